// comm/ccl/ccl_hccl: the HCCL call shape's adapters. Tessera calls every CCL through CclLibrary's NCCL-shaped
// pointers with NCCL's numbers; these functions translate such calls into HCCL's (hccl.h, as vendored by
// Ascend/pytorch third_party/hccl/inc/hccl at commit c4840e3c; tests/shims/hccl_abi.h cites each line):
//   - numbers: NCCL's type / op value -> DType / RedOp -> the row's HcclDataType / HcclReduceOp; none (avg) ->
//     HCCL_E_NOT_SUPPORT (5, types:28) without calling HCCL (CclLibrary::SupportsReduce says so first);
//   - counts: size_t -> uint64_t (hccl:131 ff.);
//   - ids: the 4,108-byte root info by pointer (HcclGetRootInfo hccl:67, HcclCommInitRootInfo hccl:79) through
//     CclLibrary::NewId / InitRank; the 128-byte GetUniqueId / CommInitRank return HCCL_E_NOT_SUPPORT;
//   - broadcast: HcclBroadcast has one buffer (hccl:146): out of place, the root first copies send -> recv on
//     the stream with aclrtMemcpyAsync (ACL rt:1346, ACL_MEMCPY_DEVICE_TO_DEVICE = 3, rt:115-124; found through
//     libhccl's own dependency on libascendcl), then broadcasts recv;
//   - no abort (hccl.h has none): CommAbort destroys; no version call in the subset used: version 0;
//   - HcclGetCommAsyncError (hccl:388) for CommGetAsyncError; groups from libhcomm.so (torch_npu HcclCompile.h).
// The adapters are plain functions (CclLibrary holds C function pointers), so each distinct HCCL file loaded
// gets a slot of statics; a file loaded again reuses its slot.
#include <dlfcn.h>
#include <fmt/format.h>

#include <cstdint>
#include <cstring>
#include <mutex>
#include <utility>

#include "comm/ccl/ccl_adapters.hpp"

