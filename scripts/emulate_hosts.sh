#!/usr/bin/env bash
# Emulated hosts for tapegrad's distributed training (docs/distributed.md, "Hosts, emulated"): N network
# namespaces ("hosts") joined by rate-limited veth links to one switch namespace, and mpirun launching one rank
# per host through `ip netns exec` (scripts/emulate_hosts_agent.sh) where it would use ssh. Needs root, iproute2
# (`ip`, `tc`), util-linux (`unshare`) and Open MPI.
#   bash scripts/emulate_hosts.sh [OPTIONS] -- PROGRAM [ARGS...]   # run PROGRAM on N emulated hosts, clean up
#   bash scripts/emulate_hosts.sh --cleanup [--prefix P]          # remove what a killed run left (idempotent)
# Options:
#   --np N          hosts, one rank each (default 2)
#   --rate R        each link's rate in each direction, tc syntax (1gbit, 10gbit, 100mbit) or none (default 1gbit)
#   --prefix P      namespace names begin with P (default tgemu-); runs at the same time need different prefixes
#   --subnet A.B.C  the /24 inside the namespaces (default: the first 10.213.X.0/24 this machine does not use)
#   --timeout S     stop the job after S seconds, exit 124 (default 0: no limit)
#   --keep          leave the namespaces up after PROGRAM (print how to use them; remove with --cleanup)
#   --mpirun-arg A  one more argument for mpirun (repeat it for several)
#   --check-rate    first measure one TCP stream host1 -> host2 (python3) and fail if it beats --rate by 15 %
# Prints each link's bytes in both directions after the run; exits with mpirun's status.
set -euo pipefail

usage() { sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'; }
die() { echo "emulate_hosts: $*" >&2; exit 2; }

np=2
rate=1gbit
prefix=tgemu-
subnet=
timeout_seconds=0
keep=0
check_rate=0
cleanup_only=0
mpirun_args=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --np) np="$2"; shift 2 ;;
    --rate) rate="$2"; shift 2 ;;
    --prefix) prefix="$2"; shift 2 ;;
    --subnet) subnet="$2"; shift 2 ;;
    --timeout) timeout_seconds="$2"; shift 2 ;;
    --keep) keep=1; shift ;;
    --check-rate) check_rate=1; shift ;;
    --cleanup) cleanup_only=1; shift ;;
    --mpirun-arg) mpirun_args+=("$2"); shift 2 ;;
    -h|--help) usage; exit 0 ;;
    --) shift; break ;;
    *) die "unknown option '$1' (see --help)" ;;
  esac
done
[[ "$np" =~ ^[1-9][0-9]?$ && "$np" -le 64 ]] || die "--np $np: expected 1 to 64 hosts"
[[ "$prefix" =~ ^[a-z][a-z0-9]{0,15}-$ ]] || die "--prefix '$prefix': expected a lower-case letter, at most 15 letters or digits, then '-'"
[[ "$timeout_seconds" =~ ^[0-9]+$ ]] || die "--timeout $timeout_seconds: expected whole seconds"

here="$(cd "$(dirname "$0")" && pwd)"
agent="$here/emulate_hosts_agent.sh"
switch="${prefix}switch"

# Note: a namespace outlives `ip netns delete` while a process still runs in it (an orted or a rank a killed
# mpirun left behind), so those processes (ours: nothing else runs in these namespaces) are killed first.
remove_namespaces() {
  local ns
  for ns in $(ip netns list 2>/dev/null | awk -v p="$prefix" 'index($1, p) == 1 { print $1 }'); do
    local pids
    pids=$(ip netns pids "$ns" 2>/dev/null || true)
    [[ -n "$pids" ]] && kill -KILL $pids 2>/dev/null || true
    ip netns delete "$ns" 2>/dev/null || true
    rm -rf "/etc/netns/$ns"
  done
  rmdir /etc/netns 2>/dev/null || true  # only when empty: other namespaces' files stay
}

if [[ $cleanup_only -eq 1 ]]; then
  remove_namespaces
  rm -rf "/tmp/emulate_hosts.${prefix}"*  # a killed run's hostfile and hosts file
  left=$(ip netns list 2>/dev/null | awk -v p="$prefix" 'index($1, p) == 1' | wc -l)
  [[ "$left" -eq 0 ]] || die "--cleanup: $left namespace(s) named ${prefix}* remain"
  echo "emulate_hosts: no namespace named ${prefix}* remains"
  exit 0
