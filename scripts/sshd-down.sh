#!/usr/bin/env bash
# Stop the loopback sshd that scripts/sshd-up.sh started (by its pid file). Keys are kept.
set -euo pipefail
STATE=${HPCENV_STATE:-/var/tmp/hpcenv-services}
PIDFILE=$STATE/sshd/sshd.pid
[ -s "$PIDFILE" ] || exit 0
pid=$(cat "$PIDFILE")
if kill -0 "$pid" 2>/dev/null; then
  kill -TERM "$pid"
  for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  echo "sshd-down: stopped sshd ($pid)"
fi
rm -f "$PIDFILE"
