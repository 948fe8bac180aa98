// comm/ccl: the dlopen-based loader of the CCL rows (kCclTable), the object of NCCL's call shape (nccl, mccl) and
// the per-island communicator; see ccl.hpp. HCCL's shape: ccl_hccl.cpp.
#include "comm/ccl/ccl.hpp"

#include <fmt/format.h>

#include <cstdlib>
#include <cstring>

#include "comm/ccl/ccl_shapes.hpp"
#include "comm/store/store.hpp"
#include "common/env.hpp"
#include "common/log.hpp"
#include "common/vendor.hpp"

namespace tessera::comm {
namespace {

constexpr bool TableIsSound() {
  for (const auto& r : kCclTable)
    if (r.shape == CclShape::kNccl && r.id_bytes != sizeof(NcclCalls::UniqueId)) return false;
  // Every device family's CCL names a row (common/vendor.hpp; "": a family without a library).
  for (const auto& f : kDeviceFamilies)
    if (*f.ccl != 0 && !dl::HasRow(kCclTable, f.ccl)) return false;
  return true;
}
static_assert(TableIsSound(),
              "kCclTable: an NCCL-shaped row whose id is not NCCL's, or a DeviceFamily::ccl without a row");

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

// NCCL's call shape (nccl, mccl, or any row TESSERA_CCL_LIB / TESSERA_CCL_PREFIX make): the library's symbols
// under the row's prefix, called with the row's numbers (NCCL's for the rows of the table).
class NcclShape final : public CclLibrary {
 public:
  NcclShape(const CclRow& row, const Files& files) : CclLibrary(row, files) {}

  Status BindAll() {
    const dl::Library& h = files().lib;
    TSR_RETURN_IF_ERROR(Bind(c_.GetVersion, "GetVersion", h));
    TSR_RETURN_IF_ERROR(Bind(c_.GetUniqueId, "GetUniqueId", h));
    TSR_RETURN_IF_ERROR(Bind(c_.CommInitRank, "CommInitRank", h));
    TSR_RETURN_IF_ERROR(Bind(c_.CommDestroy, "CommDestroy", h));
    TSR_RETURN_IF_ERROR(Bind(c_.CommAbort, "CommAbort", h));
    TSR_RETURN_IF_ERROR(Bind(c_.CommGetAsyncError, "CommGetAsyncError", h));
    TSR_RETURN_IF_ERROR(Bind(c_.AllReduce, "AllReduce", h));
    TSR_RETURN_IF_ERROR(Bind(c_.ReduceScatter, "ReduceScatter", h));
    TSR_RETURN_IF_ERROR(Bind(c_.AllGather, "AllGather", h));
    TSR_RETURN_IF_ERROR(Bind(c_.Broadcast, "Broadcast", h));
    TSR_RETURN_IF_ERROR(Bind(c_.Send, "Send", h));
    TSR_RETURN_IF_ERROR(Bind(c_.Recv, "Recv", h));
    if (row().has_groups) {
      TSR_RETURN_IF_ERROR(Bind(c_.GroupStart, "GroupStart", files().group));
      TSR_RETURN_IF_ERROR(Bind(c_.GroupEnd, "GroupEnd", files().group));
    }
    TSR_RETURN_IF_ERROR(Bind(c_.GetErrorString, "GetErrorString", h));
    return Check(c_.GetVersion(&version_), "GetVersion");
  }

  std::string Symbol(const char* what) const override { return prefix() + what; }
  Status NewId(std::string* id) const override {
    UniqueId u{};
    TSR_RETURN_IF_ERROR(Check(c_.GetUniqueId(&u), "GetUniqueId"));
    id->assign(reinterpret_cast<const char*>(&u), sizeof(u));
    return Status::Ok();
  }
  Status InitRank(void** comm, int nranks, const std::string& id, int rank) const override {
    if (id.size() != sizeof(UniqueId))
      return InvalidArgument(fmt::format("a {} id has {} bytes, not {}", name(), sizeof(UniqueId), id.size()));
    UniqueId u{};
    std::memcpy(&u, id.data(), sizeof(u));
    return Check(c_.CommInitRank(comm, nranks, u, rank), "CommInitRank");
  }
  // NCCL's own: destroy flushes what is queued; abort ends it.
  Status CommDestroy(void* comm, std::chrono::milliseconds) const override {
    return Check(c_.CommDestroy(comm), "CommDestroy");
  }
  Status CommAbort(void* comm, std::chrono::milliseconds) const override {
    return Check(c_.CommAbort(comm), "CommAbort");
  }
  Result_ CommGetAsyncError(void* comm, Result_* err) const override { return c_.CommGetAsyncError(comm, err); }
  Result_ AllReduce(const void* s, void* r, size_t n, DType t, RedOp op, void* comm, void* st) const override {
    return c_.AllReduce(s, r, n, DataType(t), Op(op), comm, st);
  }
  Result_ ReduceScatter(const void* s, void* r, size_t n, DType t, RedOp op, void* comm, void* st) const override {
    return c_.ReduceScatter(s, r, n, DataType(t), Op(op), comm, st);
  }
  Result_ AllGather(const void* s, void* r, size_t n, DType t, void* comm, void* st) const override {
    return c_.AllGather(s, r, n, DataType(t), comm, st);
  }
  Result_ Broadcast(const void* s, void* r, size_t n, DType t, int root, void* comm, void* st) const override {
    return c_.Broadcast(s, r, n, DataType(t), root, comm, st);
  }
  Result_ Send(const void* s, size_t n, DType t, int peer, void* comm, void* st) const override {
    return c_.Send(s, n, DataType(t), peer, comm, st);
  }
  Result_ Recv(void* r, size_t n, DType t, int peer, void* comm, void* st) const override {
    return c_.Recv(r, n, DataType(t), peer, comm, st);
  }
  Result_ GroupStart() const override { return c_.GroupStart(); }
  Result_ GroupEnd() const override { return c_.GroupEnd(); }
  const NcclCalls* nccl() const override { return &c_; }

