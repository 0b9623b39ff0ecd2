#!/usr/bin/env bash
# Start the two-node Slurm rehearsal (site `local-2node`) on one machine.
#
# Two "compute nodes", node1 and node2, each a network + UTS + mount namespace:
#   - network: a veth pair per node, the inside end `eth0` with 10.251.77.1N/24, the outside end
#     on the bridge hpcbr2n (10.251.77.1). Only these addresses and loopback are used; nothing is
#     routed or NATed out, so MPI and Slurm traffic between the nodes really crosses the veth link.
#   - UTS: its own hostname (node1, node2), which slurmd registers as its NodeName.
#   - mount: its own /tmp ($STATE/slurm-2node/nodeN/tmp bind-mounted on /tmp), so node-local
#     storage (the site's node_local path /tmp/hpcenv-2node-local: same path, different disk per
#     node) and Slurm's PMIx client dirs (/tmp/spmix_appdir_*) are per node as on a real cluster,
#     and an /etc/hosts naming both nodes. Everything else (/var/tmp scratch, images, podman
#     storage, this checkout) is shared, like a cluster's shared filesystems: job workdirs must be
#     there, not under the host's /tmp.
# A holder process (`sleep infinity`) keeps each node's namespaces; slurmd runs inside them, so
# every job step on that node runs there too. slurmctld (on the bridge address) and munged (socket
# under $STATE/munge) are shared, as on a real cluster. The cluster is separate from the one-node
# `local` Slurm (its own slurm.conf, ports and state): clients use
#   SLURM_CONF=$STATE/slurm-2node/slurm.conf   (also written to $STATE/slurm-2node/env).
# GPUs as Slurm sees them, without a GPU (the GPU sites' twins: site-configs/*-twin.yaml): each
# node declares two GRES GPUs, `Gres=gpu:twin:2`, whose device files are null devices made with
# mknod (/dev/hpcenv-fakegpu0, 1) and whose affinity gres.conf gives with AutoDetect=off: GPU 1
# is closest to core 0 and GPU 0 to core 1, so that --gpu-bind=closest gives rank 0 a GPU other
# than 0, as Frontier's map does (rank 0 on GCD 4). Slurm computes each task's
# CUDA_VISIBLE_DEVICES / ROCR_VISIBLE_DEVICES / GPU_DEVICE_ORDINAL itself; that needs
# TaskPlugin=task/affinity (with task/none every task sees every GPU) and cores that exist (the
# node line is this machine's). A job that asks for no GPU gets none of this: CPU jobs run as
# before, now bound to their cores.
# Idempotent: whatever already runs is reused; a node whose slurmd died is restarted, and
# running daemons whose slurm.conf or gres.conf changed are restarted to read the new one.
# Env: HPCENV_STATE, HPCENV_2NODE_NET (first three octets, default 10.251.77),
#      HPCENV_2NODE_CTLD_PORT (6827). scripts/slurm-2node-down.sh removes everything again.
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
STATE=${HPCENV_STATE:-/var/tmp/hpcenv-services}
S=$STATE/slurm-2node
M=$STATE/munge
NET=${HPCENV_2NODE_NET:-10.251.77}
CTLD_PORT=${HPCENV_2NODE_CTLD_PORT:-6827}
BRIDGE=hpcbr2n
NODE_LOCAL=/tmp/hpcenv-2node-local
NODES=(node1 node2)

die() { echo "slurm-2node-up: $*" >&2; exit 1; }
[ "$(id -u)" -eq 0 ] || die "must run as root (network namespaces, veth, slurmd)"
for bin in ip nsenter unshare munged slurmctld slurmd scontrol sinfo; do
  command -v "$bin" >/dev/null || die "$bin not found (run scripts/host-setup.sh)"
done
# shellcheck source-path=SCRIPTDIR source=slurm-common.sh
. "$HERE/slurm-common.sh"
slurm_close_inherited_fds

mkdir -p "$S/ctld" "$S/log"
bash "$HERE/munge-up.sh"
SOCK=$M/munge.socket.2

# --- network: bridge + one veth per node ------------------------------------------------------
if ! ip link show "$BRIDGE" >/dev/null 2>&1; then
  ip link add "$BRIDGE" type bridge
  ip addr add "$NET.1/24" dev "$BRIDGE"
fi
ip link set "$BRIDGE" up
cat >"$S/hosts" <<HOSTS
127.0.0.1 localhost
$NET.1 head
$NET.11 node1
$NET.12 node2
HOSTS

