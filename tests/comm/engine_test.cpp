// tests/comm/engine_test: comm/engine in one process, over in-memory channels whose capacity, pace and
// failures the test controls, and over real TCP channels on socket pairs: messages of 0, 1 and odd sizes
// arrive intact and in order with their padding consumed; channels that take a few bytes at a time
// still complete; folds run in contributor order whatever order the contributions arrive in; a result
// sent with SendResult equals its reduction; a RecvCheck's error ends the run; a channel error, a failed
// health check and a silent peer each end Run with an error naming the peer instead of hanging.
#include "comm/engine.hpp"

#include <gtest/gtest.h>
#include <sys/socket.h>

#include <chrono>
#include <cstring>
#include <memory>
#include <numeric>
#include <vector>

#include "comm/reduce/reduce.hpp"
#include "comm/transport/tcp.hpp"
#include "common/dtype.hpp"

namespace tessera::comm {
namespace {

using namespace std::chrono_literals;

// A one-way byte stream in memory: at most `capacity` bytes buffered, at most `step` bytes per call.
struct Pipe {
  size_t capacity = 1 << 20;
  size_t step = SIZE_MAX;
  int hold = 0;  // Peek returns nothing for this many more calls (a slow peer)
  Status fail;   // returned by every TrySend/Peek once set
  std::vector<std::byte> buf;
  size_t rd = 0;
  size_t sent = 0, consumed = 0;  // totals
  size_t buffered() const { return buf.size() - rd; }
};

class PipeSender final : public SendChannel {
 public:
  explicit PipeSender(Pipe* p) : p_(p) {}
  Result<size_t> TrySend(const void* src, size_t bytes) override {
    if (!p_->fail.ok()) return p_->fail;
    const size_t n = std::min({bytes, p_->step, p_->capacity - p_->buffered()});
    const auto* b = static_cast<const std::byte*>(src);
    p_->buf.insert(p_->buf.end(), b, b + n);
    p_->sent += n;
    return n;
  }
  const char* transport() const override { return "pipe"; }

 private:
  Pipe* p_;
};

class PipeReceiver final : public RecvChannel {
 public:
  explicit PipeReceiver(Pipe* p) : p_(p) {}
  Result<std::pair<const std::byte*, size_t>> Peek() override {
    if (!p_->fail.ok()) return p_->fail;
    if (p_->hold > 0) {
      --p_->hold;
      return std::pair<const std::byte*, size_t>(nullptr, 0);
    }
    if (p_->rd > 4096 && p_->rd * 2 > p_->buf.size()) {  // compact
      p_->buf.erase(p_->buf.begin(), p_->buf.begin() + static_cast<std::ptrdiff_t>(p_->rd));
      p_->rd = 0;
    }
    return std::pair<const std::byte*, size_t>(p_->buf.data() + p_->rd, std::min(p_->buffered(), p_->step));
  }
  void Consume(size_t bytes) override {
    ASSERT_LE(bytes, p_->buffered());
    p_->rd += bytes;
    p_->consumed += bytes;
  }
  const char* transport() const override { return "pipe"; }

 private:
  Pipe* p_;
};

// A sender that sends from the caller's host memory (as the ucx row does): TrySendFrom keeps the pointer, and the
// bytes enter the pipe only once SentFromDone has been asked `late` times since the last send (a transport whose
// sends complete later). Whatever TrySend copies waits behind them, so the stream keeps its order.
class BorrowingSender final : public SendChannel {
 public:
  explicit BorrowingSender(Pipe* p) : p_(p) {}
  Result<size_t> TrySend(const void* src, size_t bytes) override {
    const auto* b = static_cast<const std::byte*>(src);
    queued_.push_back({nullptr, bytes, std::vector<std::byte>(b, b + bytes)});
    copied += bytes;
    return bytes;
  }
  bool sends_from(std::string_view memory) const override { return memory == "host"; }
  Result<size_t> TrySendFrom(const void* src, size_t bytes, std::string_view memory) override {
    EXPECT_EQ(memory, "host");
    const size_t n = std::min(bytes, size_t{1000});  // several posts per message
    queued_.push_back({static_cast<const std::byte*>(src), n, {}});
    borrowed += n;
    asks_ = 0;
    return n;
  }
  Result<bool> SentFromDone() override {
    if (++asks_ < late) return false;
    for (auto& q : queued_) {
      const std::byte* b = q.from != nullptr ? q.from : q.copy.data();
      p_->buf.insert(p_->buf.end(), b, b + q.bytes);
      p_->sent += q.bytes;
    }
    queued_.clear();
    return true;
  }
  const char* transport() const override { return "borrowing"; }
  int late = 3;
  size_t copied = 0, borrowed = 0;

