// tests/shims/shim_coll: the shared-memory collective engine of the HCCL and MCCL host shims (see shim_coll.hpp).
//
// Segment: [Header][RankSlot x n][Chan x n*n] | page | [slot data: n x slot_bytes][channel data: n*n x chan].
// A collective runs in chunks that fit a slot: every rank writes its part into its own slot, a barrier, every
// rank reads what it needs from all slots, a barrier. The first chunk also carries a descriptor (operation,
// count, type, op, root) that every rank compares with the others', so ranks that disagree fail instead of
// computing garbage. Send/recv use one single-producer ring per ordered pair (src, dst); each message starts
// with a 16-byte header (its sequence number per peer and its size) that the receiver checks.
#include "shim_coll.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <thread>

#include "shim_runtime.hpp"

namespace tshim::coll {

namespace {
using Clock = std::chrono::steady_clock;
constexpr char kIdMagic[8] = "TSRSHM1";
constexpr int kMaxRanks = 256;
struct IdBlob {
  char magic[8];
  int32_t root_pid;
  uint32_t pad;
  uint64_t nonce;
  uint64_t slot_bytes;
  uint64_t chan_bytes;
  char shm_name[72];
};
static_assert(sizeof(IdBlob) <= kIdBytes);
enum Kind : uint32_t { kAllReduce = 1, kReduceScatter, kAllGather, kBroadcast, kBarrier };
const char* KindName(uint32_t k) {
  static const char* const kNames[] = {"?", "allreduce", "reduce-scatter", "allgather", "broadcast", "barrier"};
  return k <= kBarrier ? kNames[k] : "?";
}
size_t Round(size_t n, size_t a) { return (n + a - 1) / a * a; }
uint64_t MsSince(Clock::time_point t) {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t).count());
}
void Backoff(int* spins) {
  if (*spins < 64) {
    ++*spins;
    std::this_thread::yield();
    return;
  }
  const int us = std::min(200, 20 << std::min(4, (*spins - 64) / 16));
  ++*spins;
  std::this_thread::sleep_for(std::chrono::microseconds(us));
}
std::string List(const std::vector<int>& v) {
  std::string s;
  for (int r : v) s += (s.empty() ? "" : ",") + std::to_string(r);
  return s;
}
}  // namespace

struct Comm::Header {
  std::atomic<uint32_t> state;  // 1 once the creator initialised the header
  uint32_t nranks;
  uint64_t slot_bytes, chan_bytes;
  std::atomic<uint32_t> joined;
  std::atomic<int32_t> failed_rank;  // -1 none, -2 a message is being written, else the rank that failed
  char failed_msg[512];
};
struct alignas(64) Comm::RankSlot {
  std::atomic<uint64_t> arrive;  // barrier phases passed
  std::atomic<int32_t> pid;
  uint32_t kind, dtype;
  int32_t op, root;
  uint64_t count, seq;
};
struct alignas(64) Comm::Chan {
  std::atomic<uint64_t> head;  // bytes consumed (written by dst)
  char pad[56];
  std::atomic<uint64_t> tail;  // bytes produced (written by src)
};
static_assert(std::atomic<uint64_t>::is_always_lock_free && std::atomic<int32_t>::is_always_lock_free);

void MakeId(void* out, size_t out_bytes) {
  std::memset(out, 0, out_bytes);
  IdBlob b{};
  std::memcpy(b.magic, kIdMagic, sizeof b.magic);
  b.root_pid = static_cast<int32_t>(getpid());
  if (getrandom(&b.nonce, sizeof b.nonce, 0) != static_cast<ssize_t>(sizeof b.nonce))
    b.nonce = static_cast<uint64_t>(Clock::now().time_since_epoch().count());
  b.slot_bytes = std::max<uint64_t>(4096, EnvU64("TESSERA_SHIM_SLOT_BYTES", 1 << 20));
  b.chan_bytes = std::max<uint64_t>(64, EnvU64("TESSERA_SHIM_CHANNEL_BYTES", 256 << 10));
  std::snprintf(b.shm_name, sizeof b.shm_name, "/tessera-shim-%d-%016llx", b.root_pid,
                static_cast<unsigned long long>(b.nonce));
  std::memcpy(out, &b, std::min(out_bytes, sizeof b));
}

