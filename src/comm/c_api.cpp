// comm/c_api: the C ABI of tessera.h over the C++ communicator. No exception crosses it; each call
// records a readable message retrievable with tsrGetLastError. Also here: the unique id
// (tsrGetUniqueId: a store served by this process). The per-thread group queue (tsrGroupStart/End) is in
// c_api_group.cpp; what the two share (the handle, the call wrapper, the errors) in c_api_state.hpp.
// Every call's arguments are checked (comm/api_args) before anything is allocated or sent: a refused call
// returns tsrInvalidArgument and leaves the communicator usable.
#include <arpa/inet.h>
#include <fmt/format.h>
#include <netdb.h>
#include <pthread.h>
#include <unistd.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "comm/api_args.hpp"
#include "comm/c_api_state.hpp"
#include "comm/comm.hpp"
#include "comm/store/store.hpp"
#include "common/c_result.hpp"
#include "common/env.hpp"
#include "common/log.hpp"
#include "common/token.hpp"
#include "tessera/tessera.h"

namespace tessera::comm::capi {
namespace {
// Each thread's message of its last failed call on each communicator (tsrComm::id): what tsrGetLastError
// returns. Per thread, so a failure reported on one thread (a watchdog's tsrCommGetAsyncError, a worker's
// call) never changes a string another thread is reading.
thread_local std::unordered_map<uint64_t, std::string> g_last_errors;
}  // namespace
void SetLastError(tsrComm_t comm, std::string message) { g_last_errors[comm->id] = std::move(message); }

tsrResult_t RefuseInherited(const char* name, tsrComm_t comm) {
  std::string msg = fmt::format(
      "{}: this communicator was made by process {}, and this process ({}) is a child of it made by fork(): a "
      "communicator is not inherited (its channels and threads are the parent's); make one in the child, or leave "
      "collectives to the parent (tsrCommDestroy here only forgets the handle)",
      name, comm->owner, ::getpid());
  SetLastError(comm, msg);
  g_init_error = std::move(msg);
  return tsrInvalidArgument;
}

namespace {
// Counts this process's fork() generations (g_fork_generation), from the moment the library is loaded.
[[maybe_unused]] const bool kForkCounted = [] {
  return pthread_atfork(nullptr, nullptr, [] { g_fork_generation.fetch_add(1, std::memory_order_relaxed); }) == 0;
}();
}  // namespace
}  // namespace tessera::comm::capi

