"""Every torch.distributed operation x dtype x reduce op through backend "tessera", against a reference
computed locally, in whatever world `tessera run` started (docs/torch.md, scripts/torch-check.sh).

Every rank makes every rank's input from (seed, rank), so each can compute the expected result of every
collective itself. Floating-point sums are checked against an f64 reference within the dtype's rounding,
and every result is also checked to be bit-identical on all ranks (Tessera's promise). Then the same in a
new_group of some ranks and in both dimensions of a 2-D DeviceMesh when the world allows.
Exit status 0 when everything passed; failures are printed as "FAIL ...".
"""
import faulthandler
import os
import sys
import traceback

import torch
import torch.distributed as dist

import tessera.torch  # noqa: F401  registers the backend

from worker_common import check, device, failures, summary  # noqa: E402

FLOATS = [torch.float32, torch.float16, torch.bfloat16, torch.float64]
INTS = [torch.int8, torch.uint8, torch.int32, torch.int64]
ALL = FLOATS + INTS + [torch.bool]
TOL = {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 1.6e-2, torch.float64: 1e-12}


DEV = None


def make(rank, n, dtype, kind="sum", seed=0):
    g = torch.Generator().manual_seed(1000 * seed + 17 * rank + n)
    if dtype == torch.bool:
        return torch.rand(n, generator=g) < 0.3
    if dtype in INTS:
        lo, hi = {"sum": (-5, 6), "prod": (1, 3), "minmax": (-100, 101)}[kind]
        if dtype == torch.uint8:
            lo, hi = max(lo, 0), max(hi, 2)
        return torch.randint(lo, hi, (n,), generator=g).to(dtype)
    x = torch.randn(n, generator=g, dtype=torch.float64)
    if kind == "prod":
        x = 1 + 0.05 * x
    return x.to(dtype)


def step(what):
    """Progress on every rank (prefixed by tessera run), and a Python stack dump if one step hangs."""
    print(f"... {what}", flush=True)
    faulthandler.cancel_dump_traceback_later()
    faulthandler.dump_traceback_later(HANG_S, exit=True)


HANG_S = int(os.environ.get("TESSERA_TEST_HANG_S", "90"))


def close(got, ref, dtype):
    got = got.cpu()
    if dtype in TOL:
        err = (got.double() - ref.double()).abs().max().item() if got.numel() else 0.0
        scale = max(ref.double().abs().max().item() if ref.numel() else 0.0, 1.0)
        return err <= TOL[dtype] * scale, err
    return torch.equal(got, ref.to(got.dtype)), 0.0


def same_everywhere(t, group, what):
    """The result's bits are the same on every rank of the group."""
    raw = t.detach().contiguous().reshape(-1).view(torch.uint8).to(DEV)
    size = dist.get_world_size(group)
    out = torch.empty(size * raw.numel(), dtype=torch.uint8, device=DEV)
    dist.all_gather_into_tensor(out, raw, group=group)
    out = out.cpu().view(size, -1)
    check(all(torch.equal(out[0], out[r]) for r in range(size)), f"{what}: bits differ across ranks")


def ref_reduce(xs, op, dtype):
    if dtype == torch.bool:
        stack = torch.stack(xs)
        return stack.any(0) if op in ("sum", "max") else stack.all(0)
    s = torch.stack([x.double() for x in xs]) if dtype in FLOATS else torch.stack([x.long() for x in xs])
    if op in ("sum", "premul"):
        r = s.sum(0)
    elif op == "avg":
        r = s.sum(0) / len(xs)
    elif op == "prod":
        r = s.prod(0)
    elif op == "max":
        r = s.max(0).values
    else:
        r = s.min(0).values
    return r if dtype in FLOATS else r.to(dtype)


OPS = {"sum": dist.ReduceOp.SUM, "avg": dist.ReduceOp.AVG, "prod": dist.ReduceOp.PRODUCT, "max": dist.ReduceOp.MAX,
       "min": dist.ReduceOp.MIN}


def ops_for(dtype):
    if dtype == torch.bool:
        return ["sum", "max", "min"]
    if dtype in INTS:
        return ["sum", "prod", "max", "min"]
    return ["sum", "avg", "prod", "max", "min", "premul"]


