// comm/ccl: the dlopen-based loader of the CCL rows (kCclTable) and the per-island communicator; see ccl.hpp.
#include "comm/ccl/ccl.hpp"

#include <dlfcn.h>
#include <fmt/format.h>

#include <cstdlib>
#include <cstring>

#include "comm/ccl/ccl_adapters.hpp"
#include "comm/store/store.hpp"
#include "common/env.hpp"
#include "common/log.hpp"
#include "common/vendor.hpp"

namespace tessera::comm {
namespace {

// An NCCL-shaped row binds its symbols directly: its numbers must be NCCL's (or -1: none).
constexpr bool NcclNumbered(const CclRow& r) {
  for (int i = 0; i < kCclTypes; ++i)
    if (r.types[i] >= 0 && r.types[i] != kNcclTypes[i]) return false;
  for (int i = 0; i < kCclOps; ++i)
    if (r.ops[i] >= 0 && r.ops[i] != kNcclOps[i]) return false;
  return true;
}
constexpr bool TableIsSound() {
  for (const auto& r : kCclTable) {
    if (r.shape == CclShape::kNccl && (!NcclNumbered(r) || r.id_bytes != 128)) return false;
    // Every device family's CCL names a row (common/vendor.hpp).
  }
  for (const auto& f : kDeviceFamilies) {
    bool found = std::string_view(f.ccl).empty();  // a family without a library
    for (const auto& r : kCclTable) found = found || std::string_view(f.ccl) == r.name;
    if (!found) return false;
  }
  return true;
}
static_assert(TableIsSound(), "kCclTable: an NCCL-shaped row with other numbers, or a DeviceFamily::ccl without a row");

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

int CclDataType(DType t) { return IsValid(t) ? kNcclTypes[static_cast<int>(t)] : -1; }

int CclRedOp(RedOp op) { return IsValid(op) ? kNcclOps[static_cast<int>(op)] : -1; }

const CclRow* FindCclRow(std::string_view name) {
  for (const auto& r : kCclTable)
    if (name == r.name) return &r;
  return nullptr;
}

std::string CclRowNames() {
  std::string names;
  for (const auto& v : kCclTable) names += names.empty() ? v.name : std::string(", ") + v.name;
  return names;
}

Result<std::shared_ptr<CclLibrary>> CclLibrary::Load(const CclRow& v) {
  std::shared_ptr<CclLibrary> lib(new CclLibrary());
  lib->name_ = v.name;
  lib->soname_ = v.soname;
  lib->prefix_ = v.prefix;
  lib->row_ = v;
  lib->row_.name = lib->name_.c_str();
  lib->row_.soname = lib->soname_.c_str();
  lib->row_.prefix = lib->prefix_.c_str();
  if (v.shape == CclShape::kNccl && !NcclNumbered(v))
    return InvalidArgument(
        fmt::format("the NCCL-shaped row '{}' has numbers that are not NCCL's: such a row "
                    "needs a translating adapter (see ccl_hccl.cpp)",
                    v.name));
  if (v.shape == CclShape::kNccl && v.id_bytes != sizeof(UniqueId))
    return InvalidArgument(
        fmt::format("the NCCL-shaped row '{}' has a {}-byte id: NCCL's is {}", v.name, v.id_bytes, sizeof(UniqueId)));
  dlerror();
  lib->handle_ = dlopen(v.soname, RTLD_NOW | RTLD_LOCAL);
  if (lib->handle_ == nullptr) {
    const char* e = dlerror();
    return Unsupported(
        fmt::format("cannot load the {} library '{}' for a device island: {} (install it, or set "
                    "TESSERA_CCL_LIB to its path)",
                    v.name, v.soname, e ? e : "?"));
  }
  {  // Not this shape's library at all: say so before looking for its group library.
    const std::string first = std::string(v.prefix) + (v.shape == CclShape::kHccl ? "GetRootInfo" : "GetVersion");
    if (dlsym(lib->handle_, first.c_str()) == nullptr)
      return internal::MissingSymbol(v.name, v.soname, first, v.prefix);
  }
  if (v.has_groups && v.group_soname != nullptr) {
    // Beside the main file first (TESSERA_CCL_LIB may point into a directory not on the search path).
    std::string main = v.soname, beside;
    if (auto slash = main.rfind('/'); slash != std::string::npos) beside = main.substr(0, slash + 1) + v.group_soname;
    dlerror();
    if (!beside.empty()) lib->group_handle_ = dlopen(beside.c_str(), RTLD_NOW | RTLD_LOCAL);
    lib->group_soname_ = lib->group_handle_ ? beside : v.group_soname;
    if (lib->group_handle_ == nullptr) lib->group_handle_ = dlopen(v.group_soname, RTLD_NOW | RTLD_LOCAL);
    if (lib->group_handle_ == nullptr) {
      const char* e = dlerror();
      return Unsupported(
          fmt::format("cannot load '{}', the {} library of {}GroupStart / {}GroupEnd: {} (install it beside '{}', the "
                      "file TESSERA_CCL_LIB points at)",
                      v.group_soname, v.name, v.prefix, v.prefix, e ? e : "?", v.soname));
    }
  }
  if (v.shape == CclShape::kHccl) {
    TSR_RETURN_IF_ERROR(internal::BindHccl(*lib, lib->handle_, lib->group_handle_ ? lib->group_handle_ : lib->handle_,
                                           lib->soname_,
                                           lib->group_soname_.empty() ? lib->soname_ : lib->group_soname_));
  } else {
    auto bind = [&](auto& fn, const char* name, void* h, const std::string& file) -> Status {
      std::string sym = std::string(v.prefix) + name;
      void* p = dlsym(h, sym.c_str());
      if (p == nullptr) return internal::MissingSymbol(v.name, file, sym, v.prefix);
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(p);
      return Status::Ok();
    };
    void* gh = lib->group_handle_ ? lib->group_handle_ : lib->handle_;
    const std::string& gfile = lib->group_handle_ ? lib->group_soname_ : lib->soname_;
    TSR_RETURN_IF_ERROR(bind(lib->GetVersion, "GetVersion", lib->handle_, lib->soname_));
    TSR_RETURN_IF_ERROR(bind(lib->GetUniqueId, "GetUniqueId", lib->handle_, lib->soname_));
    TSR_RETURN_IF_ERROR(bind(lib->CommInitRank, "CommInitRank", lib->handle_, lib->soname_));
    TSR_RETURN_IF_ERROR(bind(lib->CommDestroy, "CommDestroy", lib->handle_, lib->soname_));
    TSR_RETURN_IF_ERROR(bind(lib->CommAbort, "CommAbort", lib->handle_, lib->soname_));
    TSR_RETURN_IF_ERROR(bind(lib->CommGetAsyncError, "CommGetAsyncError", lib->handle_, lib->soname_));
    TSR_RETURN_IF_ERROR(bind(lib->AllReduce, "AllReduce", lib->handle_, lib->soname_));
    TSR_RETURN_IF_ERROR(bind(lib->ReduceScatter, "ReduceScatter", lib->handle_, lib->soname_));
    TSR_RETURN_IF_ERROR(bind(lib->AllGather, "AllGather", lib->handle_, lib->soname_));
    TSR_RETURN_IF_ERROR(bind(lib->Broadcast, "Broadcast", lib->handle_, lib->soname_));
    TSR_RETURN_IF_ERROR(bind(lib->Send, "Send", lib->handle_, lib->soname_));
    TSR_RETURN_IF_ERROR(bind(lib->Recv, "Recv", lib->handle_, lib->soname_));
    if (v.has_groups) {
      TSR_RETURN_IF_ERROR(bind(lib->GroupStart, "GroupStart", gh, gfile));
      TSR_RETURN_IF_ERROR(bind(lib->GroupEnd, "GroupEnd", gh, gfile));
    }
    TSR_RETURN_IF_ERROR(bind(lib->GetErrorString, "GetErrorString", lib->handle_, lib->soname_));
  }
  TSR_RETURN_IF_ERROR(lib->Check(lib->GetVersion(&lib->version_), "GetVersion"));
  TSR_LOG_DEBUG("loaded {} from {} (version {})", v.name, v.soname, lib->version_);
  return lib;
}

Result<std::shared_ptr<CclLibrary>> CclLibrary::LoadFromEnv(std::string_view default_row) {
  std::string want = env::Get("TESSERA_CCL").has_value() ? env::GetOrDefault("TESSERA_CCL") : std::string(default_row);
  const CclRow* row = FindCclRow(want);
  std::string lib_path = env::Get("TESSERA_CCL_LIB").value_or("");
  std::string prefix = env::Get("TESSERA_CCL_PREFIX").value_or("");
  if (row == nullptr && (lib_path.empty() || prefix.empty()))
    return InvalidArgument(
        fmt::format("TESSERA_CCL='{}' is not a known collective library (known: {}); for another "
                    "NCCL-shaped library set TESSERA_CCL_LIB and TESSERA_CCL_PREFIX too",
                    want, CclRowNames()));
  CclRow v = row ? *row : CclRow{want.c_str(), "", ""};
  v.name = want.c_str();
  if (!lib_path.empty()) v.soname = lib_path.c_str();
  if (!prefix.empty()) v.prefix = prefix.c_str();
  return Load(v);
}

int CclLibrary::DataType(DType t) const {
  if (!IsValid(t) || row_.types[static_cast<int>(t)] < 0) return -1;
  return CclDataType(t);
}

int CclLibrary::Op(RedOp op) const {
  if (!IsValid(op) || row_.ops[static_cast<int>(op)] < 0) return -1;
  return CclRedOp(op);
}

Status CclLibrary::Supports(DType t) const {
  if (DataType(t) >= 0) return Status::Ok();
  return Unsupported(fmt::format("{} ('{}') has no {} data type", name_, soname_, IsValid(t) ? DTypeName(t) : "such"));
}

Status CclLibrary::SupportsReduce(DType t, RedOp op) const {
  TSR_RETURN_IF_ERROR(Supports(t));
  if (!IsValid(op)) return InvalidArgument(fmt::format("reduce op {} is not a Tessera op", static_cast<int>(op)));
  if (Op(op) < 0) {
    if (op == RedOp::kAvg)
      return Unsupported(
          fmt::format("{} ('{}') has no avg: reduce with sum and scale once (Tessera's avg rounds "
                      "once)",
                      name_, soname_));
    return Unsupported(fmt::format("{} ('{}') has no {} reduction", name_, soname_, RedOpName(op)));
  }
  const uint32_t bit = TypeBit(t);
  if (!(row_.reduce_types & bit))
    return Unsupported(fmt::format("{} ('{}') does not reduce {} data", name_, soname_, DTypeName(t)));
  if (op == RedOp::kProd && !(row_.prod_types & bit))
    return Unsupported(fmt::format("{} ('{}') has no prod of {} data", name_, soname_, DTypeName(t)));
  return Status::Ok();
}

Status CclLibrary::NewId(std::string* id) const {
  id->assign(row_.id_bytes, '\0');
  if (NewIdBytes != nullptr) return Check(NewIdBytes(id->data()), "GetUniqueId");
  UniqueId u{};
  TSR_RETURN_IF_ERROR(Check(GetUniqueId(&u), "GetUniqueId"));
  std::memcpy(id->data(), &u, sizeof(u));
  return Status::Ok();
}

Status CclLibrary::InitRank(void** comm, int nranks, const std::string& id, int rank) const {
  if (id.size() != row_.id_bytes)
    return InvalidArgument(fmt::format("a {} id has {} bytes, not {}", name_, row_.id_bytes, id.size()));
  if (InitRankBytes != nullptr) return Check(InitRankBytes(comm, nranks, id.data(), rank), "CommInitRank");
  UniqueId u{};
  std::memcpy(&u, id.data(), sizeof(u));
  return Check(CommInitRank(comm, nranks, u, rank), "CommInitRank");
}

std::string CclLibrary::Symbol(const char* what) const {
  if (row_.shape == CclShape::kHccl) return internal::HcclSymbol(what);
  return prefix_ + what;
}

CclLibrary::~CclLibrary() {
  // The library stays mapped: CUDA libraries register atexit handlers and threads that outlive us.
}

Status CclLibrary::Check(Result_ r, const char* what) const {
  if (r == 0) return Status::Ok();
  const char* s = GetErrorString ? GetErrorString(r) : "?";
  return SystemError(fmt::format("{} error '{}' ({}) in {}", name_, s ? s : "?", r, Symbol(what)));
}

Result<std::unique_ptr<CclComm>> CclComm::Create(std::shared_ptr<CclLibrary> lib, StoreClient* store,
                                                 const std::string& key, int nranks, int rank,
                                                 std::chrono::milliseconds timeout) {
  std::unique_ptr<CclComm> c(new CclComm());
  c->lib_ = std::move(lib);
  c->nranks_ = nranks;
  std::string id;
  if (rank == 0) {
    TSR_RETURN_IF_ERROR(c->lib_->NewId(&id));
    TSR_RETURN_IF_ERROR(store->Set(key, Hex(id.data(), id.size())));
  } else {
    auto v = store->Get(key, timeout);
    if (!v.ok()) return v.status().WithContext("waiting for the island's " + c->lib_->name() + " unique id");
    id.assign(c->lib_->id_bytes(), '\0');
    if (!Unhex(*v, id.data(), id.size())) return InternalError("malformed unique id under store key " + key);
  }
  TSR_RETURN_IF_ERROR(c->lib_->InitRank(&c->comm_, nranks, id, rank));
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
  if (err != 0 && err != lib_->row().in_progress /* ncclInProgress; none in HCCL */) {
    failed_ = true;
    return lib_->Check(err, "an earlier operation (asynchronous error)");
  }
  return Status::Ok();
}

}  // namespace tessera::comm
