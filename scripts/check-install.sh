#!/usr/bin/env bash
# Installs a build tree into a scratch prefix (`cmake --install`) and builds two consumers against it:
# tests/structure/consumer with find_package(Tessera) (C++17, imported target Tessera::tessera) and
# consumer.c with pkg-config only; runs both. Also checks what the tree holds: the public headers, no
# internal header, libtessera, the CMake package and tessera.pc. Usage: check-install.sh BUILD_DIR
# (ctest: structure_install_consumer).
set -euo pipefail
build=$(cd "${1:?usage: check-install.sh BUILD_DIR}" && pwd)
src=$(cd "$(dirname "$0")/.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "check-install: FAILED: $*" >&2; exit 1; }

# --strip, as a package build would: the tree's binaries carry ~250 MB of debug information that a consumer
# never reads, and a scratch prefix on a nearly full disk should not fail for it.
cmake --install "$build" --prefix "$tmp/prefix" --strip >"$tmp/install.log" || { cat "$tmp/install.log"; fail "cmake --install"; }
inc="$tmp/prefix/include/tessera"
for h in tessera.h ckpt.h export.h status.hpp comm.hpp ckpt.hpp; do
  [ -f "$inc/$h" ] || fail "include/tessera/$h is not installed"
done
extra=$(cd "$inc" && ls | grep -vxE 'tessera\.h|ckpt\.h|export\.h|status\.hpp|comm\.hpp|ckpt\.hpp' || true)
[ -z "$extra" ] || fail "unexpected installed headers: $extra"
lib=$(find "$tmp/prefix" -name 'libtessera.so' | head -1)
[ -n "$lib" ] || fail "no libtessera.so installed"
[ -x "$tmp/prefix/bin/tessera" ] || fail "bin/tessera is not installed"
[ -z "$(find "$tmp/prefix" -name '*.a')" ] || fail "a static library is installed: $(find "$tmp/prefix" -name '*.a')"
pc=$(find "$tmp/prefix" -name tessera.pc | head -1)
[ -n "$pc" ] || fail "no tessera.pc installed"
find "$tmp/prefix" -name TesseraConfig.cmake | grep . >/dev/null || fail "no TesseraConfig.cmake installed"

# find_package(Tessera) + Tessera::tessera
cmake -S "$src/tests/structure/consumer" -B "$tmp/consumer" -G Ninja -DCMAKE_PREFIX_PATH="$tmp/prefix" \
      -DCMAKE_BUILD_TYPE=Release >"$tmp/configure.log" 2>&1 || { cat "$tmp/configure.log"; fail "configure the consumer"; }
cmake --build "$tmp/consumer" >"$tmp/build.log" 2>&1 || { cat "$tmp/build.log"; fail "build the consumer"; }
ldd "$tmp/consumer/consumer" | grep "$tmp/prefix/.*libtessera.so" >/dev/null ||
  fail "the consumer does not load the installed libtessera: $(ldd "$tmp/consumer/consumer" | grep tessera)"
mkdir -p "$tmp/scratch"
out=$("$tmp/consumer/consumer" "$tmp/scratch") || fail "the find_package consumer: $out"
[ "$out" = ok ] || fail "the find_package consumer printed '$out'"
echo "check-install: find_package(Tessera) consumer: ok"

# pkg-config only, from C
flags=$(PKG_CONFIG_PATH="$(dirname "$pc")" pkg-config --cflags --libs tessera) || fail "pkg-config tessera"
[ "$(PKG_CONFIG_PATH="$(dirname "$pc")" pkg-config --modversion tessera)" = "$("$tmp/prefix/bin/tessera" --version | grep -oE '[0-9]+\.[0-9]+\.[0-9]+' | head -1)" ] ||
  fail "pkg-config --modversion differs from tessera --version"
cc -std=c11 -Wall -Wextra -Werror "$src/tests/structure/consumer/consumer.c" -o "$tmp/consumer_c" $flags || fail "cc consumer.c \$(pkg-config --cflags --libs tessera)"
out=$("$tmp/consumer_c" "$tmp/scratch/empty") || fail "the pkg-config consumer: $out"
[ "$out" = ok ] || fail "the pkg-config consumer printed '$out'"
echo "check-install: pkg-config consumer: ok"
