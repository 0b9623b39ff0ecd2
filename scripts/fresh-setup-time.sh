#!/usr/bin/env bash
# Issue 21's set-up time: README's two commands (`make smoke-test`, then `make test`, CI=true) on
# a fresh clone, with a podman storage that holds no image, no Horovod compiler cache and an
# empty cache (hpcenv's base tarballs and MNIST, pip's wheels, the measured tuning), the nearest
# this machine comes to a fresh one. Not fresh, so not counted: what `make host` installs once
# per machine (system packages, Intel MPI and Apptainer under /opt/site; a few minutes on a new
# machine), the services' configuration. The loopback sshd's sessions get the same empty
# storage and cache (scripts/sshd-up.sh passes CONTAINERS_STORAGE_CONF and XDG_CACHE_HOME on)
# when the tests start it; one that was already running is reconfigured by them the same way.
#
# Usage: scripts/fresh-setup-time.sh [WORKDIR]   (default /var/tmp/hpcenv-fresh; needs ~30 GB)
# WORKDIR must not exist, or be one this script made (it holds .hpcenv-fresh-setup): it is
# removed first, images, cache and clone.
# Result: one JSON line appended to $CACHE/bench/setup-history.jsonl (CACHE: HPCENV_CACHE, else
# XDG_CACHE_HOME/hpcenv, else ~/.cache/hpcenv, read before anything is overridden), which
# `hpcenv bench`'s targets section reports; the logs stay in WORKDIR.
# Run it alone: a second build or test run at the same time would share the 2 cores and be timed.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
work=$(realpath -m -- "${1:-/var/tmp/hpcenv-fresh}")
marker=.hpcenv-fresh-setup
refuse() { echo "fresh-setup-time: refusing WORKDIR $work: $1" >&2; exit 2; }
if [ -e "$work" ] && [ ! -f "$work/$marker" ]; then
  refuse "it exists and this script did not make it (no $marker in it)"
fi
history_dir=${HPCENV_CACHE:-${XDG_CACHE_HOME:-${HOME:-/root}/.cache}/hpcenv}/bench
case "$repo/" in "$work"/*) refuse "the checkout $repo is inside it" ;; esac
case "$history_dir/" in "$work"/*) refuse "the history folder $history_dir is inside it" ;; esac
commit=$(git -C "$repo" rev-parse --short HEAD)

if [ -f "$work/storage.conf" ]; then  # an earlier run: its containers and mounts go first
  for what in "pod rm -af" "rm -af" "image unmount -a" "unmount -a"; do
    # shellcheck disable=SC2086  # two words each
    CONTAINERS_STORAGE_CONF="$work/storage.conf" podman $what >/dev/null 2>&1 || true
  done
  # overlay mounts an earlier run's containers left behind (deepest first), then check
  { findmnt -rn -o TARGET | grep -F "$work/" || true; } | sort -r | while read -r target; do
    umount "$target" 2>/dev/null || true
  done
  if findmnt -rn -o TARGET | grep -qF "$work/"; then
    echo "fresh-setup-time: mounts remain under $work; unmount them first" >&2
    exit 1
  fi
fi
rm -rf --one-file-system "$work"
# The Horovod compiler cache is an engine cache mount (id hpcenv-ccache) that podman keeps
# outside its storage, under ${TMPDIR:-/var/tmp}/buildah-cache (podman 4.3, buildah 1.28; a
# -UID suffix when rootless): a fresh machine has none, so it goes too (the next build on this
# machine fills it again). HPCENV_FRESH_BUILD_CACHE names another folder (the script's tests).
suffix=""
[ "$(id -u)" = 0 ] || suffix="-$(id -u)"
rm -rf -- "${HPCENV_FRESH_BUILD_CACHE:-${TMPDIR:-/var/tmp}/buildah-cache$suffix/hpcenv-ccache}"
mkdir -p "$work"
touch "$work/$marker"
cat > "$work/storage.conf" <<EOF2
[storage]
driver = "overlay"
graphroot = "$work/graph"
runroot = "$work/run"
EOF2
export CONTAINERS_STORAGE_CONF="$work/storage.conf"
export XDG_CACHE_HOME="$work/cache"
unset HPCENV_CACHE HPCENV_TUNING_DIR
export CI=true
git clone -q "$repo" "$work/clone"
cd "$work/clone"

smoke_s=0 smoke_rc=0 test_s=0 test_rc=-1  # -1: make test did not run
t0=$SECONDS
if make smoke-test >"$work/smoke-test.log" 2>&1; then smoke_rc=0; else smoke_rc=$?; fi
smoke_s=$((SECONDS - t0))
echo "fresh-setup-time: make smoke-test: ${smoke_s} s (exit ${smoke_rc})"
if [ "$smoke_rc" -eq 0 ]; then
  t0=$SECONDS
  if make test >"$work/test.log" 2>&1; then test_rc=0; else test_rc=$?; fi
  test_s=$((SECONDS - t0))
  echo "fresh-setup-time: make test: ${test_s} s (exit ${test_rc})"
fi
summary=$(tail -n 1 "$work/test.log" 2>/dev/null | tr -cd '[:alnum:] ,.:()=_/-' | cut -c1-200 || true)
mkdir -p "$history_dir"
printf '{"date": "%s", "commit": "%s", "smoke_test_s": %d, "smoke_test_rc": %d, "test_s": %d, "test_rc": %d, "pytest": "%s"}\n' \
  "$(date -u '+%Y-%m-%d %H:%M UTC')" "$commit" "$smoke_s" "$smoke_rc" "$test_s" "$test_rc" "$summary" \
  >>"$history_dir/setup-history.jsonl"
echo "fresh-setup-time: recorded in $history_dir/setup-history.jsonl; logs in $work"
[ "$smoke_rc" -eq 0 ] && [ "$test_rc" -eq 0 ]