 private:
  const char* ErrorString(Result_ r) const override { return c_.GetErrorString ? c_.GetErrorString(r) : nullptr; }
  NcclCalls c_;
};

}  // namespace

const CclRow* FindCclRow(std::string_view name) { return dl::FindRow(kCclTable, name); }

std::string CclRowNames() { return dl::RowNames(kCclTable); }

CclLibrary::CclLibrary(const CclRow& row, const Files& files)
    : name_(row.name), soname_(row.soname), prefix_(row.prefix), row_(row), files_(files) {
  row_.name = name_.c_str();
  row_.soname = soname_.c_str();
  row_.prefix = prefix_.c_str();
}

CclLibrary::~CclLibrary() {
  // The library stays mapped: CUDA libraries register atexit handlers and threads that outlive us.
}

Result<std::shared_ptr<CclLibrary>> CclLibrary::Load(const CclRow& v) {
  if (v.shape == CclShape::kNccl && v.id_bytes != sizeof(UniqueId))
    return InvalidArgument(
        fmt::format("the NCCL-shaped row '{}' has a {}-byte id: NCCL's is {}", v.name, v.id_bytes, sizeof(UniqueId)));
  const dl::Names names = {
      .what = fmt::format("the {} library", v.name),
      .env_var = "TESSERA_CCL_LIB",
      .mismatch = fmt::format("not a {} library of this shape, or the prefix '{}' is wrong (TESSERA_CCL_PREFIX sets "
                              "another)",
                              v.name, v.prefix)};
  Files files;
  TSR_ASSIGN_OR_RETURN(files.lib, dl::Library::Open(v.soname, names));
  {  // Not this shape's library at all: say so before looking for its group library.
    const std::string first = std::string(v.prefix) + (v.shape == CclShape::kHccl ? "GetRootInfo" : "GetVersion");
    if (files.lib.Find(first) == nullptr) return files.lib.Missing(first);
  }
  files.group = files.lib;
  if (v.has_groups && v.group_soname != nullptr) {
    dl::Names group = names;
    group.what = fmt::format("the {} library of {}GroupStart / {}GroupEnd", v.name, v.prefix, v.prefix);
    group.install = fmt::format("install it beside '{}', the file TESSERA_CCL_LIB points at", v.soname);
    // Beside the main file first (TESSERA_CCL_LIB may point into a directory not on the search path).
    const std::string main = v.soname;
    Result<dl::Library> g = Unsupported("not beside");
    if (auto slash = main.rfind('/'); slash != std::string::npos)
      g = dl::Library::Open(main.substr(0, slash + 1) + v.group_soname, group);
    if (!g.ok()) g = dl::Library::Open(v.group_soname, group);
    TSR_ASSIGN_OR_RETURN(files.group, std::move(g));
  }
  std::shared_ptr<CclLibrary> lib;
  if (v.shape == CclShape::kHccl) {
    TSR_ASSIGN_OR_RETURN(lib, internal::LoadHcclShape(v, files));
  } else {
    auto n = std::make_shared<NcclShape>(v, files);
    TSR_RETURN_IF_ERROR(n->BindAll());
    lib = std::move(n);
  }
  TSR_LOG_DEBUG("loaded {} from {} (version {})", v.name, v.soname, lib->version());
  return lib;
}

Result<std::shared_ptr<CclLibrary>> CclLibrary::LoadFromEnv(std::string_view default_row) {
  std::string want = env::Get("TESSERA_CCL").value_or(std::string(default_row));
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

int CclLibrary::DataType(DType t) const { return IsValid(t) ? row_.types[static_cast<int>(t)] : -1; }

int CclLibrary::Op(RedOp op) const { return IsValid(op) ? row_.ops[static_cast<int>(op)] : -1; }

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

Status CclLibrary::Check(Result_ r, const char* what) const {
  if (r == 0) return Status::Ok();
  const char* s = ErrorString(r);
  return SystemError(fmt::format("{} error '{}' ({}) in {}", name_, s ? s : "?", r, Symbol(what)));
}

Result<std::unique_ptr<CclComm>> CclComm::Create(std::shared_ptr<CclLibrary> lib, StoreClient* store,
                                                 const std::string& key, int nranks, int rank,
                                                 std::chrono::milliseconds timeout) {
  std::unique_ptr<CclComm> c(new CclComm());
  c->lib_ = std::move(lib);
  c->nranks_ = nranks;
  c->timeout_ = timeout;
  c->key_ = key;
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

std::string CclComm::Which() const { return fmt::format("the {} communicator of store key {}", lib_->name(), key_); }

CclComm::~CclComm() {
  if (comm_ == nullptr || aborted_) return;
  const bool abort = failed_;
  const Status s = abort ? lib_->CommAbort(comm_, timeout_) : lib_->CommDestroy(comm_, timeout_);
  if (!s.ok()) TSR_LOG_WARN("{}", s.WithContext((abort ? "aborting " : "destroying ") + Which()).message());
}

Status CclComm::AbortAndReport() {
  if (aborted_.exchange(true)) return Status::Ok();
  Status s = lib_->CommAbort(comm_, timeout_);
  if (s.ok()) return s;
  s = s.WithContext("aborting " + Which());
  TSR_LOG_WARN("{}", s.message());
  return s;
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
