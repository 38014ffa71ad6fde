#!/usr/bin/env bash
# Proves that the default build runs on CPUs without AVX-512 (and without AVX at all): runs its kernel tests
# (test_autocast among them: there oneDNN has no bfloat16, so autocast must take and pass its float32 fallback)
# and a training step of the CNN and the MLP under qemu-user emulating a Haswell (AVX2, no AVX-512) and a
# Nehalem (SSE4.2, no AVX). qemu traps every instruction the emulated CPU lacks with SIGILL, and oneDNN and
# tapegrad's dispatched kernels read the emulated CPUID, so they must pick their AVX2 and SSE4.1 code there.
#   bash scripts/portability.sh [BUILD_DIR]     (default build/release, already built)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build/release}
command -v qemu-x86_64 >/dev/null || { echo "portability.sh: qemu-x86_64 missing (apt-get install qemu-user)" >&2; exit 1; }
grep -q '^TAPEGRAD_NATIVE:BOOL=OFF' "$build/CMakeCache.txt" ||
  { echo "portability.sh: $build is not the default (portable) build" >&2; exit 1; }

# The control: qemu must trap AVX-512 under -cpu Haswell, or the runs below prove nothing.
control=$(mktemp -d)
trap 'rm -rf "$control"' EXIT
printf 'int main(void) {\n  __asm__ volatile("vpxord %%zmm0, %%zmm0, %%zmm0");\n  return 0;\n}\n' > "$control/avx512.c"
gcc "$control/avx512.c" -o "$control/avx512"
if qemu-x86_64 -cpu Haswell "$control/avx512" 2>/dev/null; then
  echo "portability.sh: qemu -cpu Haswell ran an AVX-512 instruction: the check would prove nothing" >&2
  exit 1
fi
echo "control: an AVX-512 instruction under qemu -cpu Haswell is trapped (SIGILL), as it must be"

# Note: qemu warns about CPUID bits its TCG cannot emulate (pcid, x2apic...); those lines are dropped.
emulate() {
  local cpu=$1
  shift
  qemu-x86_64 -cpu "$cpu" "$@" 2> >(grep -v "TCG doesn't support requested feature" >&2)
}

# One emulated CPU's checks; prints its report and fails when any check fails.
run_cpu() {
  local cpu=$1
  echo "== $cpu =="
  for test in test_kernels_gemm test_kernels_column_sums test_kernels_vector_math test_batch_norm_paths \
              test_batch_norm_relu test_conv test_pool test_pool_nhwc test_channels_last_conv_bn test_loss_numerics \
              test_autocast test_bfloat16_dtype; do
    # Note: grep reads all of the output (no early close, so no SIGPIPE), and fails when no summary is there.
    RC_PARAMS=max_success=10 emulate "$cpu" "$build/tests/$test" | grep -E "^(All tests passed|test cases:)" |
      sed "s/^/$test: /"
  done
  for workload in cnn mlp; do
    emulate "$cpu" "$build/bench/compare" --smoke --workload "$workload" | grep '^workload='
  done
}

# Note: the two CPUs run at once (qemu is mostly one busy thread per process, and CI has two cores); each
# report is printed whole, in order, and either failing fails the script.
set +e
(set -eo pipefail; run_cpu Haswell) > "$control/Haswell.log" 2>&1 &
haswell=$!
(set -eo pipefail; run_cpu Nehalem) > "$control/Nehalem.log" 2>&1 &
nehalem=$!
wait "$haswell"; haswell_status=$?
wait "$nehalem"; nehalem_status=$?
set -e
cat "$control/Haswell.log" "$control/Nehalem.log"
if [[ $haswell_status -ne 0 || $nehalem_status -ne 0 ]]; then
  echo "portability.sh: failed under qemu (Haswell status $haswell_status, Nehalem status $nehalem_status)" >&2
  exit 1
fi
echo "portability.sh: the default build ran its checks on Haswell and Nehalem"
