#!/usr/bin/env bash
# Checks (never rewrites) that every tracked C, C++ and CUDA file is formatted by .clang-format (Google
# style, 120 columns), with the clang-format of Debian 12 (14). Run by `make test` (`make format-check`);
# `make format` rewrites. There is no baseline of skipped files: the whole tree is formatted.
set -euo pipefail
cd "$(dirname "$0")/.."
cf=${CLANG_FORMAT:-clang-format}
command -v "$cf" >/dev/null || { echo "check-format: $cf not found (apt install clang-format)" >&2; exit 1; }

mapfile -t files < <(git ls-files '*.c' '*.cpp' '*.hpp' '*.h' '*.cu' '*.cuh')
bad=()
for f in "${files[@]}"; do
  [ -f "$f" ] || continue
  "$cf" --dry-run --Werror "$f" >/dev/null 2>&1 || bad+=("$f")
done
if ((${#bad[@]})); then
  echo "check-format: FAILED: not formatted by .clang-format (fix with \`make format\` or clang-format -i FILE):" >&2
  for f in "${bad[@]}"; do
    echo "  $f ($("$cf" --dry-run "$f" 2>&1 | grep -c 'warning:') places; first: $("$cf" --dry-run "$f" 2>&1 | grep -m1 -oE ':[0-9]+:[0-9]+:' | tr -d ':' | sed 's/^/line /;s/ \([0-9]*\)$/, column \1/'))" >&2
  done
  exit 1
fi
echo "check-format: ${#files[@]} files checked, all formatted"