 private:
  struct Queued {
    const std::byte* from;  // the caller's memory, or null: `copy`
    size_t bytes;
    std::vector<std::byte> copy;
  };
  Pipe* p_;
  std::vector<Queued> queued_;
  int asks_ = 0;
};

// Links where peer p's channels are the two ends of one pipe each way: what this rank sends to p comes
// back as what it receives from p, so one engine plays both sides of a schedule.
class LoopLinks final : public Links {
 public:
  explicit LoopLinks(int peers, std::chrono::milliseconds timeout = 10s) : timeout_(timeout), pipes_(peers) {
    for (auto& p : pipes_) {
      sends_.push_back(std::make_unique<PipeSender>(&p));
      recvs_.push_back(std::make_unique<PipeReceiver>(&p));
    }
  }
  Pipe& pipe(int peer) { return pipes_[peer]; }
  SendChannel* send(int peer) override { return sends_[peer].get(); }
  RecvChannel* recv(int peer) override { return recvs_[peer].get(); }
  Status CheckHealth(const std::vector<int>& waiting_on) override {
    ++health_checks;
    last_waiting_on = waiting_on;
    return health;
  }
  std::string PeerName(int peer) const override { return "rank " + std::to_string(peer) + " (test)"; }
  std::chrono::milliseconds timeout() const override { return timeout_; }
  Status ExplainTimeout(const std::vector<int>& owed, Status timeout) override {
    explained_owed = owed;
    return timeout;
  }
  // Replaces peer p's receive channel (a delayed or failing one, a TCP one).
  void SetRecv(int peer, std::unique_ptr<RecvChannel> ch) { recvs_[peer] = std::move(ch); }
  void SetSend(int peer, std::unique_ptr<SendChannel> ch) { sends_[peer] = std::move(ch); }

  Status health;
  int health_checks = 0;
  std::vector<int> last_waiting_on, explained_owed;

