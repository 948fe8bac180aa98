#!/usr/bin/env bash
# The exit codes of `tessera` (src/cli/exit_code.hpp, README "Exit codes") across subcommands:
# 0 ok, 1 failure, 2 usage or bad input, 3 not found, 4 unsupported. Usage: cli_exit_codes.sh TESSERA SRC_DIR
# (ctest: cli_exit_codes).
set -uo pipefail
bin=${1:?usage: cli_exit_codes.sh TESSERA SRC_DIR}
src=${2:?usage: cli_exit_codes.sh TESSERA SRC_DIR}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
unset TESSERA_CKPT_ROOT TESSERA_CKPT_WARM TESSERA_CKPT_COLD TESSERA_LEDGER
export TESSERA_HOME=$tmp/home
failures=0
# expect CODE DESCRIPTION -- ARGS...: runs `tessera ARGS`, checks the exit status (and that an error says why).
expect() {
  local want=$1 what=$2
  shift 3
  local out rc
  out=$("$bin" "$@" 2>&1)
  rc=$?
  if [ "$rc" != "$want" ]; then
    echo "FAILED: $what: tessera $* exited $rc, want $want" >&2
    echo "$out" | head -5 | sed 's/^/    /' >&2
    failures=$((failures + 1))
  elif [ "$want" != 0 ] && [ -z "$out" ]; then
    echo "FAILED: $what: tessera $* exited $rc without saying why" >&2
    failures=$((failures + 1))
  else
    echo "ok ($rc): $what"
  fi
}
ex=$src/examples/fleet
mkdir -p "$tmp/ckpt"
printf 'name: x\ntenant: t\nclass: llm-train\ncards: lots\ncompatible: [ascend]\n' >"$tmp/bad-job.yaml"

expect 0 "--version" -- --version
expect 2 "no command" --
expect 2 "unknown command" -- no-such-command
expect 2 "unknown flag (ckpt)" -- ckpt --no-such-flag ls
expect 2 "ckpt without a hot tier" -- ckpt ls
expect 3 "ckpt ls of a root that does not exist" -- ckpt --root "$tmp/nonexistent" ls
expect 3 "ckpt verify of a root that does not exist" -- ckpt --root "$tmp/nonexistent" verify
expect 0 "ckpt ls of an empty root" -- ckpt --root "$tmp/ckpt" ls
expect 3 "ckpt show of a step that does not exist" -- ckpt --root "$tmp/ckpt" show 99
expect 2 "unknown flag (plan)" -- plan --no-such-flag
expect 3 "plan with a catalog file that does not exist" -- plan --catalog "$tmp/nonexistent.yaml" --fleet "$ex/fleet.yaml" \
  --policy "$ex/policy.yaml" --job "$ex/job.yaml"
expect 2 "plan with a malformed job file" -- plan --catalog "$ex/catalog.yaml" --fleet "$ex/fleet.yaml" \
  --policy "$ex/policy.yaml" --job "$tmp/bad-job.yaml"
expect 2 "bill without a ledger" -- bill
expect 1 "bill with a ledger it cannot open (a system error)" -- bill --db "$tmp/no/such/dir/ledger.db"
expect 2 "run without a program" -- run --island a=host:1
expect 2 "bench with an unknown collective" -- bench nope
echo "$failures failure(s)"
[ "$failures" = 0 ]
