#!/usr/bin/env bash
# scripts/gpu-kit.sh — run on a Debian 12 machine with its package mirrors: gathers into .deps/gpu-kit (ignored by
# git; carried to a GPU machine with the device tool's `carry`) what the GPU image lacks to build the job
# daemon and the planner, which `scripts/demo-gpu.sh` needs there: Debian's SQLite (sqlite3.h and
# libsqlite3.so from libsqlite3-dev, public domain), cpp-httplib as Debian builds it (its split header and
# libcpp-httplib.so, MIT, with brotli's headers it includes, MIT) and GLPK (glpk.h and libglpk.so with the
# libraries it needs that Ubuntu names differently, GPL-3: carried for test runs, not distributed). A build
# configured with -DTESSERA_KIT=.deps/gpu-kit finds them there first and records the kit's lib/ as RPATH
# (transitive), so nothing needs LD_LIBRARY_PATH.
# scripts/torch-check.sh passes the kit on when .deps/gpu-kit exists. Usage: scripts/gpu-kit.sh
set -euo pipefail
cd "$(dirname "$0")/.."
K=.deps/gpu-kit
LIBDIR=/usr/lib/x86_64-linux-gnu
die() { echo "gpu-kit: $*" >&2; exit 1; }
for f in /usr/include/sqlite3.h $LIBDIR/libsqlite3.so /usr/include/httplib.h $LIBDIR/libcpp-httplib.so /usr/include/glpk.h $LIBDIR/libglpk.so; do
  [ -e "$f" ] || die "$f is missing (scripts/install-deps.sh installs libsqlite3-dev, libcpp-httplib-dev and libglpk-dev)"
done
rm -rf "$K"; mkdir -p "$K/include" "$K/lib/pkgconfig"
cp /usr/include/sqlite3.h /usr/include/sqlite3ext.h /usr/include/httplib.h /usr/include/glpk.h "$K/include/"
# httplib.h includes brotli's headers (Debian builds it with CPPHTTPLIB_BROTLI_SUPPORT); the GPU image has
# OpenSSL's and zlib's but not brotli's (MIT)
[ -e /usr/include/brotli/decode.h ] || die "/usr/include/brotli/decode.h is missing (apt install libbrotli-dev)"
cp -r /usr/include/brotli "$K/include/"
# A library, under its soname, and its development name; then the libraries it needs, except those every
# Linux with OpenSSL 3 has (glibc's, libstdc++, libgcc_s, libssl, libcrypto, zlib).
keep() {  # keep FILE
  local real soname
  real=$(readlink -f "$1"); soname=$(objdump -p "$real" | awk '/SONAME/ {print $2}')
  cp "$real" "$K/lib/$soname"
  case $(basename "$1") in *.so) ln -sf "$soname" "$K/lib/$(basename "$1")" ;; esac
}
for l in libsqlite3.so libcpp-httplib.so libglpk.so; do
  keep "$LIBDIR/$l"
  ldd "$LIBDIR/$l" | awk '$3 ~ /^\// {print $1, $3}' | while read -r name path; do
    case $name in libc.so*|libm.so*|libdl.so*|libpthread.so*|librt.so*|libstdc++*|libgcc_s*|libssl*|libcrypto*|libz.so*) ;;
      *) [ -e "$K/lib/$name" ] || keep "$path" ;;
    esac
  done
done
# pkg-config for the definitions Debian's build of cpp-httplib was made with (they change its classes'
# layout); without its Requires.private, which name .pc files the GPU image may not have
flags=$(pkg-config --cflags-only-other cpp-httplib 2>/dev/null || echo "-DCPPHTTPLIB_OPENSSL_SUPPORT -DCPPHTTPLIB_ZLIB_SUPPORT -DCPPHTTPLIB_BROTLI_SUPPORT")
cat > "$K/lib/pkgconfig/cpp-httplib.pc" <<PC
Name: cpp-httplib
Description: Debian's cpp-httplib, carried by scripts/gpu-kit.sh
Version: $(pkg-config --modversion cpp-httplib 2>/dev/null || echo 0.11)
Libs: -lcpp-httplib
Cflags: $flags
PC
du -sh "$K" | awk '{print "gpu-kit: " $1 " in '"$K"'"}'
ls "$K/lib"