fi
[[ $# -gt 0 ]] || die "no program to run (usage: emulate_hosts.sh [options] -- PROGRAM [ARGS...])"

# Say clearly what is missing instead of failing half-way (or, in CI, passing without having run anything).
[[ $(id -u) -eq 0 ]] || die "needs root (network namespaces, veth links and tc qdiscs need CAP_SYS_ADMIN and CAP_NET_ADMIN)"
for tool in ip tc unshare mpirun; do
  command -v "$tool" >/dev/null || die "'$tool' not found (scripts/setup.sh installs iproute2 and openmpi-bin)"
done
[[ -x "$agent" ]] || die "$agent is missing or not executable"
probe="${prefix}probe$$"
if ! probe_error=$(ip netns add "$probe" 2>&1); then
  die "network namespaces are not available here ('ip netns add' failed: $probe_error). A container needs --privileged or CAP_SYS_ADMIN + CAP_NET_ADMIN"
fi
if ! probe_error=$(ip -n "$probe" link add pa type veth peer name pb 2>&1); then
  ip netns delete "$probe"
  die "veth links are not available here ('ip link add type veth' failed: $probe_error)"
fi
if [[ "$rate" != none ]] && ! probe_error=$(ip netns exec "$probe" tc qdisc add dev pa root tbf rate "$rate" burst 64kb latency 20ms 2>&1); then
  ip netns delete "$probe"
  die "tc tbf rate limiting is not available here (or --rate '$rate' is not tc syntax): $probe_error"
fi
ip netns delete "$probe"

# The /24 inside the namespaces. Nothing is addressed outside them, but a range this machine already routes
# (a VPN, a docker bridge) would make the printed addresses ambiguous, so such ranges are skipped.
to_int() { local IFS=.; read -r a b c d <<<"$1"; echo $(( (a << 24) | (b << 16) | (c << 8) | ${d:-0} )); }
used_by_machine() {  # $1 = A.B.C: does any route or address of the root namespace overlap A.B.C.0/24?
  local net; net=$(to_int "$1.0")
  local prefix_text
  for prefix_text in $( { ip -4 route show table all 2>/dev/null | awk '$1 != "default" && $1 != "broadcast" && $1 != "local" { print $1 } $1 == "local" || $1 == "broadcast" { print $2 }'; ip -4 -o addr show | awk '{ print $4 }'; } | sort -u); do
    local address=${prefix_text%/*} length=32
    [[ "$prefix_text" == */* ]] && length=${prefix_text#*/}
    [[ "$address" =~ ^[0-9]+\.[0-9]+\.[0-9]+\.[0-9]+$ ]] || continue
    local shorter=$(( length < 24 ? length : 24 ))
    local mask=$(( shorter == 0 ? 0 : (0xffffffff << (32 - shorter)) & 0xffffffff ))
    (( ($(to_int "$address") & mask) == (net & mask) )) && return 0
  done
  return 1
}
if [[ -z "$subnet" ]]; then
  for x in $(seq 0 255); do
    used_by_machine "10.213.$x" || { subnet="10.213.$x"; break; }
  done
  [[ -n "$subnet" ]] || die "every 10.213.X.0/24 is in use on this machine: pass --subnet A.B.C"
else
  [[ "$subnet" =~ ^(10\.[0-9]+\.[0-9]+|172\.(1[6-9]|2[0-9]|3[01])\.[0-9]+|192\.168\.[0-9]+)$ ]] ||
    die "--subnet $subnet: expected the first three numbers of a private (RFC 1918) /24, e.g. 10.213.7"
  ! used_by_machine "$subnet" || die "--subnet $subnet.0/24 overlaps a route or address of this machine"
fi

workdir=$(mktemp -d "/tmp/emulate_hosts.${prefix}XXXXXX")
mpirun_pid=
cleanup() {
  local status=$?
  trap - EXIT INT TERM
  if [[ -n "$mpirun_pid" ]] && kill -0 "$mpirun_pid" 2>/dev/null; then
    kill -TERM "$mpirun_pid" 2>/dev/null || true  # mpirun stops its daemons and ranks on SIGTERM
    local tenths=0
    while kill -0 "$mpirun_pid" 2>/dev/null && (( tenths < 50 )); do sleep 0.1; tenths=$(( tenths + 1 )); done
    kill -KILL "$mpirun_pid" 2>/dev/null || true
  fi
  if [[ $keep -eq 0 ]]; then remove_namespaces; fi
  rm -rf "$workdir"
  exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
remove_namespaces  # a previous run with this prefix that was killed before its own clean-up

# Rate limit one link end: tbf shapes what leaves an interface, so each direction of a link is one qdisc.
# Note: burst is 1 ms of traffic at the rate (at least 64 KiB, one GSO packet), the bucket a real NIC's
# line rate does not have but tbf needs to keep up at 10 Gbit/s with the kernel's timer granularity.
rate_bits() {
  local r=${1,,}
  case "$r" in
    *gbit) echo $(( ${r%gbit} * 1000000000 )) ;;
    *mbit) echo $(( ${r%mbit} * 1000000 )) ;;
    *kbit) echo $(( ${r%kbit} * 1000 )) ;;
    *) die "--rate $1: expected N followed by kbit, mbit or gbit, or none" ;;
  esac
}
limit_link() {  # $1 = namespace, $2 = interface
  [[ "$rate" == none ]] && return 0
  local burst=$(( $(rate_bits "$rate") / 8 / 1000 ))
  (( burst < 65536 )) && burst=65536
  ip netns exec "$1" tc qdisc replace dev "$2" root tbf rate "$rate" burst "$burst" latency 20ms
}
quiet_namespace() {  # lo up, no IPv6 (no link-local addresses, no duplicate-address detection to wait for)
  ip netns exec "$1" sysctl -qw net.ipv6.conf.all.disable_ipv6=1 net.ipv6.conf.default.disable_ipv6=1
  ip -n "$1" link set lo up
}

