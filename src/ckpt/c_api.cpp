// ckpt/c_api: the C API of include/tessera/ckpt.h over the C++ API; no exception crosses it.
#include <fmt/format.h>

#include <exception>
#include <string>

#include "common/c_result.hpp"
#include "common/dtype.hpp"
#include "tessera/ckpt.h"
#include "tessera/ckpt.hpp"

struct tsrCkptWriter {
  std::unique_ptr<tessera::ckpt::CheckpointWriter> w;
};

namespace {
thread_local std::string g_last_error;

tsrResult_t Fail(const tessera::Status& s) {
  g_last_error = s.ToString();
  return tessera::ToResult(s);
}
tsrResult_t Done(const tessera::Status& s) {
  if (s.ok()) return tsrSuccess;
  return Fail(s);
}
template <typename F>
tsrResult_t Guard(F&& f) {
  try {
    return f();
  } catch (const std::exception& e) {
    return Fail(tessera::InternalError(fmt::format("unexpected exception: {}", e.what())));
  } catch (...) {
    return Fail(tessera::InternalError("unexpected exception"));
  }
}
}  // namespace

extern "C" {

tsrResult_t tsrCkptWriterOpen(const char* root, int rank, int world, tsrCkptWriter_t* writer) {
  return tsrCkptWriterOpenWithProgress(root, rank, world, nullptr, nullptr, writer);
}

tsrResult_t tsrCkptWriterOpenWithProgress(const char* root, int rank, int world, tsrCkptProgressFn fn, void* user,
                                          tsrCkptWriter_t* writer) {
  return Guard([&] {
    if (writer == nullptr || root == nullptr) return Fail(tessera::InvalidArgument("tsrCkptWriterOpen: null argument"));
    *writer = nullptr;
    tessera::ckpt::WriterOptions options;
    if (fn) options.progress = [fn, user](int64_t step, uint64_t done, uint64_t total) { fn(step, done, total, user); };
    auto w = tessera::ckpt::CheckpointWriter::Open(root, rank, world, options);
    if (!w.ok()) return Fail(w.status());
    *writer = new tsrCkptWriter{std::move(w).value()};
    return tsrSuccess;
  });
}

tsrResult_t tsrCkptSave(tsrCkptWriter_t writer, int64_t step, const tsrCkptTensor_t* tensors, size_t count) {
  return Guard([&] {
    if (writer == nullptr || (count > 0 && tensors == nullptr))
      return Fail(tessera::InvalidArgument("tsrCkptSave: null argument"));
    std::vector<tessera::ckpt::TensorView> views;
    for (size_t i = 0; i < count; ++i) {
      const auto& t = tensors[i];
      if (t.name == nullptr || t.ndim < 0 || (t.ndim > 0 && t.shape == nullptr))
        return Fail(tessera::InvalidArgument(fmt::format("tsrCkptSave: tensor #{} has a null name or shape", i)));
      // The raw ints are checked before they become Tessera enums, naming the value (as the collectives' are).
      tessera::DType dtype;
      if (tessera::Status s = tessera::FromCDataType(t.dtype, &dtype); !s.ok())
        return Fail(s.WithContext(fmt::format("tsrCkptSave: tensor #{} ('{}')", i, t.name)));
      const int sharding = static_cast<int>(t.sharding);
      if (sharding != tsrCkptReplicated && sharding != tsrCkptRowSharded)
        return Fail(tessera::InvalidArgument(
            fmt::format("tsrCkptSave: tensor #{} ('{}'): sharding {} is not a tsrCkptSharding_t (tsrCkptReplicated = "
                        "0, tsrCkptRowSharded = 1)",
                        i, t.name, sharding)));
      tessera::ckpt::TensorView v;
      v.name = t.name;
      v.dtype = dtype;
      v.shape.assign(t.shape, t.shape + t.ndim);
      v.data = t.data;
      v.sharding =
          sharding == tsrCkptRowSharded ? tessera::ckpt::Sharding::kRowSharded : tessera::ckpt::Sharding::kReplicated;
      v.row_offset = t.row_offset;
      v.global_rows = t.global_rows;
      views.push_back(std::move(v));
    }
    return Done(writer->w->Save(step, views));
  });
}

tsrResult_t tsrCkptWait(tsrCkptWriter_t writer) {
  return Guard([&] {
    if (writer == nullptr) return Fail(tessera::InvalidArgument("tsrCkptWait: null writer"));
    return Done(writer->w->Wait());
  });
}

tsrResult_t tsrCkptWriterClose(tsrCkptWriter_t writer) {
  return Guard([&] {
    if (writer == nullptr) return tsrSuccess;
    tessera::Status s = writer->w->Wait();
    delete writer;
    return Done(s);
  });
}

tsrResult_t tsrCkptLatest(const char* root, int64_t* step) {
  return Guard([&] {
    if (root == nullptr || step == nullptr) return Fail(tessera::InvalidArgument("tsrCkptLatest: null argument"));
    *step = -1;
    auto l = tessera::ckpt::Latest(root);
    if (!l.ok()) return Fail(l.status());
    *step = l->step;
    return tsrSuccess;
  });
}

tsrResult_t tsrCkptRestore(const char* root, int64_t step, const tsrCkptSlot_t* slots, size_t count) {
  return Guard([&] {
    if (root == nullptr || (count > 0 && slots == nullptr))
      return Fail(tessera::InvalidArgument("tsrCkptRestore: null argument"));
    std::vector<tessera::ckpt::TensorSlot> v;
    for (size_t i = 0; i < count; ++i) {
      if (slots[i].name == nullptr)
        return Fail(tessera::InvalidArgument(fmt::format("tsrCkptRestore: slot #{} has no name", i)));
      v.push_back({slots[i].name, slots[i].data, slots[i].bytes, slots[i].row_begin, slots[i].rows});
    }
    return Done(tessera::ckpt::Restore(root, step, v));
  });
}

const char* tsrCkptGetLastError(void) { return g_last_error.c_str(); }

}  // extern "C"
