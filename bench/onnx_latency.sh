#!/usr/bin/env bash
# Inference latency, tapegrad against ONNX Runtime on the same machine, threads and weights (issue 41, item 6):
# for each workload (the mlp and cnn of bench/compare.cpp, and `tiny`, one ReLU on [N, 1]: each side's fixed cost
# per call), batch size and thread count, bench/onnx_latency times tapegrad's eval forward (NoGradGuard) and
# exports the same model and input batch, then tests/onnx/run_model.js --time times ONNX Runtime's session.run on
# them (npm onnxruntime-node, CPU; intra-op threads = tapegrad's threads, inter-op 1, all graph optimisations).
# The two sides alternate within each repetition (the order alternating between repetitions); the table shows the
# median over repetitions of each run's median latency, and ONNX Runtime's latency over tapegrad's.
#   bash bench/onnx_latency.sh [--build-dir DIR] [--reps R] [--seconds S] [--threads "1 2"] [--batches "1 1024"]
#                              [--workloads "tiny mlp cnn"]
# DIR defaults to build/release; onnx_latency is built there if missing, ONNX Runtime installed if missing.
# Note: ONNX Runtime is timed from Node: each run is `await session.run(feeds)` between two process.hrtime
# calls, so its latency includes the JavaScript binding's cost per call (converting the feeds and results, the
# promise); the `tiny` row measures that fixed cost, which is what to subtract from a small model's row. tapegrad
# is timed in C++ around model->forward(input).
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build_dir=$root/build/release
reps=3
seconds=3
thread_counts="1 2"
batches="1 1024"
workloads="tiny mlp cnn"
while [[ $# -gt 0 ]]; do
  case $1 in
    --build-dir) build_dir=$(realpath -m "$2"); shift 2 ;;
    --reps) reps=$2; shift 2 ;;
    --seconds) seconds=$2; shift 2 ;;
    --threads) thread_counts=$2; shift 2 ;;
    --batches) batches=$2; shift 2 ;;
    --workloads) workloads=${2//,/ }; shift 2 ;;
    *) sed -n '2,15p' "$0" >&2; exit 2 ;;
  esac
done

if [[ ! -x $build_dir/bench/onnx_latency ]]; then
  [[ -f $build_dir/CMakeCache.txt ]] || cmake -S "$root" -B "$build_dir" -DCMAKE_BUILD_TYPE=Release
  cmake --build "$build_dir" --target onnx_latency -j"$(nproc)"
fi
[[ -x $build_dir/bench/onnx_latency ]] || { echo "onnx_latency was not built: the ONNX component needs libonnx-dev" >&2; exit 1; }
bash "$root/scripts/setup_onnxruntime.sh" >&2

work=$(mktemp -d)
results=$work/results
trap 'rm -rf "$work"' EXIT
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)" >&2

# median of the numbers on stdin
median() { sort -g | awk '{v[NR] = $1} END {if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }

for rep in $(seq 1 "$reps"); do
  for threads in $thread_counts; do
    for workload in $workloads; do
      for batch in $batches; do
        prefix=$work/${workload}_b${batch}
        sides=(tapegrad onnxruntime)
        (( rep % 2 == 0 )) && sides=(onnxruntime tapegrad)
        # The model and its input are written by the tapegrad run; ONNX Runtime needs them first time round.
        [[ -f $prefix.onnx ]] || "$build_dir/bench/onnx_latency" --workload "$workload" --batch "$batch" \
                                   --threads "$threads" --seconds 0.01 --export "$prefix" >/dev/null
        for side in "${sides[@]}"; do
          if [[ $side == tapegrad ]]; then
            line=$("$build_dir/bench/onnx_latency" --workload "$workload" --batch "$batch" --threads "$threads" \
                     --seconds "$seconds")
            ms=$(sed -n 's/.* median_ms=\([0-9.e+-]*\).*/\1/p' <<<"$line")
          else
            line=$(node "$root/tests/onnx/run_model.js" "$prefix.onnx" "$prefix.tgt" --time "$seconds" \
                     --threads "$threads")
            ms=$(sed -n 's/.*"median_ms":\([0-9.e+-]*\).*/\1/p' <<<"$line")
          fi
          echo "$line" >&2
          echo "$workload $batch $threads $side $ms" >>"$results"
        done
      done
    done
  done
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)" >&2

ort_version=$(node -e "console.log(require(process.argv[1]).env.versions.common)" \
                "${TAPEGRAD_ONNXRUNTIME_DIR:-$root/build/onnxruntime}/node_modules/onnxruntime-node")
echo
echo "Inference latency, medians of $reps repetitions of ${seconds} s (ms per forward call); ONNX Runtime $ort_version"
echo "(onnxruntime-node, CPU), timed from Node (see the tiny row for the per-call cost); $(nproc) CPUs,"
echo "load average at the end $(cut -d' ' -f1-3 /proc/loadavg)"
echo
echo "| workload | batch | threads | tapegrad ms | ONNX Runtime ms | ONNX Runtime / tapegrad |"
echo "|---|---|---|---|---|---|"
for threads in $thread_counts; do
  for workload in $workloads; do
    for batch in $batches; do
      ours=$(awk -v w="$workload" -v b="$batch" -v t="$threads" '$1 == w && $2 == b && $3 == t && $4 == "tapegrad" {print $5}' "$results" | median)
      theirs=$(awk -v w="$workload" -v b="$batch" -v t="$threads" '$1 == w && $2 == b && $3 == t && $4 == "onnxruntime" {print $5}' "$results" | median)
      ratio=$(awk -v a="$theirs" -v b="$ours" 'BEGIN {printf "%.2f", a / b}')
      printf '| %s | %s | %s | %.4g | %.4g | %s |\n' "$workload" "$batch" "$threads" "$ours" "$theirs" "$ratio"
    done
  done
done
