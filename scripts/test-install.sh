#!/usr/bin/env bash
# Installs ember into a fresh prefix and uses it as a C++ user would: builds and runs every
# project in examples/ with find_package(ember) and a small program with pkg-config, checks
# that nothing they compile reads the source tree, and that compiled functions find the kernel
# headers in the prefix. Usage: scripts/test-install.sh [build-dir] [extra cmake args...]
# (default build-install; the build is kept between runs, the prefix is made anew in it), or
# scripts/test-install.sh --reuse build-dir: install from a build already configured (with any
# options; scripts/test.sh passes its own), its install prefix set to the new one and the build
# brought up to date, instead of compiling the library a second time.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
REUSE=0
if [[ ${1:-} == --reuse ]]; then
  REUSE=1
  shift
  [[ -n ${1:-} && -f ${1}/CMakeCache.txt ]] || { echo "[test-install] --reuse needs a configured build dir" >&2; exit 2; }
fi
BUILD_DIR=${1:-build-install}
shift || true
BUILD=$ROOT/$BUILD_DIR
PREFIX=$BUILD/prefix
fail() { echo "[test-install] FAIL: $*" >&2; exit 1; }

if [[ $REUSE == 1 ]]; then
  # Its other options kept; the prefix is compiled into the library (where compiled functions
  # look for the kernel headers), so that one source file is built again.
  echo "[test-install] installing $BUILD_DIR (brought up to date) into $PREFIX"
  cmake -S . -B "$BUILD" -DCMAKE_INSTALL_PREFIX="$PREFIX" >/dev/null
else
  echo "[test-install] building $BUILD_DIR and installing into $PREFIX"
  cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DEMBER_BUILD_TESTS=OFF \
    -DCMAKE_INSTALL_PREFIX="$PREFIX" "$@" >/dev/null
fi
ninja -C "$BUILD" >/dev/null
rm -rf "$PREFIX"
cmake --install "$BUILD" --prefix "$PREFIX" >/dev/null
for f in include/ember/ember.h include/ember/compile.h lib/libember.a bin/ember-gpt \
         lib/cmake/ember/emberConfig.cmake lib/cmake/ember/emberConfigVersion.cmake \
         lib/pkgconfig/ember.pc share/ember/include/kernels/functors.h; do
  [[ -e $PREFIX/$f ]] || fail "$f is not installed"
done

# Examples may include the public headers only: their sources say so, and the headers their
# builds actually read (ninja's dependency records) lie outside the source tree.
if grep -rn '#include *"' examples --include='*.cpp' --include='*.h' | grep -v '#include *"ember/'; then
  fail "an example includes a header other than ember/*.h"
fi
CACHE=$(mktemp -d)
trap 'rm -rf "$CACHE"' EXIT
# Each example against libember.a, and against libember.so when that was built.
TARGETS=(ember::ember)
[[ -e $PREFIX/lib/libember.so ]] && TARGETS+=(ember::ember_shared)
for target in "${TARGETS[@]}"; do
  for dir in examples/*/; do
    [[ -f $dir/CMakeLists.txt ]] || continue  # the C++ examples (examples/nanogpt is Python)
    name=$(basename "$dir")
    out=$BUILD/examples/${target#ember::}/$name
    rm -rf "$out"
    echo "[test-install] example $name ($target)"
    cmake -S "$dir" -B "$out" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$PREFIX" \
      -DEMBER_TARGET="$target" >/dev/null
    ninja -C "$out" >/dev/null
    if ninja -C "$out" -t deps | grep -E "^ +$ROOT/(src|include)/"; then
      fail "example $name read the headers above from the source tree"
    fi
    log=$out/run.log
    start=$SECONDS
    # A cache of its own, so that it compiles (and shows where it found the kernel headers).
    EMBER_CACHE_DIR=$CACHE/${target#ember::}-$name EMBER_LOGS=compiler "$out/$name" >"$log" 2>&1 ||
      { cat "$log"; fail "example $name exited with an error"; }
    grep -v '^\[ember:compiler\]' "$log" | sed 's/^/    /'
    echo "    ($((SECONDS - start)) s)"
    # Every example compiles a function: its kernels must include the installed header.
    grep -q "^\[ember:compiler\] kernel headers from $PREFIX/" "$log" ||
      fail "example $name did not take the kernel headers from the prefix"
  done
done

# A program built with pkg-config's flags alone (it links libember.so when that is installed)
# compiles a function.
echo "[test-install] pkg-config"
export PKG_CONFIG_PATH=$PREFIX/lib/pkgconfig
flags=$(pkg-config --cflags --libs ember) || fail "pkg-config --cflags --libs ember"
echo "    $flags"
cat >"$BUILD/pc_main.cpp" <<'CPP'
#include <cstdio>
#include "ember/compile.h"
#include "ember/ember.h"
int main() {
  auto f = ember::compile([](const ember::Tensor& x) { return (x * 2.0).exp().sum(); });
  double got = f(ember::zeros({3, 4})).item();
  std::printf("compiled sum %.1f\n", got);
  return got == 12.0 ? 0 : 1;
}
CPP
# shellcheck disable=SC2086
c++ "$BUILD/pc_main.cpp" -o "$BUILD/pc_main" $flags
log=$BUILD/pc_main.log
EMBER_CACHE_DIR=$CACHE EMBER_LOGS=compiler LD_LIBRARY_PATH=$PREFIX/lib "$BUILD/pc_main" >"$log" 2>&1 ||
  { cat "$log"; fail "the pkg-config program failed"; }
grep -v '^\[ember:compiler\]' "$log" | sed 's/^/    /'
grep -q "^\[ember:compiler\] kernel headers from $PREFIX/" "$log" ||
  fail "the pkg-config program took the kernel headers from outside the prefix"

"$PREFIX/bin/ember-gpt" --help >/dev/null || fail "the installed ember-gpt does not run"
# The installed ember-gpt trains on its installed text, from anywhere, with no --data.
(cd "$BUILD" && "$PREFIX/bin/ember-gpt" train --out_dir "$BUILD/gpt-run" --max_iters 2 \
  --eval_interval 2 --eval_iters 1 --n_layer 1 --n_head 2 --n_embd 16 --block_size 8 \
  --batch_size 2 --quiet >"$BUILD/gpt-run.log" 2>&1) ||
  { cat "$BUILD/gpt-run.log"; fail "the installed ember-gpt cannot train on its default text"; }
grep -q "$PREFIX/share/ember/data/tinyshakespeare.txt" "$BUILD/gpt-run.log" ||
  { cat "$BUILD/gpt-run.log"; fail "the installed ember-gpt did not read its installed text"; }
echo "[test-install] passed"
