#!/bin/sh
# hpcenv image build step (hpcenv/blocks.py: mpich_abi_soname): relink the venv's extensions
# from the OS's MPICH library name to the MPICH ABI's name, so that a bind-model site MPI that
# replaces the ABI name is the only MPI they load. The MPI C++ bindings (UNUSED...) are dropped
# from each extension; an extension that calls them, or still needs LIBRARY or an UNUSED one
# after the relink, fails the build.
# Usage: relink-mpich-abi.sh LIBRARY ABI_SONAME VENV [UNUSED ...]
#   e.g. relink-mpich-abi.sh libmpich.so.12 libmpi.so.12 /opt/venv libmpichcxx.so.12
set -eu
if [ "$#" -lt 3 ]; then
  echo "usage: relink-mpich-abi.sh LIBRARY ABI_SONAME VENV [UNUSED ...]" >&2
  exit 2
fi
library=$1 abi=$2 venv=$3
shift 3
# "$@" is now the unused libraries.

relink() {  # relink FILE UNUSED...: drop UNUSED, load the ABI name instead of LIBRARY
  f=$1
  shift
  n=$#
  for u do set -- "$@" --remove-needed "$u"; done
  shift "$n"
  patchelf "$@" --replace-needed "$library" "$abi" "$f"
}

still_needs() {  # still_needs FILE NAME...: FILE's dynamic section names one of NAME...
  dynamic=$(readelf -d "$1") || dynamic=
  shift
  for name do
    case $dynamic in *"[$name]"*) return 0 ;; esac
  done
  return 1
}

# One extension per line (venv paths hold no newline); no globbing of the names.
files=$(grep -rlF --include='*.so' -e "$library" "$venv" || true)
IFS='
'
set -f
for f in $files; do
  case "$(nm -D --undefined-only "$f")" in
    *_ZN3MPI*)
      echo "hpcenv: $f calls the MPI C++ bindings" >&2
      exit 1
      ;;
  esac
  if relink "$f" "$@"; then echo "hpcenv: $f now loads $abi"; fi
done
for f in $files; do
  if still_needs "$f" "$library" "$@"; then
    echo "hpcenv: $f still needs $library" >&2
    exit 1
  fi
done
