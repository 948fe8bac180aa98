"""examples/torch/train_lm.py resumes its DCP checkpoint on another world size and another split of the global batch.

Run A trains a small model for 6 steps on two host islands of 2 ranks each (world 4, the batch split 3+3+3+3),
checkpointing every 3 steps: it is the unmoved run. Run B resumes A's step 3, as the job daemon resumes a job moved
to another mix (TESSERA_RESUME_FROM, a new TESSERA_ISLAND_WEIGHTS), on 2 + 1 ranks (world 3, the split 3+3+6) with
the same global batch, and trains to step 6. Checked:
  - B says it resumed step 3 of 6 at the data position of step 3 and names both splits;
  - B's loss log holds steps 0..5 once each (the 3 kept from before the move, then B's own 3: no step trained
    twice or skipped), and B checkpoints step 6 only;
  - B's losses of steps 3..5 equal A's within TOL.

TOL = 1e-4 (absolute, on a loss of about 5.5): both runs train on the same sequences at every step, and the
synchronised gradient is the global batch's mean gradient in both (hetero_allreduce_hook weighs each rank's mean by
its share), so in exact arithmetic the curves are the same. In f32 only the order of the sums differs (means over
3 or 6 sequences per rank, an allreduce over 4 or 3 ranks): each gradient differs in its last bits and Adam's steps
carry that on, which leaves the losses about 1e-6 apart after a few steps. A batch skipped or trained twice changes
the loss by the difference between two batches, about 1e-2 here; the test checks that A's consecutive losses differ
by more than 10 x TOL, so that such a shift could not pass.

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
STEPS, AT = 6, 3
MODEL = ["--layers", "1", "--dim", "32", "--heads", "2", "--seq", "32", "--global-batch", "12", "--precision", "f32",
         "--corpus-mb", "1", "--print-every", "1", "--warmup-steps", "1", "--steps", str(STEPS), "--ckpt-every", str(AT)]
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
    cmd += ["--", sys.executable, TRAIN, *MODEL, "--ckpt-dir", ckpt, "--log", log]
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


def main():
    with tempfile.TemporaryDirectory(prefix="tsr-lm-resume-") as d:
        a_log, b_log = os.path.join(d, "a.jsonl"), os.path.join(d, "b.jsonl")
        train("A (unmoved)", ["ascend=host:2", "nvidia=host:2"], "1,1", os.path.join(d, "a"), a_log)
        a, _ = steps_of(a_log)
        check([s for s, _ in a] == list(range(STEPS)), f"run A logged steps 0..{STEPS - 1}")
        # the job's log as the moved attempt finds it: the unmoved run's lines (B keeps those before its step)
        with open(a_log) as src, open(b_log, "w") as dst:
            dst.write(src.read())
        out = train("B (moved)", ["ascend=host:2", "nvidia=host:1"], "1,2", os.path.join(d, "b"), b_log,
                    resume=os.path.join(d, "a", f"step-{AT:010d}"))
        check(f"{AT} of {STEPS} steps done, data at epoch 0 micro-batch {AT}" in out,
              f"B resumed step {AT} at the data position of step {AT}")
        check("saved by 4 ranks splitting the global batch [3, 3, 3, 3], now 3 ranks splitting it [3, 3, 6]" in out,
              "B names the saved world and split and its own")
        b, summary = steps_of(b_log)
        check([s for s, _ in b] == list(range(STEPS)), f"B's log holds steps 0..{STEPS - 1} once each: {[s for s, _ in b]}")
        check(summary.get("world") == 3 and summary.get("shares") == [3, 3, 6], f"B ran on world 3, split [3, 3, 6]: {summary.get('shares')}")
        check(sorted(os.listdir(os.path.join(d, "b"))) == [f"step-{STEPS:010d}"],
              f"B checkpointed step {STEPS} only: {sorted(os.listdir(os.path.join(d, 'b')))}")
        gaps = [abs(a[i + 1][1] - a[i][1]) for i in range(len(a) - 1)]
        check(min(gaps) > 10 * TOL, f"A's consecutive losses differ by more than 10 x {TOL} (min {min(gaps):.2e})")
        for (s, la), (_, lb) in zip(a[AT:], b[AT:]):
            check(abs(la - lb) <= TOL, f"step {s}: loss after the move {lb:.7f}, unmoved {la:.7f} (|diff| {abs(la - lb):.1e})")
    print(f"lm-resume: {len(failures)} failed", flush=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
