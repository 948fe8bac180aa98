#!/usr/bin/env bash
# Checks of libtessera.so, the library a framework links (docs/architecture.md, "Libraries"):
#   check-library.sh deps LIB      ldd lists none of GLPK, SQLite, yaml-cpp, cpp-httplib (the binary's)
#   check-library.sh symbols LIB   the exported (dynamic, defined) symbols, demangled, are exactly
#                                  tests/structure/public_symbols.txt: the C API and the public C++ API,
#                                  nothing third-party; and the C functions are exactly those that
#                                  include/tessera/{tessera,ckpt}.h declare with TESSERA_API
#   check-library.sh symbols --update LIB   rewrites the list (after a deliberate API change; review the diff)
# ctest: structure_library_deps, structure_exported_symbols.
set -euo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
list=$src/tests/structure/public_symbols.txt
mode=${1:?usage: check-library.sh deps|symbols [--update] LIB}
shift
update=0
if [ "${1:-}" = --update ]; then update=1; shift; fi
lib=${1:?usage: check-library.sh deps|symbols [--update] LIB}
[ -f "$lib" ] || { echo "check-library: no $lib" >&2; exit 1; }

case $mode in
deps)
  deps=$(ldd "$lib")
  bad=$(echo "$deps" | grep -iE 'glpk|sqlite|yaml-cpp|httplib' || true)
  if [ -n "$bad" ]; then
    echo "check-library: FAILED: $lib depends on libraries of the binary, not of a training process:" >&2
    echo "$bad" >&2
    exit 1
  fi
  echo "check-library: $lib needs none of GLPK, SQLite, yaml-cpp, cpp-httplib ($(echo "$deps" | wc -l) entries in ldd)"
  ;;
symbols)
  # Defined dynamic symbols without the linker's own markers (_init, _fini, _edata, _end, __bss_start).
  actual=$(nm -D --defined-only "$lib" | awk '{print $NF}' | grep -vxE '_init|_fini|_edata|_end|__bss_start' |
           c++filt | LC_ALL=C sort -u)
  if [ $update = 1 ]; then
    { echo "# The symbols libtessera.so exports (demangled, sorted): the C API and the public C++ API."
      echo "# Checked by scripts/check-library.sh symbols (ctest structure_exported_symbols); regenerate after a"
      echo "# deliberate API change with: scripts/check-library.sh symbols --update build/libtessera.so"
      echo "$actual"; } >"$list"
    echo "check-library: wrote $(echo "$actual" | wc -l) symbols to $list"
    exit 0
  fi
  status=0
  # 1. Nothing outside Tessera's names: C functions tsr*, C++ symbols in namespace tessera.
  foreign=$(echo "$actual" | sed -E 's/^(vtable|typeinfo|typeinfo name|VTT|construction vtable) for //' |
            grep -vE '^tsr[A-Za-z0-9_]*$' | grep -vE '^(non-virtual thunk to |virtual thunk to )?tessera::' || true)
  if [ -n "$foreign" ]; then
    echo "check-library: FAILED: exported symbols outside the tsr*/tessera:: API (third-party or std code):" >&2
    echo "$foreign" | head -40 >&2
    status=1
  fi
  # 2. The C functions are the ones the headers declare with TESSERA_API.
  declared=$(cat "$src/include/tessera/tessera.h" "$src/include/tessera/ckpt.h" |
             grep -oE '^TESSERA_API [^(]*\btsr[A-Za-z0-9_]+\(' | grep -oE 'tsr[A-Za-z0-9_]+\($' | tr -d '(' |
             LC_ALL=C sort -u)
  exported_c=$(echo "$actual" | grep -E '^tsr[A-Za-z0-9_]*$' || true)
  if [ "$declared" != "$exported_c" ]; then
    echo "check-library: FAILED: C functions exported vs declared with TESSERA_API in tessera.h/ckpt.h:" >&2
    diff <(echo "$declared") <(echo "$exported_c") | sed 's/^</declared, not exported:/; s/^>/exported, not declared:/' |
      grep -v '^[0-9]' >&2 || true
    status=1
  fi
  # 3. The whole set is the reviewed list.
  expected=$(grep -v '^#' "$list" | LC_ALL=C sort -u)
  if [ "$expected" != "$actual" ]; then
    echo "check-library: FAILED: exported symbols differ from tests/structure/public_symbols.txt" >&2
    diff <(echo "$expected") <(echo "$actual") | grep '^[<>]' | sed 's/^</missing:/; s/^>/unexpected:/' | head -60 >&2
    echo "(after a deliberate API change: scripts/check-library.sh symbols --update $lib, and review the diff)" >&2
    status=1
  fi
  [ $status = 0 ] && echo "check-library: $lib exports exactly the public API: $(echo "$actual" | wc -l) symbols," \
                          "$(echo "$exported_c" | wc -l) of them C functions"
  exit $status
  ;;
*) echo "check-library: unknown mode '$mode' (deps|symbols)" >&2; exit 2 ;;
esac
