"""scripts/lm_report.py without torch (ctest lm_report): the weights it derives from an independent run, and
its summary of a real run of the experiment (tests/data/lm-20261201T1812Z, copied: the report writes
lm-summary.json beside its inputs). Usage: lm_report_test.py ROOT TESSERA_BINARY; exit 0 when all hold."""
import json
import os
import shutil
import subprocess
import sys
import tempfile

root, tessera = sys.argv[1], sys.argv[2]
report = os.path.join(root, "scripts", "lm_report.py")
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print(f"FAIL {what}", flush=True)


with tempfile.TemporaryDirectory() as tmp:
    # Per-rank speeds from an independent run, in the calibration's island order (nvidia listed first in the
    # run's row, ascend first in the calibration: the weights follow the calibration).
    indep = os.path.join(tmp, "lm-indep-1.jsonl")
    with open(indep, "w") as f:
        f.write(json.dumps({"step": 0, "loss": 5.0}) + "\n")
        f.write(json.dumps({"islands": {"nvidia": {"ranks": 1, "tokens_per_s": 100000.0},
                                        "ascend": {"ranks": 2, "tokens_per_s": 60000.0}}}) + "\n")
    cal = os.path.join(tmp, "cal.json")
    with open(cal, "w") as f:
        json.dump({"islands": {"ascend": 1.0, "nvidia": 2.0}, "weights": "0.5,1", "seq": 512}, f)
    out = subprocess.run([sys.executable, report, "--weights-from", indep, cal], capture_output=True, text=True)
    check(out.returncode == 0, f"--weights-from exits 0 (got {out.returncode}: {out.stderr.strip()})")
    if out.returncode == 0:
        w = json.loads(out.stdout)
        check(w["weights"] == "0.3000,1.0000", f"weights per rank 30000 : 100000, got {w['weights']}")
        check(list(w["islands"]) == ["ascend", "nvidia"], f"island order of the calibration, got {list(w['islands'])}")
        check(w["seq"] == 512 and "independent run" in w["source"], "other keys kept, source named")

    # An independent run that lacks an island of the calibration: a clear error naming it, no weights.
    with open(indep, "w") as f:
        f.write(json.dumps({"islands": {"nvidia": {"ranks": 1, "tokens_per_s": 100000.0}}}) + "\n")
    out = subprocess.run([sys.executable, report, "--weights-from", indep, cal], capture_output=True, text=True)
    check(out.returncode != 0 and "ascend" in out.stderr and not out.stdout,
          f"a missing island is refused by name (got {out.returncode}: {out.stderr.strip()})")

    # The summary of a real run: the figures docs/benchmarks.md quotes.
    run = os.path.join(tmp, "run")
    shutil.copytree(os.path.join(root, "tests", "data", "lm-20261201T1812Z"), run)
    report_tmp = os.path.join(tmp, "report-tmp")  # its TMPDIR: the report leaves nothing there
    os.mkdir(report_tmp)
    out = subprocess.run([sys.executable, report, run, tessera, root], capture_output=True, text=True,
                         env=dict(os.environ, TMPDIR=report_tmp))
    text = out.stdout
    check(not os.listdir(report_tmp), f"the report leaves nothing in its TMPDIR (left {os.listdir(report_tmp)})")
    check(out.returncode == 0, f"report exits 0 (got {out.returncode}: {out.stderr.strip()[-300:]})")
    check("hybrid / parts = 0.9563 (per rep 0.9551, 0.9575); even / parts = 0.7908" in text,
          "throughput ratios of the run")
    check("mean relative difference 3.84e-03 (A/A 6.00e-03)" in text, "loss parity and A/A of the run")
    check(text.count("equal to it: True") == 3, "every dtype's synchronised gradient equals one rounding")
    if "cost: plan failed" not in text:  # a build without GLPK says so instead
        check("11.5% less" in text, "cost against all-fast cards")
    summary = json.load(open(os.path.join(run, "lm-summary.json")))
    check(abs(summary["hybrid_over_parts"]["median_ratio"] - 0.9563) < 1e-4, "lm-summary.json has the ratio")

print(f"lm_report: {len(failures)} failed" if failures else "lm_report: all passed")
sys.exit(1 if failures else 0)
