#!/bin/bash
# hpcenv logs step (hpcenv/jobs/submit.py: logs): run by `bash -s -- PATTERN...` on the host
# that submitted the job, with this file on stdin. Prints every regular file that a PATTERN
# names under a "==> path <==" header, as tail does; a PATTERN that names none is skipped.
# Only "*" in a PATTERN matches other names: hpcenv passes any other pattern character in a
# bracket expression ("[?]" for "?"), and no PATTERN is split at spaces.
hpcenv_logs() {
  local IFS='' pattern f
  for pattern do
    for f in $pattern; do
      if [ -f "$f" ]; then
        echo "==> $f <=="
        cat -- "$f" </dev/null
      fi
    done
  done
}

hpcenv_logs "$@"; exit $?
