"""init_process_group("tessera") as any c10d backend is used: without `tessera run` and with no TESSERA_*
variable, through env:// (as torchrun sets it up), tcp:// and file://; one island per device type.

  python init_worker.py launch METHOD N    starts N ranks of this file (METHOD: env, tcp or file), each with
                                           every TESSERA_* variable removed, and waits for them (bounded)
  python init_worker.py torchrun           one rank under torchrun (RANK, WORLD_SIZE, MASTER_* from it)

Each rank checks a few collectives' results, that the group's backend is tessera, and that a host rank
never initialised CUDA (with a CUDA build of torch on a machine without a GPU, or with the GPU hidden,
making the backend used to fail: "no CUDA-capable device is detected"). Exit status 0 when every rank
passed; failures print "FAIL ...".
"""
import datetime
import os
import socket
import subprocess
import sys
import tempfile

LAUNCH_TIMEOUT_S = 120


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(method, n):
    env = {k: v for k, v in os.environ.items() if not k.startswith("TESSERA_")}
    tmp = tempfile.mkdtemp(prefix="tsr-init-")
    port = free_port()
    url = {"env": "env://", "tcp": f"tcp://127.0.0.1:{port}", "file": f"file://{tmp}/rendezvous"}.get(method)
    if url is None:
        sys.exit(f"init_worker: METHOD {method!r} is not env, tcp or file")
    procs = []
    for r in range(n):
        e = dict(env, RANK=str(r), WORLD_SIZE=str(n), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        if method != "env":  # tcp:// and file:// take rank and size as arguments, not from the environment
            for k in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
                e.pop(k)
        procs.append(subprocess.Popen([sys.executable, __file__, "rank", url, str(r), str(n)], env=e))
    rc = 0
    for r, p in enumerate(procs):
        try:
            code = p.wait(timeout=LAUNCH_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            print(f"FAIL {method}: rank {r} still running after {LAUNCH_TIMEOUT_S} s (killed)", flush=True)
            return 1
        if code != 0:
            print(f"FAIL {method}: rank {r} exited {code}", flush=True)
            rc = 1
    print(f"init {method} ({n} ranks, no TESSERA_* variables): {'passed' if rc == 0 else 'FAILED'}", flush=True)
    return rc


def rank_body(url, rank, size):
    import torch
    import torch.distributed as dist

    failures = []

    def check(ok, what):
        if not ok:
            failures.append(what)
            print(f"FAIL rank {rank}: {what}", flush=True)

    kw = {} if url == "env://" else {"rank": rank, "world_size": size}
    dist.init_process_group("tessera", init_method=url, timeout=datetime.timedelta(seconds=60), **kw)
    check(dist.get_backend() == "tessera", f"backend is {dist.get_backend()!r}, not 'tessera'")
    check(dist.get_rank() == rank and dist.get_world_size() == size,
          f"rank/size {dist.get_rank()}/{dist.get_world_size()}, expected {rank}/{size}")
    t = torch.full((1000,), float(rank + 1))
    dist.all_reduce(t)
    check(bool((t == size * (size + 1) / 2).all()), f"all_reduce sum gave {t[0].item()}")
    b = torch.arange(10, dtype=torch.int64) * (rank + 1)
    dist.broadcast(b, src=size - 1)
    check(torch.equal(b, torch.arange(10, dtype=torch.int64) * size), f"broadcast gave {b.tolist()}")
    out = [torch.empty(3, dtype=torch.bfloat16) for _ in range(size)]
    dist.all_gather(out, torch.full((3,), float(rank), dtype=torch.bfloat16))
    check(all(bool((o == r).all()) for r, o in enumerate(out)), "all_gather gave the wrong tensors")
    w = dist.all_reduce(torch.ones(4), async_op=True)
    w.wait()
    dist.barrier()
    if torch.version.cuda is not None:
        check(not torch.cuda.is_initialized(), "a host rank initialised CUDA")
    dist.destroy_process_group()
    return 1 if failures else 0


def main():
    if len(sys.argv) == 4 and sys.argv[1] == "launch":
        return launch(sys.argv[2], int(sys.argv[3]))
    if len(sys.argv) == 5 and sys.argv[1] == "rank":
        return rank_body(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
    if len(sys.argv) == 2 and sys.argv[1] == "torchrun":
        stray = sorted(k for k in os.environ if k.startswith("TESSERA_"))
        if stray:
            print(f"FAIL torchrun: TESSERA_* variables set: {stray}", flush=True)
            return 1
        rc = rank_body("env://", int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]))
        print(f"rank {os.environ['RANK']}: torchrun {'passed' if rc == 0 else 'FAILED'}", flush=True)
        return rc
    sys.exit("usage: init_worker.py launch env|tcp|file N | torchrun")


if __name__ == "__main__":
    sys.exit(main())