 private:
  std::chrono::milliseconds timeout_;
  std::vector<Pipe> pipes_;
  std::vector<std::unique_ptr<SendChannel>> sends_;
  std::vector<std::unique_ptr<RecvChannel>> recvs_;
};

std::vector<std::byte> Pattern(size_t n, unsigned seed) {
  std::vector<std::byte> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<std::byte>((i * 131 + seed * 7 + (i >> 8)) & 0xff);
  return v;
}

TEST(Engine, RunWithNothingQueuedAndZeroByteMessagesReturnsAtOnce) {
  LoopLinks links(2);
  Engine e(&links);
  EXPECT_TRUE(e.Run("empty").ok());
  std::byte b{};
  e.Send(1, &b, 0);
  e.RecvCopy(1, &b, 0);
  ReduceJob job;
  job.n = 0;
  job.Init(2);
  e.RecvFold(1, &job, 1);
  e.LocalFold(&job, 0, &b);
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_TRUE(e.Run("zero bytes").ok());
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 5s);
  EXPECT_EQ(links.pipe(1).sent, 0u);  // nothing, not even padding, went on the wire
}

TEST(Engine, MessagesOfOddSizesArriveIntactInOrderAndPadded) {
  const std::vector<size_t> sizes = {1, 2, 3, 7, 8, 9, 13, 64, 255, 4099, 300001};
  for (size_t step : {size_t{1}, size_t{3}, size_t{4096}, SIZE_MAX}) {
    LoopLinks links(2);
    links.pipe(1).step = step;
    links.pipe(1).capacity = step == SIZE_MAX ? (1 << 20) : 64;  // a small channel: many partial sends
    if (step == 1) links.pipe(1).capacity = 5;
    std::vector<std::vector<std::byte>> in, out;
    for (size_t i = 0; i < sizes.size(); ++i) {
      in.push_back(Pattern(sizes[i], static_cast<unsigned>(i)));
      out.emplace_back(sizes[i], std::byte{0xEE});
    }
    Engine e(&links);
    for (size_t i = 0; i < sizes.size(); ++i) {
      e.Send(1, in[i].data(), in[i].size());
      e.RecvCopy(1, out[i].data(), out[i].size());
    }
    ASSERT_TRUE(e.Run("odd sizes").ok());
    size_t padded = 0;
    for (size_t i = 0; i < sizes.size(); ++i) {
      EXPECT_EQ(out[i], in[i]) << "message " << i << " of " << sizes[i] << " bytes, step " << step;
      padded += PadToChannel(sizes[i]);
    }
    // Every message took its padded length on the wire and the receiver consumed all of it.
    EXPECT_EQ(links.pipe(1).sent, padded);
    EXPECT_EQ(links.pipe(1).consumed, padded);
    EXPECT_EQ(links.pipe(1).buffered(), 0u);
  }
}

// A channel that sends from the caller's host memory gets the message itself (no copy but the padding), and the
// message's op ends only once the channel says its bytes have left that memory: here they leave only then, so an
// engine that ended the op earlier would wait for its own receive until the timeout.
TEST(Engine, AChannelThatSendsFromHostMemoryIsHandedTheCallersBytesAndHeldToTheirEnd) {
  LoopLinks links(2, 5s);
  auto sender = std::make_unique<BorrowingSender>(&links.pipe(1));
  BorrowingSender* ch = sender.get();
  links.SetSend(1, std::move(sender));
  const std::vector<size_t> sizes = {1, 13, 4099, 300001};
  size_t total = 0, padding = 0;
  std::vector<std::vector<std::byte>> in, out;
  for (size_t i = 0; i < sizes.size(); ++i) {
    in.push_back(Pattern(sizes[i], static_cast<unsigned>(i)));
    out.emplace_back(sizes[i], std::byte{0xEE});
    total += sizes[i];
    padding += PadToChannel(sizes[i]) - sizes[i];
  }
  Engine e(&links);
  for (size_t i = 0; i < sizes.size(); ++i) {
    e.Send(1, in[i].data(), in[i].size());
    e.RecvCopy(1, out[i].data(), out[i].size());
  }
  ASSERT_TRUE(e.Run("sends from host memory").ok());
  for (size_t i = 0; i < sizes.size(); ++i) EXPECT_EQ(out[i], in[i]) << "message " << i << " of " << sizes[i];
  EXPECT_EQ(ch->borrowed, total);  // every byte of the messages from the caller's memory
  EXPECT_EQ(ch->copied, padding);  // and only the padding copied
}

TEST(Engine, ReusedAfterRunForTheNextStep) {
  LoopLinks links(3);
  Engine e(&links);
  for (int round = 0; round < 3; ++round) {
    auto a = Pattern(1000 + round, round), b = Pattern(17, round + 9);
    std::vector<std::byte> ra(a.size()), rb(b.size());
    e.Send(1, a.data(), a.size());
    e.Send(2, b.data(), b.size());
    e.RecvCopy(2, rb.data(), rb.size());
    e.RecvCopy(1, ra.data(), ra.size());
    ASSERT_TRUE(e.Run("round").ok()) << round;
    EXPECT_EQ(ra, a);
    EXPECT_EQ(rb, b);
  }
}

// Three contributors whose f32 sum depends on the order: (1e8 + -1e8) + 1 = 1, but (1e8 + 1) + -1e8 = 0.
TEST(Engine, FoldsInContributorOrderWhateverOrderTheyArriveIn) {
  const size_t n = 1001;  // odd
  std::vector<float> c0(n, 1e8f), c1(n, -1e8f), c2(n, 1.0f);
  for (int late : {1, 2}) {  // contributor 1 (or 2) is held back: the other arrives first
    LoopLinks links(3);
    links.pipe(late).hold = 5000;
    std::vector<float> acc(n, -7.f);
    ReduceJob job;
    job.acc = acc.data();
    job.n = n;
    job.dtype = DType::kFloat32;
    job.op = RedOp::kSum;
    job.Init(3);
    Engine e(&links);
    e.Send(1, c1.data(), n * sizeof(float));  // loops back as contributor 1's stream
    e.Send(2, c2.data(), n * sizeof(float));
    e.LocalFold(&job, 0, c0.data());
    e.RecvFold(1, &job, 1);
    e.RecvFold(2, &job, 2);
    ASSERT_TRUE(e.Run("ordered fold").ok());
    for (size_t i = 0; i < n; ++i) ASSERT_EQ(acc[i], (c0[i] + c1[i]) + c2[i]) << "element " << i << ", late " << late;
    EXPECT_EQ(acc[0], 1.0f);  // and not the other order's 0
  }
}

TEST(Engine, TwoContributorBf16JobFinalizesIntoItsOutput) {
  const size_t n = 37;
  std::vector<uint16_t> a(n), b(n), out(n, 0xFFFF);
  for (size_t i = 0; i < n; ++i) {
    a[i] = F32ToBf16(static_cast<float>(i) * 0.75f);
    b[i] = F32ToBf16(1.0f / static_cast<float>(i + 1));
  }
  for (int local : {0, 1}) {  // the local contributor first or second
    LoopLinks links(2);
    std::vector<float> acc(n);
    ReduceJob job;
    job.acc = acc.data();
    job.n = n;
    job.dtype = DType::kBfloat16;
    job.op = RedOp::kAvg;
    job.divisor = 2;
    job.dst = out.data();
    job.Init(2);
    const auto& mine = local == 0 ? a : b;
    const auto& theirs = local == 0 ? b : a;
    Engine e(&links);
    e.Send(1, theirs.data(), n * 2);
    e.LocalFold(&job, local, mine.data());
    e.RecvFold(1, &job, 1 - local);
    ASSERT_TRUE(e.Run("bf16 avg").ok());
    for (size_t i = 0; i < n; ++i) {
      // f32 sum of the two in order, divided once, rounded once.
      const float want = (Bf16ToF32(a[i]) + Bf16ToF32(b[i])) / 2.0f;
      EXPECT_EQ(out[i], F32ToBf16(want)) << "element " << i << ", local " << local;
    }
  }
}

// The in-place case of hierarchical.cpp's bridge: dst is the rank's own input, folded second, so the job has a
// separate accumulator. A two-contributor job goes straight into dst and leaves the accumulator untouched (it
// was a second stream through memory), with the same values: for every type with an accumulator of its own
// type, sum, avg and max, the local contributor first or second.
TEST(Engine, TwoContributorJobWritesItsOutputAndNeverItsScratchAccumulator) {
  const size_t n = 5000;  // more than one of Fold2Finalize's stack blocks
  for (DType dt : {DType::kFloat32, DType::kFloat64, DType::kInt32, DType::kInt64, DType::kInt8}) {
    const size_t esz = DTypeSize(dt);
    for (RedOp op : {RedOp::kSum, RedOp::kAvg, RedOp::kMax}) {
      for (int local : {0, 1}) {
        std::vector<std::byte> mine(n * esz), theirs(n * esz), want(n * esz);
        for (size_t i = 0; i < n; ++i) {
          StoreElement(mine.data(), i, dt, static_cast<double>(static_cast<int>(i % 91) - 45) * 0.5);
          StoreElement(theirs.data(), i, dt, static_cast<double>(static_cast<int>(i % 37) - 11) * 0.25);
        }
        // The reference: the kernels the job would run through a separate accumulator (contributor 0 first).
        std::vector<std::byte> ref_acc(n * esz);
        const auto& c0 = local == 0 ? mine : theirs;
        const auto& c1 = local == 0 ? theirs : mine;
        Fold2(ref_acc.data(), c0.data(), dt, c1.data(), dt, n, dt, op);
        Finalize(want.data(), ref_acc.data(), n, dt, op, 2);
        std::vector<std::byte> acc(n * esz, std::byte{0x5A});
        const std::vector<std::byte> poison = acc;
        LoopLinks links(2);
        ReduceJob job;
        job.acc = acc.data();
        job.n = n;
        job.dtype = dt;
        job.op = op;
        job.divisor = 2;
        job.dst = mine.data();  // in place: the local input is the output
        job.Init(2);
        Engine e(&links);
        e.Send(1, theirs.data(), n * esz);
        e.LocalFold(&job, local, mine.data());
        e.RecvFold(1, &job, 1 - local);
        ASSERT_TRUE(e.Run("in place").ok());
        const std::string what = std::string(DTypeName(dt)) + " op " + std::to_string(static_cast<int>(op)) +
                                 " local " + std::to_string(local);
        EXPECT_TRUE(mine == want) << what << ": the result differs from Fold2 + Finalize";
        EXPECT_TRUE(acc == poison) << what << ": the scratch accumulator was written";
      }
    }
  }
}

TEST(Engine, SendResultSendsTheReductionAsItIsFinished) {
  const size_t n = 70001;
  std::vector<int32_t> x(n), y(n), got(n, -1), dst(n, -2);
  std::iota(x.begin(), x.end(), 5);
  for (size_t i = 0; i < n; ++i) y[i] = static_cast<int32_t>(i % 97) - 40;
  LoopLinks links(3);
  links.pipe(1).step = 4096;  // y arrives in pieces
  ReduceJob job;
  job.acc = dst.data();  // an int32 job accumulates in its output
  job.dst = dst.data();
  job.n = n;
  job.dtype = DType::kInt32;
  job.op = RedOp::kSum;
  job.Init(2);
  Engine e(&links);
  e.Send(1, y.data(), n * 4);
  e.LocalFold(&job, 0, x.data());
  e.RecvFold(1, &job, 1);
  e.SendResult(2, &job);
  e.RecvCopy(2, got.data(), n * 4);
  ASSERT_TRUE(e.Run("send result").ok());
  for (size_t i = 0; i < n; ++i) ASSERT_EQ(got[i], x[i] + y[i]) << "element " << i;
  EXPECT_EQ(got, dst);
}

TEST(Engine, RecvCheckRunsWhenItsBytesAreInAndItsErrorEndsTheRun) {
  LoopLinks links(2);
  uint64_t header = 42, seen = 0;
  int checks = 0;
  std::vector<std::byte> body = Pattern(100, 1), got(100);
  Engine e(&links);
  e.Send(1, &header, sizeof(header));
  e.Send(1, body.data(), body.size());
  e.RecvCheck(1, &seen, sizeof(seen), [&]() -> Status {
    ++checks;
    EXPECT_EQ(seen, 42u);  // the bytes are in when the check runs
    return Status::Ok();
  });
  e.RecvCopy(1, got.data(), got.size());
  ASSERT_TRUE(e.Run("checked").ok());
  EXPECT_EQ(checks, 1);
  EXPECT_EQ(got, body);

  e.Send(1, &header, sizeof(header));
  e.Send(1, body.data(), body.size());
  e.RecvCheck(1, &seen, sizeof(seen), [] { return InvalidArgument("header says no"); });
  e.RecvCopy(1, got.data(), got.size());
  Status s = e.Run("refused");
  EXPECT_EQ(s.code(), Code::kInvalidArgument) << s.ToString();
  EXPECT_NE(s.message().find("header says no"), std::string::npos) << s.ToString();
}

TEST(Engine, AChannelErrorEndsTheRunNamingThePeer) {
  {
    LoopLinks links(3);
    links.pipe(2).fail = RemoteError("the wire broke");
    std::vector<std::byte> d = Pattern(64, 3);
    Engine e(&links);
    e.Send(2, d.data(), d.size());
    Status s = e.Run("sending");
    EXPECT_EQ(s.code(), Code::kRemoteError);
    EXPECT_NE(s.message().find("sending to rank 2 (test)"), std::string::npos) << s.ToString();
    EXPECT_NE(s.message().find("the wire broke"), std::string::npos) << s.ToString();
  }
  {
    LoopLinks links(3);
    std::vector<std::byte> d(64);
    Engine e(&links);
    e.RecvCopy(1, d.data(), d.size());
    links.pipe(1).fail = RemoteError("gone");
    Status s = e.Run("receiving");
    EXPECT_EQ(s.code(), Code::kRemoteError);
    EXPECT_NE(s.message().find("receiving from rank 1 (test)"), std::string::npos) << s.ToString();
  }
}

TEST(Engine, ASilentPeerTimesOutNamingItAndTheStep) {
  LoopLinks links(3, 300ms);
  std::vector<std::byte> d(16), mine = Pattern(16, 2);
  Engine e(&links);
  e.Send(1, mine.data(), mine.size());  // completes (loops back), but nothing arrives from 2
  e.RecvCopy(1, d.data(), d.size());
  std::vector<std::byte> never(8);
  e.RecvCopy(2, never.data(), never.size());
  const auto t0 = std::chrono::steady_clock::now();
  Status s = e.Run("allreduce #3 (bridge)");
  EXPECT_EQ(s.code(), Code::kTimeout) << s.ToString();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 20s);  // returned, did not hang
  EXPECT_NE(s.message().find("allreduce #3 (bridge)"), std::string::npos) << s.ToString();
  EXPECT_NE(s.message().find("waiting on rank 2 (test)"), std::string::npos) << s.ToString();
  EXPECT_EQ(s.message().find("rank 1"), std::string::npos) << s.ToString();  // rank 1 owes nothing
  EXPECT_EQ(links.explained_owed, std::vector<int>{2});
  EXPECT_GT(links.health_checks, 0);
}

