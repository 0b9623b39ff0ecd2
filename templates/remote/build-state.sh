#!/bin/sh
# hpcenv build --on-login: the state of the build in the current folder (new, running PID,
# stopped, done RC), then, given a line number, build.log from that line. Sent on stdin
# (`sh -s -- [LINE]`) each time the login node is asked; nothing of it is built as a string.
if [ -f build.rc ]; then
  echo "done $(cat build.rc)"
elif [ -f build.pid ] && kill -0 "$(cat build.pid)" 2>/dev/null; then
  echo "running $(cat build.pid)"
elif [ -f build.pid ]; then
  echo stopped
else
  echo new
fi
if [ -n "${1:-}" ]; then
  tail -n +"$1" build.log
fi
