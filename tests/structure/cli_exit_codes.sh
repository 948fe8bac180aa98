#!/usr/bin/env bash
# The exit codes of `tessera` (src/cli/exit_code.hpp, docs/architecture.md "Errors and exit codes") across subcommands:
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
# With SAYS=TEXT set, the output must contain TEXT too (the message convention: "tessera CMD: ...", no internal
# code names, "did you mean" for a near miss).
expect() {
  local want=$1 what=$2
  shift 3
  local out rc
  out=$("$bin" "$@" 2>&1)
  rc=$?
  if [ -n "${SAYS:-}" ] && [[ "$out" != *"$SAYS"* ]]; then
    echo "FAILED: $what: tessera $* does not say: $SAYS" >&2
    echo "$out" | head -5 | sed 's/^/    /' >&2
    failures=$((failures + 1))
  elif [ "$rc" != "$want" ]; then
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
expect 3 "bill without a ledger (the daemon's STATE/ledger.db does not exist)" -- bill
expect 3 "bill with a ledger file that does not exist" -- bill --db "$tmp/no/such/dir/ledger.db"
expect 1 "bill with a ledger it cannot read (a system error)" -- bill --db "$tmp"
expect 2 "run without a program" -- run --island a=host:1
# Messages: the command's name first, no internal code names, the closest name for a near miss.
SAYS="did you mean 'run'?" expect 2 "mistyped command" -- runn
SAYS="did you mean '--island'?" expect 2 "mistyped flag (run)" -- run --islnad a=host:1 -- true
SAYS="did you mean '--catalog'?" expect 2 "mistyped flag (plan)" -- plan --catalog "$ex/catalog.yaml" \
  --fleet "$ex/fleet.yaml" --policy "$ex/policy.yaml" --job "$ex/job.yaml" --catalgo x
SAYS="tessera status: " expect 2 "a job id that is not a number" -- status abc
SAYS="tessera plan: $tmp/nonexistent.yaml" expect 3 "plan: a missing file, without a code name" -- plan \
  --catalog "$tmp/nonexistent.yaml" --fleet "$ex/fleet.yaml" --policy "$ex/policy.yaml" --job "$ex/job.yaml"
if "$bin" submit --help >/dev/null 2>&1; then  # a build with the job daemon
  expect 3 "submit with a job file that does not exist" -- submit "$tmp/nonexistent.yaml"
  SAYS="Start it with \`tessera daemon\`" expect 1 "a daemon that cannot be reached" -- queue --daemon 127.0.0.1:1
fi
expect 2 "bench with an unknown collective" -- bench nope
echo "$failures failure(s)"
[ "$failures" = 0 ]