TEST(Engine, AFailedHealthCheckEndsTheWaitBeforeTheTimeout) {
  LoopLinks links(2, 60s);
  links.health = RemoteError("rank 1 (test) (pid 99) exited");
  std::vector<std::byte> never(8);
  Engine e(&links);
  e.RecvCopy(1, never.data(), never.size());
  const auto t0 = std::chrono::steady_clock::now();
  Status s = e.Run("barrier #0");
  EXPECT_EQ(s.code(), Code::kRemoteError) << s.ToString();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 30s);  // long before the 60 s timeout
  EXPECT_NE(s.message().find("exited"), std::string::npos) << s.ToString();
  EXPECT_EQ(links.last_waiting_on, std::vector<int>{1});
}

// Real TCP channels over a socket pair per direction: the engine's direct receive (straight from the
// socket into the destination) and its folds from the receiver's buffer, with chunks dealt over 2 streams.
TEST(Engine, OverTcpChannelsOnSocketPairs) {
  auto pair = [] {
    int sv[2];
    EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    return std::pair<int, int>(sv[0], sv[1]);
  };
  auto tx = std::make_shared<TcpConnections>(), rx = std::make_shared<TcpConnections>();
  for (int s = 0; s < 2; ++s) {
    auto [a, b] = pair();
    ASSERT_TRUE(TcpTune(a).ok());
    ASSERT_TRUE(TcpTune(b).ok());
    tx->fds.push_back(a);
    rx->fds.push_back(b);
  }
  LoopLinks links(2);
  const size_t chunk = 4096;
  links.SetSend(1, MakeTcpSender(tx, chunk));
  links.SetRecv(1, MakeTcpReceiver(rx, chunk));
  const size_t n = 50001;  // f32 elements: 200004 bytes, many chunks on both streams
  std::vector<float> a(n), b(n), acc(n);
  for (size_t i = 0; i < n; ++i) {
    a[i] = static_cast<float>(i % 1000) * 0.5f;
    b[i] = static_cast<float>(i % 7) - 3.0f;
  }
  // An odd size first: after its direct receive the fold's elements must still arrive aligned (UBSan
  // checks the float loads; TcpChannel.ElementsAfterAnOddDirectReceiveAreAligned).
  std::vector<std::byte> small = Pattern(13, 4), got(13);
  std::vector<float> copy(n);
  ReduceJob job;
  job.acc = acc.data();
  job.n = n;
  job.dtype = DType::kFloat32;
  job.op = RedOp::kSum;
  job.Init(2);
  Engine e(&links);
  e.Send(1, small.data(), small.size());
  e.Send(1, b.data(), n * 4);
  e.Send(1, a.data(), n * 4);
  e.RecvCopy(1, got.data(), got.size());
  e.LocalFold(&job, 0, a.data());
  e.RecvFold(1, &job, 1);
  e.RecvCopy(1, copy.data(), n * 4);
  ASSERT_TRUE(e.Run("tcp").ok());
  EXPECT_EQ(got, small);
  EXPECT_EQ(copy, a);
  for (size_t i = 0; i < n; ++i) ASSERT_EQ(acc[i], a[i] + b[i]) << "element " << i;
}

}  // namespace
}  // namespace tessera::comm
