#!/usr/bin/env bash
# Installs ONNX Runtime for the ONNX export tests, the main job's ONNX step and bench/onnx_latency.sh: npm's
# onnxruntime-node at the version pinned in tests/onnx/package-lock.json (the CPU runtime ships in the package),
# into $TAPEGRAD_ONNXRUNTIME_DIR (default: build/onnxruntime, shared by every build directory, never committed).
# Idempotent: when the installed lock file is the pinned one and the package loads, it returns at once.
#   bash scripts/setup_onnxruntime.sh [--dir DIR]
# Note: `npm ci --ignore-scripts`: the package's install script would download GPU (CUDA) files, which fails
# without network and is not needed; the CPU binaries are in the tarball. Node and npm come from Debian
# (nodejs, npm) when missing.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
dir=${TAPEGRAD_ONNXRUNTIME_DIR:-$root/build/onnxruntime}
while [[ $# -gt 0 ]]; do
  case $1 in
    --dir) dir=$2; shift 2 ;;
    -h|--help) sed -n '2,9p' "$0"; exit 0 ;;
    *) echo "setup_onnxruntime.sh: unknown option '$1' (expected --dir DIR)" >&2; exit 2 ;;
  esac
done
lock=$root/tests/onnx/package-lock.json

if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  echo "setup_onnxruntime.sh: installing Debian's nodejs and npm"
  as_root=()
  if [[ $(id -u) -ne 0 ]]; then
    command -v sudo >/dev/null || { echo "setup_onnxruntime.sh: need root (or sudo) to install nodejs and npm" >&2; exit 1; }
    as_root=(sudo)
  fi
  "${as_root[@]}" apt-get update
  "${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends nodejs npm
fi

# loads: prints the runtime's version when the installed package loads in this Node, fails otherwise.
loads() {
  node -e "const ort = require(process.argv[1]); console.log(ort.env.versions.common)" \
    "$dir/node_modules/onnxruntime-node" 2>/dev/null
}

mkdir -p "$dir"
# Note: one installer at a time (the main job installs in the background while CI's test command may run).
exec 9>"$dir/.lock"
flock 9
if cmp -s "$lock" "$dir/.installed-lock" && version=$(loads); then
  echo "setup_onnxruntime.sh: onnxruntime-node (ONNX Runtime $version) already installed in $dir"
  exit 0
fi

echo "setup_onnxruntime.sh: installing onnxruntime-node into $dir (npm ci --ignore-scripts)"
rm -f "$dir/.installed-lock"
cp "$root/tests/onnx/package.json" "$lock" "$dir/"
(cd "$dir" && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error)
if ! version=$(loads); then
  echo "setup_onnxruntime.sh: onnxruntime-node was installed in $dir but does not load in node $(node --version):" >&2
  node -e "require(process.argv[1])" "$dir/node_modules/onnxruntime-node" >&2 || true
  exit 1
fi
cp "$lock" "$dir/.installed-lock"
echo "setup_onnxruntime.sh: ONNX Runtime $version (onnxruntime-node) installed in $dir"
