"""Where a torch all_reduce's time goes after the bridge's work: joins allreduce_bench.py --phases rows with
the TESSERA_DEVICE_TRACE files of the same run (both on the monotonic clock).

    python3 bench/torch/trace_report.py DIR   # DIR: phases.jsonl (the --phases rows), trace-torch.rankN

For each call and rank: the bridge job's end (its copies done, from the trace), then, in µs after it, the
end event as seen by polling Work.is_completed() (every other call), wait()'s return, and
torch.cuda.synchronize()'s return; and the medians. Standard library only.
"""
import json
import pathlib
import statistics
import sys


def jobs(path):
    rows = path.read_text().splitlines()[1:]
    return [tuple(float(x) for x in r.split()) for r in rows if r.strip()]


def main(d):
    d = pathlib.Path(d)
    if not (d / "phases.jsonl").is_file():
        sys.exit(f"trace_report: {d / 'phases.jsonl'} is missing (the rows of allreduce_bench.py --phases)")
    lat = {"polled": [], "waited": [], "synced": []}
    for line in (d / "phases.jsonl").read_text().splitlines():
        row = json.loads(line)
        rank = row["rank"]
        if not (d / f"trace-torch.rank{rank}").is_file():
            sys.exit(f"trace_report: {d / f'trace-torch.rank{rank}'} is missing (TESSERA_DEVICE_TRACE=DIR/trace-torch)")
        trace = jobs(d / f"trace-torch.rank{rank}")
        print(f"rank {rank}: {len(row['calls'])} calls of {row['bytes'] >> 20} MiB")
        for c in row["calls"]:
            job = [j for j in trace if c["start"] <= j[1] <= c["issued"]]
            if not job:
                print("  (no bridge job submitted inside this call's issue)")
                continue
            copied = job[0][4]
            rel = {k: c[k] - copied for k in ("completed", "waited", "synced") if k in c}
            if "completed" in rel:
                lat["polled"].append(rel["completed"])
            lat["waited"].append(rel["waited"])
            lat["synced"].append(rel["synced"])
            print(f"  job {int(job[0][0])}: bridge run {job[0][3] - job[0][2]:.0f} us; after its copies: " +
                  ", ".join(f"{k} +{v:.0f}" for k, v in rel.items()))
    print("median µs after the bridge's end: " +
          ", ".join(f"{k} {statistics.median(v):.0f} (n={len(v)})" for k, v in lat.items() if v))


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: trace_report.py DIR (with phases.jsonl and trace-torch.rankN)")
    main(sys.argv[1])
