// comm/ccl/ccl_hccl: the object of HCCL's call shape. Tessera calls every CCL through CclLibrary on its own types;
// this object translates each call into HCCL's (hccl.h, as vendored by Ascend/pytorch third_party/hccl/inc/hccl at
// commit c4840e3c; tests/shims/hccl_abi.h cites each line):
//   - numbers: DType / RedOp -> the row's HcclDataType / HcclReduceOp; none (avg) -> HCCL_E_NOT_SUPPORT (5,
//     types:28) without calling HCCL (CclLibrary::SupportsReduce says so first);
//   - counts: size_t -> uint64_t (hccl:131 ff.);
//   - ids: the 4,108-byte root info by pointer (HcclGetRootInfo hccl:67, HcclCommInitRootInfo hccl:79);
//   - broadcast: HcclBroadcast has one buffer (hccl:146): out of place, the root first copies send -> recv on
//     the stream with aclrtMemcpyAsync (ACL rt:1346, ACL_MEMCPY_DEVICE_TO_DEVICE = 3, rt:115-124; found through
//     libhccl's own dependency on libascendcl), then broadcasts recv;
//   - no abort (hccl.h has none; nor has CANN 9's hcomm, whose HcclCommSuspend/Resume are reserved for on-chip
//     memory faults). HcclCommDestroy may be called from another thread: while a thread is inside a call on the
//     communicator it returns HCCL_E_AGAIN and destroys nothing; otherwise it destroys the communicator and the
//     operations it still runs end at once with an error ("Terminating operation due to external request") —
//     CANN's HcclCommDestroy page (canncommercial/800 apiref hcclcpp_07_0010; the same in 8.5.0), which
//     tests/shims/hccl_shim.cpp models and cites. So a bounded drain, then destroy: the object records an ACL event
//     (aclrtCreateEvent rt:927, aclrtRecordEvent rt:983) on each stream after the communicator's latest call there
//     (a group's calls at its GroupEnd); CommAbort / CommDestroy first wait for those events (aclrtQueryEventStatus
//     rt:1024, polled) within the communicator's timeout, so that work which can finish does, then destroy it,
//     retrying HCCL_E_AGAIN until that deadline. Operations still running then (a peer died or never came) are
//     ended by the destroy, and the end says so; a communicator still in use at the deadline is left
//     undestroyed, and the end says that;
//   - no version call in the subset used: version 0;
//   - HcclGetCommAsyncError (hccl:388) for CommGetAsyncError; groups from libhcomm.so (torch_npu HcclCompile.h).
// Each loaded file is its own object holding its own symbols: any number of HCCL files per process.
#include <fmt/format.h>

#include <cstdint>
#include <cstring>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "comm/ccl/ccl_shapes.hpp"
#include "common/log.hpp"

namespace tessera::comm::internal {
namespace {

constexpr int kHcclSuccess = 0;              // HCCL_SUCCESS, types:24
constexpr int kHcclPara = 1;                 // HCCL_E_PARA, types:25
constexpr int kHcclNotSupport = 5;           // HCCL_E_NOT_SUPPORT, types:29
constexpr int kHcclAgain = 20;               // HCCL_E_AGAIN, types:44
constexpr int kAclMemcpyDeviceToDevice = 3;  // ACL_MEMCPY_DEVICE_TO_DEVICE, acl_rt.h rt:115-124
constexpr int kAclEventComplete = 1;         // ACL_EVENT_RECORDED_STATUS_COMPLETE, acl_rt.h (aclrtEventRecordedStatus)

// HCCL's symbol for an NCCL-named call: "GetUniqueId" -> "HcclGetRootInfo", "AllReduce" -> "HcclAllReduce".
std::string HcclSymbol(const char* what) {
  const std::string w = what;
  if (w == "GetUniqueId") return "HcclGetRootInfo";
  if (w == "CommInitRank") return "HcclCommInitRootInfo";
  if (w == "CommGetAsyncError") return "HcclGetCommAsyncError";
  if (w == "CommAbort") return "HcclCommDestroy";
  if (w == "GetVersion") return "(HCCL version: none)";
  return "Hccl" + w;
}

class HcclShape final : public CclLibrary {
 public:
  HcclShape(const CclRow& row, const Files& files) : CclLibrary(row, files) {}

