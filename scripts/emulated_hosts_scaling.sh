#!/usr/bin/env bash
# Scaling of fashion_mnist_ddp across emulated hosts (scripts/emulate_hosts.sh, docs/distributed.md "Hosts,
# emulated"): samples/s of one process with 1 thread against 2 and 4 ranks of 1 thread, one rank per emulated
# host, at each link rate, and the gradient volume per step (from the model's parameter count). Needs root.
#   bash scripts/emulated_hosts_scaling.sh [--build-dir DIR] [--steps N] [--repeats N] [--ranks "2 4"]
#                                          [--rates "none 10gbit 1gbit"] [-- EXAMPLE ARGS (e.g. --plain-bn)]
#   --build-dir  where examples/fashion_mnist_ddp and tools/tapegrad-inspect are (default build/release)
#   --steps      training steps of a global batch of 128 per run (default 100)
#   --repeats    runs of every configuration, interleaved; the table gives the median (default 3)
set -euo pipefail
cd "$(dirname "$0")/.."

build_dir=build/release
steps=100
repeats=3
ranks="2 4"
rates="none 10gbit 1gbit"
while [[ $# -gt 0 ]]; do
  case "$1" in
    --build-dir) build_dir="$2"; shift 2 ;;
    --steps) steps="$2"; shift 2 ;;
    --repeats) repeats="$2"; shift 2 ;;
    --ranks) ranks="$2"; shift 2 ;;
    --rates) rates="$2"; shift 2 ;;
    -h|--help) sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    --) shift; break ;;
    *) echo "emulated_hosts_scaling: unknown option '$1' (see --help)" >&2; exit 2 ;;
  esac
done
extra_args=("$@")
example="$build_dir/examples/fashion_mnist_ddp"
inspect="$build_dir/tools/tapegrad-inspect"
for binary in "$example" "$inspect"; do
  [[ -x "$binary" ]] || { echo "emulated_hosts_scaling: $binary not built (cmake --build $build_dir --target fashion_mnist_ddp tapegrad-inspect)" >&2; exit 2; }
done
example=$(realpath "$example")
work=$(mktemp -d /tmp/emulated_hosts_scaling.XXXXXX)
trap 'rm -rf "$work"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
train_args=(--epochs 1 --threads 1 --max-steps "$steps" "${extra_args[@]}")

load() { cut -d' ' -f1 /proc/loadavg; }
samples_per_second() { sed -n 's/^epoch 1\/1: .* \([0-9]*\) samples\/s$/\1/p' "$1"; }

# One run of one configuration: "one" (a single process, no mpirun) or "<ranks>@<rate>". Appends
# "samples/s load bytes-per-step" to $work/<configuration>.runs.
# A failed run (e.g. a rank killed from outside) is reported with its output and left out of the medians.
run() {
  local config="$1" log="$work/$1.log" out="$work/$1.out"
  local start_load; start_load=$(load)
  local status=0
  if [[ "$config" == one ]]; then
    "$example" "${train_args[@]}" --output-dir "$out" >"$log" 2>&1 || status=$?
  else
    bash scripts/emulate_hosts.sh --np "${config%@*}" --rate "${config#*@}" --prefix tgscale- --timeout 900 -- \
      "$example" "${train_args[@]}" --output-dir "$out" >"$log" 2>&1 || status=$?
  fi
  local rate; rate=$(samples_per_second "$log")
  if [[ $status -ne 0 || -z "$rate" ]]; then
    tail -n 15 "$log" >&2
    echo "  $config: FAILED (status $status, load $start_load): left out" | tee -a "$work/failures"
    return 0
  fi
  # Bytes host1 sent over its link during the whole job (start-up broadcast and evaluation included), per step.
  local sent; sent=$(sed -n 's/^emulate_hosts: link tgscale-host1: sent \([0-9]*\) bytes.*/\1/p' "$log")
  echo "$rate $start_load ${sent:+$(( sent / steps ))}" >>"$work/$config.runs"
  echo "  $config: $rate samples/s (load $start_load)${sent:+, host1 sent $(( sent / steps )) bytes per step}"
}

