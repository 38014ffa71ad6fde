#!/usr/bin/env bash
# Open MPI's launch agent for scripts/emulate_hosts.sh (mpirun --mca plm_rsh_agent THIS): where mpirun would run
# `ssh HOST COMMAND` to start its daemon (orted) on HOST, this runs COMMAND in the network namespace named HOST,
# under its own hostname HOST.
#   emulate_hosts_agent.sh [ssh-style options] HOST COMMAND...
# Note: with its own hostname each host is named in Open MPI's messages (which node a rank died on) and keeps its
# own session directory under /tmp, which the emulated hosts share; otherwise every one reports the machine's.
set -euo pipefail
prefix="${TAPEGRAD_EMULATED_HOSTS_PREFIX:?emulate_hosts_agent.sh: TAPEGRAD_EMULATED_HOSTS_PREFIX is not set (run through scripts/emulate_hosts.sh)}"
while [[ $# -gt 0 && "$1" == -* ]]; do shift; done  # options meant for ssh (Open MPI adds none for this agent today)
[[ $# -ge 2 ]] || { echo "emulate_hosts_agent.sh: expected HOST COMMAND..., got '$*'" >&2; exit 2; }
host="$1"
shift
if [[ "$host" != "$prefix"* || ! -e "/var/run/netns/$host" ]]; then
  echo "emulate_hosts_agent.sh: '$host' is not an emulated host of this run (no namespace /var/run/netns/$host)" >&2
  exit 2
fi
# As ssh does, the command words are joined and run by a shell on the "remote" side.
exec ip netns exec "$host" unshare --uts sh -c 'hostname "$0" && exec sh -c "$1"' "$host" "$*"
