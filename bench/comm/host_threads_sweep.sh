#!/usr/bin/env bash
# bench/comm/host_threads_sweep.sh — the host engine's allreduce against its bound for each TESSERA_HOST_THREADS
# value: 1+1 host ranks (f32 avg in place, 64 and 256 MiB, `tessera bench allreduce`), REPS rounds
# (default 3) with the values interleaved so load hits them alike, beside allreduce_bound for the layout (this
# box's multi-threaded memcpy bandwidth x the traffic the allreduce must make) measured at the start of every round:
# the box's memcpy moved 39 to 64 GB/s in calls minutes apart on a GPU machine, so one measurement is not its
# bandwidth. Prints the median busbw of each value and its ratio to the median bound (the bounds' range beside it);
# raw rows go to $OUT/threads-sweep.jsonl when OUT is set.
#   Usage: [VAR=NAME] bench/comm/host_threads_sweep.sh BUILD_DIR [VALUE...]   (values default: 1 2 4 6 8 12 auto)
#   BUILD_DIR without a `tessera` in it is made first by bench/comm/host_build.sh (host only, release flags).
#   VAR names the variable swept (default TESSERA_HOST_THREADS; any other, with the threads then `auto`). A value
#   with '=' in it is a list of assignments instead, e.g. TESSERA_HOST_THREADS=4,TESSERA_SHM_RING=8M. A value
#   `build:DIR` runs DIR's tessera (threads `auto`) instead of BUILD_DIR's: two commits interleaved, A/B, e.g.
#   `host_threads_sweep.sh /tmp/new build:/tmp/new build:/tmp/old`. DIR must hold a built `tessera` already (from the
#   other commit's tree: its own bench/comm/host_build.sh); one without is an error, not built from this tree.
set -uo pipefail
B=${1:?usage: host_threads_sweep.sh BUILD_DIR [VALUE...]}
shift
VALUES=("$@")
[ ${#VALUES[@]} -gt 0 ] || VALUES=(1 2 4 6 8 12 auto)
VAR=${VAR:-TESSERA_HOST_THREADS}
[ -x "$B/tessera" ] || "$(dirname "$0")/host_build.sh" "$B" || exit 1
OUTDIR=${OUT:-$(mktemp -d)}
mkdir -p "$OUTDIR"
ROWS=$OUTDIR/threads-sweep.jsonl
: > "$ROWS"
echo "host_threads_sweep: $(nproc) cpus, $VAR = ${VALUES[*]}, ${REPS:-3} rounds"
# File names: letters, digits, '.', '-' and '_' only, so that the device machine's $OUT hands every file back.
for t in "${VALUES[@]}"; do
  case $t in build:*) [ -x "${t#build:}/tessera" ] || {
    echo "host_threads_sweep: value '$t': ${t#build:}/tessera does not exist; build that commit's tree there first" \
      "(its bench/comm/host_build.sh ${t#build:})" >&2
    exit 2
  } ;; esac
done
rm -f "$OUTDIR"/bound-1-1-r*.txt
for rep in $(seq "${REPS:-3}"); do
  "$B/bench/comm/allreduce_bound" --islands 1,1 --sizes 64M,256M > "$OUTDIR/bound-1-1-r$rep.txt"
  grep '^# memcpy' "$OUTDIR/bound-1-1-r$rep.txt" | sed "s/^# /round $rep: /"
  for t in "${VALUES[@]}"; do
    bin=$B/tessera
    case $t in
      build:*) assign=TESSERA_HOST_THREADS=auto bin=${t#build:}/tessera ;;
      *=*) assign=${t//,/ } ;;
      *) assign="$VAR=$t" ;;
    esac
    err="$OUTDIR/threads-$(printf '%s' "$t" | tr -c 'A-Za-z0-9._-' '_')-r$rep.err"
    # shellcheck disable=SC2086  # $assign: one or more NAME=VALUE words
    env $assign timeout 120 "$bin" run --timeout 60s --island a=host:1 --island b=host:1 -- \
      "$bin" bench allreduce --iters 5 --batch 5 --warmup 2 --op avg --in-place --json - --sizes 64M,256M \
      2> "$err" | grep -o '{.*}' | sed "s|^{|{\"threads\":\"$t\",|" >> "$ROWS" \
      || { echo "$VAR=$t round $rep failed:"; tail -5 "$err"; }
  done
done
python3 - "$ROWS" "$OUTDIR" "${VALUES[@]}" <<'PY'
import glob, json, os, re, statistics, sys
rows_path, outdir, *values = sys.argv[1:]
bounds = {}  # bytes -> busbw GB/s per round: allreduce_bound's rows are "size traffic ring bound(us) bound-busbw ..."
for path in sorted(glob.glob(os.path.join(outdir, "bound-1-1-r*.txt"))):
    for line in open(path):
        f = line.split()
        if f and not line.startswith("#") and re.fullmatch(r"\d+", f[0]): bounds.setdefault(int(f[0]), []).append(float(f[4]))
bound = {s: statistics.median(v) for s, v in bounds.items()}
for s, v in sorted(bounds.items()):
    print(f"bound {s >> 20} MiB: median {bound[s]:.2f} GB/s busbw over {len(v)} rounds ({min(v):.2f}..{max(v):.2f})")
got = {}
for line in open(rows_path):
    d = json.loads(line)
    for r in d.get("rows", []):
        got.setdefault((d["threads"], r["bytes"]), []).append(r["busbw_GBps"])
sizes = sorted({b for (_, b) in got})
print("\nvalue | " + " | ".join(f"{s >> 20} MiB busbw (min..max) / bound" for s in sizes))
for t in values:
    cells = []
    for s in sizes:
        v = got.get((t, s), [])
        if not v:
            cells.append("-")
            continue
        med = statistics.median(v)
        ratio = f" = {med / bound[s]:.2f}" if s in bound else ""
        cells.append(f"{med:.2f} ({min(v):.2f}..{max(v):.2f}) / {bound.get(s, float('nan')):.2f}{ratio}")
    print(f"{t:>7} | " + " | ".join(cells))
PY