i=0
for node in "${NODES[@]}"; do
  i=$((i + 1))
  addr="$NET.1$i"
  d=$S/$node
  mkdir -p "$d/tmp" "$d/spool"
  chmod 1777 "$d/tmp"
  if ! ip netns list | grep -qw "^$node"; then ip netns add "$node"; fi
  if ! ip link show "veth-$node" >/dev/null 2>&1; then
    ip link add "veth-$node" type veth peer name eth0 netns "$node"
    ip link set "veth-$node" master "$BRIDGE" up
    ip -n "$node" addr add "$addr/24" dev eth0
  fi
  ip -n "$node" link set lo up
  ip -n "$node" link set eth0 up
  # Holder: UTS + mount namespaces inside the node's network namespace.
  if ! alive "$d/holder.pid" sleep; then
    rm -f "$d/ready"
    # shellcheck disable=SC2016  # the inner script's $1..$5 are its own arguments
    setsid nsenter --net="/run/netns/$node" unshare --uts --mount --propagation private -- \
      bash -c 'hostname "$1"; mount --bind "$2" /tmp; mkdir -p "$3"; mount --bind "$4" /etc/hosts; : >"$5"; exec sleep infinity' \
      holder "$node" "$d/tmp" "$NODE_LOCAL" "$S/hosts" "$d/ready" </dev/null >/dev/null 2>&1 &
    echo $! >"$d/holder.pid"
    for _ in $(seq 1 50); do [ -e "$d/ready" ] && break; sleep 0.1; done
    [ -e "$d/ready" ] || die "namespace holder for $node did not start"
  fi
done

# --- GRES GPUs: device files and gres.conf -----------------------------------------------------
GPUS=(/dev/hpcenv-fakegpu0 /dev/hpcenv-fakegpu1)
for dev in "${GPUS[@]}"; do [ -e "$dev" ] || mknod -m 0666 "$dev" c 1 3; done
cat >"$S/gres.conf.new" <<GRES
# Generated by hpcenv scripts/slurm-2node-up.sh: two GPUs per node from null device files.
AutoDetect=off
Name=gpu Type=twin File=${GPUS[0]} Cores=1
Name=gpu Type=twin File=${GPUS[1]} Cores=0
GRES

# --- slurm.conf ------------------------------------------------------------------------------
# Both nodes share this machine's memory: give each under half of it.
HW=$(slurm_hardware 0.45)
CONF=$S/slurm.conf
{
  echo "# Generated by hpcenv scripts/slurm-2node-up.sh (shared lines: scripts/slurm-common.sh); edits are overwritten."
  echo "ClusterName=hpcenv2node"
  echo "SlurmctldHost=$(hostname -s)($NET.1)"
  echo "SlurmdPort=6818"
  echo "SlurmdSpoolDir=$S/%n/spool"
  echo "SlurmdPidFile=$S/%n/slurmd.pid"
  echo "SlurmdLogFile=$S/%n/slurmd.log"
  slurm_conf_shared "$S" "$SOCK" "$CTLD_PORT" task/affinity
  echo "GresTypes=gpu"
  echo "# A job that loses a node ends NODE_FAIL (Slurm would otherwise requeue it, PENDING again)."
  echo "JobRequeue=0"
  echo "# A node whose slurmd stops answering is marked DOWN after this many seconds (fault tests)."
  # (both nodes share this host's cores: a ping answered late under a training job must not
  # count as a failed node, so neither is shorter than that load has been seen to delay one)
  echo "SlurmdTimeout=20"
  echo "MessageTimeout=10"
  echo "NodeName=node1 NodeAddr=$NET.11 NodeHostname=node1 $HW Gres=gpu:twin:2 State=UNKNOWN"
  echo "NodeName=node2 NodeAddr=$NET.12 NodeHostname=node2 $HW Gres=gpu:twin:2 State=UNKNOWN"
  echo "PartitionName=rehearsal Nodes=node1,node2 Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO"
} >"$CONF.new"
changed=0
cmp -s "$CONF.new" "$CONF" && cmp -s "$S/gres.conf.new" "$S/gres.conf" || changed=1
mv "$S/gres.conf.new" "$S/gres.conf"
slurm_install_conf "$S"
if [ "$changed" -eq 1 ]; then
  # TaskPlugin and GresTypes are read at start only: daemons from an older configuration go.
  for node in "${NODES[@]}"; do stop_service "$S/$node/slurmd.pid" slurmd slurm-2node-up; done
  stop_service "$S/slurmctld.pid" slurmctld slurm-2node-up
fi

if ! alive "$S/slurmctld.pid" slurmctld; then slurmctld -f "$CONF"; fi
for node in "${NODES[@]}"; do
  if ! alive "$S/$node/slurmd.pid" slurmd; then
    nsenter -t "$(cat "$S/$node/holder.pid")" --net --uts --mount slurmd -f "$CONF" -N "$node"
  fi
done

# --- wait for both nodes -----------------------------------------------------------------------
for _ in $(seq 1 150); do
  ok=0
  for node in "${NODES[@]}"; do
    state=$(sinfo -h -n "$node" -o '%T' 2>/dev/null || true)
    case "$state" in
      *'*') ;; # not responding yet (sinfo marks it with '*')
      idle*|mixed*|allocated*|completing*) ok=$((ok + 1)) ;;
      down*|drain*) scontrol update NodeName="$node" State=RESUME 2>/dev/null || true ;;
    esac
  done
  if [ "$ok" -eq "${#NODES[@]}" ]; then
    echo "slurm-2node-up: node1 ($NET.11) and node2 ($NET.12) idle"
    echo "export SLURM_CONF=$CONF"
    exit 0
  fi
  sleep 0.2
done
echo "slurm-2node-up: nodes not idle after 30 s ($(sinfo -h -o '%n %T' 2>&1 | tr '\n' ' ')); logs in $S" >&2
exit 1
