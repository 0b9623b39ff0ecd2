# shellcheck shell=bash
# Sourced (not run) by the service scripts (munge, the two Slurms, the loopback sshd): the one
# way they read a pid file. A pid file outlives its process (a killed session, a reboot, a machine
# restored from a snapshot), and its number is then given to any later process: a stranger, or
# the very script reading it. So a pid counts only when its process is alive AND has the name the
# service's program has (/proc/PID/comm); a stale file is never signalled, only replaced.

# pid_if_ours PIDFILE NAME: print the pid in PIDFILE when that process runs and is named NAME.
pid_if_ours() {
  local file=$1 name=$2 pid
  [ -s "$file" ] || return 1
  pid=$(head -c 32 "$file" | tr -d '[:space:]')
  [[ $pid =~ ^[1-9][0-9]*$ ]] || return 1
  [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = "$name" ] || return 1
  echo "$pid"
}

# alive PIDFILE NAME: the service in PIDFILE runs (see pid_if_ours).
alive() { pid_if_ours "$1" "$2" >/dev/null; }

# stop_pid PID LABEL PREFIX: TERM, wait up to 10 s, then KILL; say so as "PREFIX: stopped LABEL (PID)".
stop_pid() {
  local pid=$1 label=$2 prefix=$3
  kill -0 "$pid" 2>/dev/null || return 0
  kill -TERM "$pid" 2>/dev/null || true
  for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  if kill -0 "$pid" 2>/dev/null; then kill -KILL "$pid" 2>/dev/null || true; fi
  echo "$prefix: stopped $label ($pid)"
}

# stop_service PIDFILE NAME PREFIX: stop the service in PIDFILE if it is ours; remove the file.
stop_service() {
  local pid
  if pid=$(pid_if_ours "$1" "$2"); then stop_pid "$pid" "$2" "$3"; fi
  rm -f "$1"
}
