"""PyTorch's own distributed test suite, for any backend: the suite torch's test_distributed_spawn.py runs
for gloo and nccl (torch.testing._internal.distributed.distributed_test: DistributedTest._DistTestBase on
TestDistBackend), run here for BACKEND=gloo or BACKEND=tessera alike, and as BACKEND=tessera-as-gloo (below)
(scripts/torch-conformance.sh runs all three and compares them test by test).

Environment (as torch's own runner): BACKEND, WORLD_SIZE; INIT_METHOD (default env://, the suite's own
default is a file:// per test). TESSERA_CONFORMANCE_START=fork|spawn picks how the ranks of each test are
started (default fork: the suite's ~300 tests each start WORLD_SIZE processes, and a spawned process
imports torch anew, seconds each on a small machine; spawn is what torch's runner uses).

A third-party backend is admitted to the feature-gated tests through DistTestCases, as the suite intends:
tessera is a "plugin" backend that supports DDP and subgroups; "cuda"/"gpu" only where this process sees
a GPU and tessera._C was built with CUDA.
"""
import os
import sys
import tempfile

import torch
import torch.distributed as dist

BACKEND = os.environ.get("BACKEND", "")
if BACKEND not in ("gloo", "tessera", "tessera-as-gloo") or "WORLD_SIZE" not in os.environ:
    sys.exit("conformance_suite: set BACKEND=gloo|tessera|tessera-as-gloo and WORLD_SIZE=N "
             "(scripts/torch-conformance.sh does)")
# tessera-as-gloo: the suite is told it runs gloo (so the tests it gates on gloo's name run too, with gloo's
# expectations), and every process group it makes with backend "gloo" is made with "tessera" instead. A test
# that the suite skips for tessera only by name is then run on tessera all the same.
AS_GLOO = BACKEND == "tessera-as-gloo"
if AS_GLOO:
    BACKEND = os.environ["BACKEND"] = "gloo"
# The suite's barrier lives in TEMP_DIR/barrier; torch's runner makes it before importing the suite.
if "TEMP_DIR" not in os.environ:
    os.environ["TEMP_DIR"] = tempfile.mkdtemp(prefix="tsr-conformance-")
    os.makedirs(os.path.join(os.environ["TEMP_DIR"], "barrier"), exist_ok=True)

torch.backends.cuda.matmul.allow_tf32 = False

from torch.testing._internal.common_distributed import DistTestCases  # noqa: E402

if BACKEND == "tessera" or AS_GLOO:
    import tessera.torch  # noqa: F401  registers the backend (also done by torch's entry-point autoload)

    for feature in ("plugin", "ddp", "subgroup"):
        DistTestCases.backend_feature[feature].add("tessera")
    # Like NCCL's, tessera's recv names its peer: no receive from any source (the suite's own way to say so).
    DistTestCases.skip_collective["sendrecv anysource"].add("tessera")
    from tessera import _C

    if torch.cuda.is_available() and getattr(_C, "cuda_build", False):
        DistTestCases.backend_feature["cuda"].add("tessera")
        DistTestCases.backend_feature["gpu"].add("tessera")

if AS_GLOO:
    def _tessera_for_gloo(fn):
        def wrapped(*args, **kwargs):
            if kwargs.get("backend") in ("gloo", dist.Backend.GLOO):
                kwargs["backend"] = "tessera"
            elif args and fn is _init_process_group and args[0] in ("gloo", dist.Backend.GLOO):
                args = ("tessera",) + tuple(args[1:])
            return fn(*args, **kwargs)
        return wrapped

    _init_process_group = dist.init_process_group
    dist.init_process_group = _tessera_for_gloo(dist.init_process_group)
    dist.new_group = _tessera_for_gloo(dist.new_group)

from torch.testing._internal.common_utils import run_tests  # noqa: E402
from torch.testing._internal.distributed.distributed_test import DistributedTest, TestDistBackend  # noqa: E402


class TestConformance(TestDistBackend, DistributedTest._DistTestBase):
    """One class name for every backend, so that the two runs' test ids match."""

    def setUp(self):
        super().setUp()
        how = os.environ.get("TESSERA_CONFORMANCE_START", "fork")
        if how not in ("fork", "spawn"):
            raise ValueError(f"TESSERA_CONFORMANCE_START={how!r} is not fork or spawn")
        self._start_processes(torch.multiprocessing.get_context(how).Process)
        torch.backends.cudnn.flags(enabled=True, allow_tf32=False).__enter__()

    def tearDown(self):
        # The suite's MultiProcessTestCase makes each test's FileStore file (a tempfile, self.file_name) and
        # never removes it; a rank that exits with its process group alive leaves it behind too.
        super().tearDown()
        try:
            os.remove(self.file_name)
        except FileNotFoundError:
            pass


if __name__ == "__main__":
    if not dist.is_available():
        sys.exit("conformance_suite: this torch has no torch.distributed")
    run_tests()
