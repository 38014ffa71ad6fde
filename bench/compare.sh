#!/usr/bin/env bash
# The tapegrad vs libtorch comparison in one command: runs bench/compare and bench/compare_torch interleaved
# (A B A B: each workload, tapegrad then libtorch, repeated), takes medians, and prints a markdown table of
# throughput ratios (tapegrad / libtorch, higher is better) against issue 7's targets, plus the peak resident
# memory of a cnn training process of each.
#   bash bench/compare.sh [--build-dir DIR] [--reps R] [--seconds S] [--threads "1 2"] [--workloads "mlp cnn"]
# DIR defaults to build/release; the two programs are built there if missing (configuring the release preset
# if DIR does not exist). libtorch runs with OpenBLAS: LD_LIBRARY_PATH=/usr/lib/x86_64-linux-gnu/openblas-openmp.
# Note: one process per (workload, side, repetition), so each max_rss_mb belongs to one workload alone, and
# the sides alternate so that load from other processes hits both alike. Medians, not means, for the same reason.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build_dir=$root/build/release
reps=3
seconds=3
thread_counts="1 2"
workloads="mlp cnn bn_fwd_bwd infer_mlp_b1 infer_mlp_b1024 matmul"
openblas=/usr/lib/x86_64-linux-gnu/openblas-openmp
while [[ $# -gt 0 ]]; do
  case $1 in
    --build-dir) build_dir=$(realpath -m "$2"); shift 2 ;;
    --reps) reps=$2; shift 2 ;;
    --seconds) seconds=$2; shift 2 ;;
    --threads) thread_counts=$2; shift 2 ;;
    --workloads) workloads=$2; shift 2 ;;
    *) sed -n '2,8p' "$0" >&2; exit 2 ;;
  esac
done

if [[ ! -x $build_dir/bench/compare || ! -x $build_dir/bench/compare_torch ]]; then
  if [[ ! -f $build_dir/CMakeCache.txt ]]; then
    cmake -S "$root" -B "$build_dir" -DCMAKE_BUILD_TYPE=Release -DTAPEGRAD_NATIVE=ON
  fi
  cmake --build "$build_dir" --target compare compare_torch -j"$(nproc)"
fi
[[ -d $openblas ]] || { echo "OpenBLAS not found at $openblas (apt-get install libopenblas0-openmp)" >&2; exit 1; }

results=$(mktemp)
trap 'rm -f "$results"' EXIT
load_before=$(cut -d' ' -f1-3 /proc/loadavg)
echo "load average before: $load_before" >&2
for ((rep = 1; rep <= reps; ++rep)); do
  for threads in $thread_counts; do
    for workload in $workloads; do
      for side in tapegrad libtorch; do
        if [[ $side == tapegrad ]]; then
          output=$("$build_dir/bench/compare" --threads "$threads" --seconds "$seconds" --workload "$workload")
        else
          output=$(LD_LIBRARY_PATH=$openblas "$build_dir/bench/compare_torch" --threads "$threads" \
                     --seconds "$seconds" --workload "$workload")
        fi
        rss=$(sed -n 's/^max_rss_mb=//p' <<<"$output")
        sed -n "s/^workload=.*samples_per_s=\([^ ]*\).*cpu_ms_per_step=\([^ ]*\).*/$side $workload $threads \1 $rss \2/p" \
          <<<"$output" \
          | tee -a "$results" >&2
      done
    done
  done
done
load_after=$(cut -d' ' -f1-3 /proc/loadavg)
echo "load average after: $load_after" >&2

# Medians per (side, workload, threads) of samples_per_s and of max_rss_mb, then the table.
awk -v workloads="$workloads" -v thread_counts="$thread_counts" -v reps="$reps" '
  function median(list,   values, n, i, j, t) {
    n = split(list, values, " ")
    for (i = 2; i <= n; ++i) for (j = i; j > 1 && values[j - 1] + 0 > values[j] + 0; --j) {
      t = values[j]; values[j] = values[j - 1]; values[j - 1] = t
    }
    return n % 2 ? values[(n + 1) / 2] : (values[n / 2] + values[n / 2 + 1]) / 2
  }
  { key = $1 SUBSEP $2 SUBSEP $3; speed[key] = speed[key] " " $4; rss[key] = rss[key] " " $5; cpu[key] = cpu[key] " " $6 }
  END {
    target["mlp", 1] = 1.25; target["mlp", 2] = 1.25; target["cnn", 1] = 1.8; target["cnn", 2] = 1.5
    target["bn_fwd_bwd", 1] = 3; target["bn_fwd_bwd", 2] = 2.5
    target["infer_mlp_b1", 1] = 1.3; target["infer_mlp_b1", 2] = 1.3
    target["infer_mlp_b1024", 1] = 0.95; target["infer_mlp_b1024", 2] = 0.95
    target["matmul", 1] = 0.95; target["matmul", 2] = 0.95
    n_threads = split(thread_counts, threads_list, " ")
    n_workloads = split(workloads, workload_list, " ")
    printf "Throughput ratio tapegrad / libtorch 1.13 + OpenBLAS (openmp), medians of %d interleaved runs\n\n", reps
    printf "| workload | threads | tapegrad samples/s | libtorch samples/s | ratio | target | met | CPU-time ratio |\n"
    printf "|---|---|---|---|---|---|---|---|\n"
    for (w = 1; w <= n_workloads; ++w) for (t = 1; t <= n_threads; ++t) {
      name = workload_list[w]; threads = threads_list[t]
      a = median(speed["tapegrad", name, threads]); b = median(speed["libtorch", name, threads])
      goal = ((name, threads) in target) ? target[name, threads] : 0
      ratio = b > 0 ? a / b : 0
      cpu_a = median(cpu["tapegrad", name, threads]); cpu_b = median(cpu["libtorch", name, threads])
      printf "| %s | %d | %.4g | %.4g | %.2fx | %s | %s | %.2fx |\n", name, threads, a, b, ratio,
             goal ? sprintf(">= %.2fx", goal) : "-", goal ? (ratio >= goal ? "yes" : "no") : "-",
             (cpu_a > 0 ? cpu_b / cpu_a : 0)
    }
    if (index(" " workloads " ", " cnn ")) {
      printf "\nPeak resident memory of a cnn training process (max_rss_mb, median):\n\n"
      printf "| threads | tapegrad MB | libtorch MB | met (tapegrad <= libtorch) |\n|---|---|---|---|\n"
      for (t = 1; t <= n_threads; ++t) {
        threads = threads_list[t]
        a = median(rss["tapegrad", "cnn", threads]); b = median(rss["libtorch", "cnn", threads])
        printf "| %d | %.1f | %.1f | %s |\n", threads, a, b, (a <= b ? "yes" : "no")
      }
    }
    printf "\nCPU-time ratio: libtorch CPU ms per step / tapegrad CPU ms per step (medians). At 1 thread it discounts\n"
    printf "the time other processes held the core; at 2 threads it sums both threads (efficiency, not speed).\n"
  }' "$results"
echo
echo "Load average (1, 5, 15 min) before: $load_before; after: $load_after (on $(nproc) cores)."
