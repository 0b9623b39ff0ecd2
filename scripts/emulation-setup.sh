#!/usr/bin/env bash
# Foreign-architecture builds and runs under emulation (idempotent): Debian's qemu-user-static
# registers its binfmt_misc handlers through binfmt-support with the F (fix binary) flag, so the
# kernel keeps the interpreter open and it works inside containers and chroots without copying
# qemu in (Debian package qemu-user-static, /usr/share/binfmts/qemu-*: "fix_binary yes";
# kernel Documentation/admin-guide/binfmt-misc.rst, flag F). Measured on this project's machines:
# /work/shared/notes/platform.md, "Foreign architectures under emulation".
# Handlers checked: aarch64 (Grace Hopper sites) and ppc64le (Summit, Sierra-class machines).
set -euo pipefail
SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
pkgs=(qemu-user-static binfmt-support)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "emulation-setup: installing ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
BINFMT=/proc/sys/fs/binfmt_misc
if [ ! -e "$BINFMT/register" ]; then
  echo "emulation-setup: mounting binfmt_misc on $BINFMT"
  $SUDO mount -t binfmt_misc binfmt_misc "$BINFMT"
fi
for arch in aarch64 ppc64le; do
  handler="$BINFMT/qemu-$arch"
  if [ ! -e "$handler" ]; then
    # binfmt-support knows the format from /usr/share/binfmts/qemu-$arch (the package's file)
    $SUDO update-binfmts --enable "qemu-$arch" >/dev/null 2>&1 || true
  fi
  if [ ! -e "$handler" ]; then
    echo "emulation-setup: qemu-$arch handler is not registered (is binfmt_misc available?)" >&2
    exit 1
  fi
  if ! grep -q '^enabled' "$handler" || ! grep -q '^flags: .*F' "$handler"; then
    echo "emulation-setup: qemu-$arch is registered without the F flag or is disabled:" >&2
    cat "$handler" >&2
    exit 1
  fi
done
echo "emulation-setup: qemu-aarch64 and qemu-ppc64le handlers enabled (flags F)"