  Status BindAll() {
    const dl::Library& h = files().lib;
    TSR_RETURN_IF_ERROR(Bind(GetRootInfo_, "GetRootInfo", h));
    TSR_RETURN_IF_ERROR(Bind(CommInitRootInfo_, "CommInitRootInfo", h));
    TSR_RETURN_IF_ERROR(Bind(AllReduce_, "AllReduce", h));
    TSR_RETURN_IF_ERROR(Bind(Broadcast_, "Broadcast", h));
    TSR_RETURN_IF_ERROR(Bind(ReduceScatter_, "ReduceScatter", h));
    TSR_RETURN_IF_ERROR(Bind(AllGather_, "AllGather", h));
    TSR_RETURN_IF_ERROR(Bind(GetRankId_, "GetRankId", h));
    TSR_RETURN_IF_ERROR(Bind(Send_, "Send", h));
    TSR_RETURN_IF_ERROR(Bind(Recv_, "Recv", h));
    TSR_RETURN_IF_ERROR(Bind(CommDestroy_, "CommDestroy", h));
    TSR_RETURN_IF_ERROR(Bind(GetCommAsyncError_, "GetCommAsyncError", h));
    TSR_RETURN_IF_ERROR(Bind(GetErrorString_, "GetErrorString", h));
    if (row().has_groups) {
      TSR_RETURN_IF_ERROR(Bind(GroupStart_, "GroupStart", files().group));
      TSR_RETURN_IF_ERROR(Bind(GroupEnd_, "GroupEnd", files().group));
    }
    // Searched in libhccl and the libraries it depends on (libascendcl). Optional: out-of-place broadcast needs
    // the copy; waiting before a destroy needs the events (without them a destroy does not wait, as before).
    h.BindOptional(MemcpyAsync_, "aclrtMemcpyAsync");
    h.BindOptional(CreateEvent_, "aclrtCreateEvent");
    h.BindOptional(DestroyEvent_, "aclrtDestroyEvent");
    h.BindOptional(RecordEvent_, "aclrtRecordEvent");
    h.BindOptional(QueryEventStatus_, "aclrtQueryEventStatus");
    return Status::Ok();
  }

  std::string Symbol(const char* what) const override { return HcclSymbol(what); }
  Status NewId(std::string* id) const override {
    id->assign(row().id_bytes, '\0');
    return Check(GetRootInfo_(id->data()), "GetUniqueId");
  }
  Status InitRank(void** comm, int nranks, const std::string& id, int rank) const override {
    if (id.size() != row().id_bytes)
      return InvalidArgument(fmt::format("a {} id has {} bytes, not {}", name(), row().id_bytes, id.size()));
    if (nranks <= 0 || rank < 0) return Check(kHcclPara, "CommInitRank");
    return Check(CommInitRootInfo_(static_cast<uint32_t>(nranks), id.data(), static_cast<uint32_t>(rank), comm),
                 "CommInitRank");
  }
  Status CommDestroy(void* comm, std::chrono::milliseconds timeout) const override { return End(comm, timeout); }
  Status CommAbort(void* comm, std::chrono::milliseconds timeout) const override { return End(comm, timeout); }
  Result_ CommGetAsyncError(void* comm, Result_* err) const override { return GetCommAsyncError_(comm, err); }

