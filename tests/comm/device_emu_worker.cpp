// tests/comm/device_emu_worker: one rank of a job that runs the device bridge (the engine's device mode,
// Comm::Hierarchical with a DeviceOps) on an EMULATED device, so that the code a GPU rank runs — ring
// Reserve/Publish and Claim/Consume, pieces in flight, padding, results sent as their folds finish —
// is tested on every CI machine, under the sanitizers too, without a GPU.
//
// The emulated device keeps "device memory" in host memory and runs the two queues of DeviceOps the way
// a GPU would, only more adversarially:
//   * the send queue (device -> ring copies) runs each copy as soon as it is issued — unless a
//     SendAfterFolds gate is ahead of it — so a copy that should have waited for folds reads stale data;
//   * the fold queue (ring -> device copies, folds, finalizes) runs one operation per query, so the
//     engine sees work "in flight" and its not-yet-done paths run.
//
// Allreduce and reduce-scatter of every floating type and op, and broadcast (every root) and allgather of floating and
// integer types, in and out of place; results checked against a reference and bit-identical on every rank.
//
//   device_emu_worker [--sizes 0,1,...] [--piece BYTES] [--emulate all|even] [--no-gate] [--relay BYTES]
// --emulate even: only even ranks use the emulated device; odd ranks take the host path (a hybrid job).
// --no-gate: SendAfterFolds does nothing — a planted bug the test expects to be caught.
// --quit-rank R: rank R leaves right after joining (_exit(0), its sockets closed by the kernel), to see the
// others fail naming it instead of waiting for TESSERA_TIMEOUT.
// --relay BYTES: the emulated ranks put their TCP links to other islands (TESSERA_BRIDGE=tcp) behind
// TcpRelays with rings of BYTES, as a GPU rank with TESSERA_DEVICE_BRIDGE=device does: the device bridge over TCP.
// Prints "OK rank R: N cases" or "FAIL rank R: why" (exit 1).
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <list>
#include <memory>
#include <string>
#include <vector>

#include "comm/comm.hpp"
#include "comm/engine.hpp"
#include "comm/reduce/reduce.hpp"
#include "reference.hpp"

namespace tessera::comm {

// Test access to the communicator's internals (a friend of Comm).
struct CommTestAccess {
  static Status Reduce(Comm& c, CollKind kind, const void* send, void* recv, size_t count, DType dt, RedOp op,
                       DeviceOps* dev) {
    Status s = c.Hierarchical(kind, send, recv, count, dt, op, 0, dev);
    ++c.seq_;
    return s;
  }
  // What a GPU rank reserves at submission (Comm::DeviceScratchBytes): the emulated device gets exactly that.
  static size_t ScratchBytes(const Comm& c, CollKind kind, size_t count, DType dt) {
    return c.DeviceScratchBytes(kind, count, dt);
  }
  // What SetUpChannels does for a GPU rank of the device bridge: its TCP links to other islands behind
  // TcpRelays (host rings of `ring_bytes`). Returns how many links it relayed.
  static Result<int> RelayTcpLinks(Comm& c, size_t ring_bytes) { return c.RelayBridgeLinks(ring_bytes); }
  static Status Select(Comm& c, CollKind kind, const void* send, void* recv, size_t count, DType dt, int root,
                       DeviceOps* dev) {
    Status s = c.Hierarchical(kind, send, recv, count, dt, RedOp::kSum, root, dev);
    ++c.seq_;
    return s;
  }
};

class EmulatedDevice final : public DeviceOps {
 public:
  EmulatedDevice(size_t piece, bool gate) : piece_(piece), gate_(gate) {}

  // Scratch is one reservation per call, as on a GPU rank (DeviceBridgeRank reserves it at submission): a call that
  // needs more than Comm::DeviceScratchBytes said fails.
  void Reserve(size_t bytes) { scratch_.assign(bytes, std::byte{0}); }

