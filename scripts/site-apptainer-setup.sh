#!/usr/bin/env bash
# Install the `local-bind-sif` rehearsal site's Apptainer: the command scripts/site-apptainer as
# $PREFIX/bin/apptainer (it runs Apptainer in hpcenv's helper container, see that file) and
# hpcenv's containers.conf beside it, the way a centre installs Apptainer under its own prefix
# (the site file names the command in runtime.executable).
#
# Result (idempotent; a second run replaces both files with the checkout's):
#   $PREFIX/bin/apptainer          the command
#   $PREFIX/etc/containers.conf    the podman settings it uses when CONTAINERS_CONF is unset
# Env: HPCENV_SITE_APPTAINER_PREFIX (default /opt/site/apptainer).
set -euo pipefail
PREFIX=${HPCENV_SITE_APPTAINER_PREFIX:-/opt/site/apptainer}
repo=$(cd "$(dirname "$0")/.." && pwd)
install -d -m 0755 "$PREFIX/bin" "$PREFIX/etc"
# Names of this run's own ($$): two runs at once (two test processes) each replace the files whole.
install -m 0755 "$repo/scripts/site-apptainer" "$PREFIX/bin/.apptainer.new.$$"
install -m 0644 "$repo/hpcenv/data/containers.conf" "$PREFIX/etc/.containers.conf.new.$$"
mv -f "$PREFIX/bin/.apptainer.new.$$" "$PREFIX/bin/apptainer"
mv -f "$PREFIX/etc/.containers.conf.new.$$" "$PREFIX/etc/containers.conf"
echo "site-apptainer-setup: $PREFIX/bin/apptainer runs Apptainer in hpcenv's helper container"
