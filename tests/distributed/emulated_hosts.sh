#!/usr/bin/env bash
# ctest distributed_emulated_hosts: the small version of docs/distributed.md's "Hosts, emulated". Two network
# namespaces joined by 1 Gbit/s veth links (scripts/emulate_hosts.sh) train a few steps of fashion_mnist_ddp
# over TCP, one rank per namespace. Checks that the rate limit holds, that the job succeeds, that each link
# carried at least the gradients' bytes of every step (so the ranks did talk over the emulated network), that a
# failing job reports its failure, and that nothing is left behind either way. Needs root and network
# namespaces: without them it fails with the reason (it never passes without having run).
#   bash tests/distributed/emulated_hosts.sh EXAMPLE INSPECT   # fashion_mnist_ddp, tapegrad-inspect
set -euo pipefail
[[ $# -eq 2 ]] || { echo "usage: emulated_hosts.sh FASHION_MNIST_DDP TAPEGRAD_INSPECT" >&2; exit 2; }
example=$(realpath "$1")
inspect=$(realpath "$2")
emulate="$(cd "$(dirname "$0")/../../scripts" && pwd)/emulate_hosts.sh"
prefix="tgci$$-"  # unique per run: ctest may run this beside another build's copy
work=$(mktemp -d /tmp/emulated_hosts_test.XXXXXX)
namespaces_left() { ip netns list 2>/dev/null | awk -v p="$prefix" 'index($1, p) == 1' | wc -l; }
trap 'rm -rf "$work"; bash "$emulate" --cleanup --prefix "$prefix" >/dev/null 2>&1 || true' EXIT
fail() { echo "distributed_emulated_hosts: FAILED: $*" >&2; exit 1; }
started=$(date +%s.%N)

# 1. A few training steps on two emulated hosts, the rate measured first.
steps=3
status=0
bash "$emulate" --np 2 --rate 1gbit --prefix "$prefix" --timeout 60 --check-rate -- \
  "$example" --epochs 1 --threads 1 --max-steps "$steps" --subset 1024 --output-dir "$work/out" >"$work/train.log" 2>&1 ||
  status=$?
cat "$work/train.log"
[[ $status -eq 0 ]] || fail "emulate_hosts.sh exited with status $status (its message is above)"
grep -q '^2 ranks x 1 threads, 64 images per rank per step' "$work/train.log" || fail "the example did not run as 2 ranks"
grep -q '^epoch 1/1: ' "$work/train.log" || fail "the example did not finish its epoch"
[[ $(namespaces_left) -eq 0 ]] || fail "namespaces named ${prefix}* remain after a successful run"

# Every parameter's gradient crosses each link once per step in each direction (an allreduce of 2 ranks), so
# each link's bytes must be at least steps x the gradients' bytes. Shared memory or loopback would leave
# the links nearly idle.
gradient_bytes=$("$inspect" "$work/out/fashion_mnist_ddp.ckpt" | awk '
  $2 == "parameter" {
    match($0, /\[[^]]*\]/); count = split(substr($0, RSTART + 1, RLENGTH - 2), dims, ", "); n = 1
    for (i = 1; i <= count; ++i) n *= dims[i]
    bytes += n * ($3 == "float64" ? 8 : 4)
  }
  END { print bytes + 0 }')
[[ "$gradient_bytes" -gt 100000 ]] || fail "could not read the parameter count from the checkpoint (got '$gradient_bytes' bytes)"
for host in 1 2; do
  sent='' received=''
  read -r sent received < <(sed -n "s/^emulate_hosts: link ${prefix}host$host: sent \([0-9]*\) bytes, received \([0-9]*\) bytes$/\1 \2/p" "$work/train.log") || true
  [[ -n "$sent" ]] || fail "no traffic report for host$host"
  for value in "$sent" "$received"; do
    [[ "$value" -ge $(( steps * gradient_bytes )) ]] ||
      fail "link host$host carried $value bytes, less than $steps steps x $gradient_bytes gradient bytes"
  done
done
echo "distributed_emulated_hosts: $steps steps x $gradient_bytes gradient bytes; each link carried at least that both ways"

# 2. A job whose ranks fail: its status comes back (mpirun's 1, not the script's own 2) and nothing is left.
status=0
bash "$emulate" --np 2 --rate 1gbit --prefix "$prefix" --timeout 30 -- false >"$work/fail.log" 2>&1 || status=$?
[[ $status -eq 1 ]] || { cat "$work/fail.log"; fail "a job whose ranks exit 1 returned status $status"; }
[[ $(namespaces_left) -eq 0 ]] || fail "namespaces named ${prefix}* remain after a failed run"

# 3. --cleanup is idempotent: nothing to remove is success.
bash "$emulate" --cleanup --prefix "$prefix" >/dev/null || fail "--cleanup with nothing to remove failed"
bash "$emulate" --cleanup --prefix "$prefix" >/dev/null || fail "a second --cleanup failed"
awk -v s="$started" -v e="$(date +%s.%N)" 'BEGIN { printf "distributed_emulated_hosts: passed in %.1f s\n", e - s }'