def run_all(group, label):
    rank, size = dist.get_rank(group), dist.get_world_size(group)
    members = dist.get_process_group_ranks(group)
    n = 1031  # odd: islands' shards of different sizes
    for dtype in ALL:
        tag = f"[{label}] {dtype}"
        # allreduce with every op
        for opname in ops_for(dtype):
            step(f"{tag} all_reduce {opname}")
            kind = "prod" if opname == "prod" else ("minmax" if opname in ("max", "min") else "sum")
            xs = [make(members[r], n, dtype, kind) for r in range(size)]
            t = xs[rank].clone().to(DEV)
            if opname == "premul":
                op = dist._make_nccl_premul_sum(0.5)
                ref = ref_reduce([x.double() * 0.5 for x in xs], "sum", dtype)
            else:
                op = OPS[opname]
                ref = ref_reduce(xs, opname, dtype)
            dist.all_reduce(t, op=op, group=group)
            ok, err = close(t, ref, dtype)
            check(ok, f"{tag} all_reduce {opname}: max error {err}")
            same_everywhere(t, group, f"{tag} all_reduce {opname}")
        xs = [make(members[r], n, dtype) for r in range(size)]
        # async_op + wait, and the future's value
        step(f"{tag} async all_reduce")
        t = xs[rank].clone().to(DEV)
        work = dist.all_reduce(t, op=dist.ReduceOp.MAX, group=group, async_op=True)
        fut = work.get_future()
        work.wait()
        val = fut.wait()[0]
        check(close(val, ref_reduce(xs, "max", dtype), dtype)[0], f"{tag} all_reduce async future value")
        # broadcast from the last rank
        step(f"{tag} broadcast")
        t = xs[rank].clone().to(DEV)
        dist.broadcast(t, src=members[-1], group=group)
        check(torch.equal(t.cpu(), xs[-1]), f"{tag} broadcast")
        # all_gather (list) and all_gather_into_tensor
        step(f"{tag} all_gather")
        outs = [torch.empty(n, dtype=dtype, device=DEV) for _ in range(size)]
        dist.all_gather(outs, xs[rank].to(DEV), group=group)
        check(all(torch.equal(outs[r].cpu(), xs[r]) for r in range(size)), f"{tag} all_gather")
        big = torch.empty(size * n, dtype=dtype, device=DEV)
        dist.all_gather_into_tensor(big, xs[rank].to(DEV), group=group)
        check(torch.equal(big.cpu(), torch.cat(xs)), f"{tag} all_gather_into_tensor")
        # gather / scatter / reduce to the first rank
        step(f"{tag} gather/scatter/reduce")
        root = members[0]
        gl = [torch.empty(n, dtype=dtype, device=DEV) for _ in range(size)] if rank == 0 else None
        dist.gather(xs[rank].to(DEV), gather_list=gl, dst=root, group=group)
        if rank == 0:
            check(all(torch.equal(gl[r].cpu(), xs[r]) for r in range(size)), f"{tag} gather")
        out = torch.empty(n, dtype=dtype, device=DEV)
        dist.scatter(out, scatter_list=[x.to(DEV) for x in xs] if rank == 0 else None, src=root, group=group)
        check(torch.equal(out.cpu(), xs[rank]), f"{tag} scatter")
        if dtype != torch.bool:
            t = xs[rank].clone().to(DEV)
            dist.reduce(t, dst=root, op=dist.ReduceOp.SUM, group=group)
            if rank == 0:
                check(close(t, ref_reduce(xs, "sum", dtype), dtype)[0], f"{tag} reduce")
            else:
                check(torch.equal(t.cpu(), xs[rank]), f"{tag} reduce leaves non-root input unchanged")
        # reduce_scatter (list) and reduce_scatter_tensor
        step(f"{tag} reduce_scatter")
        if dtype != torch.bool:
            full = [make(members[r], size * n, dtype) for r in range(size)]
            ref = ref_reduce(full, "sum", dtype)
            out = torch.empty(n, dtype=dtype, device=DEV)
            dist.reduce_scatter_tensor(out, full[rank].to(DEV), op=dist.ReduceOp.SUM, group=group)
            check(close(out, ref[rank * n:(rank + 1) * n], dtype)[0], f"{tag} reduce_scatter_tensor")
            out2 = torch.empty(n, dtype=dtype, device=DEV)
            dist.reduce_scatter(out2, list(full[rank].to(DEV).chunk(size)), op=dist.ReduceOp.SUM, group=group)
            check(torch.equal(out2.cpu(), out.cpu()), f"{tag} reduce_scatter (list) equals reduce_scatter_tensor")
        # all_to_all_single, equal and uneven splits (rank r sends r+p+1 rows to p), and all_to_all
        step(f"{tag} all_to_all")
        send = make(members[rank], size * 5, dtype).to(DEV)
        recv = torch.empty_like(send)
        dist.all_to_all_single(recv, send, group=group)
        exp = torch.cat([make(members[p], size * 5, dtype)[rank * 5:(rank + 1) * 5] for p in range(size)])
        check(torch.equal(recv.cpu(), exp), f"{tag} all_to_all_single equal")
        in_split = [rank + p + 1 for p in range(size)]
        out_split = [p + rank + 1 for p in range(size)]
        send = make(members[rank], sum(in_split) * 3, dtype).view(-1, 3).to(DEV)
        recv = torch.empty(sum(out_split), 3, dtype=dtype, device=DEV)
        dist.all_to_all_single(recv, send, out_split, in_split, group=group)
        parts = []
        for p in range(size):
            sp = [p + q + 1 for q in range(size)]
            src = make(members[p], sum(sp) * 3, dtype).view(-1, 3)
            parts.append(src[sum(sp[:rank]):sum(sp[:rank]) + sp[rank]])
        check(torch.equal(recv.cpu(), torch.cat(parts)), f"{tag} all_to_all_single uneven")
        ins = [make(members[rank] * 31 + p, 7, dtype).to(DEV) for p in range(size)]
        outs = [torch.empty(7, dtype=dtype, device=DEV) for _ in range(size)]
        dist.all_to_all(outs, ins, group=group)
        check(all(torch.equal(outs[p].cpu(), make(members[p] * 31 + rank, 7, dtype)) for p in range(size)),
               f"{tag} all_to_all")
        # send/recv around the ring, then batch_isend_irecv both ways at once
        step(f"{tag} send/recv")
        if size > 1:
            nxt, prv = members[(rank + 1) % size], members[(rank - 1) % size]
            buf = torch.empty(n, dtype=dtype, device=DEV)
            if rank % 2 == 0:
                dist.send(xs[rank].to(DEV), dst=nxt, group=group)
                dist.recv(buf, src=prv, group=group)
            else:
                dist.recv(buf, src=prv, group=group)
                dist.send(xs[rank].to(DEV), dst=nxt, group=group)
            check(torch.equal(buf.cpu(), xs[(rank - 1) % size]), f"{tag} send/recv ring")
            a = torch.empty(n, dtype=dtype, device=DEV)
            b = torch.empty(n, dtype=dtype, device=DEV)
            reqs = dist.batch_isend_irecv([
                dist.P2POp(dist.irecv, a, prv, group), dist.P2POp(dist.irecv, b, nxt, group),
                dist.P2POp(dist.isend, xs[rank].to(DEV), nxt, group), dist.P2POp(dist.isend, xs[rank].to(DEV), prv, group)])
            for r in reqs:
                r.wait()
            check(torch.equal(a.cpu(), xs[(rank - 1) % size]) and torch.equal(b.cpu(), xs[(rank + 1) % size]),
                   f"{tag} batch_isend_irecv")
    # coalesced forms
    step(f"[{label}] coalesced")
    ts = [make(members[rank], k, torch.float32).to(DEV) for k in (5, 300, 17)]
    refs = [ref_reduce([make(members[r], k, torch.float32) for r in range(size)], "sum", torch.float32)
            for k in (5, 300, 17)]
    with dist._coalescing_manager(group=group, device=DEV):
        for t in ts:
            dist.all_reduce(t, group=group)
    check(all(close(t, r, torch.float32)[0] for t, r in zip(ts, refs)), f"[{label}] coalesced all_reduce")
    # all_gather_coalesced: outs[r][i] is rank r's input i (three inputs, whatever the group's size)
    ins = [make(members[rank], k, torch.int32, seed=3).to(DEV) for k in (4, 9, 1)]
    outs = [[torch.empty_like(t) for t in ins] for _ in range(size)]
    dist.all_gather_coalesced(outs, ins, group=group)
    check(all(torch.equal(outs[r][i].cpu(), make(members[r], k, torch.int32, seed=3))
               for r in range(size) for i, k in enumerate((4, 9, 1))), f"[{label}] all_gather_coalesced")
    dist.barrier(group=group)
    check(True, f"[{label}] barrier")


