#!/usr/bin/env bash
# The README's main job: install what is missing, build Release, train the Fashion-MNIST CNN with its
# defaults, save a checkpoint, then load it into a fresh model in a second process and evaluate it; finally export
# it to ONNX and print ONNX Runtime's test accuracy beside tapegrad's (examples/fashion_mnist_onnx.cpp).
#   bash scripts/main_job.sh [extra arguments for the training run, e.g. --epochs 2]
# Output (checkpoint, metrics CSV, curves) goes to $TAPEGRAD_OUT (default: out/main_job).
set -euo pipefail
cd "$(dirname "$0")/.."

out="${TAPEGRAD_OUT:-out/main_job}"
checkpoint="$out/fashion_mnist_cnn.ckpt"
binary=build/release/examples/fashion_mnist_cnn

bash scripts/setup.sh
echo "== main_job: build release (the example only: the test command builds everything) =="
cmake --preset release >/dev/null
cmake --build --preset release --target fashion_mnist_cnn -j"$(nproc)"

if [[ ! -x "$binary" ]]; then
  echo "main_job: $binary was not built: examples/fashion_mnist_cnn (issue 6) does not exist yet in this checkout." >&2
  exit 1
fi

mkdir -p "$out"
# Note: ONNX Runtime (npm onnxruntime-node, for the last step) installs in the background while the CNN trains,
# so the first epoch starts as soon as the example is built; the ONNX step waits for it.
bash scripts/setup_onnxruntime.sh >"$out/setup_onnxruntime.log" 2>&1 &
onnxruntime_setup=$!
echo "== main_job: train (checkpoint: $checkpoint) =="
"$binary" --output-dir "$out" --checkpoint "$checkpoint" "$@"
if [[ ! -f "$checkpoint" ]]; then
  echo "main_job: training finished but wrote no checkpoint at $checkpoint" >&2
  exit 1
fi
echo "== main_job: reload the checkpoint into a fresh model and evaluate =="
"$binary" --output-dir "$out" --evaluate "$checkpoint"

echo "== main_job: export the CNN to ONNX and evaluate it with ONNX Runtime =="
if ! cmake --build --preset release --target fashion_mnist_onnx -j"$(nproc)"; then
  echo "main_job: fashion_mnist_onnx was not built: the ONNX component (tapegrad::onnx) needs libonnx-dev (scripts/setup.sh installs it)" >&2
  exit 1
fi
if ! wait "$onnxruntime_setup"; then
  cat "$out/setup_onnxruntime.log" >&2
  echo "main_job: ONNX Runtime could not be installed (scripts/setup_onnxruntime.sh)" >&2
  exit 1
fi
cat "$out/setup_onnxruntime.log"
build/release/examples/fashion_mnist_onnx --checkpoint "$checkpoint" --onnx "$out/fashion_mnist_cnn.onnx"
