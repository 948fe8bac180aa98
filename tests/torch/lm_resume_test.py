"""examples/torch/train_lm.py resumes its DCP checkpoint on a larger and on a smaller world, each with another split of
the same global batch.

Run A trains a small model for 6 steps on two host islands of 1 rank each (world 2, the batch of 12 split 6+6),
checkpointing every 2 steps: it is the unmoved run. Run B resumes A's step 2, as the job daemon resumes a job moved
to another mix (TESSERA_RESUME_FROM, a new TESSERA_ISLAND_WEIGHTS), on 2 + 1 ranks (world 3, weights 1,2: the split
3+3+6) and trains to step 6, checkpointing steps 4 and 6. Run C resumes B's step 4 on one rank (world 1, the whole
batch of 12) and trains to step 6. Checked, for B and C:
  - the run says it resumed its step at the data position of that step and names the saved split and its own;
  - its loss log holds steps 0..5 once each (those kept from before the move, then its own), and it checkpoints
    only the steps after the one it resumed;
  - no sample trained twice or skipped: every run logs the sample indices each rank trained on at each step
    (--sample-log); the moved run trains exactly the steps after its resume point, each rank exactly its share
    of the new split, and each step's samples are the unmoved run's samples of that step, no index twice;
  - its losses equal A's at the same steps within TOL.

TOL = 1e-4 (absolute, on a loss of about 5.5): both runs train on the same sequences at every step (checked above),
and the synchronised gradient is the global batch's mean gradient in both (hetero_allreduce_hook weighs each rank's
mean by its share), so in exact arithmetic the curves are the same. In f32 only the order of the sums differs (means
over 12, 6 or 3 sequences per rank, an allreduce over 2, 3 or 1 ranks): each gradient differs in its last bits and
Adam's steps carry that on, which leaves the losses about 1e-6 apart after a few steps. A batch skipped or trained
twice changes the loss by the difference between two batches, about 1e-2 here; the test checks that A's consecutive
losses differ by more than 10 x TOL, so that such a shift could not pass.

Usage: lm_resume_test.py (TESSERA_BIN: the tessera binary; the interpreter is this one). Exit 0 when every check
passes."""
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TRAIN = os.path.join(ROOT, "examples", "torch", "train_lm.py")
TOL = 1e-4
STEPS, EVERY, BATCH = 6, 2, 12
MODEL = ["--layers", "1", "--dim", "32", "--heads", "2", "--seq", "32", "--global-batch", str(BATCH), "--precision",
         "f32", "--corpus-mb", "1", "--print-every", "1", "--warmup-steps", "1", "--steps", str(STEPS), "--ckpt-every",
         str(EVERY)]
failures = []


def check(ok, what):
    print(f"{'ok  ' if ok else 'FAIL'} {what}", flush=True)
    if not ok:
        failures.append(what)


def train(tag, islands, weights, ckpt, log, resume=None):
    env = dict(os.environ, TESSERA_ISLAND_WEIGHTS=weights)
    env.pop("TESSERA_RESUME_FROM", None)
    if resume:
        env["TESSERA_RESUME_FROM"] = resume
    cmd = [os.environ.get("TESSERA_BIN", "tessera"), "run", "--timeout", "60s", "--no-prefix"]
    for i in islands:
        cmd += ["--island", i]
    cmd += ["--", sys.executable, TRAIN, *MODEL, "--ckpt-dir", ckpt, "--log", log, "--sample-log", log + ".samples"]
    r = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=300)
    print(f"--- run {tag}: {' '.join(islands)}, TESSERA_ISLAND_WEIGHTS={weights}, exit {r.returncode}", flush=True)
    if r.returncode != 0:
        print(r.stdout[-4000:], flush=True)
        raise SystemExit(f"run {tag} failed (exit {r.returncode})")
    return r.stdout


def steps_of(log):
    with open(log) as f:
        rows = [json.loads(line) for line in f if line.strip()]
    return [(r["step"], r["loss"]) for r in rows if set(r) == {"step", "loss"}], rows[-1]


def samples_of(log):
    """{step: [sample indices of each rank]} of one run's --sample-log."""
    with open(log + ".samples") as f:
        rows = [json.loads(line) for line in f if line.strip()]
    return {r["step"]: r["ranks"] for r in rows}


