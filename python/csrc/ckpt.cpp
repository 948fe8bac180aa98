// python/csrc/ckpt.cpp — tessera._C's checkpoint half: Tessera's checkpoint library (tessera/ckpt.hpp) on
// torch tensors, for tessera.torch.checkpoint (the torch.distributed.checkpoint StorageWriter/Reader).
//
// Tensors are passed by pointer: a Save snapshots them into Tessera's host buffer (device memory is copied
// by the library itself) and returns; the step persists in the background until wait(). Errors raise
// RuntimeError with the library's message (it names the step and the file).
#include <ATen/ATen.h>
#include <c10/util/Exception.h>
#include <torch/csrc/utils/pybind.h>
#include <torch/extension.h>

#include <memory>
#include <string>
#include <tessera/ckpt.hpp>
#include <tuple>
#include <vector>

#include "check.hpp"

namespace tessera_torch {

namespace {

namespace ck = tessera::ckpt;

void Ok(const tessera::Status& s, const char* what) {
  TSR_CHECK(s.ok(), "tessera checkpoint: ", what, ": ", s.message());
}

// torch dtype -> Tessera's element type; bool is stored as uint8 (the reader converts back).
tessera::DType DTypeOf(const at::Tensor& t) {
  switch (t.scalar_type()) {
    case at::kChar:
      return ck::dtype::kInt8;
    case at::kByte:
    case at::kBool:
      return ck::dtype::kUint8;
    case at::kInt:
      return ck::dtype::kInt32;
    case at::kLong:
      return ck::dtype::kInt64;
    case at::kHalf:
      return ck::dtype::kFloat16;
    case at::kBFloat16:
      return ck::dtype::kBfloat16;
    case at::kFloat:
      return ck::dtype::kFloat32;
    case at::kDouble:
      return ck::dtype::kFloat64;
    default:
      break;
  }
  TSR_CHECK(false, "tessera checkpoint: dtype ", t.scalar_type(), " has no Tessera element type");
}

const char* DTypeName(tessera::DType d) {
  static const char* names[] = {"int8", "uint8", "int32", "int64", "float16", "bfloat16", "float32", "float64"};
  const int i = static_cast<int>(d);
  return i >= 0 && i < 8 ? names[i] : "unknown";
}

class Writer {
 public:
  Writer(const std::string& root, int rank, int world) {
    auto w = ck::CheckpointWriter::Open(root, rank, world);
    Ok(w.status(), "opening the writer");
    w_ = std::move(w).value();
  }
  // items: (name, tensor, row_offset, global_rows); global_rows < 0: replicated (this rank stores all).
  void Save(int64_t step, const std::vector<std::tuple<std::string, at::Tensor, int64_t, int64_t>>& items) {
    std::vector<ck::TensorView> views;
    views.reserve(items.size());
    for (const auto& [name, t, row_offset, global_rows] : items) {
      TSR_CHECK(t.is_contiguous(), "tessera checkpoint: tensor ", name, " is not contiguous");
      ck::TensorView v;
      v.name = name;
      v.dtype = DTypeOf(t);
      v.shape.assign(t.sizes().begin(), t.sizes().end());
      v.data = t.data_ptr();
      if (global_rows >= 0) {
        v.sharding = ck::Sharding::kRowSharded;
        v.row_offset = row_offset;
        v.global_rows = global_rows;
      }
      views.push_back(std::move(v));
    }
    pybind11::gil_scoped_release nogil;
    Ok(w_->Save(step, views), "save");
  }
  void Wait() {
    pybind11::gil_scoped_release nogil;
    Ok(w_->Wait(), "wait");
  }
  double LastSnapshotSeconds() const { return w_->LastSnapshotSeconds(); }

