"""Training through backend "tessera" under `tessera run`: python train_worker.py MODE.

Modes (each rank exits 0 when its checks pass; failures print "FAIL ..."):
  ddp       DDP on the ranks of the job (GPU and CPU ranks mixed): at every step the synchronised gradients
            are bit-identical on every rank (check_replicas on the .grad tensors).
  replicas  AdamW, 50 steps: with plain DDP the replicas drift apart when ranks are on different devices
            (reported by check_replicas; asserted only when the job mixes device types), with
            ZeroRedundancyOptimizer (each parameter stepped by one rank, then broadcast) they stay
            bit-identical.
  uneven    HeteroDistributedSampler's uneven split + hetero_allreduce_hook: the synchronised gradient
            equals the gradient of the whole global batch computed on one process (f32 tolerance).
  fsdp      FSDP2 (fully_shard) on the job's ranks: the loss over 20 steps matches the same model trained on
            one process with the same global batch and seed, within a stated tolerance.
  fault     the last rank exits abruptly mid-training; every other rank must get a RuntimeError (within
            the group's timeout) instead of hanging.
  mismatch  ranks call different collectives; every rank must get a RuntimeError naming both calls.
  destroy   rank 0 destroys the process group while another of its threads has an all_reduce pending (the
            other ranks never join it): that call raises a RuntimeError saying the group was destroyed, and
            the rank exits cleanly (it died of SIGSEGV, the backend freed under the running call).
  exit-callback  each rank leaves with an all_reduce whose future's callback still runs (rank 0's future waits
            for the last rank, which joins late; the callback takes 1 s): the rank exits 0 and the callback runs to
            its end ("callback ran" in the log, which the caller counts). A device rank in a group of several
            islands completes such futures on its completion thread; a thread still in a callback, or dropping
            the last reference to a call's tensors, when Python finalized was ended mid-call and aborted the
            process ("terminate called without an active exception").
  destroy-callback  the same, but the rank destroys the group before it exits.
  fork-exit  after a collective, each rank forks a child that calls a collective on the group it inherited (refused,
            naming the fork) and leaves through Python's normal exit (its atexit handlers run); the child must
            exit 0 within 8 s. A device rank waits at exit (up to 10 s) for its
            completion threads, and a child has a copy of their state but not the threads (it waited the 10 s);
            libtessera stops the stores of the ids a process made at exit, and a child joined a parent's store
            thread it does not have (SIGSEGV).
"""
import datetime
import faulthandler
import os
import sys
import threading
import time

import torch
import torch.distributed as dist
import torch.nn as nn

import tessera.torch as tt

from worker_common import arm_hang_dump, check, device, failures  # noqa: E402


def mixed_devices():
    layout = os.environ.get("TESSERA_ISLANDS", "")
    return "host:" in layout and "cuda:" in layout


def model(seed=0):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(64, 256), nn.GELU(), nn.Linear(256, 256), nn.GELU(), nn.Linear(256, 10))


def batch(step, n=32, seed=0):
    g = torch.Generator().manual_seed(seed * 100003 + step)
    return torch.randn(n, 64, generator=g), torch.randint(0, 10, (n,), generator=g)


def ddp_mode(dev, rank):
    from torch.nn.parallel import DistributedDataParallel as DDP
    m = DDP(model().to(dev))
    opt = torch.optim.SGD(m.parameters(), lr=0.05, momentum=0.9)
    for step in range(10):
        x, y = batch(step * 7 + rank)
        loss = nn.functional.cross_entropy(m(x.to(dev)), y.to(dev))
        opt.zero_grad()
        loss.backward()
        grads = {n: p.grad for n, p in m.module.named_parameters()}
        bad = tt.check_replicas(grads)
        check(not bad, f"ddp step {step}: gradients differ across ranks: {bad}")
        opt.step()
    bad = tt.check_replicas(m.module)
    check(not bad, f"ddp: parameters differ after SGD: {bad}")


def replicas_mode(dev, rank):
    from torch.distributed.optim import ZeroRedundancyOptimizer
    from torch.nn.parallel import DistributedDataParallel as DDP
    results = {}
    for name in ("plain", "zero"):
        m = DDP(model(1).to(dev))
        if name == "plain":
            opt = torch.optim.AdamW(m.parameters(), lr=1e-3)
        else:
            opt = ZeroRedundancyOptimizer(m.parameters(), optimizer_class=torch.optim.AdamW, lr=1e-3)
        for step in range(50):
            x, y = batch(step * 11 + rank, seed=1)
            loss = nn.functional.cross_entropy(m(x.to(dev)), y.to(dev))
            opt.zero_grad()
            loss.backward()
            opt.step()
        results[name] = tt.check_replicas(m.module)
        n_bad = sum(1 for _ in results[name])
        if rank == 0:
            print(f"replicas {name}: {n_bad} of {len(list(m.module.parameters()))} parameter tensors differ "
                  f"across ranks after 50 AdamW steps", flush=True)
    check(not results["zero"], f"ZeroRedundancyOptimizer replicas differ: {results['zero']}")
    if mixed_devices():
        check(bool(results["plain"]), "plain DDP + AdamW on CPU and GPU ranks did not drift (expected it to)")


