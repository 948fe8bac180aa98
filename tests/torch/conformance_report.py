"""Compares the JUnit XML reports of PyTorch's distributed test suite run for several backends
(scripts/torch-conformance.sh): passed/failed/skipped counts per backend, and every test whose outcome
differs from the reference backend's (the first one, gloo).

  conformance_report.py [--known FILE] [--markdown FILE] [--doc FILE --commit SHA --machine TEXT]
                        NAME=REPORT.xml NAME=REPORT.xml ...

--known: lines "test_name: reason" — the tests that pass with the reference but cannot apply to the other
backend, each with its reason (tests/torch/conformance_known.txt). --doc rewrites the part of FILE between
"<!-- conformance:begin -->" and "<!-- conformance:end -->" with the table, test by test.
A report named NAME-as-gloo is NAME's backend run with the suite told it is gloo: a test the suite skips for
NAME only by its name, and that passes there, counts as passed for NAME (the note says so).
Exit status 0 when every test that passes with the reference passes with every other backend or is known;
1 when one is not (it is listed as "unexpected"); 2 on bad input.
"""
import argparse
import sys
import xml.etree.ElementTree as ET

BEGIN, END = "<!-- conformance:begin -->", "<!-- conformance:end -->"
ALIAS = "-as-gloo"  # NAME-as-gloo: NAME's backend run with the suite told it is gloo (conformance_suite.py)


def outcomes(path):
    """test name -> (outcome, message) from a JUnit XML file (pytest --junitxml)."""
    try:
        root = ET.parse(path).getroot()
    except (OSError, ET.ParseError) as e:
        sys.exit(f"conformance_report: cannot read {path}: {e}")
    out = {}
    for case in root.iter("testcase"):
        name = case.get("name", "")
        kind, msg = "passed", ""
        for child in case:
            if child.tag in ("failure", "error"):
                kind, msg = "failed", (child.get("message") or "").strip()
            elif child.tag == "skipped" and kind == "passed":
                kind, msg = "skipped", (child.get("message") or "").strip()
        out[name] = (kind, " ".join(msg.split())[:160])
    if not out:
        sys.exit(f"conformance_report: {path} has no test cases")
    return out


def load_known(path):
    known = {}
    if not path:
        return known
    with open(path) as f:
        for n, line in enumerate(f, 1):
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            name, sep, reason = line.partition(":")
            if not sep or not reason.strip():
                sys.exit(f"conformance_report: {path}:{n}: expected 'test_name: reason', got {line!r}")
            known[name.strip()] = reason.strip()
    return known


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--known")
    ap.add_argument("--markdown")
    ap.add_argument("--doc")
    ap.add_argument("--commit", default="")
    ap.add_argument("--machine", default="")
    ap.add_argument("reports", nargs="+", metavar="NAME=REPORT.xml")
    a = ap.parse_args()
    runs = []
    for spec in a.reports:
        name, sep, path = spec.partition("=")
        if not sep or not name or not path:
            ap.error(f"{spec!r} is not NAME=REPORT.xml")
        runs.append((name, outcomes(path)))
    if len(runs) < 2:
        ap.error("give the reference backend's report and at least one other")
    known = load_known(a.known)
    ref_name, ref = runs[0]
    names = sorted(set().union(*(r for _, r in runs)))

    print(f"{'backend':10} {'passed':>7} {'failed':>7} {'skipped':>8} {'total':>6}")
    for name, r in runs:
        c = {k: sum(1 for v in r.values() if v[0] == k) for k in ("passed", "failed", "skipped")}
        print(f"{name:10} {c['passed']:7} {c['failed']:7} {c['skipped']:8} {len(r):6}")

    unexpected, rows = [], []
    by_name = dict(runs)
    for t in names:
        ref_kind = ref.get(t, ("absent", ""))[0]
        cells = [ref_kind]
        note = ""
        for other, r in runs[1:]:
            kind, msg = r.get(t, ("absent", ""))
            cells.append(kind)
            if other.endswith(ALIAS):  # the alias run only settles what its backend's own run skipped by name
                continue
            alias = by_name.get(other + ALIAS, {}).get(t, ("absent", ""))[0]
            if ref_kind == "passed" and kind == "skipped" and alias == "passed":
                note = note or f"the suite skips it for {other} by name; run as {other}{ALIAS}: passed"
            elif ref_kind == "passed" and kind != "passed":
                if t in known:
                    note = known[t]
                else:
                    note = f"UNEXPECTED: {msg}"
                    unexpected.append((other, t, kind, msg))
            elif kind == "failed" and ref_kind != "failed" and not note:
                note = f"fails on {other} only: {msg}"
        if ref_kind == "failed" and not note:
            note = f"fails on {ref_name} too"
        rows.append((t, cells, note))

    diffs = [(t, c, n) for t, c, n in rows if len(set(c)) > 1]
    print(f"\ndifferences from {ref_name} ({len(diffs)}):")
    for t, c, n in diffs:
        print(f"  {t}: " + ", ".join(f"{runs[i][0]} {k}" for i, k in enumerate(c)) + (f" — {n}" if n else ""))
    stale = sorted(k for k in known if k not in names or all(r.get(k, ("", ""))[0] == "passed" for _, r in runs))
    if stale:
        print(f"\nknown differences that no longer differ or were not run ({len(stale)}): " + ", ".join(stale))

    table = [f"| test | {' | '.join(n for n, _ in runs)} | note |", "|---|" + "---|" * len(runs) + "---|"]
    table += [f"| `{t}` | {' | '.join(c)} | {n.replace('|', '/')} |" for t, c, n in rows]
    summary = []
    for name, r in runs:
        c = {k: sum(1 for v in r.values() if v[0] == k) for k in ("passed", "failed", "skipped")}
        summary.append(f"{name}: {c['passed']} passed, {c['failed']} failed, {c['skipped']} skipped")
    head = "; ".join(summary)
    if a.commit or a.machine:
        head = f"Commit `{a.commit}`, {a.machine}: " + head
    md = head + ".\n\n" + "\n".join(table) + "\n"
    if a.markdown:
        with open(a.markdown, "w") as f:
            f.write(md)
    if a.doc:
        text = open(a.doc).read()
        if BEGIN not in text or END not in text:
            sys.exit(f"conformance_report: {a.doc} has no {BEGIN} ... {END} section")
        pre, rest = text.split(BEGIN, 1)
        post = rest.split(END, 1)[1]
        with open(a.doc, "w") as f:
            f.write(pre + BEGIN + "\n" + md + END + post)
    if unexpected:
        print(f"\n{len(unexpected)} test(s) pass with {ref_name} but not with another backend and are not known:")
        for other, t, kind, msg in unexpected:
            print(f"  {other} {kind}: {t}: {msg}")
        return 1
    print(f"\nconformance: every test that passes with {ref_name} passes with the others or is known "
          f"({len(known)} known differences)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
