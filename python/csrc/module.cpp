// python/csrc/module.cpp — the bindings of tessera._C: the backend class (backend.cpp), the checkpoint half
// (ckpt.cpp), the unique id and version, and the dtype / reduce-op maps (maps.hpp) for tests/torch/maps_test.py.
#include <tessera/tessera.h>
#include <torch/csrc/utils/pybind.h>
#include <torch/extension.h>

#include "check.hpp"
#include "crash_trace.hpp"
#include "maps.hpp"

namespace tessera_torch {
void BindBackend(pybind11::module& m);     // backend.cpp
void BindCheckpoint(pybind11::module& m);  // ckpt.cpp
}  // namespace tessera_torch

PYBIND11_MODULE(_C, m) {
  m.doc() = "Tessera's torch.distributed backend (see tessera.torch)";
  py::module::import("torch.distributed");
  tessera_torch::BindBackend(m);
  m.def("unique_id", []() {
    tsrUniqueId id;
    const tsrResult_t r = tsrGetUniqueId(&id);
    TSR_CHECK(r == tsrSuccess, "tessera: tsrGetUniqueId failed: ", tsrGetLastError(nullptr));
    return py::bytes(id.internal, sizeof(id.internal));
  });
#ifdef TESSERA_TORCH_CUDA
  m.attr("cuda_build") = true;  // this tessera._C serves CUDA tensors (the setup found torch's CUDA and nvcc)
#else
  m.attr("cuda_build") = false;
#endif
  tessera_torch::BindCheckpoint(m);
  tessera_torch::InstallCrashTrace();
  m.def("version", []() {
    int v = 0;
    tsrGetVersion(&v);
    return v;
  });
  // The maps alone (tests/torch/maps_test.py): Tessera's type / reduce op as its C API's enum value.
  m.def(
      "_type_of", [](at::ScalarType dtype) { return static_cast<int>(tessera_torch::TypeOf(dtype, "_type_of")); },
      py::arg("dtype"));
  m.def(
      "_redop_of",
      [](int op, at::ScalarType dtype) {  // op: int(torch.distributed.ReduceOp.RedOpType.X)
        return static_cast<int>(tessera_torch::RedOpOf(static_cast<c10d::ReduceOp::RedOpType>(op), dtype, "_redop_of"));
      },
      py::arg("op"), py::arg("dtype"));
}