def main():
    global DEV
    DEV = device()
    if DEV.type == "cuda":
        torch.cuda.set_device(DEV)
        if os.environ.get("TESSERA_TEST_SIDE_STREAM") == "1":  # work on a stream of our own, not the default
            torch.cuda.set_stream(torch.cuda.Stream())
    dist.init_process_group("tessera")
    rank, world = dist.get_rank(), dist.get_world_size()
    backend = dist.get_backend()
    check(backend == "tessera", f"backend is {backend}")
    # the group's tessera backend serves this rank's device (npu:0 is Tessera's npu row, not a CPU fallback)
    want = os.environ.get("TESSERA_DEVICE", "host")
    got = dist.distributed_c10d._get_default_group()._get_backend(DEV).device
    check(got == want, f"the backend's device is {got}, expected {want}")
    try:
        run_all(dist.group.WORLD, "world")
        if world >= 2:
            sub_ranks = list(range(1, world))  # everyone but rank 0: a subgroup without world rank 0's island
            sub = dist.new_group(sub_ranks)
            if rank in sub_ranks:
                run_all(sub, f"new_group{sub_ranks}")
            from torch.distributed.device_mesh import init_device_mesh
            layout = os.environ.get("TESSERA_ISLANDS", "")
            mesh_dev = "cuda" if "host:" not in layout and DEV.type == "cuda" else "cpu"
            shape = (2, world // 2) if world % 2 == 0 else (world, 1)
            mesh = init_device_mesh(mesh_dev, shape, mesh_dim_names=("dp", "tp"))
            run_all(mesh.get_group("dp"), f"mesh{shape} dp")
            run_all(mesh.get_group("tp"), f"mesh{shape} tp")
    except Exception:
        traceback.print_exc()
        failures.append("exception")
    faulthandler.cancel_dump_traceback_later()
    dist.destroy_process_group()
    sys.exit(summary(f"rank {rank}"))


if __name__ == "__main__":
    main()