def check_samples(tag, got, unmoved, first, shares):
    """`got` (a run resumed at step `first` with the split `shares`) trained steps first..STEPS-1 only, each rank its
    share, each step the unmoved run's samples of that step, none twice."""
    check(sorted(got) == list(range(first, STEPS)), f"{tag} trained steps {first}..{STEPS - 1} only: {sorted(got)}")
    for s in sorted(got):
        ranks = got[s]
        flat = [i for r in ranks for i in r]
        check([len(r) for r in ranks] == shares, f"{tag} step {s}: the ranks trained {[len(r) for r in ranks]} "
              f"samples, the split is {shares}")
        check(len(set(flat)) == len(flat), f"{tag} step {s}: no sample trained twice")
        want = sorted(i for r in unmoved[s] for i in r)
        check(sorted(flat) == want, f"{tag} step {s}: the unmoved run's {len(want)} samples of the step, no other")


def moved(tag, d, islands, weights, shares, resume_run, at, prev_log, log, unmoved, a):
    """Resumes `resume_run`'s step `at` on `islands` with `weights` and checks it against the unmoved run A."""
    with open(prev_log) as src, open(log, "w") as dst:  # the job's log as the moved attempt finds it
        dst.write(src.read())
    before = json.loads(open(prev_log).readlines()[-1]).get("shares")
    out = train(tag, islands, weights, os.path.join(d, tag[0].lower()), log,
                resume=os.path.join(d, resume_run, f"step-{at:010d}"))
    check(f"{at} of {STEPS} steps done, data at epoch 0 micro-batch {at}" in out,
          f"{tag} resumed step {at} at the data position of step {at}")
    world = len(shares)
    check(f"now {world} ranks splitting it {shares}" in out and f"splitting the global batch {before}" in out,
          f"{tag} names the saved split {before} and its own {shares}")
    b, summary = steps_of(log)
    check([s for s, _ in b] == list(range(STEPS)),
          f"{tag}'s log holds steps 0..{STEPS - 1} once each: {[s for s, _ in b]}")
    check(summary.get("world") == world and summary.get("shares") == shares,
          f"{tag} ran on world {world}, split {shares}: {summary.get('world')}, {summary.get('shares')}")
    want = [f"step-{s:010d}" for s in range(at + EVERY, STEPS + 1, EVERY)]
    got = sorted(os.listdir(os.path.join(d, tag[0].lower())))
    check(got == want, f"{tag} checkpointed steps after {at} only: {got}")
    check_samples(tag, samples_of(log), unmoved, at, shares)
    for (s, la), (_, lb) in zip(a[at:], b[at:]):
        check(abs(la - lb) <= TOL, f"{tag} step {s}: loss after the move {lb:.7f}, unmoved {la:.7f} "
              f"(|diff| {abs(la - lb):.1e})")


def main():
    with tempfile.TemporaryDirectory(prefix="tsr-lm-resume-") as d:
        a_log, b_log, c_log = (os.path.join(d, f"{x}.jsonl") for x in "abc")
        train("A (unmoved)", ["ascend=host:1", "nvidia=host:1"], "1,1", os.path.join(d, "a"), a_log)
        a, _ = steps_of(a_log)
        check([s for s, _ in a] == list(range(STEPS)), f"run A logged steps 0..{STEPS - 1}")
        unmoved = samples_of(a_log)
        check_samples("A", unmoved, unmoved, 0, [6, 6])
        everything = [i for s in range(STEPS) for r in unmoved[s] for i in r]
        check(len(set(everything)) == STEPS * BATCH, f"A's {STEPS} steps train {STEPS * BATCH} distinct samples "
              f"(so a step's samples name the step)")
        gaps = [abs(a[i + 1][1] - a[i][1]) for i in range(len(a) - 1)]
        check(min(gaps) > 10 * TOL, f"A's consecutive losses differ by more than 10 x {TOL} (min {min(gaps):.2e})")
        # 2 -> 3 ranks, the split 6+6 -> 3+3+6; then 3 -> 1 rank, the split 3+3+6 -> 12
        moved("B (2 -> 3 ranks)", d, ["ascend=host:2", "nvidia=host:1"], "1,2", [3, 3, 6], "a", EVERY, a_log, b_log,
              unmoved, a)
        moved("C (3 -> 1 rank)", d, ["nvidia=host:1"], "1", [BATCH], "b", 2 * EVERY, b_log, c_log, unmoved, a)
    print(f"lm-resume: {len(failures)} failed", flush=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
