#!/bin/bash
#PBS -N train
#PBS -l select=2
#PBS -l place=scatter
#PBS -l walltime=00:30:00
#PBS -A stf007
#PBS -q debug
#PBS -l filesystems=home:flare
# hpcenv job train on aurora (pbs):
#   nodes     2 (24 ranks, 12 per node, by mpiexec)
#   per rank  8 cores, 1 GPU tile (bound by ZE_AFFINITY_MASK)
#   image     /lus/flare/projects/$HPCENV_PROJECT/$USER/hpcenv/images/torch-gpu-aurora.sif (apptainer; bind MPI mpich@4.2 over pmix@4)
#   data in   /lus/flare/projects/$HPCENV_PROJECT/datasets/mnist -> /tmp/hpcenv-$USER-train-${HPCENV_JOB_ID}-${HPCENV_NONCE}/data, verified
#   data out  /lus/flare/projects/$HPCENV_PROJECT/$USER/hpcenv-jobs/train-output-${HPCENV_JOB_ID} -> /lus/flare/projects/$HPCENV_PROJECT/results/run1, verified
#   walltime  00:30:00
#   command   python3 train.py --data "${HPCENV_DATA}" --out "${HPCENV_OUTPUT}"
# tuning: cores 0,52 reserved for the system (node.reserved_cores): 102 of 104 cores usable
# tuning: 12 ranks per node: the site's documented default (node.ranks_per_node)
# tuning: 6 rank(s) per socket x 2 socket(s); 51 usable cores per socket -> 8 cores per rank
# tuning: 4 oneCCL worker(s) per rank on the last cores of its domain -> OMP_NUM_THREADS=4; compute and worker cores are disjoint
# tuning: 12 GPU tiles / 12 ranks -> 1 per rank, as FLAT devices (tile t of GPU g is device 2g+t), bound by ZE_AFFINITY_MASK per rank
# tuning: KMP_BLOCKTIME=1: threads stop spinning soon after a parallel region
# bind model: host mpich@4.2 from $MPI_ROOT bound over the image's
set -eo pipefail
module load apptainer
set -u
: "${USER:=$(id -un)}" # site paths and the per-user folders name $USER; a batch system may not set it

# The project (--account) and the variables the site provides, with their documented defaults.
export HPCENV_PROJECT=stf007
export MPI_ROOT="${MPI_ROOT:?site aurora sets MPI_ROOT on its nodes}"

export HPCENV_JOB_NAME=train
export HPCENV_JOB_ID=${PBS_JOBID}
export HPCENV_WORKDIR="/lus/flare/projects/$HPCENV_PROJECT/$USER/hpcenv-jobs"
# The node-local folder's name is unguessable: another user cannot take it first (node-local.sh).
HPCENV_NONCE=$(od -An -N8 -tx1 /dev/urandom | tr -d ' \n')
export HPCENV_NONCE
export HPCENV_NODE_LOCAL="/tmp/hpcenv-$USER-train-${HPCENV_JOB_ID}-${HPCENV_NONCE}"
export HPCENV_DATA="/tmp/hpcenv-$USER-train-${HPCENV_JOB_ID}-${HPCENV_NONCE}/data"
export HPCENV_OUTPUT="/lus/flare/projects/$HPCENV_PROJECT/$USER/hpcenv-jobs/train-output-${HPCENV_JOB_ID}"
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
if [ -n "${HPCENV_GPU_MASKS:-}" ]; then
  i=0 mask=
  for word in $HPCENV_GPU_MASKS; do
    if [ "$i" -eq "$LOCAL_RANK" ]; then mask=$word; break; fi
    i=$((i + 1))
  done
  if [ -z "$mask" ]; then
    echo "hpcenv rank-env: local rank $LOCAL_RANK has no device in HPCENV_GPU_MASKS on $(hostname)" >&2
    exit 3
  fi
  export ZE_AFFINITY_MASK="$mask"
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
cat >"$HPCENV_STEPS/bind-preflight.sh" <<'HPCENV_BIND_PREFLIGHT' # step file: the bind-model preflight
#!/bin/sh
set -u
soname=$1 root=$2 path=$3 spec=$4 abi=$5 mismatch=$6
shift 7 # the rest: SONAME=ABI pairs, every MPI ABI family hpcenv knows
site=$(IFS=:; for d in $path; do if [ -e "$d/$soname" ]; then echo "$d/$soname"; break; fi; done)
[ -n "$site" ] ||
  { echo "hpcenv: bind model: site MPI library $soname ($spec) is not visible in the container on $path (bind mount missing)" >&2; exit 1; }
side=${HPCENV_MPICH_ABI_LIB:-}
found=$({
  ldconfig -p 2>/dev/null | awk '{print $NF}'
  [ -z "$side" ] || ls -d "$side"/libmpi.so* 2>/dev/null
} | grep -v "^$root/" | sort -u)
same="" other=""
for lib in $found; do
  for pair in "$@"; do
    s=${pair%%=*}
    [ "${lib##*/}" = "$s" ] || continue
    case $s in "$soname") same="$same $lib" ;; *) other="$other $lib ($s, ${pair#*=} ABI)" ;; esac
  done
done
[ -z "$same" ] || { echo "hpcenv: bind model: site MPI $spec $site ($abi ABI) replaces the image's$same"; exit 0; }
echo "hpcenv: bind model ABI mismatch: site MPI $spec provides $site ($soname, $abi ABI) but the image's MPI is${other:- not found}; a program linked against the image MPI cannot use the site MPI" >&2
exit "$mismatch"
HPCENV_BIND_PREFLIGHT
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
hpcenv_cleanup() { mpiexec -n 2 --ppn 1 bash "$HPCENV_STEPS/node-local.sh" remove || true; }
mpiexec -n 2 --ppn 1 bash "$HPCENV_STEPS/node-local.sh" make