  Status ToHost(void* host_dst, const void* dev_src, size_t bytes) override {
    Push(kSendQueue, [=] { std::memcpy(host_dst, dev_src, bytes); });
    PumpSends();  // eagerly: the strictest order a real device could pick
    return Status::Ok();
  }
  Status CopyIn(void* dev_dst, const void* host_src, size_t bytes) override {
    std::memcpy(dev_dst, host_src, bytes);
    return Status::Ok();
  }
  Status FromHost(void* dev_dst, const void* host_src, size_t bytes) override {
    Push(kFoldQueue, [=] { std::memcpy(dev_dst, host_src, bytes); });
    return Status::Ok();
  }
  Result<void*> Mirror(const void* /*inbox_byte*/, size_t bytes) override {
    mirrors_.emplace_back(bytes);
    return static_cast<void*>(mirrors_.back().data());
  }
  Status Fold(void* acc, const void* src, size_t n, DType dtype, DType src_type, RedOp op, bool first) override {
    Push(kFoldQueue, [=] { comm::Fold(acc, src, n, dtype, src_type, op, first); });
    return Status::Ok();
  }
  Status Finalize(void* out, const void* acc, size_t n, DType dtype, RedOp op, int divisor) override {
    Push(kFoldQueue, [=] { comm::Finalize(out, acc, n, dtype, op, divisor); });
    return Status::Ok();
  }
  Status Copy(void* dev_dst, const void* dev_src, size_t bytes) override {
    Push(kFoldQueue, [=] { std::memcpy(dev_dst, dev_src, bytes); });
    return Status::Ok();
  }
  Result<Ticket> Mark(Queue q) override { return issued_[q]; }
  Result<bool> Done(Queue q, Ticket t) override {
    Step();
    return executed_[q] >= t;
  }
  Status SendAfterFolds() override {
    if (gate_) queue_[kSendQueue].push_back({nullptr, issued_[kFoldQueue]});
    if (gate_) ++issued_[kSendQueue];
    return Status::Ok();
  }
  Result<void*> Scratch(size_t bytes) override {
    if (scratch_.size() < bytes)
      return InternalError("emulated device: " + std::to_string(bytes) + " bytes of scratch needed, " +
                           std::to_string(scratch_.size()) + " reserved");
    return static_cast<void*>(scratch_.data());
  }
  size_t piece() const override { return piece_; }

 private:
  struct Op {
    std::function<void()> run;  // null: a gate
    uint64_t wait_fold;         // a gate: the fold queue must have run this many operations
  };
  void Push(Queue q, std::function<void()> fn) {
    queue_[q].push_back({std::move(fn), 0});
    ++issued_[q];
  }
  void PumpSends() {
    auto& q = queue_[kSendQueue];
    while (!q.empty()) {
      if (q.front().run == nullptr && executed_[kFoldQueue] < q.front().wait_fold) return;
      if (q.front().run) q.front().run();
      q.pop_front();
      ++executed_[kSendQueue];
    }
  }
  // The device moves on: one fold-queue operation, then every send that is free to go.
  void Step() {
    auto& f = queue_[kFoldQueue];
    if (!f.empty()) {
      f.front().run();
      f.pop_front();
      ++executed_[kFoldQueue];
    }
    PumpSends();
    if (queue_[kSendQueue].empty() && f.empty()) mirrors_.clear();  // nothing can read them any more
  }

  size_t piece_;
  bool gate_;
  std::deque<Op> queue_[2];
  uint64_t issued_[2] = {0, 0}, executed_[2] = {0, 0};
  std::list<std::vector<std::byte>> mirrors_;
  std::vector<std::byte> scratch_;
};

}  // namespace tessera::comm

namespace {

using tessera::DType;
using namespace tessera::check;

int g_rank = 0;

// The communicator, released before a failing rank exits as a program should: its relays' pump threads
// are joined (TSan reports a thread that ended unjoined at exit), and the teardown after a failure runs.
std::unique_ptr<tessera::comm::Comm>* g_comm = nullptr;

[[noreturn]] void Fail(const std::string& why) {
  std::printf("FAIL rank %d: %s\n", g_rank, why.c_str());
  std::fflush(stdout);
  if (g_comm != nullptr) g_comm->reset();
  std::exit(1);
}

}  // namespace

