#!/usr/bin/env bash
# The README's main job: install what is missing, build Release, train the Fashion-MNIST CNN with its
# defaults, save a checkpoint, then load it into a fresh model in a second process and evaluate it.
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
echo "== main_job: train (checkpoint: $checkpoint) =="
"$binary" --output-dir "$out" --checkpoint "$checkpoint" "$@"
if [[ ! -f "$checkpoint" ]]; then
  echo "main_job: training finished but wrote no checkpoint at $checkpoint" >&2
  exit 1
fi
echo "== main_job: reload the checkpoint into a fresh model and evaluate =="
"$binary" --output-dir "$out" --evaluate "$checkpoint"
