"""tessera.torch.checkpoint — torch.distributed.checkpoint (DCP) on Tessera's tiered checkpoint store.

    import torch.distributed.checkpoint as dcp
    from tessera.torch.checkpoint import TesseraWriter, TesseraReader, resume
    dcp.save(state, storage_writer=TesseraWriter(root, step))        # also dcp.async_save
    dcp.load(state, storage_reader=TesseraReader(root))               # newest good step, any tier
    step = resume(state)                                              # TESSERA_RESUME_FROM, or None

Layout: a DCP save is one Tessera step: `<root>/step-NNNNNNNNNN/` with one safetensors shard per rank and
Tessera's manifest (checksums, committed last: a step is visible only once committed). Every chunk DCP
asks a rank to write becomes a tensor of that rank's shard:
  * a chunk that spans every dimension but the first (a whole tensor, or an FSDP2/DTensor row shard) is
    stored under the tensor's own name, row-sharded at its row offset — so `tessera ckpt show` lists the
    global tensor, the Hugging Face library reads the shards, and Tessera's reader can cut any row range;
  * any other chunk (e.g. a column shard) under "<name>#<offsets>";
  * non-tensor state (DCP's BytesIO items: step, RNG state, sampler position, ...) as uint8 tensors
    "__bytes__/<name>"; DCP's own Metadata (pickled) as "__dcp_metadata__" in rank 0's shard, which
    rank 0 writes last, in finish(), so the manifest commits only after it.
Loading reshards through DCP's planner (any world size or island layout). A step without DCP metadata
(e.g. one made by `tessera ckpt import` from Hugging Face files) loads too: its tensors are described from
Tessera's manifest. A step only in the warm (S3) or cold tier is staged back to hot (verified) first.

dcp.async_save: TesseraWriter is its own stager (DCP's AsyncStager protocol). It copies the state into
pinned host memory that is kept for the next save of the same shapes (one copy per process, like DCP's
`cache_staged_state_dict`), so the training loop is blocked for about one GPU-to-pinned copy; the write
runs in DCP's thread. A save still writing from those buffers is never overwritten: the next one then
stages into fresh buffers. `release_staging()` frees them.

Devices: the device types of Tessera's family table (_devices.DEVICE_TYPES: cuda, npu, musa; CoreX's torch is CUDA's)
are read by Tessera's checkpoint library itself, through its device runtime rows, without a host copy first; a
tensor of any other device type is copied to the host. Staging waits for the copies of every such device type.
Pinned host memory (page-locked staging, asynchronous copies up on load) is CUDA's, where torch pins with it.
"""
import io
import math
import os
import pickle
import re
import threading

import torch
import torch.distributed as dist
from torch.futures import Future  # DCP waits on torch futures (fut.wait()), not concurrent.futures
from torch.distributed.checkpoint.metadata import (BytesStorageMetadata, ChunkStorageMetadata, Metadata,
                                                   MetadataIndex, TensorProperties, TensorStorageMetadata)
from torch.distributed.checkpoint.planner import LoadItemType, WriteItemType
from torch.distributed.checkpoint.storage import StorageReader, StorageWriter, WriteResult

from . import _devices

__all__ = ["TesseraWriter", "TesseraReader", "resume", "latest_step", "parse_resume_from", "release_staging"]

