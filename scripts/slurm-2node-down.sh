#!/usr/bin/env bash
# Tear down what scripts/slurm-2node-up.sh started: both slurmds (and any job processes left in
# the nodes' namespaces), the namespace holders, the network namespaces, veths and the bridge,
# the cluster's slurmctld, and munged unless the one-node `local` Slurm still uses it.
# Leaves no namespace, link, mount or daemon behind; job records and logs stay in
# $STATE/slurm-2node unless --purge.
set -uo pipefail
STATE=${HPCENV_STATE:-/var/tmp/hpcenv-services}
S=$STATE/slurm-2node
M=$STATE/munge
BRIDGE=hpcbr2n

# shellcheck source-path=SCRIPTDIR source=pidfile.sh
. "$(dirname "$0")/pidfile.sh"  # pid_if_ours, stop_pid, stop_service, alive

for node in node1 node2; do
  d=$S/$node
  if pid=$(pid_if_ours "$d/slurmd.pid" slurmd); then stop_pid "$pid" "slurmd on $node" slurm-2node-down; fi
  rm -f "$d/slurmd.pid"
  # Processes still in this node's network namespace (slurmstepd, job tasks, containers' conmon).
  if ip netns list 2>/dev/null | grep -qw "^$node"; then
    for pid in $(ip netns pids "$node" 2>/dev/null); do
      holder=$(pid_if_ours "$d/holder.pid" sleep || true)
      [ "$pid" = "$holder" ] && continue
      stop_pid "$pid" "$(cat "/proc/$pid/comm" 2>/dev/null || echo process) on $node" slurm-2node-down
    done
  fi
  if pid=$(pid_if_ours "$d/holder.pid" sleep); then stop_pid "$pid" "namespace holder of $node" slurm-2node-down; fi
  rm -f "$d/holder.pid" "$d/ready"
  ip link del "veth-$node" 2>/dev/null || true
  if ip netns list 2>/dev/null | grep -qw "^$node"; then ip netns del "$node"; echo "slurm-2node-down: removed netns $node"; fi
done
if ip link show "$BRIDGE" >/dev/null 2>&1; then ip link del "$BRIDGE"; echo "slurm-2node-down: removed bridge $BRIDGE"; fi
stop_service "$S/slurmctld.pid" slurmctld slurm-2node-down
if alive "$STATE/slurm/slurmctld.pid" slurmctld; then
  echo "slurm-2node-down: munged left running (the one-node Slurm uses it)"
else
  stop_service "$M/munged.pid" munged slurm-2node-down
fi
if [ "${1:-}" = "--purge" ]; then rm -rf "$S"; echo "slurm-2node-down: removed $S"; fi
exit 0
