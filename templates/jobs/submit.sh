#!/bin/bash
# hpcenv submit step (hpcenv/jobs/submit.py): run by `bash -s -- ARGS` on the host that submits
# (this machine or a login node over SSH), with this file and then the job script on stdin.
# It makes and enters the job's workdir, prints it, and hands the rest of stdin (the job script)
# to the scheduler's submit command.
#
# Usage: bash -s -- WORKDIR TOKEN NFIND [FIND_ARGV...] SUBMIT_ARGV...
#   WORKDIR      the job's workdir (its $VARS already expanded by the calling shell)
#   TOKEN        the job's submit token, or "" (then NFIND is 0: nothing to look for)
#   NFIND        how many of the next words are FIND_ARGV
#   FIND_ARGV    prints "ID TOKEN ..." lines, one per job of this user (Slurm: squeue --me)
#   SUBMIT_ARGV  reads the job script on stdin and prints the job id (sbatch --parsable ...)
# With a token, a lock in WORKDIR/.hpcenv (WORKDIR/.hpcenv-USER where .hpcenv is another
# user's) serialises submissions of that token, and a job that
# already carries it (an earlier attempt whose reply was lost) is printed instead of submitting
# a second one.
#
# Read from stdin, bash reads this file one byte at a time (POSIX: the shell must not read what
# the commands it starts should read), so the submit command gets exactly the job script. All of
# it is one function and the last line calls it and exits: nothing after that line ever runs as
# commands here, and only the submit command reads stdin (everything else reads /dev/null).
WORKDIR_MARK=HPCENV_WORKDIR=
EXISTING_MARK=HPCENV_SUBMITTED_BEFORE=

hpcenv_submit() {
  if [ "$#" -lt 4 ]; then
    echo "hpcenv submit: usage: WORKDIR TOKEN NFIND [FIND_ARGV...] SUBMIT_ARGV..." >&2
    return 2
  fi
  local workdir=$1 token=$2 nfind=$3
  shift 3
  case $nfind in
    '' | *[!0-9]*)
      echo "hpcenv submit: NFIND is not a count: $nfind" >&2
      return 2
      ;;
  esac
  if [ "$#" -le "$nfind" ] || { [ "$nfind" -gt 0 ] && [ -z "$token" ]; }; then
    echo "hpcenv submit: no submit command, or a find command without a token" >&2
    return 2
  fi
  local find=("${@:1:nfind}")
  shift "$nfind"
  mkdir -p -- "$workdir" </dev/null && cd -- "$workdir" || return
  echo "$WORKDIR_MARK$(pwd -P)"
  if [ "$nfind" -eq 0 ]; then
    "$@"
    return
  fi
  # In a group workdir .hpcenv may be another user's: the lock then goes to one of this user's
  # own (the same folder for every attempt, so a retry still finds the first one's lock).
  local dir=.hpcenv found rc
  mkdir -p "$dir" </dev/null 2>/dev/null || true
  if [ -L "$dir" ] || [ ! -O "$dir" ] || [ ! -w "$dir" ]; then
    dir=".hpcenv-$(id -un </dev/null)"
    mkdir -m 0700 "$dir" </dev/null 2>/dev/null || [ -d "$dir" ] || return
    if [ -L "$dir" ] || [ ! -O "$dir" ]; then
      echo "hpcenv submit: $(pwd -P)/$dir is not $(id -un </dev/null)'s; remove it" >&2
      return 2
    fi
  fi
  local lock="$dir/submit-$token.lock"
  exec 9>"$lock" || return
  flock 9 </dev/null
  rc=$?
  if [ "$rc" -eq 0 ]; then
    found=$("${find[@]}" </dev/null | awk -v t="$token" '$2 == t {print $1}')
    if [ -n "$found" ]; then
      echo "$EXISTING_MARK$found"
    else
      "$@"
    fi
    rc=$?
  fi
  rm -f "$lock"
  return "$rc"
}

hpcenv_submit "$@"; exit $?
