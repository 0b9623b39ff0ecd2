#!/usr/bin/env bash
# Stop the daemons scripts/slurm-up.sh started (by their pid files in the state dir; a pid file
# whose process is gone or is another program is only removed, see scripts/pidfile.sh).
# State (job records, jobcomp file, logs) is kept; pass --purge to delete the state dir's slurm part.
set -euo pipefail
STATE=${HPCENV_STATE:-/var/tmp/hpcenv-services}
S=$STATE/slurm
M=$STATE/munge
# shellcheck source-path=SCRIPTDIR source=pidfile.sh
. "$(dirname "$0")/pidfile.sh"

stop_service "$S/slurmd.pid" slurmd slurm-down
stop_service "$S/slurmctld.pid" slurmctld slurm-down
# munged is shared with the two-node rehearsal: leave it while that cluster runs.
if alive "$STATE/slurm-2node/slurmctld.pid" slurmctld; then
  echo "slurm-down: munged left running (the two-node rehearsal uses it)"
else
  stop_service "$M/munged.pid" munged slurm-down
fi
if [ "${1:-}" = "--purge" ]; then rm -rf "$S"; echo "slurm-down: removed $S"; fi
