# shellcheck shell=bash
# Sourced (not run) by scripts/slurm-up.sh (the one-node `local` Slurm) and
# scripts/slurm-2node-up.sh (the two-node rehearsal): what both clusters share, in one place.
# Each script then writes only what differs on purpose: cluster and controller names, slurmd's
# spool/pid/log paths, the nodes and partition, and the failure settings (the one-node cluster
# keeps SlurmdTimeout=60; the rehearsal uses SlurmdTimeout=10 and JobRequeue=0 so its
# node-failure test ends NODE_FAIL in seconds instead of requeueing).

# Daemons started by the caller must not inherit its open files (a `flock` on the shared heavy
# lock would otherwise be held by munged/slurmd until they stop). Call after sourcing this file.
slurm_close_inherited_fds() {
  local fd
  for fd in "/proc/$$/fd"/*; do
    fd=${fd##*/}
    case $fd in 0|1|2|255) ;; *) eval "exec $fd>&-" 2>/dev/null || true ;; esac
  done
}

# shellcheck source-path=SCRIPTDIR source=pidfile.sh
. "$(dirname "${BASH_SOURCE[0]}")/pidfile.sh"  # alive, pid_if_ours, stop_service

# slurm_hardware FRACTION: this machine's node line from `slurmd -C` (without its NodeName and
# UpTime), RealMemory scaled by FRACTION so a node never drains for "Low RealMemory".
slurm_hardware() {
  slurmd -C | head -1 | sed -e 's/^NodeName=[^ ]* //' -e 's/ *UpTime=.*//' |
    awk -v f="$1" '{for(i=1;i<=NF;i++){if($i ~ /^RealMemory=/){split($i,a,"=");$i="RealMemory=" int(a[2]*f)}}; print}'
}

# slurm_conf_shared STATEDIR MUNGE_SOCKET CTLD_PORT [TASK_PLUGIN]: the slurm.conf lines both
# clusters share (TaskPlugin task/none unless given: the two-node rehearsal binds tasks to cores
# with task/affinity, which its GRES GPUs' --gpu-bind needs).
slurm_conf_shared() {
  local s=$1 sock=$2 port=$3 task=${4:-task/none}
  cat <<CONF
SlurmUser=root
SlurmctldPort=$port
AuthType=auth/munge
AuthInfo=socket=$sock
CredType=cred/munge
StateSaveLocation=$s/ctld
SlurmctldPidFile=$s/slurmctld.pid
SlurmctldLogFile=$s/log/slurmctld.log
PlugStackConfig=$s/plugstack.conf
ProctrackType=proctrack/linuxproc
TaskPlugin=$task
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/filetxt
JobCompLoc=$s/jobcomp.txt
SchedulerType=sched/backfill
SchedulerParameters=batch_sched_delay=0,sched_min_interval=0
DependencyParameters=kill_invalid_depend
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=pmix
ReturnToService=2
MinJobAge=3600
KillWait=5
InactiveLimit=0
CONF
}

# slurm_install_conf STATEDIR: move STATEDIR/slurm.conf.new into place, with an empty
# plugstack.conf and STATEDIR/env (`export SLURM_CONF=...` for clients); exports SLURM_CONF.
slurm_install_conf() {
  local s=$1
  mv "$s/slurm.conf.new" "$s/slurm.conf"
  : >"$s/plugstack.conf"
  echo "export SLURM_CONF=$s/slurm.conf" >"$s/env"
  export SLURM_CONF=$s/slurm.conf
}
