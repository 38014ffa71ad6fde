#!/usr/bin/env bash
# Proves that tapegrad works as a dependency of other projects, the ways docs/packaging.md lists, from an
# existing release build (bash scripts/test.sh release makes it):
#   bash scripts/check_package.sh [--deb]
# 1. install to a temporary prefix; every installed public header compiles on its own;
# 2. the installed libraries carry their SONAME and export no internal kernel;
# 3. find_package: an outside project that sets no C++ standard builds, runs, and its compile lines carry
#    neither -fopenmp, -march nor Eigen's include path; the testing kit's example project builds and runs;
# 4. pkg-config: a plain g++ command builds and runs the same program;
# 5. the installed library runs on CPUs without AVX-512 (qemu-x86_64 -cpu Haswell) and without AVX
#    (-cpu Nehalem);
# 6. add_subdirectory: an outside project builds tapegrad from source as a subproject (libraries only; it builds
#    the core library its program links);
# 7. --deb (as root, on a machine where nothing else needs /usr/lib/libtapegrad*): cpack -G DEB, apt-get install
#    of both packages, the find_package and pkg-config consumers against /usr, then apt-get remove.
set -euo pipefail
cd "$(dirname "$0")/.."
source_dir=$PWD
build=build/release
with_deb=false
for arg in "$@"; do
  case "$arg" in
    --deb) with_deb=true ;;
    -h|--help) sed -n '2,15p' "$0"; exit 0 ;;
    *) echo "check_package.sh: unknown option '$arg'" >&2; exit 2 ;;
  esac
done
[[ -f $build/CMakeCache.txt ]] || { echo "check_package.sh: no $build (run bash scripts/test.sh release)" >&2; exit 1; }

work=$(mktemp -d /tmp/tapegrad-package.XXXXXX)
trap 'rm -rf "$work"' EXIT
prefix=$work/prefix
step() { echo; echo "--- check_package: $*"; }

step "install to $prefix"
cmake --install $build --prefix "$prefix" > "$work/install.log"
libdir=$(find "$prefix" -name 'libtapegrad.so.*.*' -printf '%h\n' | head -1)
test -n "$libdir"
export PKG_CONFIG_PATH=$libdir/pkgconfig