configs=(one)
for rate in $rates; do for n in $ranks; do configs+=("$n@$rate"); done; done
for config in "${configs[@]}"; do : >"$work/$config.runs"; done
echo "== emulated_hosts_scaling: ${configs[*]}, $steps steps each, $repeats repeats (interleaved), args: ${train_args[*]}"
# What each rate limit lets one TCP stream through right now (the machine's load lowers it).
for rate in $rates; do
  [[ "$rate" == none ]] && continue
  bash scripts/emulate_hosts.sh --np 2 --rate "$rate" --prefix tgscale- --check-rate -- true 2>&1 | grep -E 'measured|check-rate' || true
done
for repeat in $(seq 1 "$repeats"); do
  echo "repeat $repeat/$repeats"
  for config in "${configs[@]}"; do run "$config"; done
done

[[ -s "$work/one.runs" ]] || { echo "emulated_hosts_scaling: every one-process run failed: no baseline" >&2; exit 1; }

# The gradient volume: every parameter's gradient is allreduced once per step (DistributedDataParallel's
# buckets), so it is the parameter count times the dtype's size, read from the checkpoint the example saved.
read -r parameters gradient_bytes < <("$inspect" "$work/one.out/fashion_mnist_ddp.ckpt" | awk '
  $2 == "parameter" {
    match($0, /\[[^]]*\]/); shape = substr($0, RSTART + 1, RLENGTH - 2); n = 1
    count = split(shape, dims, ", "); for (i = 1; i <= count; ++i) n *= dims[i]
    size = $3 == "float64" ? 8 : 4; total += n; bytes += n * size
  }
  END { print total, bytes }')

median() { sort -n | awk '{ v[NR] = $1 } END { printf "%.0f\n", NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
field() { awk -v c="$2" '{ print $c }' "$work/$1.runs"; }
one=$(field one 1 | median)
echo
echo "gradient volume per step: $parameters parameters x $(( gradient_bytes / parameters )) bytes = $gradient_bytes bytes allreduced per step"
# Note: what each rank sends depends on the allreduce algorithm Open MPI picks: a ring sends 2(p-1)/p of the
# volume, recursive doubling log2(p) times it. The measured link bytes say which one ran.
for n in $ranks; do
  awk -v n="$n" -v b="$gradient_bytes" 'BEGIN {
    ring = 2 * (n - 1) / n * b; doubling = log(n) / log(2) * b
    printf "  %d ranks, sent per rank and step: ring %.0f bytes (%.1f ms at 1 Gbit/s, %.2f ms at 10 Gbit/s), recursive doubling %.0f bytes (%.1f ms, %.2f ms)\n",
           n, ring, ring * 8 / 1e6, ring * 8 / 1e7, doubling, doubling * 8 / 1e6, doubling * 8 / 1e7 }'
done
echo
echo "| configuration | samples/s (median, min-max) | vs one process | host1 link bytes per step | load at start |"
echo "|---|---|---|---|---|"
for config in "${configs[@]}"; do
  if [[ ! -s "$work/$config.runs" ]]; then echo "| $config | every run failed | | | |"; continue; fi
  rates_seen=$(field "$config" 1 | sort -n | tr '\n' ' ')
  value=$(field "$config" 1 | median)
  bytes=-
  [[ "$config" != one ]] && bytes=$(field "$config" 3 | median)
  loads=$(field "$config" 2 | sort -n | sed -n '1p;$p' | paste -sd- -)
  label="one process, 1 thread"
  [[ "$config" != one ]] && label="${config%@*} hosts x 1 thread, link ${config#*@}"
  awk -v l="$label" -v v="$value" -v o="$one" -v lo="${rates_seen%% *}" -v hi="$(echo "$rates_seen" | awk '{ print $NF }')" \
      -v b="$bytes" -v load="$loads" \
      'BEGIN { printf "| %s | %.0f (%s-%s) | %.2fx | %s | %s |\n", l, v, lo, hi, v / o, b, load }'
done
if [[ -s "$work/failures" ]]; then echo; echo "failed runs (left out above):"; cat "$work/failures"; fi
