// python/csrc/module.cpp — the bindings of tessera._C: the backend class (backend.hpp), the checkpoint half
// (ckpt.cpp), the unique id and version, and the dtype / reduce-op maps (maps.hpp) for tests/torch/maps_test.py.
#include <tessera/tessera.h>
#include <torch/csrc/utils/pybind.h>
#include <torch/extension.h>

#include <atomic>
#include <chrono>
#include <cstdio>

#include "backend.hpp"
#include "check.hpp"
#include "completer.hpp"
#include "crash_trace.hpp"
#include "maps.hpp"

namespace tessera_torch {
void BindCheckpoint(pybind11::module& m);  // ckpt.cpp

void BindBackend(pybind11::module& m) {
  py::class_<Backend, c10d::Backend, c10::intrusive_ptr<Backend>>(m, "Backend")
      .def(py::init<const std::string&, int, int, int, const std::string&, const std::string&, int64_t, bool,
                    const std::string&>(),
           py::arg("unique_id"), py::arg("rank"), py::arg("size"), py::arg("island"), py::arg("vendor"),
           py::arg("device"), py::arg("timeout_ms"), py::arg("hybrid") = true, py::arg("torch_device") = "",
           py::call_guard<py::gil_scoped_release>())
      .def("describe", &Backend::describe)
      .def_property_readonly("device", &Backend::device)
      // new_group (python/tessera/torch/_backend.py): a member's half of a split of this group, and the half of a
      // rank outside the new group (torch calls perform_nocolor_split there, as for ProcessGroupNCCL).
      .def(
          "split_off",
          [](Backend& b, int color, int key, int64_t timeout_ms) { return b.SplitOff(color, key, timeout_ms); },
          py::arg("color"), py::arg("key"), py::arg("timeout_ms"), py::call_guard<py::gil_scoped_release>())
      .def(
          "perform_nocolor_split",
          [](Backend& b, const py::object& /*device*/) {
            py::gil_scoped_release nogil;
            (void)b.SplitOff(TSR_SPLIT_NOCOLOR, 0, b.timeoutMs());
          },
          py::arg("device"))
      .def("comm_split_count", &Backend::splitCount)
      .def_property_readonly("options", &Backend::getBackendOptions);  // split_group copies the parent's
  py::class_<Backend::Options, c10d::Backend::Options, c10::intrusive_ptr<Backend::Options>>(m, "BackendOptions")
      .def("__deepcopy__", [](const Backend::Options& o, const py::dict& /*memo*/) {
        auto c = c10::make_intrusive<Backend::Options>(o.timeout);
        c->group_name = o.group_name;
        c->group_desc = o.group_desc;
        c->global_ranks_in_group = o.global_ranks_in_group;
        return c;
      });
}

}  // namespace tessera_torch

PYBIND11_MODULE(_C, m) {
  m.doc() = "Tessera's torch.distributed backend (see tessera.torch)";
  py::module::import("torch.distributed");
  tessera_torch::BindBackend(m);
  // Every unique id starts a store and a rendezvous (tsrGetUniqueId); unique_ids_made counts this process's, so a
  // test sees that a split group made none.
  static std::atomic<int64_t> ids_made{0};
  m.def("unique_id", []() {
    tsrUniqueId id;
    const tsrResult_t r = tsrGetUniqueId(&id);
    TSR_CHECK(r == tsrSuccess, "tessera: tsrGetUniqueId failed: ", tsrGetLastError(nullptr));
    ++ids_made;
    return py::bytes(id.internal, sizeof(id.internal));
  });
  m.def("unique_ids_made", []() { return ids_made.load(); });
#ifdef TESSERA_TORCH_CUDA
  m.attr("cuda_build") = true;  // this tessera._C serves CUDA tensors (the setup found torch's CUDA and nvcc)
#else
  m.attr("cuda_build") = false;
#endif
  tessera_torch::BindCheckpoint(m);
  tessera_torch::InstallCrashTrace();
  // The completion threads finish what they hold before Python finalizes (completer.hpp).
  py::module::import("atexit").attr("register")(py::cpp_function([]() {
    constexpr int kDrainSeconds = 10;
    int left = 0;
    {
      py::gil_scoped_release nogil;
      left = tessera_torch::Completer::DrainAll(std::chrono::seconds(kDrainSeconds));
    }
    if (left > 0)
      std::fprintf(stderr,
                   "tessera: at exit, %d completion thread(s) still waited for a device call after %d s; "
                   "leaving it (its call's future never completes)\n",
                   left, kDrainSeconds);
  }));
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