namespace {
using tessera::ToResult;
using tessera::comm::capi::Call;
using tessera::comm::capi::g_group_depth;
using tessera::comm::capi::g_init_error;
using tessera::comm::capi::g_last_errors;
using tessera::comm::capi::kInGroup;
using tessera::comm::capi::QueueGroupOp;
using tessera::comm::capi::SetLastError;

// Call for operations that a group does not allow (collectives, split).
template <typename F>
tsrResult_t CallOutsideGroup(const char* name, tsrComm_t comm, F&& f) {
  if (g_group_depth > 0) {
    const std::string msg = fmt::format("{} {}", name, kInGroup);
    if (comm != nullptr) SetLastError(comm, msg);
    g_init_error = msg;
    return tsrInvalidArgument;
  }
  return Call(name, comm, std::forward<F>(f));
}

tsrComm_t Wrap(std::unique_ptr<tessera::comm::Comm> c) {
  auto* h = new tsrComm;
  h->direct = c->direct();
  h->shape = {c->rank(), c->size(), c->device() == nullptr, c->islands()[c->island()].vendor};
  h->impl = std::move(c);
  return h;
}

// ---- unique ids -----------------------------------------------------------------------------------

// Layout of tsrUniqueId::internal: "TSRU2 <token> <host:port>", NUL-padded; the token has no spaces. In a job
// (TESSERA_TOKEN set where the id is made) the token field is kJobToken: the id store checks the job token, and
// a joining rank presents its own TESSERA_TOKEN. The id travels through stores a non-member may read (torch's
// env:// store), so it never carries the job token itself: a member can use it only with the token it has.
constexpr char kIdMagic[] = "TSRU2 ";
constexpr char kJobToken[] = "-";
constexpr size_t kMaxIdToken = 64;  // TESSERA_TOKEN, when it is used

struct ParsedId {
  std::string token, address;
  bool job = false;  // made in a job: each rank presents its own TESSERA_TOKEN
};

tessera::Result<ParsedId> ParseId(const tsrUniqueId& id) {
  const char* p = id.internal;
  const void* nul = std::memchr(p, '\0', TSR_UNIQUE_ID_BYTES);
  const size_t len = nul ? static_cast<size_t>(static_cast<const char*>(nul) - p) : TSR_UNIQUE_ID_BYTES;
  const std::string text(p, len);
  const size_t magic = sizeof(kIdMagic) - 1;
  const size_t space = text.find(' ', magic);
  if (nul == nullptr || text.compare(0, magic, kIdMagic) != 0 || space == std::string::npos || space == magic)
    return tessera::InvalidArgument(
        "tsrCommInitRank: the unique id was not made by tsrGetUniqueId of this Tessera version (bad magic or "
        "version): pass every rank the bytes rank 0 got");
  ParsedId out;
  out.token = text.substr(magic, space - magic);
  out.address = text.substr(space + 1);
  if (out.token == kJobToken) {
    out.job = true;
    out.token = tessera::env::Get("TESSERA_TOKEN").value_or("");
    if (out.token.empty())
      return tessera::InvalidArgument(
          "tsrCommInitRank: the unique id was made in a job (TESSERA_TOKEN set where tsrGetUniqueId ran), and "
          "this rank has no TESSERA_TOKEN: run every rank of the group with the job's token");
  }
  if (out.address.find(':') == std::string::npos || out.address.find(' ') != std::string::npos)
    return tessera::InvalidArgument(
        fmt::format("tsrCommInitRank: the unique id is corrupt (store address '{}')", out.address));
  return out;
}

// Where this process's id stores listen: TESSERA_BRIDGE_ADDR (`tessera run` on several nodes: the node's route
// to the job's store); else, where the launcher's store is on loopback (`tessera run` on one host), 127.0.0.1;
// else this host's first non-loopback IPv4 address (from its name), else 127.0.0.1.
std::string IdHost() {
  if (auto v = tessera::env::Get("TESSERA_BRIDGE_ADDR")) return *v;
  if (auto s = tessera::env::Get("TESSERA_STORE")) {
    const std::string h = s->substr(0, s->rfind(':'));
    if (h.rfind("127.", 0) == 0 || h == "localhost" || h == "[::1]" || h == "::1") return "127.0.0.1";
  }
  char name[256] = {};
  if (gethostname(name, sizeof(name) - 1) == 0) {
    addrinfo hints{};
    hints.ai_family = AF_INET;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* res = nullptr;
    if (getaddrinfo(name, nullptr, &hints, &res) == 0) {
      std::string found;
      for (addrinfo* ai = res; ai != nullptr && found.empty(); ai = ai->ai_next) {
        const auto* sin = reinterpret_cast<const sockaddr_in*>(ai->ai_addr);
        if ((ntohl(sin->sin_addr.s_addr) >> 24) == 127) continue;
        char buf[INET_ADDRSTRLEN] = {};
        if (inet_ntop(AF_INET, &sin->sin_addr, buf, sizeof(buf)) != nullptr) found = buf;
      }
      freeaddrinfo(res);
      if (!found.empty()) return found;
    }
  }
  return "127.0.0.1";
}

// The stores of the ids this process made (MakeId).
struct IdStores {
  std::mutex mu;
  std::vector<std::unique_ptr<tessera::comm::StoreServer>> servers;
};
std::atomic<IdStores*> id_stores{nullptr};

tessera::Status MakeId(tsrUniqueId* id) {
  // The job token: TESSERA_TOKEN when set (a launcher's or a daemon's job), else 128 random bits.
  std::string token = tessera::env::Get("TESSERA_TOKEN").value_or("");
  if (!token.empty() && (token.size() > kMaxIdToken || token.find_first_of(" \t\n") != std::string::npos))
    return tessera::InvalidArgument(
        fmt::format("tsrGetUniqueId: TESSERA_TOKEN ({} bytes) must be at most {} bytes "
                    "without spaces to travel in a unique id",
                    token.size(), kMaxIdToken));
  const bool job_token = !token.empty();
  if (!job_token) {
    TSR_ASSIGN_OR_RETURN(token, tessera::RandomToken("tsrGetUniqueId's job token"));
  }
  const std::string host = IdHost();
  // The store of each id lives as long as the process (a list no static destructor runs down) and stops at exit,
  // before the logger it uses is destroyed (registered after log::Init, so it runs first). A child made by fork()
  // starts an empty list: the parent's stores are the parent's, and their threads are not in the child (joining
  // one at the child's exit crashed it once glibc had unmapped the parent's stacks).
  static std::once_flag once;
  std::call_once(once, [] {
    id_stores.store(new IdStores);
    pthread_atfork(nullptr, nullptr, [] { id_stores.store(new IdStores); });
    std::atexit([] {
      IdStores* s = id_stores.load();
      std::lock_guard<std::mutex> l(s->mu);
      s->servers.clear();
    });
  });
  TSR_ASSIGN_OR_RETURN(auto server, tessera::comm::StoreServer::Start(host, 0, token));
  const std::string address =
      fmt::format("{}:{}", host.find(':') != std::string::npos ? "[" + host + "]" : host, server->port());
  const std::string text = kIdMagic + (job_token ? kJobToken : token) + " " + address;
  if (text.size() >= TSR_UNIQUE_ID_BYTES)
    return tessera::InvalidArgument(fmt::format(
        "tsrGetUniqueId: the store address '{}' (TESSERA_BRIDGE_ADDR) is too long for a unique id", address));
  {
    IdStores* s = id_stores.load();
    std::lock_guard<std::mutex> l(s->mu);
    s->servers.push_back(std::move(server));
  }
  std::memset(id->internal, 0, TSR_UNIQUE_ID_BYTES);
  std::memcpy(id->internal, text.data(), text.size());
  TSR_LOG_DEBUG("tsrGetUniqueId: store at {}", address);
  return tessera::Status::Ok();
}

// A config's fields, or why it is not a tsrConfig_t of a version this library reads.
tessera::Status CheckConfig(const char* what, const tsrConfig_t* c) {
  if (c == nullptr) return tessera::Status::Ok();
  if (c->magic != TSR_CONFIG_MAGIC)
    return tessera::InvalidArgument(
        fmt::format("{}: config->magic is {:#x}, not TSR_CONFIG_MAGIC ({:#x}): start "
                    "from TSR_CONFIG_INITIALIZER",
                    what, c->magic, TSR_CONFIG_MAGIC));
  // Version 1 ended before island_reduce: a program built against it passes the smaller size.
  if (c->version < 1 || c->size < offsetof(tsrConfig_t, island_reduce) ||
      (c->version >= 2 && c->size < sizeof(tsrConfig_t)))
    return tessera::InvalidArgument(fmt::format(
        "{}: config version {} of size {} is not supported (this library "
        "reads version {} of size {}, and version 1 of size {})",
        what, c->version, c->size, TSR_CONFIG_VERSION, sizeof(tsrConfig_t), offsetof(tsrConfig_t, island_reduce)));
  return tessera::Status::Ok();
}

// config->island_reduce where the config has it (version 2), else null.
const char* IslandReduceOf(const tsrConfig_t* c) {
  return c != nullptr && c->version >= 2 && c->size >= sizeof(tsrConfig_t) ? c->island_reduce : nullptr;
}

tessera::Result<tessera::comm::InitParams> InitRankParams(int nranks, const tsrUniqueId& id, int rank,
                                                          const tsrConfig_t* c) {
  TSR_RETURN_IF_ERROR(CheckConfig("tsrCommInitRank", c));
  if (nranks < 1 || nranks > (1 << 20))
    return tessera::InvalidArgument(fmt::format("tsrCommInitRank: nranks {} is not in [1, {}]", nranks, 1 << 20));
  if (rank < 0 || rank >= nranks)
    return tessera::InvalidArgument(fmt::format("tsrCommInitRank: rank {} is not in [0, {})", rank, nranks));
  TSR_ASSIGN_OR_RETURN(ParsedId pid, ParseId(id));
  tessera::comm::InitParams p;
  p.world = nranks;
  p.rank = rank;
  if (c != nullptr && c->island >= 0) {
    p.island = c->island;
  } else {
    TSR_ASSIGN_OR_RETURN(int64_t island, tessera::env::Int("TESSERA_ISLAND", 0, nranks - 1));
    p.island = static_cast<int>(island);
  }
  p.vendor = c != nullptr && c->vendor != nullptr ? c->vendor : tessera::env::Get("TESSERA_ISLAND_VENDOR").value_or("");
  p.device = c != nullptr && c->device != nullptr ? c->device : tessera::env::GetOrDefault("TESSERA_DEVICE");
  if (c != nullptr && c->timeout_ms > 0) {
    p.timeout = std::chrono::milliseconds(c->timeout_ms);
  } else {
    TSR_ASSIGN_OR_RETURN(p.timeout, tessera::env::Duration("TESSERA_TIMEOUT"));
  }
  const bool own_token = c != nullptr && c->token != nullptr;
  p.token = own_token ? c->token : pid.token;
  // The group's store is tsrGetUniqueId's, with the token of the process that made the id.
  p.token_mismatch = fmt::format("{} differs from {}", own_token ? "tsrConfig_t.token" : "TESSERA_TOKEN",
                                 pid.job ? "the job token of the process that made the id (its TESSERA_TOKEN at "
                                           "tsrGetUniqueId): run every rank of the group with the job's token"
                                         : "the id's own token (leave tsrConfig_t.token NULL to use it)");
  if (const char* ir = IslandReduceOf(c)) p.island_reduce = ir;
  p.store_addr = pid.address;
  // Its own namespace per id: under one job token (every id `tessera run`'s ranks make) communicators
  // made at the same moment, such as a DeviceMesh's subgroups, must not share shm names ("/tsr-H-<rank>").
  // Each id names its own store (address:port, alive while the process that made it is), so the address
  // tells communicators apart; every member of one has the same.
  p.ns = "id-" + pid.address;
  return p;
}
// The end of tsrCommInitRank and tsrCommInitFromEnv: the parameters, then the communicator; every failure
// (and any exception) is this thread's init error.
template <typename Params>
tsrResult_t CreateComm(Params params, tsrComm_t* comm) {
  try {
    auto p = params();
    if (!p.ok()) {
      g_init_error = p.status().message();
      return ToResult(p.status());
    }
    auto c = tessera::comm::Comm::Create(*p);
    if (!c.ok()) {
      g_init_error = c.status().message();
      return ToResult(c.status());
    }
    *comm = Wrap(std::move(c).value());
    return tsrSuccess;
  } catch (const std::exception& e) {
    g_init_error = std::string("internal error: ") + e.what();
    return tsrInternalError;
  }
}

}  // namespace

