#!/usr/bin/env bash
# The tapegrad vs libtorch comparison in one command, with the peer at its best and the machine's limits
# beside the ratios:
#   - bench/compare and bench/compare_torch run interleaved (for each repetition, thread count and workload:
#     one side then the other, the order alternating between repetitions, each with the system allocator and
#     with jemalloc preloaded); medians, with the min..max spread;
#   - libtorch runs with OpenBLAS (openmp build) and with OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE unset for its
#     command alone: this workplace sets both, which pins OpenBLAS to old kernels; the core OpenBLAS then
#     reports is printed;
#   - jemalloc runs with the MALLOC_CONF of PyTorch's own CPU launcher and CI (no purging, one arena for big
#     blocks, a background thread): jemalloc's defaults hand big blocks back to the kernel at once, and every
#     step then page-faults them in again;
#   - the ratio is tapegrad (system allocator, what a user gets) over libtorch's better allocator;
#   - bench/anchors prints the FMA peak per core (and the bfloat16 dot-product peak and oneDNN bfloat16 matmul
#     where the CPU has AVX512-BF16), raw 1024^3 sgemm of oneDNN and OpenBLAS (and dgemm), and
#     each GEMM- or conv-bound workload's GFLOP/s is shown as a fraction of the FMA peak;
#   - peak resident memory, absolute and above each side's idle process.
#   bash bench/compare.sh [--build-dir DIR] [--reps R] [--seconds S] [--threads "1 2"] [--workloads "mlp cnn" or mlp,cnn]
#                         [--allocators "system jemalloc"]
# DIR defaults to build/release (the default, portable build); the programs are built there if missing.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build_dir=$root/build/release
reps=3
seconds=3
thread_counts="1 2"
workloads="mlp cnn cnn_cl resnet resnet_cl bn_fwd_bwd infer_mlp_b1 infer_mlp_b1024 matmul lstm lstm_infer_b1 transformer matmul_bf16 mlp_bf16 cnn_bf16 resnet_bf16 cnn_bf16_cl resnet_bf16_cl"
allocators="system jemalloc"
openblas=/usr/lib/x86_64-linux-gnu/openblas-openmp
jemalloc=/usr/lib/x86_64-linux-gnu/libjemalloc.so.2
jemalloc_conf=oversize_threshold:1,background_thread:true,metadata_thp:auto,dirty_decay_ms:-1,muzzy_decay_ms:-1
while [[ $# -gt 0 ]]; do
  case $1 in
    --build-dir) build_dir=$(realpath -m "$2"); shift 2 ;;
    --reps) reps=$2; shift 2 ;;
    --seconds) seconds=$2; shift 2 ;;
    --threads) thread_counts=$2; shift 2 ;;
    --workloads) workloads=${2//,/ }; shift 2 ;;
    --allocators) allocators=$2; shift 2 ;;
    *) sed -n '2,17p' "$0" >&2; exit 2 ;;
  esac
done

if [[ ! -x $build_dir/bench/compare || ! -x $build_dir/bench/compare_torch || ! -x $build_dir/bench/anchors ]]; then
  if [[ ! -f $build_dir/CMakeCache.txt ]]; then
    cmake -S "$root" -B "$build_dir" -DCMAKE_BUILD_TYPE=Release
  fi
  cmake --build "$build_dir" --target compare compare_torch anchors -j"$(nproc)"
fi
[[ -d $openblas ]] || { echo "OpenBLAS not found at $openblas (apt-get install libopenblas0-openmp)" >&2; exit 1; }
if [[ " $allocators " == *" jemalloc "* && ! -f $jemalloc ]]; then
  echo "jemalloc not found at $jemalloc (apt-get install libjemalloc2)" >&2
  exit 1
fi

# run SIDE ALLOCATOR ARGS...: one process of one side, with the allocator preloaded or not.
run() {
  local side=$1 allocator=$2
  shift 2
  local preload=()
  [[ $allocator == jemalloc ]] && preload=(LD_PRELOAD="$jemalloc" MALLOC_CONF="$jemalloc_conf")
  if [[ $side == tapegrad ]]; then
    env "${preload[@]}" "$build_dir/bench/compare" "$@"
  else
    # Note: the OpenBLAS variables are unset for the libtorch command alone, never for tests or CI.
    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE "${preload[@]}" LD_LIBRARY_PATH="$openblas" \
      "$build_dir/bench/compare_torch" "$@"
  fi
}

results=$(mktemp)
anchors=$(mktemp)
trap 'rm -f "$results" "$anchors"' EXIT
load_before=$(cut -d' ' -f1-3 /proc/loadavg)
echo "load average before: $load_before" >&2
core=$(run libtorch system --threads 1 --workload idle | sed -n 's/^openblas_core=//p')
echo "OpenBLAS core under libtorch (OPENBLAS_CORETYPE/L2_SIZE unset): ${core:-not reported}" >&2

anchor_run() {
  for threads in $thread_counts; do
    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE "$build_dir/bench/anchors" --threads "$threads" \
      --seconds "$(awk -v s="$seconds" 'BEGIN { print s / 2 }')" | tee -a "$anchors" >&2
  done
}
anchor_run
for ((rep = 1; rep <= reps; ++rep)); do
  # Note: the order alternates between repetitions. On this machine the second of two back-to-back runs was
  # measured up to 20-35% faster at one thread (2026-12-06), so a fixed order would favour one side.
  if ((rep % 2)); then sides="tapegrad libtorch"; else sides="libtorch tapegrad"; fi
  for threads in $thread_counts; do
    for workload in $workloads idle; do
      for side in $sides; do
        for allocator in $allocators; do
          output=$(run "$side" "$allocator" --threads "$threads" --seconds "$seconds" --workload "$workload")
          rss=$(sed -n 's/^max_rss_mb=//p' <<<"$output")
          if [[ $workload == idle ]]; then
            echo "$side/$allocator idle $threads 0 $rss 0" | tee -a "$results" >&2
          else
            sed -n "s|^workload=.*samples_per_s=\([^ ]*\).*cpu_ms_per_step=\([^ ]*\).*|$side/$allocator $workload $threads \1 $rss \2|p" \
              <<<"$output" | tee -a "$results" >&2
          fi
        done
      done
    done
  done
done
anchor_run  # again at the end: the anchors' spread says how steady the machine was
load_after=$(cut -d' ' -f1-3 /proc/loadavg)
echo "load average after: $load_after" >&2

cpu_model=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n 1)
echo "## tapegrad vs libtorch 1.13, $(date -u '+%Y-%m-%d %H:%M UTC'), commit $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)"
echo
echo "CPU: $cpu_model ($(nproc) cores); build: $(sed -n 's/^TAPEGRAD_NATIVE:BOOL=//p' "$build_dir/CMakeCache.txt" | sed 's/ON/native (-march=native)/;s/OFF/default (portable, run-time dispatch)/'); OpenBLAS core under libtorch: ${core:-not reported}"
echo "jemalloc runs: LD_PRELOAD=$jemalloc MALLOC_CONF=$jemalloc_conf"
echo

awk -v workloads="$workloads" -v thread_counts="$thread_counts" -v reps="$reps" -v allocators="$allocators" \
    -v anchors_file="$anchors" -f "$root/bench/compare_report.awk" "$results"
echo
echo "Load average (1, 5, 15 min) before: $load_before; after: $load_after (on $(nproc) cores)."