_META = "__dcp_metadata__"
_DTYPES = {"int8": torch.int8, "uint8": torch.uint8, "int32": torch.int32, "int64": torch.int64,
           "float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32, "float64": torch.float64}


def _ckpt():
    from .. import _C
    return _C.ckpt


def _tiers(root, warm, cold):
    return (root, warm or os.environ.get("TESSERA_CKPT_WARM", ""), cold or os.environ.get("TESSERA_CKPT_COLD", ""))


def parse_resume_from(value):
    """".../ckpt/step-0000000150" -> (".../ckpt", 150); ValueError naming the value otherwise."""
    m = re.fullmatch(r"(.*)/step-(\d+)/?", value or "")
    if not m:
        raise ValueError(f"TESSERA_RESUME_FROM={value!r} does not name a <root>/step-N directory")
    return m.group(1), int(m.group(2))


def latest_step(root, warm="", cold="", below=None):
    """The newest committed step that verifies, in any tier (hot steps verified; warm/cold ones are verified
    when staged). None when there is none. `below`: only steps < below."""
    hot, warm, cold = _tiers(root, warm, cold)
    c = _ckpt()
    candidates = []
    if warm or cold:
        candidates = [s for s, _ in c.list_all(hot, warm, cold)]
    elif os.path.isdir(hot):
        candidates = c.steps(hot)
    for s in sorted(set(candidates), reverse=True):
        if below is not None and s >= below:
            continue
        try:
            _stage(hot, warm, cold, s)
            c.verify(hot, s)
            return s
        except RuntimeError as e:
            print(f"tessera checkpoint: skipping step {s}: {e}", flush=True)
    return None


def _stage(hot, warm, cold, step):
    if os.path.exists(os.path.join(hot, f"step-{step:010d}", "manifest.json")):
        return
    _ckpt().stage(hot, warm, cold, step)


def _synchronize_devices():
    """Waits for the work queued on every device of the table's device types whose torch module is loaded and has a
    device (torch.cuda; torch.npu once torch_npu registered it)."""
    for device_type in _devices.DEVICE_TYPES:
        mod = _devices.module(device_type)
        if mod is not None and hasattr(mod, "synchronize") and mod.is_available():
            mod.synchronize()


def _dist():
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


class _Staging:
    """The pinned host copy of a state that async saves reuse (TesseraWriter.stage)."""
    lock = threading.Lock()
    state = None  # the staged state dict (pinned tensors), or None
    free = threading.Event()  # set while no save is writing from `state`


def release_staging():
    """Frees the pinned buffers async saves keep between saves (TesseraWriter.stage)."""
    with _Staging.lock:
        _Staging.state = None
        _Staging.free.clear()


class TesseraWriter(StorageWriter):
    """DCP StorageWriter into Tessera's hot tier `root`, as step `step`; its own stager for async_save."""

    # DCP's AsyncStager protocol: stage() returns a finished host copy (nothing to synchronise later)
    _synchronize_after_execute = False

    @property
    def should_synchronize_after_execute(self):
        return False

    def stage(self, state_dict):
        """dcp.async_save: the state copied into pinned host memory (kept for the next save of the same
        shapes); returns when the copy is complete, so training may change the state right after."""
        from torch.distributed._state_dict_utils import _copy_state_dict, _create_cpu_state_dict
        with _Staging.lock:
            staged = _Staging.state if _Staging.free.is_set() else None
            _Staging.free.clear()
            _Staging.state = None
        copied = None
        if staged is not None:
            try:
                copied = _copy_state_dict(state_dict, staged, non_blocking=True)
            except Exception:  # noqa: BLE001 - e.g. CompanionMismatch: other keys or shapes than last time
                copied = None  # stage into fresh buffers
        if copied is None:
            staged = _create_cpu_state_dict(state_dict, pin_memory=torch.cuda.is_available())
            copied = _copy_state_dict(state_dict, staged, non_blocking=True)
        _synchronize_devices()  # the copies out of device memory were asynchronous
        self._staged = copied
        return copied

    def synchronize_staging(self):
        pass

    def close(self):
        pass

    def _release_staged(self):
        """The save is over (committed or failed): its staged buffers may serve the next save."""
        staged, self._staged = getattr(self, "_staged", None), None
        if staged is not None:
            with _Staging.lock:
                _Staging.state = staged
                _Staging.free.set()

    def __init__(self, root, step, warm="", cold=""):
        super().__init__()
        if step is None or int(step) < 0:
            raise ValueError(f"TesseraWriter: step must be a non-negative integer, got {step!r}")
        self.root, self.step = os.fspath(root), int(step)
        self.warm, self.cold = warm, cold
        self._writer = None
        self._pending = []  # rank 0: its own items, saved in finish() with the metadata
        self._keep = []

    def reset(self, checkpoint_id=None):
        if checkpoint_id is not None:
            self.root, self.step = parse_resume_from(os.fspath(checkpoint_id))
        self._pending, self._keep = [], []

    @classmethod
    def validate_checkpoint_id(cls, checkpoint_id):
        try:
            parse_resume_from(os.fspath(checkpoint_id))
            return True
        except (ValueError, TypeError):
            return False

    def set_up_storage_writer(self, is_coordinator, *args, **kwargs):
        self.is_coordinator = is_coordinator
        self.rank, self.world = _dist()
        self._writer = _ckpt().Writer(self.root, self.rank, self.world)

    def storage_meta(self):
        return None

    def prepare_local_plan(self, plan):
        return plan

    def prepare_global_plan(self, plans):
        return plans

    def write_data(self, plan, planner):
        items, results, per_name, devices = [], [], {}, set()
        for wi in plan.items:
            if wi.type != WriteItemType.BYTE_IO:
                per_name[wi.index.fqn] = per_name.get(wi.index.fqn, 0) + 1
        for wi in plan.items:
            data = planner.resolve_data(wi)
            if wi.type == WriteItemType.BYTE_IO:
                raw = data.getvalue() if isinstance(data, io.BytesIO) else bytes(data)
                name = f"__bytes__/{wi.index.fqn}"
                t = torch.frombuffer(bytearray(raw), dtype=torch.uint8) if raw else None
                sd = {"name": name, "bytes": len(raw)}
                if t is not None:
                    items.append((name, t, 0, t.numel()))
                results.append(WriteResult(index=wi.index, size_in_bytes=len(raw), storage_data=sd))
                continue
            t = data.detach()
            if t.device.type != "cpu" and t.device.type not in _devices.DEVICE_TYPES:
                t = t.cpu()  # the library reads host memory and the device memory of the table's families
            elif t.device.type != "cpu":
                devices.add(t.device)
            if not t.is_contiguous():
                t = t.contiguous()
            chunk = wi.tensor_data.chunk
            full = list(wi.tensor_data.size)
            offsets, sizes = list(chunk.offsets), list(chunk.sizes)
            is_bool = t.dtype == torch.bool
            stored = t.view(torch.uint8) if is_bool else t
            if stored.dim() == 0:
                stored = stored.reshape(1)
                full, offsets, sizes = [1], [0], [1]
            rows_like = all(o == 0 for o in offsets[1:]) and sizes[1:] == full[1:] and per_name[wi.index.fqn] == 1
            name = wi.index.fqn if rows_like else f"{wi.index.fqn}#{','.join(map(str, offsets))}"
            sd = {"name": name, "row0": offsets[0] if rows_like else 0, "shape": list(stored.shape),
                  "bool": is_bool, "scalar": t.dim() == 0}
            if stored.numel() > 0:
                if rows_like:
                    items.append((name, stored, offsets[0], full[0]))
                else:
                    items.append((name, stored, 0, stored.shape[0]))
            results.append(WriteResult(index=wi.index, size_in_bytes=t.numel() * t.element_size(), storage_data=sd))
        # The library copies device memory with its runtime's synchronous copy, which need not wait for the work torch
        # queued on its streams: that work is waited for first.
        for d in devices:
            mod = _devices.module(d.type)
            if mod is not None and hasattr(mod, "synchronize"):
                mod.synchronize(d.index)
        fut = Future()
        try:
            if self.is_coordinator:
                self._pending = items  # saved in finish(), after the metadata is known
            else:
                self._writer.save(self.step, items)
                self._writer.wait()
                self._release_staged()
            fut.set_result(results)
        except Exception as e:  # noqa: BLE001 - handed to DCP, which raises it on every rank
            self._release_staged()
            fut.set_exception(e)
        return fut

    def finish(self, metadata, results):
        storage = {}
        for rs in results:
            for r in rs:
                storage[r.index] = r.storage_data
        metadata.storage_data = storage
        blob = pickle.dumps(metadata)
        meta = torch.frombuffer(bytearray(blob), dtype=torch.uint8)
        try:
            self._writer.save(self.step, self._pending + [(_META, meta, 0, meta.numel())])
            self._writer.wait()  # the manifest is committed once every rank's part is durable
        finally:
            self._pending = []
            self._release_staged()


class TesseraReader(StorageReader):
    """DCP StorageReader from Tessera's tiers: step `step`, or the newest good step when None."""

    def __init__(self, root, step=None, warm="", cold=""):
        super().__init__()
        self.root, self.warm, self.cold = os.fspath(root), warm, cold
        self.step = step
        self.storage_data = None
        self._error = None

    def reset(self, checkpoint_id=None):
        if checkpoint_id is not None:
            self.root, self.step = parse_resume_from(os.fspath(checkpoint_id))
        self.storage_data = None
        self._error = None

    @classmethod
    def validate_checkpoint_id(cls, checkpoint_id):
        return TesseraWriter.validate_checkpoint_id(checkpoint_id)

    def _resolve(self):
        hot, warm, cold = _tiers(self.root, self.warm, self.cold)
        if self.step is None:
            self.step = latest_step(hot, warm, cold)
            if self.step is None:
                raise FileNotFoundError(f"tessera checkpoint: no committed good step under {self.root}")
        else:
            _stage(hot, warm, cold, self.step)
        return hot

    def read_metadata(self, *args, **kwargs):
        """DCP's metadata of the step. A failure (a damaged manifest or shard, a missing step) is kept and
        raised by set_up_storage_reader: DCP (torch 2.11) swallows read_metadata's exceptions and then fails
        with "metadata is None", which would lose the message naming the file."""
        try:
            return self._read_metadata()
        except Exception as e:  # noqa: BLE001 - re-raised in set_up_storage_reader
            self._error = e
            md = Metadata(state_dict_metadata={})
            md.storage_data = {}
            return md

    def _read_metadata(self):
        hot = self._resolve()
        c = _ckpt()
        _, _, _, tensors = c.describe(hot, self.step)
        names = {t[0]: t for t in tensors}
        if _META in names:
            buf = torch.empty(names[_META][2][0], dtype=torch.uint8)
            c.restore(hot, self.step, _META, buf, 0, -1)
            md = pickle.loads(buf.numpy().tobytes())
        else:
            md = self._metadata_from_manifest(tensors)
        try:  # tell the other ranks which step the coordinator resolved (set_up_storage_reader)
            from torch.distributed.checkpoint.metadata import StorageMeta
            md.storage_meta = StorageMeta(checkpoint_id=f"{self.root}/step-{self.step:010d}")
        except (ImportError, TypeError):
            pass
        return md

    @staticmethod
    def _metadata_from_manifest(tensors):
        """A step without DCP metadata (tessera ckpt import): one whole-tensor chunk per Tessera tensor."""
        sd_md, storage = {}, {}
        for name, dtype, shape, _ in tensors:
            dt = _DTYPES[dtype]
            props = TensorProperties(dtype=dt)
            size = torch.Size(shape)
            sd_md[name] = TensorStorageMetadata(properties=props, size=size,
                                                chunks=[ChunkStorageMetadata(offsets=torch.Size([0] * len(shape)),
                                                                             sizes=size)])
            storage[MetadataIndex(fqn=name, offset=torch.Size([0] * len(shape)), index=0)] = {
                "name": name, "row0": 0, "shape": list(shape) if shape else [1], "bool": False,
                "scalar": len(shape) == 0}
        md = Metadata(state_dict_metadata=sd_md)
        md.storage_data = storage
        return md

    def set_up_storage_reader(self, metadata, is_coordinator, *args, **kwargs):
        if self._error is not None:
            raise self._error
        self.storage_data = metadata.storage_data
        sm = getattr(metadata, "storage_meta", None)
        if self.step is None and sm is not None and getattr(sm, "checkpoint_id", None):
            self.step = parse_resume_from(os.fspath(sm.checkpoint_id))[1]
        self._resolve()

    def prepare_local_plan(self, plan):
        return plan

    def prepare_global_plan(self, plans):
        return plans

    def _find(self, index):
        sd = self.storage_data.get(index)
        if sd is None:  # an index written with a different `index` field
            for k, v in self.storage_data.items():
                if k.fqn == index.fqn and tuple(k.offset or ()) == tuple(index.offset or ()):
                    return v
            raise KeyError(f"tessera checkpoint step {self.step}: no stored data for {index.fqn} at {index.offset}")
        return sd

    # Bytes of temporary (staging) buffers read per restore call: bounds the extra memory of a load.
    _BATCH_BYTES = 512 << 20

    def read_data(self, plan, planner):
        """Reads the plan's items in batches (one restore call each: one manifest check, pieces read in
        parallel). A CPU target whose stored rows are contiguous in it is read straight into; a CUDA one is
        read into pinned host memory and copied up asynchronously; anything else (a narrowed column range, a
        bool tensor) through a temporary, then narrowed and copied."""
        c = _ckpt()
        fut = Future()
        pending, staged = [], [0]
        cuda_devices = set()  # devices with asynchronous copies from pinned staging in flight

        def flush():
            if not pending:
                return
            c.restore_many(self.root, self.step, [(p["name"], p["src"], p["row0"], p["rows"]) for p in pending])
            for p in pending:
                req, src, target = p["req"], p["src"], p["target"]
                if target is None:  # BYTE_IO
                    planner.load_bytes(req, io.BytesIO(src.numpy().tobytes()))
                    continue
                if p["copy"]:
                    if p["bool"]:
                        src = src.view(torch.bool)
                    for d in range(1, len(p["lens"])):
                        src = src.narrow(d, p["offs"][d], p["lens"][d])
                    nb = target.device.type == "cuda" and src.is_pinned()
                    target.copy_(src.reshape(target.shape), non_blocking=nb)
                    if nb:
                        cuda_devices.add(target.device)
                planner.commit_tensor(req, target)
            pending.clear()
            staged[0] = 0

        try:
            for req in plan.items:
                sd = self._find(req.storage_index)
                if req.type == LoadItemType.BYTE_IO:
                    n = sd["bytes"]
                    if not n:
                        planner.load_bytes(req, io.BytesIO(b""))
                        continue
                    pending.append({"req": req, "name": sd["name"], "src": torch.empty(n, dtype=torch.uint8),
                                    "row0": 0, "rows": -1, "target": None})
                    staged[0] += n
                else:
                    target = planner.resolve_tensor(req).detach()
                    if target.numel() == 0:
                        planner.commit_tensor(req, target)
                        continue
                    offs = list(req.storage_offsets) or [0]
                    lens = list(req.lengths) or [1]
                    shape = list(sd["shape"])
                    # rows [row0 + offs[0], + lens[0]) of the stored tensor, all other dims; then narrowed
                    rows = [lens[0]] + shape[1:]
                    whole_rows = all(offs[d] == 0 and lens[d] == shape[d] for d in range(1, len(lens)))
                    direct = (target.device.type == "cpu" and not sd["bool"] and whole_rows and target.is_contiguous()
                              and target.numel() == math.prod(rows))
                    if direct:
                        src = target.view(rows)
                    else:
                        dt = torch.uint8 if sd["bool"] else target.dtype
                        pin = target.device.type == "cuda" and torch.cuda.is_available()
                        src = torch.empty(rows, dtype=dt, pin_memory=pin)
                        staged[0] += src.numel() * src.element_size()
                    pending.append({"req": req, "name": sd["name"], "src": src, "row0": sd["row0"] + offs[0],
                                    "rows": lens[0], "target": target, "copy": not direct, "bool": sd["bool"],
                                    "offs": offs, "lens": lens})
                if staged[0] >= self._BATCH_BYTES:
                    flush()
            flush()
            for d in cuda_devices:  # the pinned sources may be reused once their copies are done
                torch.cuda.current_stream(d).synchronize()
            fut.set_result(None)
        except Exception as e:  # noqa: BLE001 - DCP raises it
            fut.set_exception(e)
        return fut


def resume(state_dict, root=None, warm="", cold=""):
    """Loads `state_dict` in place from TESSERA_RESUME_FROM (set by the daemon: the newest committed good
    step) and returns that step; returns None on a fresh start (variable unset). If that step fails to load
    (damaged since), falls back to the newest older good step; raises RuntimeError if none loads (the
    variable names a committed step, so starting afresh would lose work). Collective under a process group."""
    value = os.environ.get("TESSERA_RESUME_FROM", "")
    if not value:
        return None
    from torch.distributed import checkpoint as dcp
    from torch.distributed.checkpoint.api import CheckpointException  # a BaseException, not an Exception

    r_root, step = parse_resume_from(value)
    root = root or r_root
    tried = []
    while step is not None:
        try:
            dcp.load(state_dict, storage_reader=TesseraReader(root, step, warm, cold))
            return step
        except (Exception, CheckpointException) as e:  # noqa: BLE001 - any failure of this step: try the one before
            first = str(e).strip().splitlines()[-1] if str(e).strip() else type(e).__name__
            print(f"tessera checkpoint: step {step} failed to load ({first}); trying the previous good step", flush=True)
            tried.append(f"{step}: {first}")
            step = latest_step(root, warm, cold, below=step)
    # TESSERA_RESUME_FROM names a committed step, so a fresh start here would silently throw work away.
    raise RuntimeError(f"tessera checkpoint: TESSERA_RESUME_FROM={value}: no good step under {root} loads "
                       f"(tried {'; '.join(tried) or 'none'}); unset it to start from scratch")
