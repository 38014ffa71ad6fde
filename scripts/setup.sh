#!/usr/bin/env bash
# Installs the Debian 12 packages tapegrad needs, only when some are missing (so repeated runs are instant).
#   bash scripts/setup.sh [--with-torch] [--with-mpi] [--with-fuzz]
#   --with-torch  libtorch, OpenMP OpenBLAS and jemalloc (for the comparison benchmarks in bench/)
#   --with-mpi    accepted for compatibility: Open MPI (framework/distributed, its mpirun tests) is now a default
#   --with-fuzz   clang, libFuzzer and clang's OpenMP (for -DTAPEGRAD_FUZZ=ON and fuzz/)
set -euo pipefail

packages=(build-essential cmake g++ libeigen3-dev libboost-serialization-dev libfmt-dev
          catch2 librapidcheck-dev libbenchmark-dev libcli11-dev zlib1g-dev dataset-fashion-mnist gnuplot-nox
          libopenmpi-dev openmpi-bin libzip-dev zipcmp zipmerge ziptool nlohmann-json3-dev libdnnl-dev
          python3-torch qemu-user pkg-config libpng-dev libjpeg62-turbo-dev fortunes libonnx-dev iproute2)
# Note: python3-torch for the PyTorch interop tests (tests/interop), never linked; qemu-user for the
# portability check (scripts/portability.sh); pkg-config for scripts/check_package.sh. zipcmp, zipmerge and ziptool:
# libzip-dev's CMake config refers to these programs and fails without them, though the library is all we use.
# libpng-dev and libjpeg62-turbo-dev decode the image-folder dataset's files (framework/data); fortunes is the
# text corpus of the char_transformer example (/usr/share/games/fortunes). libonnx-dev: ONNX's own protobuf classes,
# checker and shape inference for the optional ONNX export component (tapegrad::onnx); iproute2: `ip netns` for the
# emulated-hosts distributed test.
for arg in "$@"; do
  case "$arg" in
    --with-torch) packages+=(libtorch-dev libopenblas0-openmp libjemalloc2) ;;
    --with-fuzz) packages+=(clang libclang-rt-14-dev libomp-dev) ;;
    --with-mpi) ;;  # Note: Open MPI is in the default list now, so CI has mpirun for tests/distributed
    -h|--help) sed -n '2,6p' "$0"; exit 0 ;;
    *) echo "setup.sh: unknown option '$arg' (expected --with-torch, --with-mpi or --with-fuzz)" >&2; exit 2 ;;
  esac
done

missing=()
for package in "${packages[@]}"; do
  status=$(dpkg-query -W -f='${db:Status-Status}' "$package" 2>/dev/null || true)
  [[ "$status" == "installed" ]] || missing+=("$package")
done

if [[ ${#missing[@]} -eq 0 ]]; then
  echo "setup.sh: all ${#packages[@]} packages already installed"
  exit 0
fi

echo "setup.sh: installing ${#missing[@]} missing packages: ${missing[*]}"
as_root=()
if [[ $(id -u) -ne 0 ]]; then
  if command -v sudo >/dev/null; then
    as_root=(sudo)
  else
    echo "setup.sh: need root (or sudo) to install: ${missing[*]}" >&2
    exit 1
  fi
fi
export DEBIAN_FRONTEND=noninteractive
"${as_root[@]}" apt-get update
"${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing[@]}"