tessera::comm::Comm* tessera::comm::Unwrap(tsrComm_t comm) { return comm != nullptr ? comm->impl.get() : nullptr; }

extern "C" {

tsrResult_t tsrGetVersion(int* version) {
  if (version == nullptr) {
    g_init_error = "tsrGetVersion: version is NULL";
    return tsrInvalidArgument;
  }
  *version = TESSERA_VERSION_CODE;
  return tsrSuccess;
}

tsrResult_t tsrGetUniqueId(tsrUniqueId* id) {
  if (id == nullptr) {
    g_init_error = "tsrGetUniqueId: id is NULL";
    return tsrInvalidArgument;
  }
  try {
    tessera::log::Init();
    tessera::Status s = MakeId(id);
    if (!s.ok()) g_init_error = s.message();
    return ToResult(s);
  } catch (const std::exception& e) {
    g_init_error = std::string("internal error: ") + e.what();
    return tsrInternalError;
  }
}

tsrResult_t tsrCommInitRank(tsrComm_t* comm, int nranks, tsrUniqueId id, int rank, const tsrConfig_t* config) {
  if (comm == nullptr) {
    g_init_error = "tsrCommInitRank: comm is NULL";
    return tsrInvalidArgument;
  }
  *comm = nullptr;
  if (g_group_depth > 0) {
    g_init_error = fmt::format("tsrCommInitRank {}", kInGroup);
    return tsrInvalidArgument;
  }
  return CreateComm([&] { return InitRankParams(nranks, id, rank, config); }, comm);
}

tsrResult_t tsrCommInitFromEnv(tsrComm_t* comm) {
  if (comm == nullptr) {
    g_init_error = "tsrCommInitFromEnv: comm is NULL";
    return tsrInvalidArgument;
  }
  *comm = nullptr;
  if (g_group_depth > 0) {
    g_init_error = fmt::format("tsrCommInitFromEnv {}", kInGroup);
    return tsrInvalidArgument;
  }
  return CreateComm([] { return tessera::comm::Comm::ParamsFromEnv(); }, comm);
}

tsrResult_t tsrCommSplit(tsrComm_t comm, int color, int key, tsrComm_t* newcomm, const tsrConfig_t* config) {
  if (newcomm == nullptr) {
    if (comm != nullptr) SetLastError(comm, "tsrCommSplit: newcomm is NULL");
    g_init_error = "tsrCommSplit: newcomm is NULL";
    return tsrInvalidArgument;
  }
  *newcomm = nullptr;
  return CallOutsideGroup("tsrCommSplit", comm, [&](tessera::comm::Comm&) -> tessera::Status {
    if (comm->impl == nullptr) return tessera::Unsupported("tsrCommSplit: not a Tessera communicator");
    // A bad config still takes part in the collective, so that the other ranks fail at once too.
    const tessera::Status bad = CheckConfig("tsrCommSplit", config);
    const bool use = bad.ok() && config != nullptr;
    const std::string device = use && config->device != nullptr ? config->device : "";
    const auto timeout = std::chrono::milliseconds(use && config->timeout_ms > 0 ? config->timeout_ms : 0);
    auto c = comm->impl->Split(color, key, device, timeout, bad);
    if (!c.ok()) return c.status();
    if (*c) *newcomm = Wrap(std::move(c).value());
    return tessera::Status::Ok();
  });
}

tsrResult_t tsrCommAbort(tsrComm_t comm) {
  if (comm == nullptr || comm->impl == nullptr) {
    g_init_error = "tsrCommAbort: comm is NULL (or destroyed)";
    return tsrInvalidArgument;
  }
  if (comm->Inherited())
    return tessera::comm::capi::RefuseInherited("tsrCommAbort", comm);  // it would abort the parent
  try {
    comm->impl->Abort();
    return tsrSuccess;
  } catch (const std::exception&) {
    return tsrInternalError;
  }
}

tsrResult_t tsrCommGetAsyncError(tsrComm_t comm, tsrResult_t* error) {
  if (comm == nullptr || comm->impl == nullptr || error == nullptr) {
    g_init_error = comm == nullptr || comm->impl == nullptr ? "tsrCommGetAsyncError: comm is NULL (or destroyed)"
                                                            : "tsrCommGetAsyncError: error is NULL";
    if (comm != nullptr && comm->impl != nullptr) SetLastError(comm, g_init_error);
    return tsrInvalidArgument;
  }
  if (comm->Inherited()) return tessera::comm::capi::RefuseInherited("tsrCommGetAsyncError", comm);
  try {
    const tessera::Status s = comm->impl->AsyncError();
    *error = ToResult(s);
    if (!s.ok()) SetLastError(comm, s.message());  // the cause, for this thread's tsrGetLastError
    return tsrSuccess;
  } catch (const std::exception&) {
    return tsrInternalError;
  }
}

tsrResult_t tsrCommDestroy(tsrComm_t comm) {
  if (comm == nullptr) return tsrSuccess;
  // Sends and receives of this thread's open group on comm cannot run any more.
  tessera::comm::capi::DropGroupOps(comm);
  g_last_errors.erase(comm->id);  // (other threads' entries stay: a few strings, never read again)
  // In a fork() child the communicator is the parent's: destroying it would join threads this process does not have
  // and tell the parent's peers that the rank is leaving. Only the handle goes; the rest is left as inherited.
  if (comm->Inherited()) (void)comm->impl.release();
  try {
    delete comm;
  } catch (const std::exception&) {
    return tsrInternalError;
  }
  return tsrSuccess;
}

namespace {
// The queries: `out` NULL is refused naming the call.
tsrResult_t Query(const char* name, tsrComm_t comm, int* out, int (tessera::comm::Comm::*get)() const) {
  if (out == nullptr) {
    const std::string msg = fmt::format("{}: the output pointer is NULL", name);
    if (comm != nullptr && comm->impl != nullptr) SetLastError(comm, msg);
    g_init_error = msg;
    return tsrInvalidArgument;
  }
  return Call(name, comm, [&](tessera::comm::Comm& c) {
    *out = (c.*get)();
    return tessera::Status::Ok();
  });
}
}  // namespace

tsrResult_t tsrCommRank(tsrComm_t comm, int* rank) {
  return Query("tsrCommRank", comm, rank, &tessera::comm::Comm::rank);
}

tsrResult_t tsrCommSize(tsrComm_t comm, int* size) {
  return Query("tsrCommSize", comm, size, &tessera::comm::Comm::size);
}

tsrResult_t tsrCommIsland(tsrComm_t comm, int* island) {
  return Query("tsrCommIsland", comm, island, &tessera::comm::Comm::island);
}

tsrResult_t tsrAllReduce(const void* sendbuf, void* recvbuf, size_t count, tsrDataType_t datatype, tsrRedOp_t op,
                         tsrComm_t comm, tsrStream_t stream) {
  if (comm != nullptr && comm->direct != nullptr && g_group_depth == 0 && !comm->Inherited()) {
    // Takes only calls whose arguments it has checked (device.hpp); the rest go through the checks below.
    const int r = comm->direct->TryCall(sendbuf, recvbuf, count, datatype, op, stream);
    if (r == 0) return tsrSuccess;
    if (r != tessera::comm::DirectAllReduce::kNotTaken)
      return Call("tsrAllReduce", comm,
                  [&](tessera::comm::Comm&) { return comm->direct->report(comm->direct->owner, r); });
  }
  return CallOutsideGroup("tsrAllReduce", comm, [&](tessera::comm::Comm& c) {
    TSR_RETURN_IF_ERROR(tessera::comm::api::CheckAllReduce(sendbuf, recvbuf, count, datatype, op, stream, comm->shape));
    return c.AllReduce(sendbuf, recvbuf, count, datatype, op, stream);
  });
}

tsrResult_t tsrReduceScatter(const void* sendbuf, void* recvbuf, size_t recvcount, tsrDataType_t datatype,
                             tsrRedOp_t op, tsrComm_t comm, tsrStream_t stream) {
  return CallOutsideGroup("tsrReduceScatter", comm, [&](tessera::comm::Comm& c) {
    TSR_RETURN_IF_ERROR(
        tessera::comm::api::CheckReduceScatter(sendbuf, recvbuf, recvcount, datatype, op, stream, comm->shape));
    return c.ReduceScatter(sendbuf, recvbuf, recvcount, datatype, op, stream);
  });
}

tsrResult_t tsrAllGather(const void* sendbuf, void* recvbuf, size_t sendcount, tsrDataType_t datatype, tsrComm_t comm,
                         tsrStream_t stream) {
  return CallOutsideGroup("tsrAllGather", comm, [&](tessera::comm::Comm& c) {
    TSR_RETURN_IF_ERROR(tessera::comm::api::CheckAllGather(sendbuf, recvbuf, sendcount, datatype, stream, comm->shape));
    return c.AllGather(sendbuf, recvbuf, sendcount, datatype, stream);
  });
}

tsrResult_t tsrBroadcast(const void* sendbuf, void* recvbuf, size_t count, tsrDataType_t datatype, int root,
                         tsrComm_t comm, tsrStream_t stream) {
  return CallOutsideGroup("tsrBroadcast", comm, [&](tessera::comm::Comm& c) {
    TSR_RETURN_IF_ERROR(
        tessera::comm::api::CheckBroadcast(sendbuf, recvbuf, count, datatype, root, stream, comm->shape));
    return c.Broadcast(sendbuf, recvbuf, count, datatype, root, stream);
  });
}

tsrResult_t tsrSend(const void* sendbuf, size_t count, tsrDataType_t datatype, int peer, tsrComm_t comm,
                    tsrStream_t stream) {
  if (g_group_depth > 0) return QueueGroupOp("tsrSend", comm, true, sendbuf, nullptr, count, datatype, peer, stream);
  return Call("tsrSend", comm, [&](tessera::comm::Comm& c) {
    TSR_RETURN_IF_ERROR(tessera::comm::api::CheckSendRecv(true, sendbuf, count, datatype, peer, stream, comm->shape));
    return c.Send(sendbuf, count, datatype, peer, stream);
  });
}

tsrResult_t tsrRecv(void* recvbuf, size_t count, tsrDataType_t datatype, int peer, tsrComm_t comm, tsrStream_t stream) {
  if (g_group_depth > 0) return QueueGroupOp("tsrRecv", comm, false, nullptr, recvbuf, count, datatype, peer, stream);
  return Call("tsrRecv", comm, [&](tessera::comm::Comm& c) {
    TSR_RETURN_IF_ERROR(tessera::comm::api::CheckSendRecv(false, recvbuf, count, datatype, peer, stream, comm->shape));
    return c.Recv(recvbuf, count, datatype, peer, stream);
  });
}

tsrResult_t tsrBarrier(tsrComm_t comm) {
  return CallOutsideGroup("tsrBarrier", comm, [&](tessera::comm::Comm& c) { return c.Barrier(); });
}

tsrResult_t tsrAllToAll(const void* sendbuf, void* recvbuf, size_t count, tsrDataType_t datatype, tsrComm_t comm,
                        tsrStream_t stream) {
  return CallOutsideGroup("tsrAllToAll", comm, [&](tessera::comm::Comm& c) -> tessera::Status {
    TSR_RETURN_IF_ERROR(tessera::comm::api::CheckAllToAll(sendbuf, recvbuf, count, datatype, stream, comm->shape));
    const size_t w = static_cast<size_t>(c.size());
    std::vector<size_t> counts(w, count), displs(w);
    for (size_t p = 0; p < w; ++p) displs[p] = p * count;
    return c.AllToAllv(sendbuf, counts.data(), displs.data(), recvbuf, counts.data(), displs.data(), datatype, stream);
  });
}

tsrResult_t tsrAllToAllv(const void* sendbuf, const size_t sendcounts[], const size_t sdispls[], void* recvbuf,
                         const size_t recvcounts[], const size_t rdispls[], tsrDataType_t datatype, tsrComm_t comm,
                         tsrStream_t stream) {
  return CallOutsideGroup("tsrAllToAllv", comm, [&](tessera::comm::Comm& c) -> tessera::Status {
    TSR_RETURN_IF_ERROR(tessera::comm::api::CheckAllToAllv(sendbuf, sendcounts, sdispls, recvbuf, recvcounts, rdispls,
                                                           datatype, stream, comm->shape));
    return c.AllToAllv(sendbuf, sendcounts, sdispls, recvbuf, recvcounts, rdispls, datatype, stream);
  });
}

const char* tsrCommDescribe(tsrComm_t comm) {
  if (comm == nullptr || !comm->impl) return "";
  try {
    comm->description = comm->impl->Describe();
  } catch (const std::exception&) {
    comm->description.clear();
  }
  return comm->description.c_str();
}

const char* tsrGetErrorString(tsrResult_t result) {
  switch (result) {
    case tsrSuccess:
      return "success";
    case tsrInvalidArgument:
      return "invalid argument";
    case tsrSystemError:
      return "system error";
    case tsrRemoteError:
      return "remote error (a peer rank failed or went away)";
    case tsrTimeout:
      return "timeout (TESSERA_TIMEOUT ran out)";
    case tsrInternalError:
      return "internal error";
    case tsrUnsupported:
      return "unsupported";
    case tsrNotFound:
      return "not found";
    case tsrCorrupt:
      return "corrupt (failed verification)";
  }
  return "unknown tsrResult_t";
}

const char* tsrGetLastError(tsrComm_t comm) {
  if (comm == nullptr) return g_init_error.c_str();
  const auto it = g_last_errors.find(comm->id);
  return it == g_last_errors.end() ? "" : it->second.c_str();
}

}  // extern "C"