 private:
  std::unique_ptr<ck::CheckpointWriter> w_;
};

// (step, world, dir, [(name, dtype, shape, row_sharded)])
pybind11::tuple Describe(const std::string& root, int64_t step) {
  auto info = ck::Describe(root, step);
  Ok(info.status(), "describe");
  pybind11::list tensors;
  for (const auto& t : info->tensors)
    tensors.append(pybind11::make_tuple(t.name, DTypeName(t.dtype), t.shape, t.sharding == ck::Sharding::kRowSharded));
  return pybind11::make_tuple(info->step, info->world, info->dir, tensors);
}

// The slot that fills `out` (contiguous, CPU or CUDA) with rows [row_begin, row_begin + rows) of `name`.
ck::TensorSlot SlotFor(const std::string& name, const at::Tensor& out, int64_t row_begin, int64_t rows) {
  TSR_CHECK(out.is_contiguous(), "tessera checkpoint: restore target for ", name, " is not contiguous");
  ck::TensorSlot slot;
  slot.name = name;
  slot.data = out.data_ptr();
  slot.bytes = static_cast<size_t>(out.numel()) * out.element_size();
  slot.row_begin = row_begin;
  slot.rows = rows;
  return slot;
}

// Fills `out` with rows [row_begin, row_begin + rows) of tensor `name` (SlotFor).
void Restore(const std::string& root, int64_t step, const std::string& name, at::Tensor out, int64_t row_begin,
             int64_t rows) {
  ck::TensorSlot slot = SlotFor(name, out, row_begin, rows);
  pybind11::gil_scoped_release nogil;
  Ok(ck::Restore(root, step, {slot}), "restore");
}

// Many tensors in one call (one manifest read and check, the pieces read in parallel): `items` =
// [(name, out, row_begin, rows)], each as in Restore. On a checksum failure nothing is trusted.
void RestoreMany(const std::string& root, int64_t step, const pybind11::list& items) {
  std::vector<ck::TensorSlot> slots;
  std::vector<at::Tensor> keep;  // the tensors stay alive while the GIL is released
  for (const auto& h : items) {
    auto t = h.cast<pybind11::tuple>();
    TSR_CHECK(t.size() == 4, "tessera checkpoint: restore_many items are (name, tensor, row_begin, rows)");
    keep.push_back(t[1].cast<at::Tensor>());
    slots.push_back(SlotFor(t[0].cast<std::string>(), keep.back(), t[2].cast<int64_t>(), t[3].cast<int64_t>()));
  }
  pybind11::gil_scoped_release nogil;
  Ok(ck::Restore(root, step, slots), "restore");
}

// (step or -1, warnings)
pybind11::tuple Latest(const std::string& root) {
  auto l = ck::Latest(root);
  if (!l.ok()) {
    if (l.status().code() == tessera::Code::kNotFound) return pybind11::make_tuple(-1, std::vector<std::string>{});
    Ok(l.status(), "latest");
  }
  return pybind11::make_tuple(l->step, l->warnings);
}

void Verify(const std::string& root, int64_t step) { Ok(ck::Verify(root, step), "verify"); }

std::vector<int64_t> Steps(const std::string& root) {
  auto s = ck::ListSteps(root);
  Ok(s.status(), "list");
  return *s;
}

ck::TierConfig Tiers(const std::string& hot, const std::string& warm, const std::string& cold) {
  ck::TierConfig base;
  base.hot = hot;
  base.warm = warm;
  base.cold = cold;
  return ck::TierConfig::FromEnv(base);
}

// [(step, [tier names])] over every tier.
std::vector<std::pair<int64_t, std::vector<std::string>>> ListAll(const std::string& hot, const std::string& warm,
                                                                  const std::string& cold) {
  auto all = ck::ListAll(Tiers(hot, warm, cold));
  Ok(all.status(), "listing the tiers");
  std::vector<std::pair<int64_t, std::vector<std::string>>> out;
  for (const auto& loc : *all) {
    std::vector<std::string> names;
    for (auto t : loc.tiers) names.push_back(ck::TierName(t));
    out.emplace_back(loc.step, names);
  }
  return out;
}

void Stage(const std::string& hot, const std::string& warm, const std::string& cold, int64_t step) {
  const auto tiers = Tiers(hot, warm, cold);
  pybind11::gil_scoped_release nogil;
  Ok(ck::Stage(tiers, step), "staging the step back to the hot tier");
}

void Demote(const std::string& hot, const std::string& warm, const std::string& cold, int64_t step,
            const std::string& to) {
  TSR_CHECK(to == "warm" || to == "cold", "tessera checkpoint: demote to 'warm' or 'cold', not '", to, "'");
  const auto tiers = Tiers(hot, warm, cold);
  pybind11::gil_scoped_release nogil;
  Ok(ck::Demote(tiers, step, to == "warm" ? ck::Tier::kWarm : ck::Tier::kCold, /*delete_source=*/true), "demote");
}

}  // namespace

void BindCheckpoint(pybind11::module& m) {
  auto c = m.def_submodule("ckpt", "Tessera's checkpoint library on torch tensors");
  pybind11::class_<Writer>(c, "Writer")
      .def(pybind11::init<const std::string&, int, int>(), pybind11::arg("root"), pybind11::arg("rank"),
           pybind11::arg("world"))
      .def("save", &Writer::Save)
      .def("wait", &Writer::Wait)
      .def("last_snapshot_seconds", &Writer::LastSnapshotSeconds);
  c.def("describe", &Describe);
  c.def("restore", &Restore);
  c.def("restore_many", &RestoreMany);
  c.def("latest", &Latest);
  c.def("verify", &Verify);
  c.def("steps", &Steps);
  c.def("list_all", &ListAll);
  c.def("stage", &Stage);
  c.def("demote", &Demote);
}

}  // namespace tessera_torch