  Result_ AllReduce(const void* s, void* r, size_t n, DType t, RedOp op, void* comm, void* st) const override {
    const int ht = DataType(t), ho = Op(op);
    if (ht < 0 || ho < 0) return kHcclNotSupport;
    return Queued(AllReduce_(const_cast<void*>(s), r, n, ht, ho, comm, st), comm, st);
  }
  Result_ ReduceScatter(const void* s, void* r, size_t n, DType t, RedOp op, void* comm, void* st) const override {
    const int ht = DataType(t), ho = Op(op);
    if (ht < 0 || ho < 0) return kHcclNotSupport;
    return Queued(ReduceScatter_(const_cast<void*>(s), r, n, ht, ho, comm, st), comm, st);
  }
  Result_ AllGather(const void* s, void* r, size_t n, DType t, void* comm, void* st) const override {
    const int ht = DataType(t);
    if (ht < 0) return kHcclNotSupport;
    return Queued(AllGather_(const_cast<void*>(s), r, n, ht, comm, st), comm, st);
  }
  Result_ Broadcast(const void* s, void* r, size_t n, DType t, int root, void* comm, void* st) const override {
    const int ht = DataType(t);
    if (ht < 0 || root < 0) return ht < 0 ? kHcclNotSupport : kHcclPara;
    if (s != r && n > 0) {  // NCCL's out-of-place broadcast: sendbuff is read on the root only
      uint32_t me = 0;
      if (int e = GetRankId_(comm, &me)) return e;
      if (static_cast<int>(me) == root) {
        if (MemcpyAsync_ == nullptr) return kHcclNotSupport;
        const size_t bytes = n * DTypeSize(t);
        if (int e = MemcpyAsync_(r, bytes, s, bytes, kAclMemcpyDeviceToDevice, st)) return e;
      }
    }
    return Queued(Broadcast_(r, n, ht, static_cast<uint32_t>(root), comm, st), comm, st);
  }
  Result_ Send(const void* s, size_t n, DType t, int peer, void* comm, void* st) const override {
    const int ht = DataType(t);
    if (ht < 0) return kHcclNotSupport;
    return Queued(Send_(const_cast<void*>(s), n, ht, static_cast<uint32_t>(peer), comm, st), comm, st);
  }
  Result_ Recv(void* r, size_t n, DType t, int peer, void* comm, void* st) const override {
    const int ht = DataType(t);
    if (ht < 0) return kHcclNotSupport;
    return Queued(Recv_(r, n, ht, static_cast<uint32_t>(peer), comm, st), comm, st);
  }
  Result_ GroupStart() const override {
    if (GroupStart_ == nullptr) return kHcclNotSupport;
    const int r = GroupStart_();
    if (r == kHcclSuccess) ++Group().depth;
    return r;
  }
  Result_ GroupEnd() const override {
    if (GroupEnd_ == nullptr) return kHcclNotSupport;
    const int r = GroupEnd_();
    GroupState& g = Group();
    if (g.depth > 0 && --g.depth == 0) {  // the group's calls are queued now: mark their streams
      std::vector<std::pair<void*, void*>> calls = std::move(g.calls[this]);
      g.calls.erase(this);
      if (r == kHcclSuccess)
        for (const auto& [comm, stream] : calls) Mark(comm, stream);
    }
    return r;
  }

 private:
  // Per thread and library: the depth of open groups and the (comm, stream) of their calls, marked at GroupEnd.
  struct GroupState {
    int depth = 0;
    std::unordered_map<const HcclShape*, std::vector<std::pair<void*, void*>>> calls;
  };
  static GroupState& Group() {
    static thread_local GroupState g;
    return g;
  }
  // A stream the communicator queued work on, and the event recorded after its latest call there.
  struct Mark_ {
    void* stream;
    void* event;
  };

  // After a call that queued work on `stream` (r == success): remember it, or inside a group, at its GroupEnd.
  int Queued(int r, void* comm, void* stream) const {
    if (r != kHcclSuccess) return r;
    GroupState& g = Group();
    if (g.depth > 0)
      g.calls[this].push_back({comm, stream});
    else
      Mark(comm, stream);
    return r;
  }
  void Mark(void* comm, void* stream) const {
    if (RecordEvent_ == nullptr || CreateEvent_ == nullptr || QueryEventStatus_ == nullptr) return;
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<Mark_>& marks = marks_[comm];
    Mark_* m = nullptr;
    for (Mark_& x : marks)
      if (x.stream == stream) m = &x;
    if (m == nullptr) {
      void* ev = nullptr;
      if (CreateEvent_(&ev) != 0) ev = nullptr;  // cannot tell when it ends: End then does not wait for it
      marks.push_back({stream, ev});
      m = &marks.back();
    }
    if (m->event != nullptr && RecordEvent_(m->event, stream) != 0) {
      (void)DestroyEvent_(m->event);
      m->event = nullptr;
    }
  }

