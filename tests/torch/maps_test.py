"""tessera._C's dtype and reduce-op maps (python/csrc/maps.hpp) alone, without a process group: every torch dtype
the backend takes maps to the tsrDataType_t of include/tessera/tessera.h, every other dtype is refused naming it,
and every c10d reduce op maps to Tessera's for every supported dtype, with bool following ProcessGroupNCCL (SUM is
or, PRODUCT is and, AVG refused). Run by scripts/torch-check.sh (group ops); exit 0 when every check passed."""
import sys

import torch
import torch.distributed as dist

from tessera import _C
from worker_common import check, summary  # noqa: E402

# include/tessera/tessera.h: tsrDataType_t and tsrRedOp_t
INT8, UINT8, INT32, INT64, F16, BF16, F32, F64 = range(8)
SUM, PROD, MAX, MIN, AVG = range(5)
TYPES = {torch.float32: F32, torch.float16: F16, torch.bfloat16: BF16, torch.float64: F64, torch.int8: INT8,
         torch.uint8: UINT8, torch.int32: INT32, torch.int64: INT64, torch.bool: UINT8}
# refused dtypes, with the name c10 gives them in the message
REFUSED_TYPES = {torch.complex64: "ComplexFloat", torch.complex128: "ComplexDouble", torch.int16: "Short",
                 torch.uint16: "UInt16", torch.float8_e4m3fn: "Float8_e4m3fn"}
R = dist.ReduceOp.RedOpType
OPS = {R.SUM: SUM, R.PRODUCT: PROD, R.MIN: MIN, R.MAX: MAX, R.AVG: AVG, R.PREMUL_SUM: SUM}
BOOL_OPS = {R.SUM: MAX, R.PRODUCT: MIN, R.MIN: MIN, R.MAX: MAX, R.PREMUL_SUM: SUM}
REFUSED_OPS = {R.BAND: "BAND", R.BOR: "BOR", R.BXOR: "BXOR"}


def raises(fn, *needles):
    try:
        fn()
    except RuntimeError as e:
        return all(n in str(e) for n in needles), str(e)
    return False, "no error"


for dtype, want in TYPES.items():
    got = _C._type_of(dtype)
    check(got == want, f"_type_of({dtype}) = {got}, expected {want}")
for dtype, name in REFUSED_TYPES.items():
    ok, msg = raises(lambda: _C._type_of(dtype), f"does not support dtype {name}", "supported: float32")
    check(ok, f"_type_of({dtype}) should be refused naming the dtype: {msg}")
for dtype in TYPES:
    table = BOOL_OPS if dtype == torch.bool else OPS
    for op, want in table.items():
        got = _C._redop_of(int(op), dtype)
        check(got == want, f"_redop_of({op}, {dtype}) = {got}, expected {want}")
    for op, name in REFUSED_OPS.items():
        ok, msg = raises(lambda: _C._redop_of(int(op), dtype), f"does not support reduce op {name}")
        check(ok, f"_redop_of({op}, {dtype}) should be refused naming {name}: {msg}")
ok, msg = raises(lambda: _C._redop_of(int(R.AVG), torch.bool), "AVG is not defined for bool")
check(ok, f"AVG on bool should be refused: {msg}")

sys.exit(summary("maps"))
