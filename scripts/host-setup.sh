#!/usr/bin/env bash
# Install the system packages hpcenv needs on a Debian/Ubuntu host (idempotent).
# Containers: podman + runc (+ buildah); base images: debootstrap;
# jobs: slurm-wlm + munge, openssh-server (loopback SSH tests), shellcheck;
# bare-host MPI for tests and benchmarks: Open MPI; the two-node rehearsal: iproute2;
# the image relink step's test (tests/test_blocks.py): patchelf.
# (The local-bind rehearsal's site MPI comes from scripts/site-mpi-setup.sh.)
set -euo pipefail
pkgs=(podman runc buildah debootstrap slurm-wlm munge openssh-server shellcheck
      openmpi-bin libopenmpi-dev uidmap iproute2 patchelf)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "host-setup: installing ${missing[*]}"
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
  echo "host-setup: all system packages present"
fi
