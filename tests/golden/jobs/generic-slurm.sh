#!/bin/bash
#SBATCH --job-name=train
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=2
#SBATCH --cpus-per-task=28
#SBATCH --time=01:00:00
#SBATCH --output=train-%j.out
#SBATCH --error=train-%j.err
#SBATCH --partition=compute
# hpcenv job train on generic-slurm (slurm):
#   nodes     2 (4 ranks, 2 per node, by srun)
#   per rank  28 cores, no GPU
#   image     /lustre/scratch/$USER/hpcenv/images/horovod-cpu-generic-slurm.sif (apptainer; hybrid MPI openmpi@4.1.4 over pmix@4)
#   data in   /lustre/scratch/$USER/datasets/mnist -> /tmp/hpcenv-$USER-train-${HPCENV_JOB_ID}-${HPCENV_NONCE}/data, verified
#   data out  /lustre/scratch/$USER/hpcenv-jobs/train-output-${HPCENV_JOB_ID} -> /lustre/scratch/$USER/results/run1, verified
#   walltime  01:00:00
#   command   python3 train.py --data "${HPCENV_DATA}" --out "${HPCENV_OUTPUT}"
# tuning: 2 ranks per node: one per socket (default)
# tuning: 1 rank(s) per socket x 2 socket(s); 28 usable cores per socket -> 28 cores per rank
# tuning: OMP_NUM_THREADS=28: one thread per core of the rank's domain
# tuning: KMP_BLOCKTIME=1: threads stop spinning soon after a parallel region
set -eo pipefail
set -u
: "${USER:=$(id -un)}" # site paths and the per-user folders name $USER; a batch system may not set it