int main(int argc, char** argv) {
  setvbuf(stdout, nullptr, _IOLBF, 0);
  std::vector<size_t> sizes = {0, 1, 7, 4099, 100003};
  size_t piece = 16 << 10;
  std::string emulate = "all";
  bool gate = true;
  size_t relay = 0;
  int quit_rank = -1;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--no-gate") {
      gate = false;
    } else if (i + 1 < argc && a == "--sizes") {
      sizes.clear();
      for (const char* p = argv[++i]; *p;) {
        char* end;
        sizes.push_back(std::strtoull(p, &end, 10));
        p = *end == ',' ? end + 1 : end;
      }
    } else if (i + 1 < argc && a == "--piece") {
      piece = std::strtoull(argv[++i], nullptr, 10);
    } else if (i + 1 < argc && a == "--quit-rank") {
      quit_rank = std::atoi(argv[++i]);
    } else if (i + 1 < argc && a == "--relay") {
      relay = std::strtoull(argv[++i], nullptr, 10);
    } else if (i + 1 < argc && a == "--emulate") {
      emulate = argv[++i];
    } else {
      std::fprintf(stderr, "device_emu_worker: unknown argument %s\n", a.c_str());
      return 2;
    }
  }
  if (piece < 8) {
    std::fprintf(stderr, "device_emu_worker: --piece %zu must be at least 8 bytes\n", piece);
    return 2;
  }
  auto params = tessera::comm::Comm::ParamsFromEnv();
  if (!params.ok()) {
    std::printf("INITFAIL %s\n", params.status().ToString().c_str());
    return 3;
  }
  auto made = tessera::comm::Comm::Create(*params);
  if (!made.ok()) {
    std::printf("INITFAIL %s\n", made.status().ToString().c_str());
    return 3;
  }
  g_comm = &made.value();
  tessera::comm::Comm* comm = made.value().get();
  g_rank = comm->rank();
  const int world = comm->size();
  const bool emulated = emulate == "all" || (emulate == "even" && g_rank % 2 == 0);
  tessera::comm::EmulatedDevice device(piece, gate);
  int relayed = 0;
  if (emulated && relay > 0) {
    auto n = tessera::comm::CommTestAccess::RelayTcpLinks(*comm, relay);
    if (!n.ok()) Fail("relaying the TCP links: " + n.status().ToString());
    relayed = *n;
  }
  if (g_rank == quit_rank) _exit(0);
  using tessera::comm::CollKind;
  // The device for one call (null on the host path), its scratch reserved as a GPU rank reserves it.
  auto on_device = [&](CollKind kind, size_t count, DType t) -> tessera::comm::DeviceOps* {
    if (!emulated) return nullptr;
    device.Reserve(tessera::comm::CommTestAccess::ScratchBytes(*comm, kind, count, t));
    return &device;
  };
  const DType types[] = {DType::kFloat16, DType::kBfloat16, DType::kFloat32, DType::kFloat64};
  const tsrRedOp_t ops[] = {tsrSum, tsrProd, tsrMax, tsrMin, tsrAvg};
  uint64_t seed = 101;
  size_t cases = 0;
  for (size_t count : sizes)
    for (DType t : types)
      for (tsrRedOp_t op : ops)
        for (int inplace = 0; inplace < 2; ++inplace) {
          ++seed;
          const size_t esz = tessera::DTypeSize(t);
          std::vector<unsigned char> in(count * esz + 1), out(count * esz + 1, 0xAB);
          for (size_t i = 0; i < count; ++i) tessera::StoreElement(in.data(), i, t, Value(seed, g_rank, i, t, op));
          void* dst = inplace ? in.data() : out.data();
          tessera::Status s = tessera::comm::CommTestAccess::Reduce(*comm, CollKind::kAllReduce, in.data(), dst, count,
                                                                    t, static_cast<tessera::RedOp>(op),
                                                                    on_device(CollKind::kAllReduce, count, t));
          if (!s.ok()) Fail("allreduce: " + s.ToString());
          std::string what = std::string(tessera::DTypeName(t)) + " op " + std::to_string(op) + " count " +
                             std::to_string(count) + (inplace ? " in place" : "");
          for (size_t i = 0; i < count; ++i) {
            double abs_sum, ref = Reference(seed, i, t, op, world, &abs_sum);
            double got = tessera::LoadElement(dst, i, t);
            if (!WithinBound(got, ref, abs_sum, t, world))
              Fail(what + ": element " + std::to_string(i) + " = " + std::to_string(got) + ", f64 reference " +
                   std::to_string(ref));
          }
          uint64_t h = Hash(dst, count * esz);
          std::vector<uint64_t> all(world);
          if (!comm->AllGather(&h, all.data(), 1, tsrInt64, nullptr).ok()) Fail("allgather of hashes");
          for (int r = 0; r < world; ++r)
            if (all[r] != all[0]) Fail(what + ": result bits differ between rank 0 and rank " + std::to_string(r));
          ++cases;
          // Reduce-scatter of count elements per rank: my block of the reduced count*world elements.
          ++seed;
          std::vector<unsigned char> rin(count * world * esz + 1), rout(count * esz + 1, 0xAB);
          for (size_t i = 0; i < count * world; ++i)
            tessera::StoreElement(rin.data(), i, t, Value(seed, g_rank, i, t, op));
          void* rdst = inplace ? static_cast<void*>(rin.data() + g_rank * count * esz) : rout.data();
          s = tessera::comm::CommTestAccess::Reduce(*comm, CollKind::kReduceScatter, rin.data(), rdst, count, t,
                                                    static_cast<tessera::RedOp>(op),
                                                    on_device(CollKind::kReduceScatter, count, t));
          if (!s.ok()) Fail("reduce-scatter: " + s.ToString());
          for (size_t j = 0; j < count; ++j) {
            const size_t i = g_rank * count + j;
            double abs_sum, ref = Reference(seed, i, t, op, world, &abs_sum);
            double got = tessera::LoadElement(rdst, j, t);
            if (!WithinBound(got, ref, abs_sum, t, world))
              Fail("reduce-scatter " + what + ": element " + std::to_string(i) + " = " + std::to_string(got) +
                   ", f64 reference " + std::to_string(ref));
          }
          if (!inplace && rout[count * esz] != 0xAB) Fail("reduce-scatter " + what + ": wrote past the end");
          ++cases;
        }
  // Broadcast from every root, and allgather: each element has one contributor, so the result is its bits.
  const DType select_types[] = {DType::kFloat16, DType::kBfloat16, DType::kFloat32, DType::kFloat64,
                                DType::kInt8,    DType::kInt32,    DType::kInt64};
  size_t select_cases = 0;
  auto pattern = [](int rank, size_t i, size_t esz, size_t b) {
    return static_cast<unsigned char>((rank * 131 + i * 7 + b * 29 + esz) & 0xff);
  };
  for (size_t count : sizes)
    for (DType t : select_types)
      for (int inplace = 0; inplace < 2; ++inplace) {
        const size_t esz = tessera::DTypeSize(t);
        const size_t bytes = count * esz;
        std::string what =
            std::string(tessera::DTypeName(t)) + " count " + std::to_string(count) + (inplace ? " in place" : "");
        for (int root = 0; root < world; ++root) {
          std::vector<unsigned char> in(bytes + 1), out(bytes + 1, 0xAB);
          for (size_t b = 0; b < bytes; ++b) in[b] = pattern(g_rank, b / esz, esz, b);
          void* dst = inplace ? in.data() : out.data();
          tessera::Status s = tessera::comm::CommTestAccess::Select(*comm, CollKind::kBroadcast, in.data(), dst, count,
                                                                    t, root, on_device(CollKind::kBroadcast, count, t));
          if (!s.ok()) Fail("broadcast root " + std::to_string(root) + " " + what + ": " + s.ToString());
          const auto* got = static_cast<const unsigned char*>(dst);
          for (size_t b = 0; b < bytes; ++b)
            if (got[b] != pattern(root, b / esz, esz, b))
              Fail("broadcast root " + std::to_string(root) + " " + what + ": byte " + std::to_string(b) + " wrong");
          if (got[bytes] != (inplace ? in[bytes] : 0xAB)) Fail("broadcast " + what + ": wrote past the end");
          ++select_cases;
        }
        std::vector<unsigned char> in(bytes + 1), out(bytes * world + 1, 0xAB);  // + 1: never empty
        for (size_t b = 0; b < bytes; ++b) in[b] = pattern(g_rank, b / esz, esz, b);
        std::byte* dst = reinterpret_cast<std::byte*>(out.data());
        const void* src = in.data();
        if (inplace) {  // my contribution already in its block of the output
          std::memcpy(out.data() + g_rank * bytes, in.data(), bytes);
          src = out.data() + g_rank * bytes;
        }
        tessera::Status s = tessera::comm::CommTestAccess::Select(*comm, CollKind::kAllGather, src, dst, count, t, 0,
                                                                  on_device(CollKind::kAllGather, count, t));
        if (!s.ok()) Fail("allgather " + what + ": " + s.ToString());
        for (int r = 0; r < world; ++r)
          for (size_t b = 0; b < bytes; ++b)
            if (out[r * bytes + b] != pattern(r, b / esz, esz, b))
              Fail("allgather " + what + ": rank " + std::to_string(r) + "'s byte " + std::to_string(b) + " wrong");
        if (out[bytes * world] != 0xAB) Fail("allgather " + what + ": wrote past the end");
        ++select_cases;
      }
  std::printf("OK rank %d: %zu allreduce/reduce-scatter cases and %zu broadcast/allgather cases on the %s%s\n", g_rank,
              cases, select_cases, emulated ? "emulated device bridge" : "host path",
              relayed > 0 ? (", over " + std::to_string(relayed) + " relayed TCP links").c_str() : "");
  return 0;
}
