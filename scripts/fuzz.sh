#!/usr/bin/env bash
# Fuzzes the safetensors reader: builds ember and fuzz/safetensors_fuzz with clang,
# libFuzzer, AddressSanitizer and UndefinedBehaviorSanitizer, writes a seed corpus of valid
# files, and runs the fuzzer for a bounded time. Exits non-zero when it finds a failure
# (the input that triggered it is kept under the build directory's artifacts/).
#
#   scripts/fuzz.sh [SECONDS]        default 60; env EMBER_FUZZ_BUILD picks the build dir,
#                                    EMBER_FUZZ_JOBS the number of parallel fuzzer processes
set -euo pipefail

seconds=${1:-60}
root=$(cd "$(dirname "$0")/.." && pwd)
build=${EMBER_FUZZ_BUILD:-$root/build-fuzz}
jobs=${EMBER_FUZZ_JOBS:-1}

as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }
need=()
command -v clang++ >/dev/null || need+=(clang)
# clang's OpenMP runtime (the ember library is built with OpenMP).
[ -e /usr/include/omp.h ] || compgen -G "/usr/lib/llvm-*/lib/clang/*/include/omp.h" >/dev/null \
  || need+=(libomp-dev)
[ -e /usr/share/cmake/nlohmann_json/nlohmann_jsonConfig.cmake ] || need+=(nlohmann-json3-dev)
if [ ${#need[@]} -gt 0 ]; then
  echo "fuzz.sh: installing ${need[*]}"
  as_root apt-get update -qq
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" libomp-dev >/dev/null
fi

export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$root}
cmake -S "$root" -B "$build" -G Ninja \
  -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_FLAGS="-fsanitize=fuzzer-no-link" \
  -DEMBER_SANITIZE=ON -DEMBER_FUZZ=ON -DEMBER_NATIVE=OFF \
  -DEMBER_BUILD_TESTS=OFF -DEMBER_BUILD_BENCH=OFF >/dev/null
ninja -C "$build" -j2 safetensors_fuzz safetensors_make_seeds

seeds="$build/fuzz-seeds"
corpus="$build/fuzz-corpus"
artifacts="$build/artifacts"
rm -rf "$seeds"
mkdir -p "$seeds" "$corpus" "$artifacts"
"$build/fuzz/safetensors_make_seeds" "$seeds"

echo "fuzz.sh: fuzzing the safetensors reader for ${seconds}s"
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
flags=(-dict="$root/fuzz/safetensors.dict" -max_len=4096 -timeout=10 -rss_limit_mb=2048
       -max_total_time="$seconds" -print_final_stats=1 -artifact_prefix="$artifacts/")
# Several jobs write their logs (fuzz-N.log) into the current directory: the build's.
[ "$jobs" -gt 1 ] && flags+=(-jobs="$jobs" -workers="$jobs")
(cd "$build" && "$build/fuzz/safetensors_fuzz" "$corpus" "$seeds" "${flags[@]}")
echo "fuzz.sh: no failures in ${seconds}s (corpus kept in $corpus)"