# Topology: the switch namespace holds a bridge (br0, address .254) with one port per host; host i holds eth0
# (address .i), the other end of a veth pair whose switch end is port i. mpirun runs in the switch namespace,
# the head node of this cluster: it needs an address the orteds can reach to connect back to it (Open MPI's
# out-of-band channel), and that address must be inside a namespace this script created.
ip netns add "$switch"
quiet_namespace "$switch"
ip -n "$switch" link add br0 type bridge forward_delay 0
ip -n "$switch" addr add "$subnet.254/24" dev br0
ip -n "$switch" link set br0 up
hosts=()
for i in $(seq 1 "$np"); do
  host="${prefix}host$i"
  hosts+=("$host")
  ip netns add "$host"
  quiet_namespace "$host"
  ip link add eth0 netns "$host" type veth peer name "port$i" netns "$switch"
  ip -n "$switch" link set "port$i" master br0 up
  ip -n "$host" addr add "$subnet.$i/24" dev eth0
  ip -n "$host" link set eth0 up
  limit_link "$host" eth0
  limit_link "$switch" "port$i"
done
# Names resolve inside the emulated network (`ip netns exec` bind-mounts /etc/netns/NS/hosts on /etc/hosts).
{
  echo "127.0.0.1 localhost"
  echo "$subnet.254 $switch"
  for i in $(seq 1 "$np"); do echo "$subnet.$i ${prefix}host$i"; done
} >"$workdir/hosts"
for ns in "$switch" "${hosts[@]}"; do
  mkdir -p "/etc/netns/$ns"
  cp "$workdir/hosts" "/etc/netns/$ns/hosts"
done
for host in "${hosts[@]}"; do echo "$host slots=1"; done >"$workdir/hostfile"

echo "emulate_hosts: $np hosts (${hosts[*]}) on $subnet.0/24, one veth link each to ${switch} (bridge, mpirun at $subnet.254), rate ${rate} per link and direction"

