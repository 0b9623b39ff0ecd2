#!/usr/bin/env bash
# Stop the daemons scripts/slurm-up.sh started (by their pid files in the state dir).
# State (job records, jobcomp file, logs) is kept; pass --purge to delete the state dir's slurm part.
set -euo pipefail
STATE=${HPCENV_STATE:-/var/tmp/hpcenv-services}
S=$STATE/slurm
M=$STATE/munge

stop() {  # stop PIDFILE NAME: TERM, wait up to 10 s, then KILL
  local pidfile=$1 name=$2 pid
  [ -s "$pidfile" ] || return 0
  pid=$(cat "$pidfile")
  if kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid"
    for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    if kill -0 "$pid" 2>/dev/null; then kill -KILL "$pid"; fi
    echo "slurm-down: stopped $name ($pid)"
  fi
  rm -f "$pidfile"
}
stop "$S/slurmd.pid" slurmd
stop "$S/slurmctld.pid" slurmctld
# munged is shared with the two-node rehearsal: leave it while that cluster runs.
if [ -s "$STATE/slurm-2node/slurmctld.pid" ] && kill -0 "$(cat "$STATE/slurm-2node/slurmctld.pid")" 2>/dev/null; then
  echo "slurm-down: munged left running (the two-node rehearsal uses it)"
else
  stop "$M/munged.pid" munged
fi
if [ "${1:-}" = "--purge" ]; then rm -rf "$S"; echo "slurm-down: removed $S"; fi
