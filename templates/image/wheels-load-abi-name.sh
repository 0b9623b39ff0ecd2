#!/bin/sh
# hpcenv image build step (hpcenv/blocks.py: mpich_abi_soname_wheels): a venv of binary wheels
# only, on a bind-model MPICH the OS names LIBRARY. Nothing was linked against that name here,
# so nothing is relinked; this fails the build if an extension of the venv names LIBRARY all the
# same (it would keep loading the image's MPICH beside the site's ABI_SONAME), listing them.
# Usage: wheels-load-abi-name.sh LIBRARY ABI_SONAME VENV
#   e.g. wheels-load-abi-name.sh libmpich.so.12 libmpi.so.12 /opt/venv
set -eu
if [ "$#" -ne 3 ]; then
  echo "usage: wheels-load-abi-name.sh LIBRARY ABI_SONAME VENV" >&2
  exit 2
fi
library=$1 abi=$2 venv=$3
if [ ! -d "$venv" ]; then
  echo "hpcenv: no venv at $venv" >&2
  exit 2
fi
# extensions and the libraries wheels carry (auditwheel's *.libs/: libfoo-1a2b.so.3); grep's
# status 1 is "none", 2 an error
status=0
files=$(grep -rlF --include='*.so' --include='*.so.*' -e "$library" "$venv") || status=$?
if [ "$status" -gt 1 ]; then
  echo "hpcenv: could not read $venv" >&2
  exit 2
fi
if [ -n "$files" ]; then
  printf '%s\n' "$files" >&2
  echo "hpcenv: these binary wheels load $library, not $abi" >&2
  exit 1
fi
