#!/bin/bash
# hpcenv logs step (hpcenv/jobs/logtail.py): run by `bash -s -- CAP N PATTERN... [FILE OFFSET]...`
# on the host that submitted the job, with this file on stdin. For every regular file that one
# of the N PATTERNs names (only "*" matches other names, as in logs.sh), prints one line:
#   PATH<TAB>SIZE<TAB>OFFSET<TAB>BASE64
# BASE64 is at most CAP bytes of the file from OFFSET (the FILE's given OFFSET, else 0; CAP 0:
# to the end), so a follower reads a growing log in bounded pieces and gets its bytes exactly
# (any byte a job wrote, a newline or an escape sequence too, stays data inside the base64).
hpcenv_log_chunks() {
  local IFS='' cap=$1 n=$2 pattern f size off
  shift 2
  local patterns=("${@:1:n}")
  shift "$n"
  declare -A offsets=()
  while [ "$#" -ge 2 ]; do
    offsets[$1]=$2
    shift 2
  done
  for pattern in "${patterns[@]}"; do
    for f in $pattern; do
      [ -f "$f" ] || continue
      size=$(stat -c %s -- "$f") || continue
      off=${offsets[$f]:-0}
      if [ "$off" -gt "$size" ]; then off=0; fi # truncated or replaced: from its start
      printf '%s\t%s\t%s\t' "$f" "$size" "$off"
      if [ "$cap" -gt 0 ]; then
        tail -c "+$((off + 1))" -- "$f" </dev/null | head -c "$cap" | base64 -w0
      else
        tail -c "+$((off + 1))" -- "$f" </dev/null | base64 -w0
      fi
      printf '\n'
    done
  done
}

hpcenv_log_chunks "$@"; exit $?
