#!/usr/bin/env bash
# The README's test command: installs what is missing, builds a preset and runs every test.
#   bash scripts/test.sh            # release (default)
#   bash scripts/test.sh sanitize   # ASan + UBSan
#   (also: debug, native; extra arguments go to ctest, e.g. -R autograd)
set -euo pipefail
cd "$(dirname "$0")/.."

preset="${1:-release}"
shift || true
case "$preset" in
  release|sanitize|debug|native) ;;
  *) echo "test.sh: unknown preset '$preset' (expected release, sanitize, debug or native)" >&2; exit 2 ;;
esac

bash scripts/setup.sh
# ONNX Runtime (npm onnxruntime-node) for the ONNX export tests. Note: installed while the build compiles (on a
# fresh machine it is Debian's nodejs and npm, then npm's download: network and dpkg, little CPU); ctest waits for
# it, and a failed install still fails this script, after the build. setup_onnxruntime.sh holds a lock, so a
# second caller waits, and an installed copy returns at once.
onnxruntime_log=$(mktemp)
log=$(mktemp)
trap 'rm -f "$log" "$onnxruntime_log"' EXIT
bash scripts/setup_onnxruntime.sh > "$onnxruntime_log" 2>&1 &
onnxruntime_pid=$!
jobs=$(nproc)
# Note: ctest runs nproc tests at once and each starts an OpenMP team of nproc threads, so the cores are
# oversubscribed; libgomp's idle threads then spin away the time slices the working threads need
# (docs/performance.md, "Threads on a busy machine"). Sleeping idle threads change no result, only CPU time:
# the CNN case of test_examples_smoke took 30.0 s of CPU by default and 4.6 s with passive on a loaded machine.
export OMP_WAIT_POLICY="${OMP_WAIT_POLICY:-passive}"

if [[ "$preset" == sanitize ]]; then
  # Note: fail on the first error with a stack trace; leaks count as errors. RapidCheck runs fewer cases
  # here because the sanitizers make every case ~3x slower; the release run covers the full 100. The library
  # compiles at -O1 with line tables only (-g1, CMakePresets.json; -O1 is what ASan's documentation advises), the
  # test programs at -O0 (tests/CMakeLists.txt): CI's time here was mostly compiling the tests' RapidCheck and
  # Catch2 templates at -O2 -g, and the tests run no slower (114 s either way). Stack traces name file and line.
  export ASAN_OPTIONS="${ASAN_OPTIONS:-halt_on_error=1:detect_leaks=1:strict_string_checks=1}"
  export UBSAN_OPTIONS="${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}"
  export RC_PARAMS="${RC_PARAMS:-max_success=25}"
fi

echo "== test.sh: configure preset '$preset' =="
cmake --preset "$preset" >/dev/null
echo "== test.sh: build preset '$preset' (-j$jobs) =="
cmake --build --preset "$preset" -j"$jobs"
onnxruntime_status=0
wait "$onnxruntime_pid" || onnxruntime_status=$?
cat "$onnxruntime_log"
if [[ $onnxruntime_status -ne 0 ]]; then
  echo "test.sh: scripts/setup_onnxruntime.sh failed (status $onnxruntime_status)" >&2
  exit "$onnxruntime_status"
fi
echo "== test.sh: ctest preset '$preset' =="
status=0
ctest --preset "$preset" -j"$jobs" "$@" 2>&1 | tee "$log" || status=$?
echo "== test.sh [$preset]: $(grep -E 'tests passed|tests failed' "$log" | tail -n 1 || echo 'no ctest summary') =="
if [[ "$preset" == release && $status -eq 0 ]]; then
  # The default build must run on CPUs without AVX-512 or AVX: its checks again, under qemu.
  echo "== test.sh: portability (qemu -cpu Haswell, Nehalem) =="
  bash scripts/portability.sh "build/$preset" || status=$?
fi
exit "$status"