step "each installed public header compiles on its own (with pkg-config's flags only)"
headers=$(cd "$prefix/include" && find tapegrad -name '*.h' | sort)
compile_alone() {
  local header=$1 extra=()
  [[ $header == tapegrad/framework/distributed/* ]] && extra=($(pkg-config --cflags ompi))
  echo "#include <$header>" | g++ -fsyntax-only -Wall -Wextra -Wpedantic -Werror $(pkg-config --cflags tapegrad) \
                                  "${extra[@]}" -x c++ - ||
    { echo "check_package: <$header> does not compile on its own" >&2; return 1; }
}
export -f compile_alone
# Note: one g++ per header, nproc at a time: ~1.3 s of CPU each and ~95 headers, ~2 minutes when run one by one.
# xargs runs them all and then fails (status 123) if any one failed; each failure names its header.
printf '%s\n' $headers | xargs -P "$(nproc)" -I{} bash -c 'compile_alone "$1"' _ {}
echo "$(printf '%s\n' $headers | wc -l) headers compile alone"

step "SONAME and exported symbols"
for lib in tapegrad tapegrad_distributed; do
  file=$(ls "$libdir"/lib$lib.so.*.*)
  soname=$(readelf -d "$file" | sed -n 's/.*SONAME.*\[\(.*\)\]/\1/p')
  echo "$(basename "$file"): SONAME $soname"
  [[ $soname == lib$lib.so.0 ]] || { echo "check_package: $file has SONAME '$soname'" >&2; exit 1; }
done
nm -DC --defined-only "$libdir/libtapegrad.so" > "$work/symbols.txt"
internal=$(grep -c 'tapegrad::kernels::' "$work/symbols.txt" || true)
echo "$(wc -l < "$work/symbols.txt") exported symbols, $internal of them in tapegrad::kernels"
[[ $internal == 0 ]] || { echo "check_package: the shared library exports internal kernels" >&2; exit 1; }

step "find_package consumer (no C++ standard set by the consumer)"
cmake -S tests/consumer -B "$work/consumer" -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_BUILD_TYPE=Release > /dev/null
cmake --build "$work/consumer" -v -j"$(nproc)" > "$work/consumer-build.log"
if grep -E -e '-fopenmp|-march=|eigen3|oneapi' "$work/consumer-build.log"; then
  echo "check_package: a private flag or include path leaked into the consumer's build (lines above)" >&2; exit 1
fi
grep -q -e '-std=c++20\|-std=gnu++20' "$work/consumer-build.log" || { echo "check_package: C++20 not propagated" >&2; exit 1; }
"$work/consumer/consumer"
# Note: setup.sh installs Open MPI, so the release build has tapegrad::distributed: its absence is a bug.
"$work/consumer/consumer_distributed"
cmake -S tests/consumer_testing -B "$work/consumer_testing" -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_BUILD_TYPE=Release > /dev/null
cmake --build "$work/consumer_testing" -j"$(nproc)" > /dev/null
"$work/consumer_testing/power_norm_test"

step "pkg-config consumer: g++ \$(pkg-config --cflags --libs tapegrad)"
echo "pkg-config --cflags --libs tapegrad: $(pkg-config --cflags --libs tapegrad)"
g++ -O1 tests/consumer/main.cpp $(pkg-config --cflags --libs tapegrad) -Wl,-rpath,"$libdir" -o "$work/pkg_config_consumer"
"$work/pkg_config_consumer"

step "the installed library on older CPUs (qemu-x86_64)"
for cpu in Haswell Nehalem; do
  echo "qemu-x86_64 -cpu $cpu:"
  qemu-x86_64 -cpu $cpu "$work/consumer/consumer" | tail -1
done

step "add_subdirectory consumer (tapegrad built from source as a subproject)"
cmake -S tests/consumer_subproject -B "$work/subproject" -DTAPEGRAD_SOURCE="$source_dir" -DCMAKE_BUILD_TYPE=Debug > /dev/null
# Note: only what the consumer links (libtapegrad): tapegrad::distributed and tapegrad::onnx are configured as
# subproject targets all the same, and the release and sanitize builds compile them.
cmake --build "$work/subproject" --target consumer -j"$(nproc)" > "$work/subproject-build.log" ||
  { tail -30 "$work/subproject-build.log"; exit 1; }
"$work/subproject/consumer"

if $with_deb; then
  step "Debian packages: cpack -G DEB, apt-get install, consumers against /usr"
  (cd $build && cpack -G DEB > "$work/cpack.log") || { cat "$work/cpack.log"; exit 1; }
  debs=$(ls $build/libtapegrad*.deb)
  for deb in $debs; do
    echo "$(basename "$deb"):"; dpkg-deb -f "$deb" Package Version Depends | sed 's/^/  /'
  done
  apt-get install -y $(for deb in $debs; do echo "$PWD/$deb"; done) > "$work/apt.log" 2>&1 || { cat "$work/apt.log"; exit 1; }
  cmake -S tests/consumer -B "$work/deb_consumer" -DCMAKE_BUILD_TYPE=Release > /dev/null
  cmake --build "$work/deb_consumer" -j"$(nproc)" > /dev/null
  "$work/deb_consumer/consumer"
  unset PKG_CONFIG_PATH
  g++ -O1 tests/consumer/main.cpp $(pkg-config --cflags --libs tapegrad) -o "$work/deb_pkg_config_consumer"
  "$work/deb_pkg_config_consumer"
  tapegrad-inspect --help > /dev/null
  apt-get remove -y libtapegrad-dev "libtapegrad0" > /dev/null
fi
echo; echo "check_package: all checks passed"