  // Waits (polling, up to `timeout`) until the communicator's queued work has run, then destroys it, retrying
  // HCCL_E_AGAIN (a thread inside a call on it) until the same deadline. Work still running at the deadline is ended
  // by the destroy (HCCL's documented behaviour); the result says so, or that the communicator stays in use.
  Status End(void* comm, std::chrono::milliseconds timeout) const {
    std::vector<Mark_> marks;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (auto it = marks_.find(comm); it != marks_.end()) {
        marks = std::move(it->second);
        marks_.erase(it);
      }
    }
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    size_t running = 0;
    for (const Mark_& m : marks) {
      if (m.event == nullptr) continue;
      for (;;) {
        int status = 0;
        if (QueryEventStatus_(m.event, &status) != 0 || status == kAclEventComplete) break;
        if (std::chrono::steady_clock::now() >= deadline) {
          ++running;
          break;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
    }
    int r = CommDestroy_(comm);
    while (r == kHcclAgain && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
      r = CommDestroy_(comm);
    }
    if (r == kHcclAgain)
      return Timeout(fmt::format(
          "{}: HcclCommDestroy still answered HCCL_E_AGAIN (a thread is inside a call on the communicator) {} ms "
          "after the communicator was ended: it is left undestroyed",
          name(), timeout.count()));
    if (r != kHcclSuccess) return Check(r, "CommDestroy");
    if (running > 0)  // its events stay: the ended operations' streams may still reach them
      return Timeout(fmt::format(
          "{}: the communicator's operations on {} stream(s) were still running {} ms after it was ended (a peer "
          "that died, hangs or never came): HcclCommDestroy ended them, and they fail on their streams",
          name(), running, timeout.count()));
    for (const Mark_& m : marks)
      if (m.event != nullptr) (void)DestroyEvent_(m.event);
    return Status::Ok();
  }

  const char* ErrorString(Result_ r) const override { return GetErrorString_ ? GetErrorString_(r) : nullptr; }

  // HCCL's signatures (hccl.h lines in tests/shims/hccl_abi.h), enums as int, handles as void*.
  int (*GetRootInfo_)(void* root_info) = nullptr;
  int (*CommInitRootInfo_)(uint32_t nranks, const void* root_info, uint32_t rank, void** comm) = nullptr;
  int (*AllReduce_)(void*, void*, uint64_t, int, int, void*, void*) = nullptr;
  int (*Broadcast_)(void*, uint64_t, int, uint32_t, void*, void*) = nullptr;
  int (*ReduceScatter_)(void*, void*, uint64_t, int, int, void*, void*) = nullptr;
  int (*AllGather_)(void*, void*, uint64_t, int, void*, void*) = nullptr;
  int (*GetRankId_)(void*, uint32_t*) = nullptr;
  int (*Send_)(void*, uint64_t, int, uint32_t, void*, void*) = nullptr;
  int (*Recv_)(void*, uint64_t, int, uint32_t, void*, void*) = nullptr;
  int (*CommDestroy_)(void*) = nullptr;
  int (*GetCommAsyncError_)(void*, int*) = nullptr;
  const char* (*GetErrorString_)(int) = nullptr;
  int (*GroupStart_)() = nullptr;
  int (*GroupEnd_)() = nullptr;
  // ACL's (acl_rt.h lines in tests/shims/acl_abi.h): aclrtMemcpyAsync(dst, destMax, src, count, kind, stream), and
  // the events with aclrtEventRecordedStatus as int.
  int (*MemcpyAsync_)(void*, size_t, const void*, size_t, int, void*) = nullptr;
  int (*CreateEvent_)(void** event) = nullptr;
  int (*DestroyEvent_)(void* event) = nullptr;
  int (*RecordEvent_)(void* event, void* stream) = nullptr;
  int (*QueryEventStatus_)(void* event, int* status) = nullptr;

  mutable std::mutex mu_;
  mutable std::unordered_map<void*, std::vector<Mark_>> marks_;  // per communicator
};

}  // namespace

Result<std::shared_ptr<CclLibrary>> LoadHcclShape(const CclRow& row, const CclLibrary::Files& files) {
  auto lib = std::make_shared<HcclShape>(row, files);
  TSR_RETURN_IF_ERROR(lib->BindAll());
  return std::shared_ptr<CclLibrary>(std::move(lib));
}

}  // namespace tessera::comm::internal
