// A framework-like consumer of the installed libtessera: the C API (version, a one-rank communicator, an
// allreduce on host memory, the C checkpoint API), the header-only C++ wrapper of the C API
// (tessera/comm.hpp) and the C++ checkpoint API with Status. Prints "ok" and
// exits 0 when every check holds; otherwise names the failed check and exits 1.
#include <tessera/ckpt.h>
#include <tessera/tessera.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <tessera/ckpt.hpp>
#include <tessera/comm.hpp>
#include <tessera/status.hpp>
#include <utility>
#include <vector>

namespace {
int failures = 0;
void Check(bool ok, const std::string& what) {
  if (!ok) {
    std::fprintf(stderr, "consumer: FAILED: %s\n", what.c_str());
    ++failures;
  }
}
}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: consumer SCRATCH_DIR\n");
    return 2;
  }
  const std::string dir = argv[1];

  int version = 0;
  Check(tsrGetVersion(&version) == tsrSuccess && version == TESSERA_VERSION_CODE,
        "tsrGetVersion = TESSERA_VERSION_CODE");

  // A world of one rank through the framework path (unique id, then InitRank); allreduce of host memory.
  tsrUniqueId id;
  tsrComm_t comm = nullptr;
  Check(tsrGetUniqueId(&id) == tsrSuccess, std::string("tsrGetUniqueId: ") + tsrGetLastError(nullptr));
  Check(tsrCommInitRank(&comm, 1, id, 0, nullptr) == tsrSuccess,
        std::string("tsrCommInitRank: ") + tsrGetLastError(nullptr));
  if (comm != nullptr) {
    std::vector<float> x{1.5f, -2.0f, 3.25f};
    Check(tsrAllReduce(x.data(), x.data(), x.size(), tsrFloat32, tsrSum, comm, nullptr) == tsrSuccess,
          std::string("tsrAllReduce: ") + tsrGetLastError(comm));
    Check(x[0] == 1.5f && x[1] == -2.0f && x[2] == 3.25f, "allreduce of one rank is the identity");
    int size = 0;
    Check(tsrCommSize(comm, &size) == tsrSuccess && size == 1, "tsrCommSize = 1");
    Check(tsrCommDestroy(comm) == tsrSuccess, "tsrCommDestroy");
  }

  // The same through the C++ wrapper: RAII, Status with the C API's message, move-only ownership.
  {
    auto uid = tessera::Communicator::UniqueId();
    Check(uid.ok(), "Communicator::UniqueId: " + uid.status().ToString());
    if (uid.ok()) {
      auto made = tessera::Communicator::InitRank(1, *uid, 0);
      Check(made.ok(), "Communicator::InitRank: " + made.status().ToString());
      if (made.ok()) {
        tessera::Communicator c = std::move(made).value();
        Check(c.rank() == 0 && c.size() == 1 && c.get() != nullptr, "Communicator rank 0 of 1");
        std::vector<double> y{0.5, 4.0};
        tessera::Status s = c.AllReduce(y.data(), y.data(), y.size(), tsrFloat64, tsrMax);
        Check(s.ok() && y[0] == 0.5 && y[1] == 4.0, "Communicator::AllReduce: " + s.ToString());
        s = c.AllReduce(y.data(), y.data(), y.size(), static_cast<tsrDataType_t>(99), tsrSum);
        Check(s.code() == tessera::Code::kInvalidArgument && s.message().find("99") != std::string::npos,
              "a bad type is InvalidArgument naming it: " + s.ToString());
        tessera::Communicator moved = std::move(c);
        Check(c.get() == nullptr && moved.get() != nullptr, "a moved-from Communicator owns nothing");
      }
    }
  }

  // The C++ checkpoint API: save a step, find it, restore it.
  namespace ck = tessera::ckpt;
  std::vector<float> w{1, 2, 3, 4, 5, 6};
  auto writer = ck::CheckpointWriter::Open(dir + "/cpp", 0, 1);
  Check(writer.ok(), "CheckpointWriter::Open: " + writer.status().ToString());
  if (writer.ok()) {
    ck::TensorView t{"w", ck::dtype::kFloat32, {2, 3}, w.data()};
    tessera::Status s = (*writer)->Save(7, {t});
    Check(s.ok(), "Save: " + s.ToString());
    s = (*writer)->Wait();
    Check(s.ok(), "Wait: " + s.ToString());
    auto latest = ck::Latest(dir + "/cpp");
    Check(latest.ok() && latest->step == 7, "Latest = 7: " + latest.status().ToString());
    std::vector<float> back(6, 0);
    s = ck::Restore(dir + "/cpp", 7, {ck::TensorSlot{"w", back.data(), back.size() * sizeof(float)}});
    Check(s.ok() && back == w, "Restore gives the saved values: " + s.ToString());
  }
  auto missing = ck::Latest(dir + "/nothing-here");
  Check(!missing.ok() && missing.status().code() == tessera::Code::kNotFound, "Latest of an empty root is NotFound");

  // The C checkpoint API.
  tsrCkptWriter_t cw = nullptr;
  Check(tsrCkptWriterOpen((dir + "/c").c_str(), 0, 1, &cw) == tsrSuccess,
        std::string("tsrCkptWriterOpen: ") + tsrCkptGetLastError());
  if (cw != nullptr) {
    Check(tsrCkptWriterClose(cw) == tsrSuccess, "tsrCkptWriterClose");
  }

  if (failures != 0) return 1;
  std::printf("ok\n");
  return 0;
}