namespace tessera::comm::internal {
namespace {

constexpr int kHcclSuccess = 0;              // HCCL_SUCCESS, types:24
constexpr int kHcclNotSupport = 5;           // HCCL_E_NOT_SUPPORT, types:29
constexpr int kAclMemcpyDeviceToDevice = 3;  // ACL_MEMCPY_DEVICE_TO_DEVICE, acl_rt.h rt:115-124

// HCCL's signatures (hccl.h lines in tests/shims/hccl_abi.h), enums as int, handles as void*.
struct HcclApi {
  void* handle = nullptr;
  int (*GetRootInfo)(void* root_info) = nullptr;
  int (*CommInitRootInfo)(uint32_t nranks, const void* root_info, uint32_t rank, void** comm) = nullptr;
  int (*AllReduce)(void*, void*, uint64_t, int, int, void*, void*) = nullptr;
  int (*Broadcast)(void*, uint64_t, int, uint32_t, void*, void*) = nullptr;
  int (*ReduceScatter)(void*, void*, uint64_t, int, int, void*, void*) = nullptr;
  int (*AllGather)(void*, void*, uint64_t, int, void*, void*) = nullptr;
  int (*GetRankId)(void*, uint32_t*) = nullptr;
  int (*Send)(void*, uint64_t, int, uint32_t, void*, void*) = nullptr;
  int (*Recv)(void*, uint64_t, int, uint32_t, void*, void*) = nullptr;
  int (*CommDestroy)(void*) = nullptr;
  int (*GetCommAsyncError)(void*, int*) = nullptr;
  const char* (*GetErrorString)(int) = nullptr;
  int (*GroupStart)() = nullptr;
  int (*GroupEnd)() = nullptr;
  // aclrtMemcpyAsync(dst, destMax, src, count, kind, stream), or null: out-of-place broadcast unsupported.
  int (*MemcpyAsync)(void*, size_t, const void*, size_t, int, void*) = nullptr;
  CclTypeTable types{};
  CclOpTable ops{};
};

// NCCL's call value -> the row's HCCL number, -1 for none.
int HcclType(const HcclApi& a, int nccl) {
  for (int i = 0; i < kCclTypes; ++i)
    if (kNcclTypes[i] == nccl) return a.types[i];
  return -1;
}
int HcclOp(const HcclApi& a, int nccl) {
  for (int i = 0; i < kCclOps; ++i)
    if (kNcclOps[i] == nccl) return a.ops[i];
  return -1;
}
size_t TypeBytes(int nccl) {
  for (int i = 0; i < kCclTypes; ++i)
    if (kNcclTypes[i] == nccl) return DTypeSize(static_cast<DType>(i));
  return 0;
}

template <int S>
struct Slot {
  static inline HcclApi api;
  static int GetVersion(int* v) {
    *v = 0;
    return kHcclSuccess;
  }
  static int GetUniqueId(CclLibrary::UniqueId*) { return kHcclNotSupport; }                    // 4,108 bytes: NewId
  static int CommInitRank(void**, int, CclLibrary::UniqueId, int) { return kHcclNotSupport; }  // InitRank
  static int NewId(void* id) { return api.GetRootInfo(id); }
  static int InitRank(void** comm, int nranks, const void* id, int rank) {
    if (nranks <= 0 || rank < 0) return 1;  // HCCL_E_PARA, types:25
    return api.CommInitRootInfo(static_cast<uint32_t>(nranks), id, static_cast<uint32_t>(rank), comm);
  }
  static int CommDestroy(void* c) { return api.CommDestroy(c); }
  static int CommAbort(void* c) { return api.CommDestroy(c); }
  static int CommGetAsyncError(void* c, int* e) { return api.GetCommAsyncError(c, e); }
  static int AllReduce(const void* s, void* r, size_t n, int t, int op, void* c, void* st) {
    const int ht = HcclType(api, t), ho = HcclOp(api, op);
    if (ht < 0 || ho < 0) return kHcclNotSupport;
    return api.AllReduce(const_cast<void*>(s), r, static_cast<uint64_t>(n), ht, ho, c, st);
  }
  static int ReduceScatter(const void* s, void* r, size_t n, int t, int op, void* c, void* st) {
    const int ht = HcclType(api, t), ho = HcclOp(api, op);
    if (ht < 0 || ho < 0) return kHcclNotSupport;
    return api.ReduceScatter(const_cast<void*>(s), r, static_cast<uint64_t>(n), ht, ho, c, st);
  }
  static int AllGather(const void* s, void* r, size_t n, int t, void* c, void* st) {
    const int ht = HcclType(api, t);
    if (ht < 0) return kHcclNotSupport;
    return api.AllGather(const_cast<void*>(s), r, static_cast<uint64_t>(n), ht, c, st);
  }
  static int Broadcast(const void* s, void* r, size_t n, int t, int root, void* c, void* st) {
    const int ht = HcclType(api, t);
    if (ht < 0 || root < 0) return ht < 0 ? kHcclNotSupport : 1;
    if (s != r && n > 0) {  // NCCL's out-of-place broadcast: sendbuff is read on the root only
      uint32_t me = 0;
      if (int e = api.GetRankId(c, &me)) return e;
      if (static_cast<int>(me) == root) {
        if (api.MemcpyAsync == nullptr) return kHcclNotSupport;
        const size_t bytes = n * TypeBytes(t);
        if (int e = api.MemcpyAsync(r, bytes, s, bytes, kAclMemcpyDeviceToDevice, st)) return e;
      }
    }
    return api.Broadcast(r, static_cast<uint64_t>(n), ht, static_cast<uint32_t>(root), c, st);
  }
  static int Send(const void* s, size_t n, int t, int peer, void* c, void* st) {
    const int ht = HcclType(api, t);
    if (ht < 0) return kHcclNotSupport;
    return api.Send(const_cast<void*>(s), static_cast<uint64_t>(n), ht, static_cast<uint32_t>(peer), c, st);
  }
  static int Recv(void* r, size_t n, int t, int peer, void* c, void* st) {
    const int ht = HcclType(api, t);
    if (ht < 0) return kHcclNotSupport;
    return api.Recv(r, static_cast<uint64_t>(n), ht, static_cast<uint32_t>(peer), c, st);
  }
  static int GroupStart() { return api.GroupStart(); }
  static int GroupEnd() { return api.GroupEnd(); }
  static const char* ErrorString(int r) { return api.GetErrorString(r); }