def uneven_mode(dev, rank, world):
    from torch.nn.parallel import DistributedDataParallel as DDP
    data = torch.utils.data.TensorDataset(*batch(0, n=96, seed=3))
    weights = [1.0 + r for r in range(world)]  # rank r is (1+r) times as fast as rank 0
    sampler = tt.HeteroDistributedSampler(data, global_batch_size=48, weights=weights, shuffle=True, seed=5)
    loader = torch.utils.data.DataLoader(data, batch_size=sampler.batch_size, sampler=sampler)
    m = DDP(model(2).to(dev))
    m.register_comm_hook(sampler.fraction, tt.hetero_allreduce_hook)
    x, y = next(iter(loader))
    nn.functional.cross_entropy(m(x.to(dev)), y.to(dev)).backward()
    # the whole global batch on one process
    ref = model(2)
    order = list(iter(tt.HeteroDistributedSampler(data, 48, num_replicas=1, rank=0, shuffle=True, seed=5)))[:48]
    # the global batch is the union of the ranks' runs of step 0: the first 48 of the permutation
    xa, ya = data[order]
    nn.functional.cross_entropy(ref(xa), ya).backward()
    for (n, p), q in zip(m.module.named_parameters(), ref.parameters()):
        err = (p.grad.detach().cpu().double() - q.grad.double()).abs().max().item()
        scale = q.grad.abs().max().item()
        check(err <= 1e-4 * max(scale, 1e-3) + 1e-7, f"uneven: gradient of {n} off by {err} (scale {scale})")
    if rank == 0:
        print(f"uneven: shares {sampler.shares} of 48, gradients match the whole batch's", flush=True)


def fsdp_mode(dev, rank, world):
    from torch.distributed.fsdp import fully_shard
    steps, gb = 20, 32
    m = model(4).to(dev)
    for layer in m:
        if isinstance(layer, nn.Linear):
            fully_shard(layer)
    fully_shard(m)
    opt = torch.optim.AdamW(m.parameters(), lr=1e-3)
    losses = []
    per = gb // world
    for step in range(steps):
        x, y = batch(step, n=gb, seed=4)
        xs, ys = x[rank * per:(rank + 1) * per], y[rank * per:(rank + 1) * per]
        loss = nn.functional.cross_entropy(m(xs.to(dev)), ys.to(dev))
        opt.zero_grad()
        loss.backward()
        opt.step()
        lt = loss.detach().clone()
        dist.all_reduce(lt, op=dist.ReduceOp.AVG)
        losses.append(lt.item())
    ref = model(4).to(dev)
    ropt = torch.optim.AdamW(ref.parameters(), lr=1e-3)
    rl = []
    for step in range(steps):
        x, y = batch(step, n=gb, seed=4)
        loss = nn.functional.cross_entropy(ref(x.to(dev)), y.to(dev))
        ropt.zero_grad()
        loss.backward()
        ropt.step()
        rl.append(loss.item())
    worst = max(abs(a - b) / abs(b) for a, b in zip(losses, rl))
    if rank == 0:
        print(f"fsdp: loss {losses[0]:.5f} -> {losses[-1]:.5f}; one process {rl[0]:.5f} -> {rl[-1]:.5f}; "
              f"max relative difference {worst:.2e} (tolerance 1e-4)", flush=True)
    check(worst <= 1e-4, f"fsdp: loss differs from the one-process run by {worst:.2e} (> 1e-4)")


def fault_mode(dev, rank, world):
    t = torch.ones(1 << 16, device=dev)
    dist.all_reduce(t)
    if rank == world - 1:
        print("fault: last rank exits now", flush=True)
        os._exit(3)
    start = time.monotonic()
    try:
        for _ in range(100):
            dist.all_reduce(t)
        if dev.type == "cuda":
            torch.cuda.synchronize()
        t.sum().item()
        dist.all_reduce(t)
        if dev.type == "cuda":
            torch.cuda.synchronize()
        check(False, "fault: no error after a peer died")
    except RuntimeError as e:
        took = time.monotonic() - start
        print(f"fault: rank {rank} raised after {took:.1f}s: {str(e).splitlines()[0][:200]}", flush=True)
        check(took < 30, f"fault: took {took:.1f}s (timeout 20s)")
    os._exit(0 if not failures else 1)


