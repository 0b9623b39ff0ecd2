#!/usr/bin/env bash
# Start munged for hpcenv's Slurm clusters (the one-node `local` one and the two-node rehearsal
# share it): own socket, pid, log and seed under $HPCENV_STATE/munge. Idempotent.
# munged uses /etc/munge/munge.key when apt made one, else a key generated into the state dir.
set -euo pipefail
STATE=${HPCENV_STATE:-/var/tmp/hpcenv-services}
M=$STATE/munge
command -v munged >/dev/null || { echo "munge-up: munged not found (run scripts/host-setup.sh)" >&2; exit 1; }
# Daemons started here must not inherit the caller's open files (a `flock` on the shared heavy
# lock would otherwise be held by munged/slurmd until they stop).
for fd in "/proc/$$/fd"/*; do
  fd=${fd##*/}
  case $fd in 0|1|2|255) ;; *) eval "exec $fd>&-" 2>/dev/null || true ;; esac
done
# shellcheck source-path=SCRIPTDIR source=pidfile.sh
. "$(dirname "$0")/pidfile.sh"  # alive
mkdir -p "$M"
chmod 755 "$STATE"
chown munge:munge "$M"
chmod 755 "$M"  # munged requires a socket dir everyone can traverse
KEY=/etc/munge/munge.key
if [ ! -s "$KEY" ]; then
  KEY=$M/munge.key
  if [ ! -s "$KEY" ]; then
    if command -v mungekey >/dev/null; then
      runuser -u munge -- mungekey --create --keyfile="$KEY"
    else
      dd if=/dev/urandom of="$KEY" bs=1 count=1024 status=none
    fi
  fi
  chown munge:munge "$KEY"; chmod 400 "$KEY"
fi
SOCK=$M/munge.socket.2
if ! alive "$M/munged.pid" munged; then
  rm -f "$SOCK" "$SOCK.lock"
  runuser -u munge -- munged --socket="$SOCK" --key-file="$KEY" --pid-file="$M/munged.pid" \
    --log-file="$M/munged.log" --seed-file="$M/munged.seed"
fi
