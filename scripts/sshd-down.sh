#!/usr/bin/env bash
# Stop the loopback sshd that scripts/sshd-up.sh started (by its pid file, when that names a
# running sshd: see scripts/pidfile.sh). Keys are kept.
set -euo pipefail
STATE=${HPCENV_STATE:-/var/tmp/hpcenv-services}
# shellcheck source-path=SCRIPTDIR source=pidfile.sh
. "$(dirname "$0")/pidfile.sh"
stop_service "$STATE/sshd/sshd.pid" sshd sshd-down
