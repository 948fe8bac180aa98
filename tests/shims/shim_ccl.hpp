// tests/shims/shim_ccl: what the HCCL and MCCL shims share above the collective engine: checking that buffers are
// device memory of the communicator's device, queueing an operation on the caller's stream (in issue order per
// communicator), and groups (GroupStart/GroupEnd collect the calls of this thread and queue them at the
// outermost GroupEnd; the send/recv of one communicator in a group progress together).
#pragma once

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "shim_coll.hpp"
#include "shim_runtime.hpp"

namespace tshim::ccl {

// A user buffer, resolved to the shim's address when the operation runs (so memory freed before then is caught).
struct Buf {
  const void* p = nullptr;
  size_t bytes = 0;
};

// Why `b` cannot be used by a communicator on `device` ("" when it can).
inline std::string CheckBuf(const RuntimeHooks* h, const char* fn, const char* arg, Buf b, int device) {
  if (b.bytes == 0) return "";
  const PtrInfo p = h->lookup(b.p);
  if (p.kind != MemKind::kDevice)
    return Fmt("%s: %s %p is %s, not device memory", fn, arg, b.p,
               p.kind == MemKind::kPinnedHost ? "pinned host memory" : "host memory");
  if (p.device != device)
    return Fmt("%s: %s %p is memory of device %d, the communicator's device is %d", fn, arg, b.p, p.device, device);
  if (p.avail < b.bytes)
    return Fmt("%s: %s %p has %zu bytes left in its allocation, the call needs %zu", fn, arg, b.p, p.avail, b.bytes);
  return "";
}

inline coll::Result Resolve(const RuntimeHooks* h, Buf b, char** out) {
  if (b.bytes == 0) return *out = nullptr, coll::Result{};
  const PtrInfo p = h->lookup(b.p);
  if (p.kind != MemKind::kDevice || p.avail < b.bytes)
    return {coll::Err::kInvalid, Fmt("buffer %p (%zu bytes) was freed before the operation ran", b.p, b.bytes)};
  *out = p.Translate(b.p);
  return {};
}

// One queued operation: a send or receive (grouped sends and receives progress together), or a collective.
struct Pending {
  std::shared_ptr<coll::Comm> comm;
  std::shared_ptr<Stream> stream;
  bool p2p = false, send = false;
  Buf buf;
  int peer = -1;
  std::function<coll::Result(coll::Comm&)> body;  // collectives
};

// Maps an engine failure to the stream's error code (0: the stream does not fail; the error stays in the comm).
using StreamCode = int (*)(coll::Err);

inline coll::Result RunBatch(const RuntimeHooks* h, coll::Comm& c, const std::vector<Pending>& ops) {
  std::vector<coll::P2POp> p2p;
  for (const Pending& op : ops) {
    if (!op.p2p) {
      coll::Result r = op.body(c);
      if (!r.ok()) return r;
      continue;
    }
    char* at = nullptr;
    coll::Result r = Resolve(h, op.buf, &at);
    if (!r.ok()) return r;
    p2p.push_back({op.send, at, op.buf.bytes, op.peer});
    if (ops.size() == 1 || &op == &ops.back() || !(&op + 1)->p2p) {  // a run of sends/receives ends here
      r = c.P2P(p2p);
      if (!r.ok()) return r;
      p2p.clear();
    }
  }
  return {};
}

inline void Queue(const RuntimeHooks* h, std::vector<Pending> ops, StreamCode code, const char* lib) {
  auto comm = ops.front().comm;
  auto stream = ops.front().stream;
  const uint64_t ticket = comm->TakeTicket();
  stream->Enqueue([h, comm, ops = std::move(ops), ticket, code, lib]() -> Status {
    coll::Result r = comm->Run(ticket, [&] { return RunBatch(h, *comm, ops); });
    if (r.ok()) return Status::Ok();
    if (EnvU64("TESSERA_SHIM_VERBOSE", 0)) std::fprintf(stderr, "[%s shim] %s\n", lib, r.msg.c_str());
    const int c = code(r.err);
    return c ? Status{c, std::string(lib) + ": " + r.msg} : Status::Ok();
  });
}

// Groups: per thread, as NCCL's and HCCL's are.
struct GroupState {
  int depth = 0;
  std::vector<Pending> ops;
};
inline GroupState& Group() {
  static thread_local GroupState g;
  return g;
}

inline void Submit(const RuntimeHooks* h, Pending op, StreamCode code, const char* lib) {
  if (Group().depth > 0) {
    Group().ops.push_back(std::move(op));
    return;
  }
  std::vector<Pending> one;
  one.push_back(std::move(op));
  Queue(h, std::move(one), code, lib);
}

// At the outermost GroupEnd: one queued task per communicator, holding its calls in order. "" or why not.
inline std::string EndGroup(const RuntimeHooks* h, StreamCode code, const char* lib) {
  std::vector<Pending> ops = std::move(Group().ops);
  Group().ops.clear();
  std::vector<std::shared_ptr<coll::Comm>> comms;
  for (const Pending& op : ops) {
    bool seen = false;
    for (auto& c : comms) seen = seen || c == op.comm;
    if (!seen) comms.push_back(op.comm);
  }
  for (auto& c : comms) {
    std::vector<Pending> mine;
    for (Pending& op : ops)
      if (op.comm == c) mine.push_back(op);
    for (const Pending& op : mine)
      if (op.stream != mine.front().stream)
        return "the calls of one communicator in a group must use one stream (a limitation of this shim)";
  }
  for (auto& c : comms) {
    std::vector<Pending> mine;
    for (Pending& op : ops)
      if (op.comm == c) mine.push_back(op);
    Queue(h, std::move(mine), code, lib);
  }
  return "";
}

}  // namespace tshim::ccl
