// comm/ccl: dlopen-based loader of NCCL-shaped vendor libraries and the per-island communicator; see ccl.hpp.
#include "comm/ccl/ccl.hpp"

#include <dlfcn.h>
#include <fmt/format.h>

#include <cstdlib>
#include <cstring>

#include "comm/store/store.hpp"
#include "common/env.hpp"
#include "common/log.hpp"

namespace tessera::comm {
namespace {

// NCCL's ncclDataType_t values.
constexpr int kNcclInt8 = 0, kNcclUint8 = 1, kNcclInt32 = 2, kNcclInt64 = 4, kNcclFloat16 = 6, kNcclFloat32 = 7,
              kNcclFloat64 = 8, kNcclBfloat16 = 9;

std::string Hex(const void* p, size_t n) {
  static const char* d = "0123456789abcdef";
  std::string s;
  s.reserve(2 * n);
  auto* b = static_cast<const unsigned char*>(p);
  for (size_t i = 0; i < n; ++i) {
    s.push_back(d[b[i] >> 4]);
    s.push_back(d[b[i] & 15]);
  }
  return s;
}

bool Unhex(const std::string& s, void* p, size_t n) {
  if (s.size() != 2 * n) return false;
  auto v = [](char c) { return c <= '9' ? c - '0' : c - 'a' + 10; };
  auto* b = static_cast<unsigned char*>(p);
  for (size_t i = 0; i < n; ++i) b[i] = static_cast<unsigned char>(v(s[2 * i]) << 4 | v(s[2 * i + 1]));
  return true;
}

}  // namespace

int CclDataType(DType t) {
  switch (t) {
    case DType::kInt8:
      return kNcclInt8;
    case DType::kUint8:
      return kNcclUint8;
    case DType::kInt32:
      return kNcclInt32;
    case DType::kInt64:
      return kNcclInt64;
    case DType::kFloat16:
      return kNcclFloat16;
    case DType::kBfloat16:
      return kNcclBfloat16;
    case DType::kFloat32:
      return kNcclFloat32;
    case DType::kFloat64:
      return kNcclFloat64;
    default:
      return -1;
  }
}

int CclRedOp(RedOp op) { return static_cast<int>(op); }  // sum, prod, max, min, avg: NCCL's order

Result<std::shared_ptr<CclLibrary>> CclLibrary::Load(const CclVendor& v) {
  std::shared_ptr<CclLibrary> lib(new CclLibrary());
  lib->name_ = v.name;
  lib->prefix_ = v.prefix;
  dlerror();
  lib->handle_ = dlopen(v.soname, RTLD_NOW | RTLD_LOCAL);
  if (lib->handle_ == nullptr) {
    const char* e = dlerror();
    return Unsupported(
        fmt::format("cannot load the {} library '{}' for a device island: {} (install it, or set "
                    "TESSERA_CCL_LIB to its path)",
                    v.name, v.soname, e ? e : "?"));
  }
  auto bind = [&](auto& fn, const char* name) -> Status {
    std::string sym = std::string(v.prefix) + name;
    void* p = dlsym(lib->handle_, sym.c_str());
    if (p == nullptr)
      return Unsupported(
          fmt::format("'{}' ({}) has no symbol '{}': not an NCCL-shaped library, or the prefix "
                      "'{}' is wrong",
                      v.soname, v.name, sym, v.prefix));
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(p);
    return Status::Ok();
  };
  TSR_RETURN_IF_ERROR(bind(lib->GetVersion, "GetVersion"));
  TSR_RETURN_IF_ERROR(bind(lib->GetUniqueId, "GetUniqueId"));
  TSR_RETURN_IF_ERROR(bind(lib->CommInitRank, "CommInitRank"));
  TSR_RETURN_IF_ERROR(bind(lib->CommDestroy, "CommDestroy"));
  TSR_RETURN_IF_ERROR(bind(lib->CommAbort, "CommAbort"));
  TSR_RETURN_IF_ERROR(bind(lib->CommGetAsyncError, "CommGetAsyncError"));
  TSR_RETURN_IF_ERROR(bind(lib->AllReduce, "AllReduce"));
  TSR_RETURN_IF_ERROR(bind(lib->ReduceScatter, "ReduceScatter"));
  TSR_RETURN_IF_ERROR(bind(lib->AllGather, "AllGather"));
  TSR_RETURN_IF_ERROR(bind(lib->Broadcast, "Broadcast"));
  TSR_RETURN_IF_ERROR(bind(lib->Send, "Send"));
  TSR_RETURN_IF_ERROR(bind(lib->Recv, "Recv"));
  TSR_RETURN_IF_ERROR(bind(lib->GroupStart, "GroupStart"));
  TSR_RETURN_IF_ERROR(bind(lib->GroupEnd, "GroupEnd"));
  TSR_RETURN_IF_ERROR(bind(lib->GetErrorString, "GetErrorString"));
  TSR_RETURN_IF_ERROR(lib->Check(lib->GetVersion(&lib->version_), "GetVersion"));
  TSR_LOG_DEBUG("loaded {} from {} (version {})", v.name, v.soname, lib->version_);
  return lib;
}

Result<std::shared_ptr<CclLibrary>> CclLibrary::LoadFromEnv() {
  std::string want = env::GetOrDefault("TESSERA_CCL");
  const CclVendor* row = nullptr;
  std::string names;
  for (const auto& v : kCclTable) {
    names += names.empty() ? v.name : std::string(", ") + v.name;
    if (want == v.name) row = &v;
  }
  std::string lib_path = env::Get("TESSERA_CCL_LIB").value_or("");
  std::string prefix = env::Get("TESSERA_CCL_PREFIX").value_or("");
  if (row == nullptr && (lib_path.empty() || prefix.empty()))
    return InvalidArgument(
        fmt::format("TESSERA_CCL='{}' is not a known collective library (known: {}); for another "
                    "NCCL-shaped library set TESSERA_CCL_LIB and TESSERA_CCL_PREFIX too",
                    want, names));
  CclVendor v{want.c_str(), row ? row->soname : "", row ? row->prefix : ""};
  if (!lib_path.empty()) v.soname = lib_path.c_str();
  if (!prefix.empty()) v.prefix = prefix.c_str();
  return Load(v);
}

CclLibrary::~CclLibrary() {
  // The library stays mapped: CUDA libraries register atexit handlers and threads that outlive us.
}

Status CclLibrary::Check(Result_ r, const char* what) const {
  if (r == 0) return Status::Ok();
  const char* s = GetErrorString ? GetErrorString(r) : "?";
  return SystemError(fmt::format("{} error '{}' ({}) in {}{}", name_, s ? s : "?", r, prefix_, what));
}

Result<std::unique_ptr<CclComm>> CclComm::Create(std::shared_ptr<CclLibrary> lib, StoreClient* store,
                                                 const std::string& key, int nranks, int rank,
                                                 std::chrono::milliseconds timeout) {
  std::unique_ptr<CclComm> c(new CclComm());
  c->lib_ = std::move(lib);
  c->nranks_ = nranks;
  CclLibrary::UniqueId id{};
  if (rank == 0) {
    TSR_RETURN_IF_ERROR(c->lib_->Check(c->lib_->GetUniqueId(&id), "GetUniqueId"));
    TSR_RETURN_IF_ERROR(store->Set(key, Hex(&id, sizeof(id))));
  } else {
    auto v = store->Get(key, timeout);
    if (!v.ok()) return v.status().WithContext("waiting for the island's " + c->lib_->name() + " unique id");
    if (!Unhex(*v, &id, sizeof(id))) return InternalError("malformed unique id under store key " + key);
  }
  TSR_RETURN_IF_ERROR(c->lib_->Check(c->lib_->CommInitRank(&c->comm_, nranks, id, rank), "CommInitRank"));
  return c;
}

CclComm::~CclComm() {
  if (comm_ == nullptr || aborted_) return;
  if (failed_)
    (void)lib_->CommAbort(comm_);
  else
    (void)lib_->CommDestroy(comm_);
}

Status CclComm::AsyncError() {
  if (aborted_) return RemoteError(fmt::format("the {} communicator was aborted (tsrCommAbort)", lib_->name()));
  CclLibrary::Result_ err = 0;
  TSR_RETURN_IF_ERROR(lib_->Check(lib_->CommGetAsyncError(comm_, &err), "CommGetAsyncError"));
  if (err != 0 && err != 7 /* ncclInProgress */) {
    failed_ = true;
    return lib_->Check(err, "an earlier operation (asynchronous error)");
  }
  return Status::Ok();
}

}  // namespace tessera::comm