export HPCENV_JOB_NAME=train
export HPCENV_JOB_ID=${SLURM_JOB_ID}
export HPCENV_WORKDIR="/lustre/scratch/$USER/hpcenv-jobs"
# The node-local folder's name is unguessable: another user cannot take it first (node-local.sh).
HPCENV_NONCE=$(od -An -N8 -tx1 /dev/urandom | tr -d ' \n')
export HPCENV_NONCE
export HPCENV_NODE_LOCAL="/tmp/hpcenv-$USER-train-${HPCENV_JOB_ID}-${HPCENV_NONCE}"
export HPCENV_DATA="/tmp/hpcenv-$USER-train-${HPCENV_JOB_ID}-${HPCENV_NONCE}/data"
export HPCENV_OUTPUT="/lustre/scratch/$USER/hpcenv-jobs/train-output-${HPCENV_JOB_ID}"
cd "$HPCENV_WORKDIR"
export HPCENV_STEPS="$HPCENV_WORKDIR/.hpcenv/$HPCENV_JOB_ID"
# The steps folder holds the scripts this job runs: made by the job (0700) in a folder of ours
# nobody else may write. Another user's .hpcenv, or a folder planted under this job's id (group
# workdirs), gets the job one of its own (mktemp -d), where --wait's end marker is not looked for.
hpcenv_mine() { # DIR MASK: a real folder of ours with none of the MASK mode bits
  [ ! -L "$1" ] && [ -d "$1" ] && [ "$(stat -c %u -- "$1")" = "$(id -u)" ] &&
    ! ((8#$(stat -c %a -- "$1") & 8#$2)) # 2700 in a setgid folder is fine: no group/other bits
}
mkdir -p -- "$HPCENV_WORKDIR/.hpcenv" 2>/dev/null || true
chmod go-w -- "$HPCENV_WORKDIR/.hpcenv" 2>/dev/null || true
if ! hpcenv_mine "$HPCENV_WORKDIR/.hpcenv" 022; then
  echo "hpcenv: $HPCENV_WORKDIR/.hpcenv (owner $(stat -c %U -- "$HPCENV_WORKDIR/.hpcenv" 2>/dev/null)) is not $(id -un)'s alone; this job's steps go to a folder of its own" >&2
  HPCENV_STEPS="$(mktemp -d -- "$HPCENV_WORKDIR/.hpcenv-$(id -un).XXXXXXXX")/$HPCENV_JOB_ID" || exit 3
fi
if ! mkdir -m 0700 -- "$HPCENV_STEPS" 2>/dev/null && ! hpcenv_mine "$HPCENV_STEPS" 077; then
  echo "hpcenv: $HPCENV_STEPS (owner $(stat -c %U -- "$HPCENV_STEPS" 2>/dev/null)) is not this job's; its steps go to a folder of its own" >&2
  HPCENV_STEPS=$(mktemp -d -- "$HPCENV_STEPS.XXXXXXXX") || exit 3
fi # (an existing folder of ours: this job, requeued)
echo "hpcenv: job $HPCENV_JOB_ID (train) on $(hostname -s) at $(date -Is)"
# For `hpcenv submit --wait`: the exit status, written as the script exits; an earlier run's goes.
rm -f -- "$HPCENV_STEPS/ended"
hpcenv_exit() {
  local status=$?
  trap '' TERM INT # a second signal now would cut the cleanup and the mark short
  if declare -F hpcenv_cleanup >/dev/null; then hpcenv_cleanup; fi
  printf '%s\n' "$status" >"$HPCENV_STEPS/ended" 2>/dev/null || true
}
trap hpcenv_exit EXIT
# A cancel or time limit (TERM; LSF's bkill sends INT first) ends the job as 143 or 130.
trap 'exit 143' TERM; trap 'exit 130' INT

cat >"$HPCENV_STEPS/lib.sh" <<'HPCENV_LIB' # step file: the step library (hpcenv_* functions) the steps below source
# shellcheck shell=bash
hpcenv_die() { echo "$2" >&2; exit "$1"; }  # STATUS MESSAGE: say why on stderr, exit the step
hpcenv_unsafe_parents() {  # PATH: print why a folder above PATH lets another user move it
  local dir uid mode me
  me=$(id -u) dir=$(dirname -- "$1")
  while :; do
    if [ -e "$dir" ]; then
      read -r uid mode < <(stat -L -c '%u %a' -- "$dir")
      if [ "$uid" != 0 ] && [ "$uid" != "$me" ]; then
        echo "$dir belongs to $(stat -L -c %U -- "$dir")"
        return
      elif ((8#$mode & 8#022)) && ! ((8#$mode & 8#1000)); then
        echo "$dir is writable by other users (mode $mode, not sticky)"
        return
      fi
    fi
    [ "$dir" != / ] && [ "$dir" != . ] || return 0
    dir=$(dirname -- "$dir")
  done
}
hpcenv_check_ours() {  # DIR WHAT: refuse unless DIR is a real folder of ours nobody else can write
  local dir=$1 what=$2 mode why=
  if [ -L "$dir" ] || [ ! -d "$dir" ]; then
    why="is not a folder (a link or a file)"
  elif [ "$(stat -c %u -- "$dir")" != "$(id -u)" ]; then
    why="belongs to $(stat -c %U -- "$dir"), not to $(id -un)"
  elif mode=$(stat -c %a -- "$dir") && ((8#$mode & 8#022)); then
    why="is writable by other users (mode $mode)"
  else
    why=$(hpcenv_unsafe_parents "$dir")
    why=${why:+"is not safe from other users: $why"}
  fi
  [ -z "$why" ] || { echo "hpcenv: $what $dir $why; refusing to use it" >&2; return 1; }
}
hpcenv_user_dir() {  # DIR: make the per-user DIR (0700) if absent; it must be ours
  local dir=$1 why
  if [ ! -e "$dir" ] && [ ! -L "$dir" ]; then
    mkdir -p -- "$(dirname -- "$dir")" 2>/dev/null || true
    mkdir -m 0700 -- "$dir" 2>/dev/null || true # may lose a race: the checks decide
    if [ ! -e "$dir" ]; then
      why=$(hpcenv_unsafe_parents "$dir")
      echo "hpcenv: cannot make per-user folder $dir (${why:-no permission}); refusing to run" >&2
      return 1
    fi
  fi
  hpcenv_check_ours "$dir" "per-user folder"
}
hpcenv_job_dir() {  # DIR: make this job's DIR (0700) in its per-user folder; fail if it exists
  local dir=$1 up why
  up=$(dirname -- "$dir")
  if [ -k "$up" ] && [ "$(stat -L -c %u -- "$up")" = 0 ]; then
    why=$(hpcenv_unsafe_parents "$dir")
    [ -z "$why" ] ||
      { echo "hpcenv: job folder $dir is not safe from other users: $why; refusing to use it" >&2; return 1; }
  else
    hpcenv_user_dir "$up" || return 1
  fi
  mkdir -m 0700 -- "$dir" 2>/dev/null && return
  if [ ! -e "$dir" ] && [ ! -L "$dir" ]; then
    echo "hpcenv: cannot make job folder $dir" >&2
  elif hpcenv_check_ours "$dir" "job folder" && ! ((8#$(stat -c %a -- "$dir") & 8#077)); then
    echo "hpcenv: job folder $dir is ours from an earlier run of this job; reusing it"
    return 0
  else
    echo "hpcenv: job folder $dir already exists (owner $(stat -c %U -- "$dir")); refusing to use it" >&2
  fi
  return 1
}
hpcenv_lock() {  # FD PATH: open PATH as a lock on FD and take it; never through a symlink
  local fd=$1 path=$2 why=
  if [ ! -L "$path" ] && { [ ! -e "$path" ] || [ -f "$path" ]; }; then
    (set -C && : >"$path") 2>/dev/null || true # O_CREAT|O_EXCL: a planted symlink is not followed
  fi
  if [ -L "$path" ] || [ ! -f "$path" ]; then
    why="is a link or not a file (planted by $(stat -c %U -- "$path"))"
  elif [ "$(stat -c %u -- "$path")" != "$(id -u)" ]; then
    why="belongs to $(stat -c %U -- "$path"), not to $(id -un)"
  else
    eval "exec $fd<\"\$path\"" # read-only: opening never truncates or creates
    [ "$(stat -L -c '%d:%i:%u' -- "/proc/self/fd/$fd")" = "$(stat -c '%d:%i:%u' -- "$path")" ] ||
      why="changed while it was opened"
  fi
  [ -z "$why" ] || { echo "hpcenv: lock $path $why; refusing it" >&2; return 1; }
  flock "$fd"
}
hpcenv_check_tree() {  # DIR: fail on links, special files and names a manifest cannot hold
  local dir=$1 f bad=0
  while IFS= read -r -d '' f; do
    echo "manifest: $dir/$f is a link or special file; datasets hold regular files only" >&2; bad=1
  done < <(cd "$dir" && find . -mindepth 1 ! -type f ! -type d -printf '%P\0')
  while IFS= read -r -d '' f; do
    echo "manifest: file name not allowed in a manifest: $(printf '%q' "$f")" >&2; bad=1
  done < <(cd "$dir" && find . -mindepth 1 \( -name $'*\n*' -o -name '*\\*' \) -printf '%P\0')
  return "$bad"
}
hpcenv_manifest() {  # DIR: print the manifest of DIR
  local dir=$1 f
  hpcenv_check_tree "$dir" || return 1
  (cd "$dir" && find . -type f ! -name .hpcenv-manifest -printf '%P\0' | LC_ALL=C sort -z |
    while IFS= read -r -d '' f; do
      printf '%s  %s  %s\n' "$(stat -c %s -- "$f")" "$(sha256sum -- "$f" | cut -d' ' -f1)" "$f"
    done)
}
hpcenv_verify() {  # DIR MANIFEST: exactly the listed files; sizes first (cheap), then sha256
  local dir=$1 manifest=$2 line size rest digest path actual why extra bad=0 listed=""
  hpcenv_check_tree "$dir" || return 1
  while IFS= read -r line || [ -n "$line" ]; do
    [ -n "$line" ] || continue
    size=${line%%  *} rest=${line#*  } digest=${rest%%  *} path=${rest#*  } why=
    if ! [[ $size =~ ^[0-9]+$ && $digest =~ ^[0-9a-f]{64}$ ]] || [ "$path" = "$rest" ]; then
      why="malformed line in $manifest: $(printf '%q' "$line")"
    elif [[ /$path/ == //* || /$path/ == */../* || /$path/ == */./* || /$path/ == *//* ]]; then
      why="$(printf '%q' "$path") in $manifest leaves $dir; refused"
    else
      listed+=$path$'\n'
      if [ ! -f "$dir/$path" ]; then
        why="missing $dir/$path"
      elif actual=$(stat -c %s -- "$dir/$path") && [ "$actual" != "$size" ]; then
        why="size of $dir/$path is $actual, manifest says $size"
      fi
    fi
    [ -z "$why" ] || { echo "verify: $why" >&2; bad=1; }
  done <"$manifest"
  while IFS= read -r extra; do
    [ -z "$extra" ] || { echo "verify: $dir/$extra is not in the manifest" >&2; bad=1; }
  done < <(LC_ALL=C comm -13 <(printf '%s' "$listed" | LC_ALL=C sort) \
    <(cd "$dir" && find . -type f ! -name .hpcenv-manifest -printf '%P\n' | LC_ALL=C sort))
  [ "$bad" -eq 0 ] || return 1
  [ -s "$manifest" ] || return 0  # no files: nothing to checksum (sha256sum -c refuses empty input)
  sed -E 's/^[0-9]+  //' "$manifest" | (cd "$dir" && sha256sum --quiet --strict -c -) ||
    { echo "verify: checksum mismatch in $dir against $manifest" >&2; return 1; }
}
hpcenv_identity() {  # PATH: what PATH is now: "absent", or its device:inode and change time
  if [ -e "$1" ] || [ -L "$1" ]; then stat -c '%d:%i:%z' -- "$1"; else echo absent; fi
}
hpcenv_mode_like_umask() {  # PATH: the mode a new file gets (mktemp makes 0600/0700)
  local base=0666
  [ -d "$1" ] && base=0777
  chmod "$(printf '%04o' $((base & ~0$(umask))))" -- "$1"
}
hpcenv_publish() {  # TMP DEST FORCE SEEN: rename TMP to DEST under DEST's lock
  local tmp=$1 dest=$2 force=$3 seen=$4 old why=
  hpcenv_lock 9 "$dest.hpcenv-lock" || return 3
  if [ "$(hpcenv_identity "$dest")" != "$seen" ]; then
    why="changed while this step ran (another job wrote it); not overwriting"
  elif [ "$seen" = absent ]; then
    mv -n -T -- "$tmp" "$dest" # rename(2) with RENAME_NOREPLACE: never overwrites
    [ ! -e "$tmp" ] || why="appeared meanwhile; not overwriting"
  elif [ "$force" != 1 ]; then
    why="already exists; not overwriting (use --force)"
  elif [ -d "$dest" ] && [ ! -L "$dest" ]; then
    old=$(mktemp -d -- "$dest.hpcenv-old.XXXXXX")
    mv -T -- "$dest" "$old"
    mv -T -- "$tmp" "$dest" || { mv -T -- "$old" "$dest"; return 1; }
    rm -rf -- "$old"
  else
    mv -f -T -- "$tmp" "$dest" # one rename replaces a file atomically
  fi
  [ -z "$why" ] || { echo "publish: $dest $why" >&2; return 3; }
  exec 9>&-
}
HPCENV_LIB
cat >"$HPCENV_STEPS/node-local.sh" <<'HPCENV_NODE_LOCAL' # step file: this job's node-local folder, made and checked
#!/bin/bash
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(dirname -- "${BASH_SOURCE[0]}")/lib.sh" # the step library, once per job beside this file
action=$1 dir=${2:-${HPCENV_NODE_LOCAL:?node-local.sh: no folder given}} host=$(hostname -s)
case $action in
  make) hpcenv_job_dir "$dir" || hpcenv_die 3 "node-local[$host]: not running this job" ;;
  remove) # only a folder of ours: never one another user made at this name
    if hpcenv_check_ours "$dir" "job folder" 2>/dev/null; then rm -rf -- "$dir"; fi ;;
  *) hpcenv_die 2 "node-local: unknown action $action (make or remove)" ;;
esac
HPCENV_NODE_LOCAL
cat >"$HPCENV_STEPS/rank-env.sh" <<'HPCENV_RANK_ENV' # step file: torch.distributed's env:// names per rank (RANK, LOCAL_RANK, WORLD_SIZE...)
#!/bin/sh
set -eu
local_size=
if [ -n "${OMPI_COMM_WORLD_RANK:-}" ]; then
  RANK=$OMPI_COMM_WORLD_RANK LOCAL_RANK=$OMPI_COMM_WORLD_LOCAL_RANK
  WORLD_SIZE=$OMPI_COMM_WORLD_SIZE local_size=${OMPI_COMM_WORLD_LOCAL_SIZE:-}
elif [ -n "${JSM_NAMESPACE_RANK:-}" ]; then
  RANK=$JSM_NAMESPACE_RANK LOCAL_RANK=$JSM_NAMESPACE_LOCAL_RANK
  WORLD_SIZE=$JSM_NAMESPACE_SIZE local_size=${JSM_NAMESPACE_LOCAL_SIZE:-}
elif [ -n "${PALS_RANKID:-}" ]; then
  RANK=$PALS_RANKID LOCAL_RANK=$PALS_LOCAL_RANKID
  WORLD_SIZE=$PMI_SIZE local_size=${PALS_LOCAL_SIZE:-${PMI_LOCAL_SIZE:-}}
elif [ -n "${PMI_RANK:-}" ] && [ -n "${MPI_LOCALRANKID:-}" ]; then
  RANK=$PMI_RANK LOCAL_RANK=$MPI_LOCALRANKID
  WORLD_SIZE=$PMI_SIZE local_size=${MPI_LOCALNRANKS:-}
elif [ -n "${SLURM_PROCID:-}" ] && [ -n "${SLURM_STEP_ID:-}" ]; then
  RANK=$SLURM_PROCID LOCAL_RANK=$SLURM_LOCALID
  WORLD_SIZE=${SLURM_STEP_NUM_TASKS:-$SLURM_NTASKS}
else
  echo "hpcenv rank-env: no launcher variables (srun, mpirun, mpiexec or jsrun) on $(hostname)" >&2
  exit 3
fi
if [ -z "$local_size" ] && [ -n "${SLURM_STEP_ID:-}" ]; then
  node=${SLURM_NODEID:-0} rest=${SLURM_STEP_TASKS_PER_NODE:-}
  while [ -n "$rest" ]; do
    item=${rest%%,*}
    if [ "$item" = "$rest" ]; then rest=; else rest=${rest#*,}; fi
    count=${item%%(*} times=1
    case $item in *"(x"*) times=${item#*(x} times=${times%)} ;; esac
    if [ "$node" -lt "$times" ]; then local_size=$count; break; fi
    node=$((node - times))
  done
fi
case ${HPCENV_GPU_BIND:-} in closest|list|mask)
  rest=${CUDA_VISIBLE_DEVICES:-${ROCR_VISIBLE_DEVICES:-${ZE_AFFINITY_MASK:-}}} count=0
  while [ -n "$rest" ]; do
    count=$((count + 1))
    case $rest in *,*) rest=${rest#*,} ;; *) rest= ;; esac
  done
  if [ "$count" -gt 0 ]; then LOCAL_RANK=$((LOCAL_RANK % count)); fi
esac
export RANK LOCAL_RANK WORLD_SIZE
for name in ${HPCENV_CACHES:-}; do
  eval "dir=\${$name:-}"
  [ -z "$dir" ] || mkdir -p -- "$dir" || echo "hpcenv rank-env: cannot make $name=$dir on $(hostname)" >&2
done
[ -z "$local_size" ] || export LOCAL_WORLD_SIZE="$local_size"
[ -n "$local_size" ] || echo "hpcenv rank-env: no local task count from the launcher on $(hostname): LOCAL_WORLD_SIZE unset" >&2
exec "$@"
HPCENV_RANK_ENV
cat >"$HPCENV_STEPS/stage-in.sh" <<'HPCENV_STAGE_IN' # step file: stage-in
#!/bin/bash
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(dirname -- "${BASH_SOURCE[0]}")/lib.sh" # the step library, once per job beside this file
src=$1 dest=$2 manifest=$3 host=$(hostname -s)
[ -d "$src" ] || hpcenv_die 2 "stage-in[$host]: source $src is not a directory"
[ -f "$manifest" ] || hpcenv_die 2 "stage-in[$host]: manifest $manifest not found"
mkdir -p -- "$(dirname -- "$dest")" 2>/dev/null ||
  hpcenv_die 3 "stage-in[$host]: cannot make the folder of $dest (no permission there: another user's?); refusing"
why=$(hpcenv_unsafe_parents "$dest")
[ -z "$why" ] ||
  hpcenv_die 3 "stage-in[$host]: another user could change $dest after it is verified ($why); stage into a folder only you can write"
hpcenv_lock 8 "$dest.hpcenv-lock" || exit 3
stamp="$dest/.hpcenv-manifest"
if [ -e "$dest" ] || [ -L "$dest" ]; then
  hpcenv_check_ours "$dest" "staged data" || exit 3
  if [ -f "$stamp" ] && cmp -s "$stamp" "$manifest" && hpcenv_verify "$dest" "$stamp"; then
    echo "stage-in[$host]: $dest already holds a verified copy"
    exit 0
  fi
  hpcenv_die 3 "stage-in[$host]: $dest holds other or changed data; not rewriting it (a job may be reading it)"
fi
start=$(date +%s%N)
tmp=$(mktemp -d -- "$dest.hpcenv-tmp.XXXXXX")
trap 'rm -rf -- "$tmp"' EXIT
cp -a --no-preserve=ownership -- "$src"/. "$tmp"/
cp -- "$manifest" "$tmp/.hpcenv-manifest"
hpcenv_mode_like_umask "$tmp"
chmod -R go-w -- "$tmp" # ours to change alone, before it is verified
hpcenv_verify "$tmp" "$tmp/.hpcenv-manifest" ||
  hpcenv_die 4 "stage-in[$host]: copy for $dest does not verify against $manifest; stopping before the job runs"
mv -n -T -- "$tmp" "$dest" # rename(2) with RENAME_NOREPLACE: never overwrites
[ ! -e "$tmp" ] ||
  hpcenv_die 3 "stage-in[$host]: $dest appeared meanwhile (owner $(stat -c %U -- "$dest")); not using it"
trap - EXIT
files=$(wc -l <"$stamp")
echo "stage-in[$host]: $files files $src -> $dest verified in $((($(date +%s%N) - start) / 1000000)) ms"
HPCENV_STAGE_IN
cat >"$HPCENV_STEPS/stage-out.sh" <<'HPCENV_STAGE_OUT' # step file: stage-out
#!/bin/bash
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(dirname -- "${BASH_SOURCE[0]}")/lib.sh" # the step library, once per job beside this file
src=$1 dest=$2 force=$3
[ -d "$src" ] || hpcenv_die 2 "stage-out: results dir $src does not exist"
seen=$(hpcenv_identity "$dest")
[ "$seen" = absent ] || [ "$force" = 1 ] ||
  hpcenv_die 3 "stage-out: $dest already exists; not overwriting (use --force)"
mkdir -p -- "$(dirname -- "$dest")" 2>/dev/null ||
  hpcenv_die 3 "stage-out: cannot make the folder of $dest (no permission there: another user's?); refusing"
tmp=$(mktemp -d -- "$dest.hpcenv-tmp.XXXXXX")
sums=$(mktemp -- "$dest.hpcenv-manifest.XXXXXX")
trap 'rm -rf -- "$tmp" "$sums"' EXIT
hpcenv_manifest "$src" >"$sums"
cp -a -- "$src"/. "$tmp"/
mv -f -- "$sums" "$tmp/.hpcenv-manifest"
hpcenv_verify "$tmp" "$tmp/.hpcenv-manifest"
hpcenv_mode_like_umask "$tmp"
hpcenv_publish "$tmp" "$dest" "$force" "$seen"
trap - EXIT
echo "stage-out: $(wc -l <"$dest/.hpcenv-manifest") files $src -> $dest verified"
HPCENV_STAGE_OUT

# This job's node-local folder (per user, per job, 0700), on every node, until the job ends.
hpcenv_cleanup() { srun --nodes=2 --ntasks=2 --ntasks-per-node=1 --mpi=none bash "$HPCENV_STEPS/node-local.sh" remove || true; }
srun --nodes=2 --ntasks=2 --ntasks-per-node=1 --mpi=none bash "$HPCENV_STEPS/node-local.sh" make

# Placement, site MPI, site environment, measured tuning, the job's and the runtime's variables.
export OMP_NUM_THREADS=28
export KMP_AFFINITY=granularity=fine,compact,1,0
export KMP_BLOCKTIME=1
export I_MPI_PIN_DOMAIN='[0xfffffff,0xfffffff0000000]'
MASTER_ADDR="$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)"
export MASTER_ADDR
MASTER_PORT="$((20000 + 10#0${HPCENV_JOB_ID%%[!0-9]*} % 12000))"
export MASTER_PORT

# Stage-in: /lustre/scratch/$USER/datasets/mnist -> /tmp/hpcenv-$USER-train-${HPCENV_JOB_ID}-${HPCENV_NONCE}/data, once per node to node-local storage, verified against /lustre/scratch/$USER/datasets/mnist/.hpcenv-manifest
srun --nodes=2 --ntasks=2 --ntasks-per-node=1 --mpi=none bash "$HPCENV_STEPS/stage-in.sh" "/lustre/scratch/$USER/datasets/mnist" "/tmp/hpcenv-$USER-train-${HPCENV_JOB_ID}-${HPCENV_NONCE}/data" "/lustre/scratch/$USER/datasets/mnist/.hpcenv-manifest"

# Run (4 ranks, 2 per node).
mkdir -p "$HPCENV_OUTPUT"
srun --nodes=2 --ntasks=4 --ntasks-per-node=2 --cpus-per-task=28 --mpi=pmix sh "$HPCENV_STEPS/rank-env.sh" apptainer exec --bind /lustre --bind /home --bind "/lustre/scratch/$USER/hpcenv-jobs" --bind "/tmp/hpcenv-$USER-train-${HPCENV_JOB_ID}-${HPCENV_NONCE}" --pwd "/lustre/scratch/$USER/hpcenv-jobs" "/lustre/scratch/$USER/hpcenv/images/horovod-cpu-generic-slurm.sif" python3 train.py --data "${HPCENV_DATA}" --out "${HPCENV_OUTPUT}"

# Stage-out: /lustre/scratch/$USER/hpcenv-jobs/train-output-${HPCENV_JOB_ID} -> /lustre/scratch/$USER/results/run1, atomic, verified
bash "$HPCENV_STEPS/stage-out.sh" "/lustre/scratch/$USER/hpcenv-jobs/train-output-${HPCENV_JOB_ID}" "/lustre/scratch/$USER/results/run1" 0

echo "hpcenv: job $HPCENV_JOB_ID done at $(date -Is)"