bool ParseId(const void* in, size_t in_bytes, std::string* why) {
  IdBlob b{};
  if (in_bytes < sizeof b) return *why = "id too short", false;
  std::memcpy(&b, in, sizeof b);
  if (std::memcmp(b.magic, kIdMagic, sizeof b.magic) != 0)
    return *why = "not an id made by this shim's GetRootInfo/GetUniqueId (bad magic)", false;
  if (b.shm_name[0] != '/' || !std::memchr(b.shm_name, 0, sizeof b.shm_name)) return *why = "corrupt id", false;
  return true;
}

Result Comm::Create(const void* id, int nranks, int rank, int device, std::shared_ptr<Comm>* out) {
  std::string why;
  if (!ParseId(id, kIdBytes, &why)) return {Err::kInvalid, why};
  if (nranks < 1 || nranks > kMaxRanks) return {Err::kInvalid, Fmt("nranks %d is not in [1, %d]", nranks, kMaxRanks)};
  if (rank < 0 || rank >= nranks) return {Err::kInvalid, Fmt("rank %d is not in [0, %d)", rank, nranks)};
  IdBlob b;
  std::memcpy(&b, id, sizeof b);
  std::shared_ptr<Comm> c(new Comm());
  c->rank_ = rank;
  c->nranks_ = nranks;
  c->device_ = device;
  c->timeout_ms_ = std::max<uint64_t>(1, EnvU64("TESSERA_SHIM_TIMEOUT_MS", 5000));
  const uint64_t init_ms = std::max<uint64_t>(1, EnvU64("TESSERA_SHIM_INIT_TIMEOUT_MS", 60000));
  const size_t n = static_cast<size_t>(nranks);
  const size_t meta = Round(sizeof(Header), 64) + n * sizeof(RankSlot) + n * n * sizeof(Chan);
  c->map_bytes_ = Round(meta, 4096) + n * b.slot_bytes + n * n * b.chan_bytes;

  const auto start = Clock::now();
  int fd = -1;
  bool creator = false;
  while (fd < 0) {
    fd = shm_open(b.shm_name, O_RDWR | O_CREAT | O_EXCL, 0600);
    if (fd >= 0) {
      creator = true;
      if (ftruncate(fd, static_cast<off_t>(c->map_bytes_)) != 0) {
        close(fd);
        shm_unlink(b.shm_name);
        return {Err::kSystem, Fmt("ftruncate(%s): %s", b.shm_name, std::strerror(errno))};
      }
      break;
    }
    if (errno != EEXIST) return {Err::kSystem, Fmt("shm_open(%s): %s", b.shm_name, std::strerror(errno))};
    fd = shm_open(b.shm_name, O_RDWR, 0600);
    if (fd < 0 && errno != ENOENT) return {Err::kSystem, Fmt("shm_open(%s): %s", b.shm_name, std::strerror(errno))};
  }
  // A joiner may arrive before the creator sized the segment: wait for a size, map it, wait for the header.
  struct stat st {};
  while (fstat(fd, &st) != 0 || st.st_size == 0) {
    if (MsSince(start) > init_ms) {
      close(fd);
      return {Err::kTimeout, Fmt("rank %d: the communicator's segment was not set up within %llu ms", rank,
                                 static_cast<unsigned long long>(init_ms))};
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  const size_t have = static_cast<size_t>(st.st_size);
  void* m = mmap(nullptr, have, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (m == MAP_FAILED) return {Err::kSystem, Fmt("mmap: %s", std::strerror(errno))};
  const size_t want = c->map_bytes_;
  c->map_ = m;
  c->map_bytes_ = have;
  c->hdr_ = static_cast<Header*>(m);
  if (creator) {
    c->hdr_->nranks = static_cast<uint32_t>(nranks);
    c->hdr_->slot_bytes = b.slot_bytes;
    c->hdr_->chan_bytes = b.chan_bytes;
    c->hdr_->failed_rank.store(-1);
    c->hdr_->state.store(1, std::memory_order_release);
  }
  int spins = 0;
  while (c->hdr_->state.load(std::memory_order_acquire) != 1) {
    if (MsSince(start) > init_ms) return {Err::kTimeout, "the communicator's segment was never initialised"};
    Backoff(&spins);
  }
  if (c->hdr_->nranks != static_cast<uint32_t>(nranks) || have != want)
    return {Err::kInvalid,
            Fmt("rank %d was given nRanks %d but the communicator was created with %u", rank, nranks, c->hdr_->nranks)};
  RankSlot* me = c->SlotMeta(rank);
  int32_t expected = 0;
  if (!me->pid.compare_exchange_strong(expected, static_cast<int32_t>(getpid())))
    return {Err::kInvalid, Fmt("rank %d joined twice (pids %d and %d)", rank, expected, static_cast<int>(getpid()))};
  c->hdr_->joined.fetch_add(1, std::memory_order_acq_rel);
  c->pids_.assign(n, 0);
  c->send_seq_.assign(n, 0);
  c->recv_seq_.assign(n, 0);
  while (c->hdr_->joined.load(std::memory_order_acquire) < n) {
    if (MsSince(start) > init_ms) {
      if (creator) shm_unlink(b.shm_name);
      return {Err::kTimeout, Fmt("only %u of %d ranks joined within %llu ms", c->hdr_->joined.load(), nranks,
                                 static_cast<unsigned long long>(init_ms))};
    }
    for (size_t q = 0; q < n; ++q) {
      const int32_t p = c->SlotMeta(static_cast<int>(q))->pid.load();
      // A rank may join and exit at once: only a death before everyone joined is a failure here.
      if (p > 0 && !ProcessAlive(p) && c->hdr_->joined.load(std::memory_order_acquire) < n)
        return {Err::kPeerDead, Fmt("rank %zu (pid %d) exited during communicator initialisation", q, p)};
    }
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  for (size_t q = 0; q < n; ++q) c->pids_[q] = c->SlotMeta(static_cast<int>(q))->pid.load();
  shm_unlink(b.shm_name);  // everyone has it mapped; nothing is left behind in /dev/shm
  *out = std::move(c);
  return {};
}

Comm::~Comm() {
  if (map_) munmap(map_, map_bytes_);
}

Comm::RankSlot* Comm::SlotMeta(int r) const {
  return reinterpret_cast<RankSlot*>(static_cast<char*>(map_) + Round(sizeof(Header), 64)) + r;
}
Comm::Chan* Comm::Channel(int src, int dst) const {
  return reinterpret_cast<Chan*>(reinterpret_cast<char*>(SlotMeta(0) + nranks_)) + (src * nranks_ + dst);
}
char* Comm::Slot(int r) const {
  const size_t n = static_cast<size_t>(nranks_);
  const size_t meta = Round(sizeof(Header), 64) + n * sizeof(RankSlot) + n * n * sizeof(Chan);
  return static_cast<char*>(map_) + Round(meta, 4096) + static_cast<size_t>(r) * hdr_->slot_bytes;
}
char* Comm::ChannelData(int src, int dst) const {
  return Slot(nranks_) + static_cast<size_t>(src * nranks_ + dst) * hdr_->chan_bytes;
}

uint64_t Comm::TakeTicket() {
  std::lock_guard<std::mutex> l(mu_);
  return next_ticket_++;
}

Result Comm::Run(uint64_t ticket, const std::function<Result()>& body) {
  {
    std::unique_lock<std::mutex> l(mu_);
    if (!cv_.wait_for(l, std::chrono::milliseconds(timeout_ms_), [&] { return serving_ == ticket || aborted_; })) {
      l.unlock();
      Result r{Err::kTimeout,
               Fmt("operation %llu waited %llu ms for the previous operation on this communicator",
                   static_cast<unsigned long long>(ticket), static_cast<unsigned long long>(timeout_ms_))};
      Fail(r);
      Abort();
      return r;
    }
  }
  Result r;
  const Result prev = async_error();
  if (aborted_) {
    r = {Err::kAborted, "the communicator was aborted"};
  } else if (!prev.ok()) {
    r = {prev.err, "the communicator failed earlier: " + prev.msg};
  } else {
    r = body();
    if (!r.ok()) Fail(r);
  }
  std::lock_guard<std::mutex> l(mu_);
  ++serving_;
  cv_.notify_all();
  return r;
}

bool Comm::Drain() {
  std::unique_lock<std::mutex> l(mu_);
  return cv_.wait_for(l, std::chrono::milliseconds(timeout_ms_), [&] { return serving_ == next_ticket_ || aborted_; });
}

uint64_t Comm::InFlight() {
  std::lock_guard<std::mutex> l(mu_);
  return next_ticket_ - serving_;
}

void Comm::Abort() {
  aborted_ = true;
  int32_t none = -1;
  if (hdr_->failed_rank.compare_exchange_strong(none, -2)) {
    std::snprintf(hdr_->failed_msg, sizeof hdr_->failed_msg, "rank %d aborted its communicator", rank_);
    hdr_->failed_rank.store(rank_, std::memory_order_release);
  }
  std::lock_guard<std::mutex> l(mu_);
  cv_.notify_all();
}

Result Comm::async_error() {
  std::lock_guard<std::mutex> l(mu_);
  return async_;
}

Result Comm::Fail(Result r) {
  {
    std::lock_guard<std::mutex> l(mu_);
    if (async_.ok()) async_ = r;
  }
  int32_t none = -1;
  if (r.err != Err::kRemoteAbort && hdr_->failed_rank.compare_exchange_strong(none, -2)) {
    std::snprintf(hdr_->failed_msg, sizeof hdr_->failed_msg, "%s", r.msg.c_str());
    hdr_->failed_rank.store(rank_, std::memory_order_release);
  }
  return r;
}

Result Comm::WaitFor(const std::function<bool(std::vector<int>*)>& ready, const char* what) {
  const auto start = Clock::now();
  auto last_check = start;
  std::vector<int> waiting;
  int spins = 0;
  for (;;) {
    waiting.clear();
    if (ready(&waiting)) return {};
    if (aborted_) return {Err::kAborted, Fmt("%s: the communicator was aborted", what)};
    const int32_t fr = hdr_->failed_rank.load(std::memory_order_acquire);
    if (fr >= 0 && fr != rank_)
      return {Err::kRemoteAbort, Fmt("%s: rank %d failed: %s", what, static_cast<int>(fr), hdr_->failed_msg)};
    if (std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - last_check).count() >= 20) {
      last_check = Clock::now();
      for (int q : waiting) {
        if (ProcessAlive(pids_[static_cast<size_t>(q)])) continue;
        std::vector<int> again;  // it may have done its part just before exiting
        if (ready(&again)) return {};
        return {Err::kPeerDead, Fmt("%s: rank %d (pid %d) exited while rank %d waited for it", what, q,
                                    static_cast<int>(pids_[static_cast<size_t>(q)]), rank_)};
      }
    }
    if (MsSince(start) > timeout_ms_)
      return {Err::kTimeout, Fmt("%s: rank %d saw no progress from rank(s) %s within %llu ms", what, rank_,
                                 List(waiting).c_str(), static_cast<unsigned long long>(timeout_ms_))};
    Backoff(&spins);
  }
}

Result Comm::Sync(const char* what) {
  ++phase_;
  SlotMeta(rank_)->arrive.store(phase_, std::memory_order_release);
  return WaitFor(
      [&](std::vector<int>* waiting) {
        for (int q = 0; q < nranks_; ++q)
          if (SlotMeta(q)->arrive.load(std::memory_order_acquire) < phase_) waiting->push_back(q);
        return waiting->empty();
      },
      what);
}

Result Comm::Collective(uint32_t kind, DType t, size_t count, int op, int root, size_t nchunks,
                        const std::function<void(size_t)>& produce, const std::function<void(size_t)>& consume) {
  RankSlot* me = SlotMeta(rank_);
  ++op_seq_;
  me->kind = kind;
  me->dtype = static_cast<uint32_t>(t);
  me->count = count;
  me->op = op;
  me->root = root;
  me->seq = op_seq_;
  const std::string what = Fmt("%s #%llu", KindName(kind), static_cast<unsigned long long>(op_seq_));
  for (size_t c = 0; c < std::max<size_t>(nchunks, 1); ++c) {
    if (nchunks) produce(c);
    Result r = Sync(what.c_str());
    if (!r.ok()) return r;
    if (c == 0) {
      for (int q = 0; q < nranks_; ++q) {
        const RankSlot* o = SlotMeta(q);
        if (o->kind != me->kind || o->dtype != me->dtype || o->count != me->count || o->op != me->op ||
            o->root != me->root || o->seq != me->seq)
          return {Err::kInvalid,
                  Fmt("the ranks disagree on operation #%llu: rank %d called %s(count %llu, %s, op %d, root %d), "
                      "rank %d called %s(count %llu, %s, op %d, root %d) as its #%llu",
                      static_cast<unsigned long long>(op_seq_), rank_, KindName(me->kind),
                      static_cast<unsigned long long>(me->count), Name(t), me->op, me->root, q, KindName(o->kind),
                      static_cast<unsigned long long>(o->count), Name(static_cast<DType>(o->dtype % 12)), o->op,
                      o->root, static_cast<unsigned long long>(o->seq))};
      }
    }
    if (nchunks) consume(c);
    r = Sync(what.c_str());
    if (!r.ok()) return r;
  }
  return {};
}

Result Comm::AllReduce(const char* in, char* out, size_t count, DType t, Op op) {
  const size_t e = Size(t), per = hdr_->slot_bytes / e, nchunks = (count + per - 1) / per;
  std::vector<const char*> src(static_cast<size_t>(nranks_));
  auto len = [&](size_t c) { return std::min(per, count - c * per); };
  return Collective(
      kAllReduce, t, count, static_cast<int>(op), 0, nchunks,
      [&](size_t c) { std::memcpy(Slot(rank_), in + c * per * e, len(c) * e); },
      [&](size_t c) {
        // Split at the ring's part boundaries: each part starts its ring at a different rank.
        const size_t part = (count + static_cast<size_t>(nranks_) - 1) / static_cast<size_t>(nranks_);
        for (size_t i = c * per, end = c * per + len(c); i < end;) {
          const int owner = AllReduceOwner(i, count, nranks_);
          const size_t stop = std::min(end, (static_cast<size_t>(owner) + 1) * part);
          for (int q = 0; q < nranks_; ++q) src[static_cast<size_t>(q)] = Slot(q) + (i - c * per) * e;
          Fold(t, op, src.data(), nranks_, RingFirst(owner, nranks_), out + i * e, stop - i);
          i = stop;
        }
      });
}

Result Comm::ReduceScatter(const char* in, char* out, size_t recvcount, DType t, Op op) {
  const size_t e = Size(t), n = static_cast<size_t>(nranks_);
  const size_t per = hdr_->slot_bytes / (e * n), nchunks = (recvcount + per - 1) / per;
  std::vector<const char*> src(n);
  auto len = [&](size_t c) { return std::min(per, recvcount - c * per); };
  return Collective(
      kReduceScatter, t, recvcount, static_cast<int>(op), 0, nchunks,
      [&](size_t c) {
        for (size_t j = 0; j < n; ++j)
          std::memcpy(Slot(rank_) + j * per * e, in + (j * recvcount + c * per) * e, len(c) * e);
      },
      [&](size_t c) {
        for (int q = 0; q < nranks_; ++q) src[static_cast<size_t>(q)] = Slot(q) + static_cast<size_t>(rank_) * per * e;
        Fold(t, op, src.data(), nranks_, RingFirst(rank_, nranks_), out + c * per * e, len(c));
      });
}

Result Comm::AllGather(const char* in, char* out, size_t sendcount, DType t) {
  const size_t e = Size(t), per = hdr_->slot_bytes / e, nchunks = (sendcount + per - 1) / per;
  auto len = [&](size_t c) { return std::min(per, sendcount - c * per); };
  return Collective(
      kAllGather, t, sendcount, 0, 0, nchunks,
      [&](size_t c) { std::memcpy(Slot(rank_), in + c * per * e, len(c) * e); },
      [&](size_t c) {
        for (int q = 0; q < nranks_; ++q)
          std::memmove(out + (static_cast<size_t>(q) * sendcount + c * per) * e, Slot(q), len(c) * e);
      });
}

Result Comm::Broadcast(const char* in, char* out, size_t count, DType t, int root) {
  const size_t e = Size(t), per = hdr_->slot_bytes / e, nchunks = (count + per - 1) / per;
  auto len = [&](size_t c) { return std::min(per, count - c * per); };
  return Collective(
      kBroadcast, t, count, 0, root, nchunks,
      [&](size_t c) {
        if (rank_ == root) std::memcpy(Slot(root), in + c * per * e, len(c) * e);
      },
      [&](size_t c) {
        if (rank_ != root || in != out) std::memcpy(out + c * per * e, Slot(root), len(c) * e);
      });
}

Result Comm::Barrier() { return Collective(kBarrier, DType::kI8, 0, 0, 0, 0, nullptr, nullptr); }

namespace {
struct Wire {  // the header in front of every message
  uint64_t seq;
  uint64_t bytes;
};
}  // namespace

Result Comm::P2P(const std::vector<P2POp>& ops) {
  struct State {
    P2POp op;
    Wire wire;  // sent as is, or received into
    uint64_t want_seq;
    size_t done = 0;  // bytes of header + payload moved
    bool checked = false;
  };
  std::vector<State> st;
  for (const P2POp& o : ops) {
    if (o.peer < 0 || o.peer >= nranks_) return {Err::kInvalid, Fmt("peer %d is not in [0, %d)", o.peer, nranks_)};
    State s{o, {}, 0, 0, false};
    s.want_seq = o.send ? ++send_seq_[static_cast<size_t>(o.peer)] : ++recv_seq_[static_cast<size_t>(o.peer)];
    if (o.send) s.wire = {s.want_seq, o.bytes};
    st.push_back(s);
  }
  const uint64_t cap = hdr_->chan_bytes;
  // Moves what it can for `s`; returns the bytes moved.
  auto step = [&](State& s) -> size_t {
    const size_t total = sizeof(Wire) + s.op.bytes;
    if (s.done == total) return 0;
    const int src = s.op.send ? rank_ : s.op.peer, dst = s.op.send ? s.op.peer : rank_;
    Chan* ch = Channel(src, dst);
    char* ring = ChannelData(src, dst);
    const uint64_t head = ch->head.load(std::memory_order_acquire), tail = ch->tail.load(std::memory_order_acquire);
    const uint64_t room = s.op.send ? cap - (tail - head) : tail - head;
    size_t k = static_cast<size_t>(std::min<uint64_t>(room, total - s.done));
    if (!s.op.send && s.done < sizeof(Wire)) k = std::min(k, sizeof(Wire) - s.done);  // check the header first
    uint64_t pos = s.op.send ? tail : head;
    for (size_t moved = 0; moved < k;) {
      const size_t off = s.done + moved;
      char* local = off < sizeof(Wire) ? reinterpret_cast<char*>(&s.wire) + off : s.op.buf + (off - sizeof(Wire));
      size_t piece = std::min<size_t>(k - moved, off < sizeof(Wire) ? sizeof(Wire) - off : k - moved);
      piece = std::min<size_t>(piece, static_cast<size_t>(cap - pos % cap));
      if (s.op.send)
        std::memcpy(ring + pos % cap, local, piece);
      else
        std::memcpy(local, ring + pos % cap, piece);
      moved += piece;
      pos += piece;
    }
    if (s.op.send)
      ch->tail.store(tail + k, std::memory_order_release);
    else
      ch->head.store(head + k, std::memory_order_release);
    s.done += k;
    return k;
  };
  for (;;) {
    bool all = true, progress = false;
    for (State& s : st) {
      if (step(s)) progress = true;
      if (!s.op.send && !s.checked && s.done >= sizeof(Wire)) {
        s.checked = true;
        const uint64_t want_seq = s.want_seq, want_bytes = s.op.bytes;
        if (s.wire.seq != want_seq || s.wire.bytes != want_bytes)
          return {
              Err::kInvalid,
              Fmt("rank %d received message %llu of %llu bytes from rank %d but posted "
                  "receive %llu of %llu bytes",
                  rank_, static_cast<unsigned long long>(s.wire.seq), static_cast<unsigned long long>(s.wire.bytes),
                  s.op.peer, static_cast<unsigned long long>(want_seq), static_cast<unsigned long long>(want_bytes))};
      }
      if (s.done < sizeof(Wire) + s.op.bytes) all = false;
    }
    if (all) return {};
    if (progress) continue;
    Result r = WaitFor(
        [&](std::vector<int>* waiting) {
          bool can = false;
          for (const State& s : st) {
            if (s.done == sizeof(Wire) + s.op.bytes) continue;
            const Chan* ch = s.op.send ? Channel(rank_, s.op.peer) : Channel(s.op.peer, rank_);
            const uint64_t used = ch->tail.load(std::memory_order_acquire) - ch->head.load(std::memory_order_acquire);
            if (s.op.send ? used < cap : used > 0) can = true;
            waiting->push_back(s.op.peer);
          }
          return can;
        },
        "send/recv");
    if (!r.ok()) return r;
  }
}

}  // namespace tshim::coll