def mismatch_mode(dev, rank, world):
    t = torch.ones(100, device=dev)
    try:
        if rank == 0:
            dist.broadcast(t, src=0)
        else:
            dist.all_reduce(t)
        if dev.type == "cuda":
            torch.cuda.synchronize()
        dist.barrier()
        check(False, "mismatch: no error")
    except RuntimeError as e:
        msg = str(e)
        print(f"mismatch: rank {rank} raised: {msg.splitlines()[0][:200]}", flush=True)
        check("broadcast" in msg.lower() or "allreduce" in msg.lower() or "mismatch" in msg.lower()
              or "peer" in msg.lower(), f"mismatch: message does not say what differed: {msg[:200]}")
    os._exit(0 if not failures else 1)


def destroy_mode(dev, rank, world):
    t = torch.ones(1 << 10, device=dev)
    dist.all_reduce(t)  # every rank is up
    if rank != 0:
        time.sleep(5)  # rank 0's destroy comes first, and its pending call fails for that reason
        dist.destroy_process_group()
        os._exit(0)
    outcome = {}

    def pending():
        try:
            dist.all_reduce(torch.ones(16, device=dev))  # only rank 0 calls it: it stays pending
            outcome["returned"] = True
        except RuntimeError as e:
            outcome["error"] = str(e)

    caller = threading.Thread(target=pending)
    caller.start()
    time.sleep(1)
    dist.destroy_process_group()
    caller.join(30)
    check(not caller.is_alive(), "destroy: the pending all_reduce did not return within 30 s of the destroy")
    msg = outcome.get("error", "")
    print(f"destroy: rank 0's pending all_reduce raised: {msg.splitlines()[0][:240] if msg else outcome}", flush=True)
    check("destroyed" in msg, f"destroy: the error does not say the group was destroyed: {outcome}")
    os._exit(0 if not failures else 1)


def exit_callback_mode(dev, rank, world, destroy):
    t = torch.full((1024,), float(rank + 1), device=dev)
    dist.barrier()
    if rank == world - 1:
        time.sleep(0.5)  # the other ranks' calls are still pending when they attach the callback
    w = dist.all_reduce(t, async_op=True)

    def ran(f):
        time.sleep(1.0)
        total = f.value()[0][0].item()
        print(f"rank {rank}: callback ran at exit, sum {total:g}", flush=True)
        return f.value()

    w.get_future().then(ran)
    if destroy:
        dist.destroy_process_group()
    print(f"rank {rank}: leaving with the callback pending", flush=True)
    sys.exit(0)


def fork_exit_mode(dev, rank):
    t = torch.ones(1024, device=dev)
    dist.all_reduce(t)
    # faulthandler's watchdog thread (main) is not in a forked child, whose exit would wait for it: off across the fork
    faulthandler.cancel_dump_traceback_later()
    t0 = time.monotonic()
    pid = os.fork()
    if pid == 0:
        # The group is the parent's: a collective on it in the child fails at once, naming both processes, instead
        # of taking the parent's bytes from its channels (status 3: it ran; 4: another error). On CPU tensors, which
        # go straight to the communicator: a device runtime is not usable in a forked child, and refuses first.
        try:
            dist.all_reduce(torch.ones(4))
            code = 3
        except RuntimeError as e:
            code = 0 if "made by fork()" in str(e) else 4
            if code:
                print(f"fork-exit: the child's collective failed otherwise: {e}", flush=True)
        sys.exit(code)
    arm_hang_dump()
    status = None
    while time.monotonic() - t0 < 12:
        done, st = os.waitpid(pid, os.WNOHANG)
        if done:
            status = st
            break
        time.sleep(0.05)
    else:
        os.kill(pid, 9)
        os.waitpid(pid, 0)
    took = time.monotonic() - t0
    print(f"fork-exit: rank {rank}'s forked child was gone after {took:.1f} s (status {status})", flush=True)
    check(status == 0 and took < 8, f"fork-exit: the forked child took {took:.1f} s to exit (status {status})")


def main():
    mode = sys.argv[1]
    arm_hang_dump()
    dev = device()
    if dev.type == "cuda":
        torch.cuda.set_device(dev)
    timeout = datetime.timedelta(seconds=20 if mode in ("fault", "mismatch", "destroy") else 300)
    dist.init_process_group("tessera", timeout=timeout)
    rank, world = dist.get_rank(), dist.get_world_size()
    {"ddp": lambda: ddp_mode(dev, rank), "replicas": lambda: replicas_mode(dev, rank),
     "uneven": lambda: uneven_mode(dev, rank, world), "fsdp": lambda: fsdp_mode(dev, rank, world),
     "fault": lambda: fault_mode(dev, rank, world), "mismatch": lambda: mismatch_mode(dev, rank, world),
     "destroy": lambda: destroy_mode(dev, rank, world),
     "fork-exit": lambda: fork_exit_mode(dev, rank),
     "exit-callback": lambda: exit_callback_mode(dev, rank, world, False),
     "destroy-callback": lambda: exit_callback_mode(dev, rank, world, True)}[mode]()
    dist.destroy_process_group()
    print(f"rank {rank}: {mode} {'passed' if not failures else 'FAILED'}", flush=True)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
