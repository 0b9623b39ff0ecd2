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

stop() {  # stop PID NAME: TERM, wait up to 10 s, then KILL
  local pid=$1 name=$2
  kill -0 "$pid" 2>/dev/null || return 0
  kill -TERM "$pid" 2>/dev/null
  for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  if kill -0 "$pid" 2>/dev/null; then kill -KILL "$pid" 2>/dev/null; fi
  echo "slurm-2node-down: stopped $name ($pid)"
}
pidof_file() { [ -s "$1" ] && cat "$1"; }

for node in node1 node2; do
  d=$S/$node
  if pid=$(pidof_file "$d/slurmd.pid"); then stop "$pid" "slurmd on $node"; fi
  rm -f "$d/slurmd.pid"
  # Processes still in this node's network namespace (slurmstepd, job tasks, containers' conmon).
  if ip netns list 2>/dev/null | grep -qw "^$node"; then
    for pid in $(ip netns pids "$node" 2>/dev/null); do
      holder=$(pidof_file "$d/holder.pid" || true)
      [ "$pid" = "$holder" ] && continue
      stop "$pid" "$(cat "/proc/$pid/comm" 2>/dev/null || echo process) on $node"
    done
  fi
  if pid=$(pidof_file "$d/holder.pid"); then stop "$pid" "namespace holder of $node"; fi
  rm -f "$d/holder.pid" "$d/ready"
  ip link del "veth-$node" 2>/dev/null || true
  if ip netns list 2>/dev/null | grep -qw "^$node"; then ip netns del "$node"; echo "slurm-2node-down: removed netns $node"; fi
done
if ip link show "$BRIDGE" >/dev/null 2>&1; then ip link del "$BRIDGE"; echo "slurm-2node-down: removed bridge $BRIDGE"; fi
if pid=$(pidof_file "$S/slurmctld.pid"); then stop "$pid" slurmctld; fi
rm -f "$S/slurmctld.pid"
if [ -s "$STATE/slurm/slurmctld.pid" ] && kill -0 "$(cat "$STATE/slurm/slurmctld.pid")" 2>/dev/null; then
  echo "slurm-2node-down: munged left running (the one-node Slurm uses it)"
elif pid=$(pidof_file "$M/munged.pid"); then
  stop "$pid" munged; rm -f "$M/munged.pid"
fi
if [ "${1:-}" = "--purge" ]; then rm -rf "$S"; echo "slurm-2node-down: removed $S"; fi
exit 0