  static void Install(CclLibrary& lib) {
    lib.GetVersion = GetVersion;
    lib.GetUniqueId = GetUniqueId;
    lib.CommInitRank = CommInitRank;
    lib.NewIdBytes = NewId;
    lib.InitRankBytes = InitRank;
    lib.CommDestroy = CommDestroy;
    lib.CommAbort = CommAbort;
    lib.CommGetAsyncError = CommGetAsyncError;
    lib.AllReduce = AllReduce;
    lib.ReduceScatter = ReduceScatter;
    lib.AllGather = AllGather;
    lib.Broadcast = Broadcast;
    lib.Send = Send;
    lib.Recv = Recv;
    lib.GroupStart = GroupStart;
    lib.GroupEnd = GroupEnd;
    lib.GetErrorString = ErrorString;
  }
};

constexpr int kSlots = 4;
std::mutex g_mu;
template <int... S>
HcclApi* SlotApi(int i, std::integer_sequence<int, S...>) {
  HcclApi* apis[] = {&Slot<S>::api...};
  return apis[i];
}
template <int... S>
void SlotInstall(int i, CclLibrary& lib, std::integer_sequence<int, S...>) {
  void (*installs[])(CclLibrary&) = {&Slot<S>::Install...};
  installs[i](lib);
}

}  // namespace

Status MissingSymbol(const std::string& row, const std::string& file, const std::string& symbol,
                     const std::string& prefix) {
  return Unsupported(
      fmt::format("'{}' ({}) has no symbol '{}': not a {} library of this shape, or the prefix '{}' is wrong "
                  "(set TESSERA_CCL_LIB to a file that has it, TESSERA_CCL_PREFIX for another prefix)",
                  file, row, symbol, row, prefix));
}

std::string HcclSymbol(const char* what) {
  const std::string w = what;
  if (w == "GetUniqueId") return "HcclGetRootInfo";
  if (w == "CommInitRank") return "HcclCommInitRootInfo";
  if (w == "CommGetAsyncError") return "HcclGetCommAsyncError";
  if (w == "CommAbort") return "HcclCommDestroy";
  if (w == "GetVersion") return "(HCCL version: none)";
  return "Hccl" + w;
}

Status BindHccl(CclLibrary& lib, void* handle, void* group_handle, const std::string& file,
                const std::string& group_file) {
  HcclApi a;
  a.handle = handle;
  a.types = lib.row().types;
  a.ops = lib.row().ops;
  const std::string prefix = lib.prefix();  // "Hccl"
  auto bind = [&](auto& fn, const char* name, void* h, const std::string& f) -> Status {
    const std::string sym = prefix + name;
    void* p = dlsym(h, sym.c_str());
    if (p == nullptr) return MissingSymbol(lib.name(), f, sym, prefix);
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(p);
    return Status::Ok();
  };
  TSR_RETURN_IF_ERROR(bind(a.GetRootInfo, "GetRootInfo", handle, file));
  TSR_RETURN_IF_ERROR(bind(a.CommInitRootInfo, "CommInitRootInfo", handle, file));
  TSR_RETURN_IF_ERROR(bind(a.AllReduce, "AllReduce", handle, file));
  TSR_RETURN_IF_ERROR(bind(a.Broadcast, "Broadcast", handle, file));
  TSR_RETURN_IF_ERROR(bind(a.ReduceScatter, "ReduceScatter", handle, file));
  TSR_RETURN_IF_ERROR(bind(a.AllGather, "AllGather", handle, file));
  TSR_RETURN_IF_ERROR(bind(a.GetRankId, "GetRankId", handle, file));
  TSR_RETURN_IF_ERROR(bind(a.Send, "Send", handle, file));
  TSR_RETURN_IF_ERROR(bind(a.Recv, "Recv", handle, file));
  TSR_RETURN_IF_ERROR(bind(a.CommDestroy, "CommDestroy", handle, file));
  TSR_RETURN_IF_ERROR(bind(a.GetCommAsyncError, "GetCommAsyncError", handle, file));
  TSR_RETURN_IF_ERROR(bind(a.GetErrorString, "GetErrorString", handle, file));
  if (lib.row().has_groups) {
    TSR_RETURN_IF_ERROR(bind(a.GroupStart, "GroupStart", group_handle, group_file));
    TSR_RETURN_IF_ERROR(bind(a.GroupEnd, "GroupEnd", group_handle, group_file));
  } else {
    a.GroupStart = a.GroupEnd = [] { return kHcclNotSupport; };
  }
  // Searches libhccl and the libraries it depends on (libascendcl): optional, only out-of-place broadcast needs it.
  a.MemcpyAsync = reinterpret_cast<decltype(a.MemcpyAsync)>(dlsym(handle, "aclrtMemcpyAsync"));

  std::lock_guard<std::mutex> lock(g_mu);
  constexpr auto seq = std::make_integer_sequence<int, kSlots>();
  int slot = -1;
  for (int i = 0; i < kSlots && slot < 0; ++i) {
    HcclApi* s = SlotApi(i, seq);
    if (s->handle == handle || s->handle == nullptr) slot = i;
  }
  if (slot < 0)
    return Unsupported(
        fmt::format("cannot load '{}': this process already holds {} other HCCL libraries", file, kSlots));
  HcclApi* s = SlotApi(slot, seq);
  if (s->handle != handle) *s = a;  // a file loaded again keeps its slot (its calls may be running)
  SlotInstall(slot, lib, seq);
  return Status::Ok();
}

}  // namespace tessera::comm::internal