# One TCP stream from host1 to host2 through the switch, timed at the receiver from its first byte to its last:
# at most the link rate when tbf works (both links of the path are limited), however fast veth itself is.
measure_rate() {
  local bits; bits=$(rate_bits "$rate")
  local bytes=$(( bits / 8 / 2 ))  # half a second at the rate: well above the 1 ms burst
  cat >"$workdir/rate.py" <<'PYTHON'
import socket, sys, time
role, address, size = sys.argv[1], sys.argv[2], int(sys.argv[3])
if role == "receive":
    server = socket.create_server((address, 5201))
    open(sys.argv[4], "w").write("ready")
    connection, _ = server.accept()
    received, first = 0, None
    while chunk := connection.recv(1 << 20):
        first = first or time.monotonic()
        received += len(chunk)
    print(received * 8 / (time.monotonic() - first) if received == size else -1)
else:
    block = bytes(1 << 20)
    with socket.create_connection((address, 5201)) as connection:
        for start in range(0, size, len(block)):
            connection.sendall(block[: min(len(block), size - start)])
PYTHON
  ip netns exec "${hosts[1]}" "$python" "$workdir/rate.py" receive "$subnet.2" "$bytes" "$workdir/ready" >"$workdir/rate" &
  local receiver=$! waited=0
  until [[ -s "$workdir/ready" ]] || (( waited > 100 )); do sleep 0.05; waited=$(( waited + 1 )); done
  ip netns exec "${hosts[0]}" "$python" "$workdir/rate.py" send "$subnet.2" "$bytes"
  wait "$receiver"
  local measured; measured=$(cat "$workdir/rate")
  awk -v m="$measured" -v r="$bits" -v rate="$rate" 'BEGIN {
    if (m <= 0) { print "emulate_hosts: --check-rate: the receiver did not get every byte" > "/dev/stderr"; exit 1 }
    printf "emulate_hosts: measured %.0f Mbit/s host1 -> host2 (one TCP stream, --rate %s)\n", m / 1e6, rate
    if (m > 1.15 * r) { printf "emulate_hosts: --check-rate: %.0f Mbit/s is above the %s limit: tbf is not limiting\n", m / 1e6, rate > "/dev/stderr"; exit 1 } }'
}
if [[ $check_rate -eq 1 ]]; then
  [[ "$np" -ge 2 && "$rate" != none ]] || die "--check-rate needs --np 2 or more and a --rate"
  # Note: the system's python3 first: a version manager's shim (pyenv) on PATH costs seconds per start here.
  python=/usr/bin/python3
  [[ -x "$python" ]] || python=$(command -v python3) || die "--check-rate needs python3"
  measure_rate
fi

if [[ $keep -eq 1 ]]; then
  echo "emulate_hosts: --keep: run commands with 'ip netns exec ${prefix}host1 ...', remove with: bash $0 --cleanup --prefix $prefix"
fi

# Note: Open MPI is forced onto TCP over eth0 of each host (and its control channel too): pml ob1 with btl
# tcp,self (no vader shared memory, no UCX, which would find /dev/shm shared by the "hosts"), both TCP paths
# restricted to the emulated subnet. Each orted sees the machine's cores as its own node's; binding would pin every
# rank to core 0, so ranks are not bound. No tree spawn: every orted is started by the agent from mpirun.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export TAPEGRAD_EMULATED_HOSTS_PREFIX="$prefix"
command=(mpirun -np "$np" --hostfile "$workdir/hostfile" --bind-to none
         --mca plm_rsh_agent "$agent" --mca plm_rsh_no_tree_spawn 1
         --mca pml ob1 --mca btl "tcp,self" --mca btl_tcp_if_include "$subnet.0/24"
         --mca oob tcp --mca oob_tcp_if_include "$subnet.0/24"
         "${mpirun_args[@]}" "$@")
if [[ "$timeout_seconds" -gt 0 ]]; then command=(timeout --kill-after=5 "$timeout_seconds" "${command[@]}"); fi
status=0
ip netns exec "$switch" unshare --uts sh -c 'hostname "$0" && exec "$@"' "$switch" "${command[@]}" &
mpirun_pid=$!
wait "$mpirun_pid" || status=$?
mpirun_pid=
[[ $status -eq 124 ]] && echo "emulate_hosts: the job ran longer than --timeout $timeout_seconds s and was stopped" >&2

# Each link's traffic, read on the switch port: what the port received came from the host.
for i in $(seq 1 "$np"); do
  stats=$(ip netns exec "$switch" cat "/sys/class/net/port$i/statistics/rx_bytes" "/sys/class/net/port$i/statistics/tx_bytes" | tr '\n' ' ')
  read -r sent received <<<"$stats"
  echo "emulate_hosts: link ${prefix}host$i: sent $sent bytes, received $received bytes"
done
exit "$status"
