#!/usr/bin/env bash
# scripts/deepspeed-experiment.sh — on a GPU machine: DeepSpeed (ZeRO-3, optimizer offloaded to the
# CPU with CPUAdam) on backend "tessera" across two islands on SM shares of one GPU (tessera run --sm-share, as
# scripts/lm-experiment.sh) against DeepSpeed on nccl with one island, and a Hugging Face Trainer on tessera.
# Needs the wheels of scripts/deepspeed-wheels.sh in .whl/ (carried) and a build (scripts/torch-check.sh BUILD
# install, done here when tessera._C does not import). The default layout of the throughput runs is the one
# measured at >= 97% of the parts at once (bench/results/log/2026-12-03-deepspeed-balanced-split.md): one micro-batch of 128 sequences per
# optimizer step (ACCUM=1 GB=128), the split balanced on forward+backward per sequence (the balance phase).
# Phases (PHASES, default all, in this order):
#   tests       tests/torch/deepspeed_worker.py zero3 and zero3-offload on the two GPU islands (no SM caps), on
#               tessera and, one island, nccl; tests/torch/hf_trainer_worker.py on two GPU islands (+ DCP save)
#   calibrate   each island alone on its SM share (train_lm_deepspeed.py, one-island tessera jobs in turn):
#               its tokens/s -> the weights of the speed split, and their sum = the sum of the parts (each alone;
#               not both at once as lm-experiment.sh's `independent` runs: DeepSpeed takes the whole world)
#   balance     the speed split for the hybrid job from the islands run at once: BALANCE_RUNS (3) independent
#               runs (as below, with the weights so far, --trace; BALANCE_VARIANT=NAME adds $ARGS_NAME; the
#               medians over the runs: the two worlds are not synchronised, so one run's islands may overlap
#               only in part) give each island's time
#               per sequence of the part of the step that grows with its batch (the step minus engine.step:
#               forward, backward, ZeRO epilogue); their inverses are the weights (ds-weights.json; the old one
#               kept as ds-weights.prev.json). The islands alone (calibrate) overweight the slow one: their
#               tokens/s include engine.step, the same for both and, in the hybrid job, shared. BALANCE_FROM=DIR
#               takes the independent runs (indep[-NAME]-REP) of an earlier OUT instead of running one
#   throughput  REPS x: independent (the sum of the parts: each island a DeepSpeed world of one, both at once on
#               their shares, the micro-batches of the hybrid job: train_lm_deepspeed.py --independent), hybrid
#               (two islands, tessera) and nccl (one island, whole GPU)
#   parity      STEPS steps: hybrid against nccl one island, twice (A/A spread)
#   fp16        fp16 ZeRO-3 + CPUAdam on two islands WITHOUT SM caps (16-bit GEMMs are wrong on MPS shares)
#   summary     one line per run from the --log summaries
# Usage: scripts/deepspeed-experiment.sh [BUILD_DIR] [--cpu]
#   --cpu: a smoke run of the phases on CPU ranks (this machine too): tiny model, few steps, no MPS
# env: STEPS (300), REPS (3), SLOW (35), FAST (65), PRECISION (tf32 on the MPS shares), TSTEPS (8), TWARM (3),
#   ACCUM (1), GB (128): micro-batches per optimizer step and sequences per micro-batch of the calibrate, balance
#   and throughput runs (ACCUM=4 GB=32: the layout of 2026-12-02), PGB (32): the parity and fp16 runs' global
#   batch (one micro-batch a step), BALANCE_RUNS (3), LM_ARGS (extra train_lm_deepspeed.py arguments), PHASES,
#   OUT (BUILD_DIR/bench-results/ds-<time>),
#   TKINDS ("indep hybrid single": the throughput runs made, in this order in each rep; KIND:NAME runs KIND with the
#   extra arguments of $ARGS_NAME, e.g. TKINDS="indep hybrid indep:a1 hybrid:a1" ARGS_a1="--accum 1 --global-batch
#   128": its logs are KIND-NAME-REP.*, and the summary gives each NAME's ratio), PROFILE (entries of TKINDS, or
#   "all": their runs of rep 1 add --profile, a torch.profiler trace of one more step), PKINDS ("hybrid single-a single-b": the parity runs),
#   RUN_TIMEOUT (300s: each job's tessera run --timeout, how long the other ranks get after one fails), RUN_LIMIT
#   (580: seconds a job may take in all before it is killed), REP_FROM (1: the number of the first rep), DS_READY
#   (1: deepspeed and tessera._C are known to import: the checks at the start are skipped)
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
cd "$(dirname "$0")/.." || exit 1
ROOT=$PWD
B=build-gpu; CPU=0
for a in "$@"; do case $a in --cpu) CPU=1 ;; *) B=$a ;; esac; done
case $B in /*) ;; *) B=$ROOT/$B ;; esac
T=${TESSERA:-$B/tessera}
OUTDIR=${OUT:-$B/bench-results/ds-$(date -u +%Y%m%dT%H%MZ)}; mkdir -p "$OUTDIR"
PY=${PYTHON:-python3}
case $PY in /*) ;; */*) PY=$ROOT/$PY ;; esac  # a relative path: the checks below run in /tmp
export TORCH_EXTENSIONS_DIR=${TORCH_EXTENSIONS_DIR:-/tmp/tessera-ds-ext}  # DeepSpeed's JIT-built ops (cpu_adam)
if [ "${DS_READY:-0}" = 1 ]; then :  # DS_READY=1: a caller that ran this script already: skip the checks below
elif [ -d "$ROOT/.whl" ] && ! "$PY" -c 'import deepspeed' 2>/dev/null; then
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site "$ROOT"/.whl/*.whl || exit 1
  export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
if [ "${DS_READY:-0}" != 1 ]; then
  "$PY" -c 'import deepspeed, transformers; print("deepspeed", deepspeed.__version__, "transformers", transformers.__version__)' || {
    echo "deepspeed-experiment: $PY cannot import deepspeed/transformers (scripts/deepspeed-wheels.sh, carry .whl)"; exit 2; }
  if ! (cd /tmp && "$PY" -c 'import torch, tessera._C') 2>/dev/null; then  # torch first: _C needs libc10
    "$ROOT/scripts/torch-check.sh" "$B" install || exit 1
  fi
fi
STEPS=${STEPS:-300}; REPS=${REPS:-3}; SLOW=${SLOW:-35}; FAST=${FAST:-65}; TSTEPS=${TSTEPS:-8}; TWARM=${TWARM:-3}
ACCUM=${ACCUM:-1}; GB=${GB:-128}; PGB=${PGB:-32}; PRECISION=${PRECISION:-tf32}
PHASES=" ${PHASES:-tests calibrate balance throughput parity fp16 summary} "
TKINDS=" ${TKINDS:-indep hybrid single} "; PKINDS=" ${PKINDS:-hybrid single-a single-b} "
TKINDS=${TKINDS//,/ }; PKINDS=${PKINDS//,/ }  # "indep,hybrid" as "indep hybrid"
if [ $CPU = 1 ]; then
  export DS_ACCELERATOR=cpu
  STEPS=6; REPS=1; TSTEPS=4; TWARM=1; ACCUM=1; GB=8; PGB=8; PRECISION=f32
  TWO="--island ascend=host:1 --island nvidia=host:1"; ONE_A="--island ascend=host:1"; ONE_B="--island nvidia=host:1"
  ONE="--island nvidia=host:1"; NOCAP=$TWO; NCCL=gloo; LMX="--cpu"
else
  export DS_ACCELERATOR=cuda
  TWO="--island ascend=cuda:1 --island nvidia=cuda:1 --sm-share ascend=$SLOW --sm-share nvidia=$FAST"
  ONE_A="--island ascend=cuda:1 --sm-share ascend=$SLOW"; ONE_B="--island nvidia=cuda:1 --sm-share nvidia=$FAST"
  ONE="--island nvidia=cuda:1"; NOCAP="--island ascend=cuda:1 --island nvidia=cuda:1"; NCCL=nccl; LMX=""
fi
LM="$PY $ROOT/examples/torch/train_lm_deepspeed.py $LMX ${LM_ARGS:-}"
phase() { [[ "$PHASES" == *" $1 "* ]]; }
step() { echo; echo "=== $* ($(date +%T))"; }
RC=0
run() {  # run LABEL tessera-run-args -- program...
  local label=$1; shift
  local t0=$SECONDS
  timeout "${RUN_LIMIT:-580}" "$T" run --timeout "${RUN_TIMEOUT:-300s}" "$@" > "$OUTDIR/ds-$label.log" 2>&1; local rc=$?
  echo "$label: $((SECONDS - t0)) s"
  grep -E "island |total |replicas|against|one process:|losses|checkpoint:|FAIL|Error|passed|SKIPPED|^\[.*\] profile " "$OUTDIR/ds-$label.log" | grep -v "^\s*$" | head -12
  [ $rc = 0 ] || { echo "$label: exit $rc"; tail -15 "$OUTDIR/ds-$label.log"; RC=1; }
}
echo "deepspeed-experiment: results in $OUTDIR"

if phase tests; then
  step "tests: ZeRO-3 worker and Hugging Face Trainer"
  W="$PY $ROOT/tests/torch/deepspeed_worker.py"
  run zero3-tessera $NOCAP -- $W zero3 --log "$OUTDIR/zero3-tessera.json"
  run zero3-$NCCL $ONE -- $W zero3 --backend $NCCL --log "$OUTDIR/zero3-$NCCL.json"
  run zero3-offload-tessera $NOCAP -- $W zero3-offload
  run hf-trainer $NOCAP -- "$PY" "$ROOT/tests/torch/hf_trainer_worker.py" --steps 20 --ckpt-dir "$OUTDIR/hf-ckpt" --ckpt-every 10
fi

W=$OUTDIR/ds-weights.json
TB="--steps $TSTEPS --warmup-steps $TWARM --accum $ACCUM --global-batch $GB --precision $PRECISION"
if phase calibrate; then
  step "calibration: each island alone on its share (one-island tessera jobs in turn)"
  run cal-ascend $ONE_A -- $LM $TB --log "$OUTDIR/cal-ascend.jsonl"
  run cal-nvidia $ONE_B -- $LM $TB --log "$OUTDIR/cal-nvidia.jsonl"
  "$PY" - "$OUTDIR" "$W" <<'EOF'
import json, sys
d, out = sys.argv[1], sys.argv[2]
r = {v: json.loads(open(f"{d}/cal-{v}.jsonl").read().splitlines()[-1])["tokens_per_s"] for v in ("ascend", "nvidia")}
top = max(r.values())
json.dump({"islands": r, "weights": f"{r['ascend'] / top:.4f},{r['nvidia'] / top:.4f}", "sum_of_parts": sum(r.values())},
          open(out, "w"), indent=1)
print(f"calibration: {r}; sum of the parts {sum(r.values()):.0f} tokens/s")
EOF
fi

if phase balance; then
  step "balance: the split from each island's forward+backward per sequence, the islands at once"
  bv=${BALANCE_VARIANT:-}; bvar=ARGS_$bv; bx=${bv:+${!bvar:-}}
  if [ -z "${BALANCE_FROM:-}" ]; then
    for i in $(seq "${BALANCE_RUNS:-3}"); do
      run balance${bv:+-$bv}-$i $TWO -- $LM $TB --independent --backend $NCCL --weights-file "$W" --trace \
        --log "$OUTDIR/balance${bv:+-$bv}-$i.jsonl" $bx
    done
  fi
  "$PY" - "${BALANCE_FROM:-$OUTDIR}" "$W" "${bv}" "${BALANCE_FROM:+from}" <<'EOF'
import glob, json, os, shutil, statistics, sys
d, out, var, earlier = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
tag = ("indep" if earlier else "balance") + (f"-{var}" if var else "")
per = {}
for p in sorted(glob.glob(f"{d}/{tag}*.jsonl.*")):
    name = os.path.basename(p).split(".jsonl")[0]
    if name.rsplit("-", 1)[0] != tag:  # TAG-RUN: balance[-NAME]-I here, indep[-NAME]-REP of an earlier OUT
        continue
    s = json.loads(open(p).read().splitlines()[-1]); v = p.rsplit(".", 1)[1]; t = s["trace"][v]
    per.setdefault(v, []).append((t["step_ms"] - t["phases_ms"]["step"]) / s["islands"][v]["batch"])
ms = {v: statistics.median(x) for v, x in per.items()}
top = max(1 / m for m in ms.values())
w = {v: 1 / m / top for v, m in ms.items()}
old = json.load(open(out)) if os.path.exists(out) else {}
if os.path.exists(out):
    shutil.copy(out, out.replace(".json", ".prev.json"))
old.update({"weights": f"{w['ascend']:.4f},{w['nvidia']:.4f}",
            "balance": {"ms_per_sequence": ms, "runs": {v: len(x) for v, x in per.items()}, "from": d, "tag": tag}})
json.dump(old, open(out, "w"), indent=1)
print(f"balance ({tag} in {d}): forward+backward per sequence " +
      ", ".join(f"{v} {m:.3f} ms (median of {len(per[v])})" for v, m in ms.items()) + f" -> weights {old['weights']}")
EOF
fi

if phase throughput; then
  step "throughput: independent (sum of the parts, at once) vs hybrid (tessera, two islands) vs nccl (one island, whole GPU), $REPS reps"
  for rep in $(seq "${REP_FROM:-1}" $((${REP_FROM:-1} + REPS - 1))); do
    for k in $TKINDS; do
      kind=${k%%:*}; name=; [[ $k == *:* ]] && name=${k#*:}
      var=ARGS_$name; extra=${name:+${!var:-}}; tag=$kind${name:+-$name}-$rep
      [ "$rep" = 1 ] && [[ " ${PROFILE:-} " == *" $k "* || "${PROFILE:-}" == all ]] && extra="$extra --profile $OUTDIR/prof-$tag"
      case $kind in
        indep) run "$tag" $TWO -- $LM $TB --independent --backend $NCCL --weights-file "$W" --log "$OUTDIR/$tag.jsonl" $extra ;;
        hybrid) run "$tag" $TWO -- $LM $TB --weights-file "$W" --log "$OUTDIR/$tag.jsonl" $extra ;;
        single) run "$tag" $ONE -- $LM $TB --backend $NCCL --log "$OUTDIR/$tag.jsonl" $extra ;;
        *) echo "deepspeed-experiment: unknown throughput kind '$kind'"; RC=1 ;;
      esac
    done
  done
fi

if phase parity; then
  step "loss parity: $STEPS steps, hybrid vs one island on $NCCL (twice: A/A)"
  PB="--steps $STEPS --global-batch $PGB --precision $PRECISION"
  [[ "$PKINDS" == *" hybrid "* ]] && run parity-hybrid $TWO -- $LM $PB --weights-file "$W" --log "$OUTDIR/parity-hybrid.jsonl"
  [[ "$PKINDS" == *" single-a "* ]] && run parity-single-a $ONE -- $LM $PB --backend $NCCL --log "$OUTDIR/parity-single-a.jsonl"
  [[ "$PKINDS" == *" single-b "* ]] && run parity-single-b $ONE -- $LM $PB --backend $NCCL --log "$OUTDIR/parity-single-b.jsonl"
fi

if phase fp16; then
  step "fp16 ZeRO-3 + CPUAdam on two islands without SM caps"
  run fp16 $NOCAP -- $LM --steps $((TSTEPS * 4)) --warmup-steps $TWARM --global-batch $PGB \
    --precision "$([ $CPU = 1 ] && echo f32 || echo fp16)" --log "$OUTDIR/fp16.jsonl"
fi

if phase summary; then
  step "summary"
  "$PY" - "$OUTDIR" <<'EOF'
import glob, json, os, statistics, sys
d = sys.argv[1]
def summ(p):
    return json.loads(open(p).read().splitlines()[-1])
def losses(p):
    return [json.loads(l)["loss"] for l in open(p).read().splitlines() if '"step"' in l]
w = os.path.join(d, "ds-weights.json")
parts = json.load(open(w))["sum_of_parts"] if os.path.exists(w) else None
def rep_of(p):
    return int(os.path.basename(p).split(".jsonl")[0].rsplit("-", 1)[1])
def trace_line(tag, vendor, t):
    ph, co = t["phases_ms"], t["collectives"]
    rs = sum(v["call_ms"] + v["wait_ms"] for k, v in co.items() if "reduce_scatter" in k)
    ag = sum(v["call_ms"] + v["wait_ms"] for k, v in co.items() if "all_gather" in k)
    mb = sum(v["MB"] for k, v in co.items() if "reduce_scatter" in k or "all_gather" in k)
    return (f"  {tag} {vendor}: step {t['step_ms']:.0f} ms = fwd {ph.get('fwd', 0):.0f} + bwd {ph.get('bwd', 0):.0f} "
            f"(ZeRO epilogue {ph.get('bwd.epilogue', 0):.0f}) + micro-steps {ph.get('micro_step', 0):.0f} + drain "
            f"{ph.get('drain', 0):.0f} + engine.step {ph.get('step', 0):.0f} + loss {ph.get('loss_allreduce', 0):.0f}; "
            f"host in all-gathers {ag:.0f} ms, in reduce-scatters {rs:.0f} ms ({mb:.0f} MB)")
def runs(kind, var, islands=False):  # the logs of KIND[-NAME]-REP, by rep
    pat = f"{d}/{kind}{var}-*.jsonl" + (".*" if islands else "")
    ps = [p for p in glob.glob(pat) if os.path.basename(p).split(".jsonl")[0].rsplit("-", 1)[0] == kind + var]
    return sorted(ps, key=rep_of)
hy, hy0 = [], None
for name in sorted({os.path.basename(p).split(".jsonl")[0].rsplit("-", 1)[0] for p in glob.glob(f"{d}/hybrid*.jsonl")}):
    var = name[len("hybrid"):]  # "" or "-NAME"
    hy = [summ(p)["tokens_per_s"] for p in runs("hybrid", var)]
    hy0 = hy if not var else hy0
    # the sum of the parts, both islands at once: the islands' logs of each independent run, added
    reps = sorted({p.rsplit(".jsonl", 1)[0] for p in runs("indep", var, True)}, key=rep_of)
    ind = [sum(summ(p)["tokens_per_s"] for p in glob.glob(f"{r}.jsonl.*")) for r in reps]
    print(f"variant '{var[1:] or 'default'}':")
    if ind:
        i = statistics.median(ind)
        print(f"  independent (sum of the parts, both at once): median {i:.0f} tokens/s of {[round(x, 1) for x in ind]}")
        if hy and len(hy) == len(ind):
            r = [h / x for h, x in zip(hy, ind)]
            print(f"  hybrid / sum of the parts at once: median {statistics.median(r):.1%} (target >= 97%), spread "
                  f"{min(r):.1%}-{max(r):.1%}; per rep: " + ", ".join(f"{x:.1%}" for x in r) +
                  f"; median hybrid / median independent {statistics.median(hy) / i:.1%}")
    print(f"  hybrid: median {statistics.median(hy):.0f} tokens/s of {[round(x, 1) for x in hy]}")
    for p in runs("hybrid", var) + runs("indep", var, True):
        for vendor, t in sorted((summ(p).get("trace") or {}).items()):
            print(trace_line(os.path.basename(p).replace(".jsonl", ""), vendor, t))
        if summ(p).get("stamps"):
            print(f"  {os.path.basename(p).replace('.jsonl', '')} seconds since start: {summ(p)['stamps']}")
hy = hy0 or hy
si = [summ(p)["tokens_per_s"] for p in sorted(glob.glob(f"{d}/single-*.jsonl"))]
if hy:
    h = statistics.median(hy)
    print(f"hybrid (tessera, two islands): median {h:.0f} tokens/s of {hy}" +
          (f"; {h / parts:.1%} of the sum of the parts ({parts:.0f}, each alone; target >= 97%)" if parts else ""))
    print(f"engine.step() share of the step (CPU offload): " +
          ", ".join(f"{os.path.basename(p)[:-6]} {summ(p)['step_share_engine_step']:.1%}"
                    for p in sorted(glob.glob(f"{d}/hybrid*.jsonl"))))
if si:
    print(f"one island (whole GPU, DeepSpeed's own backend): median {statistics.median(si):.0f} tokens/s of {si}")
ph, pa, pb = (f"{d}/parity-{k}.jsonl" for k in ("hybrid", "single-a", "single-b"))
if all(os.path.exists(p) for p in (ph, pa, pb)):
    lh, la, lb = losses(ph), losses(pa), losses(pb)
    m = lambda l: sum(l[-50:]) / len(l[-50:])
    print(f"loss parity over {len(lh)} steps: mean of the last 50: hybrid {m(lh):.6f}, one island A {m(la):.6f}, "
          f"B {m(lb):.6f}; |hybrid - A| {abs(m(lh) - m(la)):.2e} against the A/A spread {abs(m(la) - m(lb)):.2e}")
for p in sorted(glob.glob(f"{d}/*.jsonl")):
    s = summ(p)
    if "replicas_identical" in s:
        print(f"{os.path.basename(p)}: replicas identical after the last step: {s['replicas_identical']}")
EOF
fi
exit $RC