# Placement, site MPI, site environment, measured tuning, the job's and the runtime's variables.
export OMP_NUM_THREADS=4
export KMP_AFFINITY=granularity=fine,compact,1,0
export KMP_BLOCKTIME=1
export I_MPI_PIN_DOMAIN='[0x1e,0x1e00,0x1e0000,0x1e000000,0x1e00000000,0x1e0000000000,0x1e0000000000000,0x1e000000000000000,0x1e00000000000000000,0x1e0000000000000000000,0x1e000000000000000000000,0x1e00000000000000000000000]'
export HPCENV_GPU_BIND=mask
export HPCENV_GPU_MASKS='0 1 2 3 4 5 6 7 8 9 10 11'
export CCL_WORKER_COUNT=4
export CCL_WORKER_AFFINITY=5,6,7,8,13,14,15,16,21,22,23,24,29,30,31,32,37,38,39,40,45,46,47,48,57,58,59,60,65,66,67,68,73,74,75,76,81,82,83,84,89,90,91,92,97,98,99,100
export CCL_PROCESS_LAUNCHER=pmix
export CCL_ATL_TRANSPORT=mpi
export FI_MR_CACHE_MONITOR=userfaultfd
export CCL_KVS_MODE=mpi
export ZE_FLAT_DEVICE_HIERARCHY=FLAT
export ONEAPI_DEVICE_SELECTOR=level_zero:gpu
export HF_HOME="/lus/flare/projects/$HPCENV_PROJECT/$USER/.cache/huggingface"
MASTER_ADDR="$(head -n 1 "$PBS_NODEFILE" | cut -d . -f 1).hsn.cm.aurora.alcf.anl.gov"
export MASTER_ADDR
export MASTER_PORT="2345"
export APPTAINERENV_LD_LIBRARY_PATH="$MPI_ROOT/lib"

# The site's shared cache folders (caches), made before the ranks start and bound into the image.
mkdir -p -- "/lus/flare/projects/$HPCENV_PROJECT/$USER/.cache/huggingface"

# Stage-in: /lus/flare/projects/$HPCENV_PROJECT/datasets/mnist -> /tmp/hpcenv-$USER-train-${HPCENV_JOB_ID}-${HPCENV_NONCE}/data, once per node to node-local storage, verified against /lus/flare/projects/$HPCENV_PROJECT/datasets/mnist/.hpcenv-manifest
mpiexec -n 2 --ppn 1 bash "$HPCENV_STEPS/stage-in.sh" "/lus/flare/projects/$HPCENV_PROJECT/datasets/mnist" "/tmp/hpcenv-$USER-train-${HPCENV_JOB_ID}-${HPCENV_NONCE}/data" "/lus/flare/projects/$HPCENV_PROJECT/datasets/mnist/.hpcenv-manifest"

# Bind model: check once, inside the image, that the site MPI replaces the image's (same ABI).
apptainer exec --bind /lus/flare --bind "/lus/flare/projects/$HPCENV_PROJECT/$USER/hpcenv-jobs" --bind "/tmp/hpcenv-$USER-train-${HPCENV_JOB_ID}-${HPCENV_NONCE}" --bind "/lus/flare/projects/$HPCENV_PROJECT/$USER/.cache/huggingface" --bind "$MPI_ROOT" --bind /opt/aurora --bind /opt/cray --pwd "/lus/flare/projects/$HPCENV_PROJECT/$USER/hpcenv-jobs" "/lus/flare/projects/$HPCENV_PROJECT/$USER/hpcenv/images/torch-gpu-aurora.sif" sh "$HPCENV_STEPS/bind-preflight.sh" libmpi.so.12 "$MPI_ROOT" "$MPI_ROOT/lib" mpich@4.2 mpich 3 bind libmpi.so.12=mpich libmpi.so.40=openmpi libmpi_ibm.so.3=openmpi

# Run (24 ranks, 12 per node).
mkdir -p "$HPCENV_OUTPUT"
mpiexec -n 24 --ppn 12 --cpu-bind list:1-4:9-12:17-20:25-28:33-36:41-44:53-56:61-64:69-72:77-80:85-88:93-96 sh "$HPCENV_STEPS/rank-env.sh" apptainer exec --bind /lus/flare --bind "/lus/flare/projects/$HPCENV_PROJECT/$USER/hpcenv-jobs" --bind "/tmp/hpcenv-$USER-train-${HPCENV_JOB_ID}-${HPCENV_NONCE}" --bind "/lus/flare/projects/$HPCENV_PROJECT/$USER/.cache/huggingface" --bind "$MPI_ROOT" --bind /opt/aurora --bind /opt/cray --pwd "/lus/flare/projects/$HPCENV_PROJECT/$USER/hpcenv-jobs" "/lus/flare/projects/$HPCENV_PROJECT/$USER/hpcenv/images/torch-gpu-aurora.sif" python3 train.py --data "${HPCENV_DATA}" --out "${HPCENV_OUTPUT}"

# Stage-out: /lus/flare/projects/$HPCENV_PROJECT/$USER/hpcenv-jobs/train-output-${HPCENV_JOB_ID} -> /lus/flare/projects/$HPCENV_PROJECT/results/run1, atomic, verified
bash "$HPCENV_STEPS/stage-out.sh" "/lus/flare/projects/$HPCENV_PROJECT/$USER/hpcenv-jobs/train-output-${HPCENV_JOB_ID}" "/lus/flare/projects/$HPCENV_PROJECT/results/run1" 0

echo "hpcenv: job $HPCENV_JOB_ID done at $(date -Is)"
