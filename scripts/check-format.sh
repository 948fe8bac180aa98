#!/usr/bin/env bash
# Checks (never rewrites) that the tracked C, C++ and CUDA files are formatted by .clang-format (Google
# style, 120 columns), with the clang-format of Debian 12 (14). Run by `make test` (`make format-check`);
# `make format` rewrites.
#
# scripts/format-baseline.txt lists files that were not formatted when the check was introduced (formatting
# the whole tree at once would conflict with every open branch). A listed file is not checked; any other
# file must be formatted. After the open branches are merged: `make format`, empty the baseline, commit
# ("clang-format only"), and the whole tree is checked.
#   scripts/check-format.sh                 check; exit 1 naming each unformatted file
#   scripts/check-format.sh --update-baseline   rewrite the baseline to today's unformatted files
set -euo pipefail
cd "$(dirname "$0")/.."
baseline=scripts/format-baseline.txt
cf=${CLANG_FORMAT:-clang-format}
command -v "$cf" >/dev/null || { echo "check-format: $cf not found (apt install clang-format)" >&2; exit 1; }

mapfile -t files < <(git ls-files '*.c' '*.cpp' '*.hpp' '*.h' '*.cu' '*.cuh')
unformatted=()
for f in "${files[@]}"; do
  [ -f "$f" ] || continue
  "$cf" --dry-run --Werror "$f" >/dev/null 2>&1 || unformatted+=("$f")
done

if [ "${1:-}" = --update-baseline ]; then
  { echo "# Files not yet formatted by clang-format, skipped by scripts/check-format.sh. Shrinks to nothing after"
    echo "# a tree-wide \`make format\` (one commit, \"clang-format only\"); never add a file to it by hand."
    printf '%s\n' "${unformatted[@]}"; } >"$baseline"
  echo "check-format: wrote ${#unformatted[@]} files to $baseline"
  exit 0
fi

declare -A skip=()
if [ -f "$baseline" ]; then
  while read -r f; do [ -n "$f" ] && [ "${f:0:1}" != "#" ] && skip[$f]=1; done <"$baseline"
fi
bad=()
for f in "${unformatted[@]}"; do [ -n "${skip[$f]:-}" ] || bad+=("$f"); done
if ((${#bad[@]})); then
  echo "check-format: FAILED: not formatted by .clang-format (fix with \`make format\` or clang-format -i FILE):" >&2
  for f in "${bad[@]}"; do
    echo "  $f ($("$cf" --dry-run "$f" 2>&1 | grep -c 'warning:') places; first: $("$cf" --dry-run "$f" 2>&1 | grep -m1 -oE ':[0-9]+:[0-9]+:' | tr -d ':' | sed 's/^/line /;s/ \([0-9]*\)$/, column \1/'))" >&2
  done
  exit 1
fi
echo "check-format: ${#files[@]} files checked, ${#skip[@]} in the baseline, all others formatted"
