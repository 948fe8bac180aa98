// tests/comm/channel_suite_test: the channel conformance suite — the same typed tests over every transport row
// (transport/transport.hpp), joined the way Comm joins two ranks (Listen, the blobs, Connect on both sides at
// once, with a store for the rows that use barriers): shm, tcp, tcp behind a TcpRelay (the device bridge's
// view of a link without rings), and ucx where UCX is installed (skipped, saying why, where it is not). In both
// directions: a stream of odd-sized messages arrives intact across many laps of the ring (or the streams' round-robin);
// partial consumes keep the rest in order; copy receives mixed with peeks keep it too, and peeks after odd-sized copy
// receives stay aligned (rows that receive straight into a destination); a full channel takes nothing (without
// blocking) until the reader reads; an empty channel hands out nothing and its wait fd, where it has one, is not ready
// until bytes come; a peer that closes after sending gives its bytes and then an error (rows that can see a close; shm
// cannot, and keeps answering "nothing yet" — Comm watches same-host peers' pids); reserved bytes stay invisible until
// published and claims never straddle the wrap (rows with rings); sends from and receives into the caller's memory keep
// the stream in order (rows whose library reads that memory itself: ucx); and a Connect whose peer never comes ends
// with an error by its deadline instead of hanging.
#include <gtest/gtest.h>
#include <poll.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "comm/store/store.hpp"
#include "comm/transport/relay.hpp"
#include "comm/transport/rows.hpp"
#include "comm/transport/transport.hpp"
#include "comm/transport/ucx.hpp"
#if TESSERA_HAVE_UCX_HEADERS
#include "comm/transport/ucx_channel.hpp"  // kUcxMaxDirectRecv
#endif

namespace tessera::comm {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

constexpr const char* kToken = "channel-suite-token";
constexpr size_t kRing = 64 << 10;  // small rings: many laps per test

std::byte Byte(uint64_t i) { return static_cast<std::byte>((i * 2654435761u) >> 13); }

struct Side {
  std::unique_ptr<StoreClient> store;
  std::unique_ptr<Transport> row;
  std::unique_ptr<TcpRelay> relay;
  Link link;
  void Close() {
    link.send.reset();
    link.recv.reset();
    relay.reset();
    row.reset();
  }
};

// Two "ranks" of one process joined by one row.
struct Pair {
  std::unique_ptr<StoreServer> server;
  Side side[2];
  TransportSetup setup[2];
  Status connected[2];
  SendChannel* send(int from) { return side[from].link.send.get(); }
  RecvChannel* recv(int to) { return side[to].link.recv.get(); }
};

std::unique_ptr<Pair> Prepare(std::unique_ptr<Transport> (*make)()) {
  static std::atomic<int> seq{0};
  auto pair = std::make_unique<Pair>();
  auto server = StoreServer::Start("127.0.0.1", 0, kToken);
  EXPECT_TRUE(server.ok()) << server.status().ToString();
  pair->server = std::move(server).value();
  const std::string addr = "127.0.0.1:" + std::to_string(pair->server->port());
  std::vector<std::string> blobs(2);
  const std::string prefix = "/tsr-suite-" + std::to_string(getpid()) + "-" + std::to_string(seq++) + "-";
  for (int i = 0; i < 2; ++i) {
    auto store = StoreClient::Connect(addr, kToken, 5s);
    EXPECT_TRUE(store.ok()) << store.status().ToString();
    Side& s = pair->side[i];
    s.store = std::move(store).value();
    s.row = make();
    EXPECT_TRUE(s.row->Viable().ok()) << s.row->Viable().ToString();
    TransportSetup& t = pair->setup[i];
    t.rank = i;
    t.size = 2;
    t.token = kToken;
    t.name_prefix = prefix;
    t.store = s.store.get();
    t.timeout = 10s;
    t.peer_name = [](int p) { return "rank " + std::to_string(p); };
    t.host_addr = "127.0.0.1";
    t.loopback_store = true;
    t.ring_bytes = [](int, int) { return kRing; };
    auto blob = s.row->Listen(t);
    EXPECT_TRUE(blob.ok()) << blob.status().ToString();
    blobs[i] = blob.ok() ? *blob : "";
  }
  for (auto& t : pair->setup) t.blobs = blobs;
  return pair;
}

// Connects side `i` by `deadline`; the link lands in the side.
void ConnectSide(Pair& p, int i, Clock::time_point deadline) {
  auto links = p.side[i].row->Connect(p.setup[i], {1 - i}, deadline);
  if (!links.ok()) {
    p.connected[i] = links.status();
    return;
  }
  if (links->size() != 1 || (*links)[0].peer != 1 - i) {
    p.connected[i] = InternalError("Connect returned no link to the peer");
    return;
  }
  p.side[i].link = std::move((*links)[0]);
}

std::unique_ptr<Pair> Join(std::unique_ptr<Transport> (*make)()) {
  auto pair = Prepare(make);
  const auto deadline = Clock::now() + 10s;
  std::thread other([&] { ConnectSide(*pair, 1, deadline); });
  ConnectSide(*pair, 0, deadline);
  other.join();
  EXPECT_TRUE(pair->connected[0].ok()) << pair->connected[0].ToString();
  EXPECT_TRUE(pair->connected[1].ok()) << pair->connected[1].ToString();
  return pair;
}

// The rows under test. kSeesClose: a receiver learns that its peer closed (an error after its bytes).
// Viable: whether the row runs here (or why not: the test is skipped, saying so).
bool AlwaysViable(std::string*) { return true; }

struct ShmRow {
  static constexpr bool kSeesClose = false;
  static bool Viable(std::string* why) { return AlwaysViable(why); }
  static std::unique_ptr<Pair> Make() { return Join(&MakeShmTransport); }
  static std::unique_ptr<Pair> Unjoined() { return Prepare(&MakeShmTransport); }
};

struct TcpRow {
  static constexpr bool kSeesClose = true;
  static bool Viable(std::string* why) { return AlwaysViable(why); }
  static std::unique_ptr<Pair> Make() { return Join(&MakeTcpTransport); }
  static std::unique_ptr<Pair> Unjoined() { return Prepare(&MakeTcpTransport); }
};

// Side 0's link behind a relay (its copy engines' view); side 1 plain tcp, as the peer of a device-bridge rank is.
struct RelayRow {
  static constexpr bool kSeesClose = true;
  static bool Viable(std::string* why) { return AlwaysViable(why); }
  static std::unique_ptr<Pair> Make() {
    auto pair = Join(&MakeTcpTransport);
    Side& s = pair->side[0];
    auto relay = TcpRelay::Create(std::move(s.link.send), std::move(s.link.recv), kRing, "rank 1", 2000ms);
    EXPECT_TRUE(relay.ok()) << relay.status().ToString();
    s.relay = std::move(relay).value();
    s.link.send = s.relay->Writer();
    s.link.recv = s.relay->Reader();
    return pair;
  }
  static std::unique_ptr<Pair> Unjoined() { return Prepare(&MakeTcpTransport); }
};

#if TESSERA_HAVE_UCX_HEADERS
// UCX as it finds itself here (ctest also runs these cases with UCX_TLS=tcp and with UCX_TLS=sm: one UCP context
// per process, so one transport set per run).
struct UcxRow {
  static constexpr bool kSeesClose = true;
  static bool Viable(std::string* why) {
    const Status v = MakeUcxTransport()->Viable();
    *why = v.ok() ? "" : "the ucx row is not viable here: " + v.message();
    return v.ok();
  }
  static std::unique_ptr<Pair> Make() { return Join(&MakeUcxTransport); }
  static std::unique_ptr<Pair> Unjoined() { return Prepare(&MakeUcxTransport); }
};
#endif

#define SKIP_UNLESS_VIABLE()                           \
  do {                                                 \
    std::string why;                                   \
    if (!TypeParam::Viable(&why)) GTEST_SKIP() << why; \
  } while (0)

template <typename Row>
class ChannelSuite : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    // Two streams of small chunks: the round-robin wraps as often as a small ring does.
    setenv("TESSERA_TCP_STREAMS", "2", 1);
    setenv("TESSERA_TCP_CHUNK", "4096", 1);
  }
};

#if TESSERA_HAVE_UCX_HEADERS
using Rows = ::testing::Types<ShmRow, TcpRow, RelayRow, UcxRow>;
#else
using Rows = ::testing::Types<ShmRow, TcpRow, RelayRow>;
#endif
class RowNames {
 public:
  template <typename T>
  static std::string GetName(int) {
    if (std::is_same_v<T, ShmRow>) return "shm";
    if (std::is_same_v<T, TcpRow>) return "tcp";
    if (std::is_same_v<T, RelayRow>) return "relay";
    return "ucx";
  }
};
TYPED_TEST_SUITE(ChannelSuite, Rows, RowNames);

// Moves `sizes` (each padded, as the engine pads) from `from` to `to` in one thread, alternating sends and
// reads, checking every byte; `consume_step` caps each Consume (partial reads). False on a mismatch or when
// it stalls past a generous safety bound.
bool Pump(Pair& p, int from, const std::vector<size_t>& sizes, size_t consume_step = SIZE_MAX) {
  SendChannel* tx = p.send(from);
  RecvChannel* rx = p.recv(1 - from);
  uint64_t total = 0;
  for (size_t n : sizes) total += PadToChannel(n);
  std::vector<std::byte> src(1 << 20);
  uint64_t sent = 0, got = 0;
  const auto bound = Clock::now() + 60s;
  while (got < total) {
    if (Clock::now() > bound) {
      ADD_FAILURE() << "stalled at " << got << " of " << total << " bytes received, " << sent << " sent";
      return false;
    }
    if (sent < total) {
      const size_t n = static_cast<size_t>(std::min<uint64_t>(src.size(), total - sent));
      for (size_t i = 0; i < n; ++i) src[i] = Byte(sent + i);
      auto took = tx->TrySend(src.data(), n);
      if (!took.ok()) {
        ADD_FAILURE() << took.status().ToString();
        return false;
      }
      sent += *took;
    }
    auto peek = rx->Peek();
    if (!peek.ok()) {
      ADD_FAILURE() << peek.status().ToString();
      return false;
    }
    auto [data, avail] = *peek;
    const size_t take = std::min(avail, consume_step);
    for (size_t i = 0; i < take; ++i)
      if (data[i] != Byte(got + i)) {
        ADD_FAILURE() << "byte " << got + i << " of the stream is wrong";
        return false;
      }
    if (take > 0) rx->Consume(take);
    got += take;
  }
  return true;
}

TYPED_TEST(ChannelSuite, OddSizedMessagesArriveIntactAcrossManyLaps) {
  SKIP_UNLESS_VIABLE();
  auto p = TypeParam::Make();
  std::vector<size_t> sizes;
  for (int i = 0; i < 12; ++i)
    for (size_t n : {size_t{1}, size_t{7}, size_t{4096}, kRing + 3, size_t{200001}}) sizes.push_back(n);
  for (int from = 0; from < 2; ++from) EXPECT_TRUE(Pump(*p, from, sizes)) << "from side " << from;
}

TYPED_TEST(ChannelSuite, PartialConsumesKeepTheRestInOrder) {
  SKIP_UNLESS_VIABLE();
  auto p = TypeParam::Make();
  for (int from = 0; from < 2; ++from) {
    EXPECT_TRUE(Pump(*p, from, {3 * kRing + 5}, 1000)) << "from side " << from;
    EXPECT_TRUE(Pump(*p, from, {10000}, 1)) << "from side " << from;
  }
}

// Rows whose channels receive straight into a destination (direct(): tcp, ucx): copy receives of odd sizes
// mixed with peeks and partial consumes keep the stream in order, across many laps of the ring, with the
// destination handed again (unchanged) until bytes come, as the engine does.
TYPED_TEST(ChannelSuite, CopyReceivesMixedWithPeeksKeepTheStreamInOrder) {
  SKIP_UNLESS_VIABLE();
  auto p = TypeParam::Make();
  for (int from = 0; from < 2; ++from) {
    SendChannel* tx = p->send(from);
    RecvChannel* rx = p->recv(1 - from);
    if (!rx->direct()) continue;
    constexpr uint64_t kTotal = 16 * kRing + 40;  // a multiple of the channel's unit
    std::vector<std::byte> src(100003), dst(kRing + 4099);
    uint64_t sent = 0, got = 0;
    int turn = 0;
    const auto bound = Clock::now() + 60s;
    while (got < kTotal) {
      ASSERT_LT(Clock::now(), bound) << "stalled at " << got << " of " << kTotal << " bytes received";
      if (sent < kTotal) {
        const size_t n = static_cast<size_t>(std::min<uint64_t>(src.size(), kTotal - sent));
        for (size_t i = 0; i < n; ++i) src[i] = Byte(sent + i);
        auto took = tx->TrySend(src.data(), n);
        ASSERT_TRUE(took.ok()) << took.status().ToString();
        sent += *took;
      }
      if (turn++ % 3 == 2) {  // a peek, consuming part of what it shows
        auto peek = rx->Peek();
        ASSERT_TRUE(peek.ok()) << peek.status().ToString();
        const size_t take = std::min<size_t>(peek->second, 777);
        for (size_t i = 0; i < take; ++i) ASSERT_EQ(peek->first[i], Byte(got + i)) << "byte " << got + i;
        if (take > 0) rx->Consume(take);
        got += take;
        continue;
      }
      // A copy receive of an odd size, handed again until it is filled.
      const size_t want = static_cast<size_t>(std::min<uint64_t>(dst.size() - (turn % 5) * 1000, kTotal - got));
      size_t filled = 0;
      while (filled < want) {
        ASSERT_LT(Clock::now(), bound) << "a copy receive stalled at " << got + filled;
        if (sent < kTotal) {
          const size_t n = static_cast<size_t>(std::min<uint64_t>(src.size(), kTotal - sent));
          for (size_t i = 0; i < n; ++i) src[i] = Byte(sent + i);
          auto took = tx->TrySend(src.data(), n);
          ASSERT_TRUE(took.ok()) << took.status().ToString();
          sent += *took;
        }
        auto n = rx->RecvInto(dst.data() + filled, want - filled);
        ASSERT_TRUE(n.ok()) << n.status().ToString();
        filled += *n;
      }
      for (size_t i = 0; i < want; ++i) ASSERT_EQ(dst[i], Byte(got + i)) << "byte " << got + i;
      got += want;
    }
  }
}

// After copy receives of odd sizes (and their padding read by peeks), a peek still hands out each byte at an address
// equal to its stream offset modulo kChannelAlign: a message's elements are aligned and never straddle a ring's wrap
// (a fold reads whole elements, and would wait for ever on a split one).
TYPED_TEST(ChannelSuite, PeeksAfterOddCopyReceivesStayAligned) {
  SKIP_UNLESS_VIABLE();
  auto p = TypeParam::Make();
  for (int from = 0; from < 2; ++from) {
    SendChannel* tx = p->send(from);
    RecvChannel* rx = p->recv(1 - from);
    if (!rx->direct()) continue;
    uint64_t sent = 0, got = 0;
    const auto bound = Clock::now() + 60s;
    std::vector<std::byte> buf(kRing);
    auto push = [&](uint64_t end) {
      if (sent >= end) return true;
      const size_t n = static_cast<size_t>(std::min<uint64_t>(buf.size(), end - sent));
      for (size_t i = 0; i < n; ++i) buf[i] = Byte(sent + i);
      auto took = tx->TrySend(buf.data(), n);
      EXPECT_TRUE(took.ok()) << took.status().ToString();
      sent += took.ok() ? *took : 0;
      return took.ok();
    };
    for (size_t round = 0; round < 24; ++round) {
      // A message of an odd size by copy receives (the destination handed again until bytes come, as the engine
      // does), then its padding and a message of 8-byte elements by peeks taking whole elements, as a fold does.
      const size_t odd = 2 * kRing + 4099 + 2 * round, elements = 8 * (kRing / 16 + 3 * round);
      const uint64_t odd_end = got + odd, pad_end = got + PadToChannel(odd), end = pad_end + elements;
      std::vector<std::byte> dst(odd);
      while (got < odd_end) {
        ASSERT_LT(Clock::now(), bound) << "a copy receive stalled at " << got;
        ASSERT_TRUE(push(end));
        const size_t filled = dst.size() - static_cast<size_t>(odd_end - got);
        auto n = rx->RecvInto(dst.data() + filled, dst.size() - filled);
        ASSERT_TRUE(n.ok()) << n.status().ToString();
        for (size_t i = 0; i < *n; ++i) ASSERT_EQ(dst[filled + i], Byte(got + i)) << "byte " << got + i;
        got += *n;
      }
      while (got < end) {
        ASSERT_LT(Clock::now(), bound) << "stalled at " << got << " of " << end << " (round " << round << ")";
        ASSERT_TRUE(push(end));
        auto peek = rx->Peek();
        ASSERT_TRUE(peek.ok()) << peek.status().ToString();
        if (peek->second == 0) continue;
        ASSERT_EQ(reinterpret_cast<uintptr_t>(peek->first) % kChannelAlign, got % kChannelAlign)
            << "stream offset " << got << " is handed out at a misaligned address (round " << round << ")";
        const size_t take = got < pad_end ? std::min<size_t>(peek->second, pad_end - got)
                                          : std::min<uint64_t>(peek->second / 8 * 8, end - got);
        if (take == 0) continue;  // less than an element so far
        for (size_t i = 0; i < take; ++i) ASSERT_EQ(peek->first[i], Byte(got + i)) << "byte " << got + i;
        rx->Consume(take);
        got += take;
      }
    }
  }
}

TYPED_TEST(ChannelSuite, AFullChannelTakesNothingUntilTheReaderReads) {
  SKIP_UNLESS_VIABLE();
  auto p = TypeParam::Make();
  for (int from = 0; from < 2; ++from) {
    SendChannel* tx = p->send(from);
    RecvChannel* rx = p->recv(1 - from);
    std::vector<std::byte> src(256 << 10);
    uint64_t sent = 0;
    int zeros = 0;
    // Until TrySend has said "full" several times in a row (a relay's pump or the kernel may still make room once).
    while (zeros < 50 && sent < (1ull << 30)) {
      for (size_t i = 0; i < src.size(); ++i) src[i] = Byte(sent + i);
      auto n = tx->TrySend(src.data(), src.size());
      ASSERT_TRUE(n.ok()) << n.status().ToString();
      sent += *n;
      zeros = *n == 0 ? zeros + 1 : 0;
      if (*n == 0) std::this_thread::sleep_for(2ms);
    }
    ASSERT_LT(sent, 1ull << 30) << "the channel never filled";
    // Read everything back; the sender can go on afterwards.
    uint64_t got = 0;
    const auto bound = Clock::now() + 30s;
    while (got < sent && Clock::now() < bound) {
      auto peek = rx->Peek();
      ASSERT_TRUE(peek.ok()) << peek.status().ToString();
      for (size_t i = 0; i < peek->second; ++i) ASSERT_EQ(peek->first[i], Byte(got + i)) << "byte " << got + i;
      rx->Consume(peek->second);
      got += peek->second;
    }
    ASSERT_EQ(got, sent);
    const std::byte more[8] = {Byte(sent),     Byte(sent + 1), Byte(sent + 2), Byte(sent + 3),
                               Byte(sent + 4), Byte(sent + 5), Byte(sent + 6), Byte(sent + 7)};
    auto n = tx->TrySend(more, sizeof(more));
    ASSERT_TRUE(n.ok());
    EXPECT_GT(*n, 0u) << "an emptied channel takes bytes again";
    uint64_t tail = *n, seen = 0;
    const auto bound2 = Clock::now() + 10s;
    while (seen < tail && Clock::now() < bound2) {
      auto peek = rx->Peek();
      ASSERT_TRUE(peek.ok());
      for (size_t i = 0; i < peek->second; ++i) ASSERT_EQ(peek->first[i], Byte(sent + seen + i));
      rx->Consume(peek->second);
      seen += peek->second;
    }
    EXPECT_EQ(seen, tail);
  }
}

TYPED_TEST(ChannelSuite, AnEmptyChannelHandsOutNothingAndItsWaitFdIsNotReady) {
  SKIP_UNLESS_VIABLE();
  auto p = TypeParam::Make();
  for (int from = 0; from < 2; ++from) {
    RecvChannel* rx = p->recv(1 - from);
    auto peek = rx->Peek();
    ASSERT_TRUE(peek.ok()) << peek.status().ToString();
    EXPECT_EQ(peek->second, 0u);
    const int fd = rx->WaitFd();
    if (fd >= 0) {
      pollfd pfd{fd, POLLIN, 0};
      EXPECT_EQ(::poll(&pfd, 1, 0), 0) << "the wait fd is ready with nothing sent";
    }
    const std::byte one[8] = {Byte(0), Byte(1), Byte(2), Byte(3), Byte(4), Byte(5), Byte(6), Byte(7)};
    auto n = p->send(from)->TrySend(one, sizeof(one));
    ASSERT_TRUE(n.ok());
    ASSERT_EQ(*n, sizeof(one));
    if (fd >= 0) {
      pollfd pfd{fd, POLLIN, 0};
      EXPECT_EQ(::poll(&pfd, 1, 10000), 1) << "the wait fd did not become ready when bytes came";
    }
    size_t got = 0;
    const auto bound = Clock::now() + 10s;
    while (got < sizeof(one) && Clock::now() < bound) {
      auto pk = rx->Peek();
      ASSERT_TRUE(pk.ok());
      for (size_t i = 0; i < pk->second; ++i) EXPECT_EQ(pk->first[i], Byte(got + i));
      rx->Consume(pk->second);
      got += pk->second;
    }
    EXPECT_EQ(got, sizeof(one));
  }
}

TYPED_TEST(ChannelSuite, APeerThatClosesGivesItsBytesThenAnError) {
  SKIP_UNLESS_VIABLE();
  for (int from = 0; from < 2; ++from) {
    auto p = TypeParam::Make();
    constexpr size_t kBytes = 3000;
    std::vector<std::byte> src(kBytes);
    for (size_t i = 0; i < kBytes; ++i) src[i] = Byte(i);
    size_t sent = 0;
    while (sent < kBytes) {
      auto n = p->send(from)->TrySend(src.data() + sent, kBytes - sent);
      ASSERT_TRUE(n.ok());
      sent += *n;
    }
    p->side[from].Close();  // a relay drains what was published first
    RecvChannel* rx = p->recv(1 - from);
    size_t got = 0;
    Status error;
    const auto bound = Clock::now() + 10s;
    while (Clock::now() < bound) {
      auto peek = rx->Peek();
      if (!peek.ok()) {
        error = peek.status();
        break;
      }
      for (size_t i = 0; i < peek->second; ++i) ASSERT_EQ(peek->first[i], Byte(got + i));
      rx->Consume(peek->second);
      got += peek->second;
      if (!TypeParam::kSeesClose && got == kBytes) break;
    }
    EXPECT_EQ(got, kBytes) << "from side " << from;
    if (TypeParam::kSeesClose) {
      EXPECT_FALSE(error.ok()) << "from side " << from << ": no error after the peer closed";
      EXPECT_FALSE(error.message().empty());
    } else {
      auto peek = rx->Peek();  // nothing more, and no garbage
      ASSERT_TRUE(peek.ok());
      EXPECT_EQ(peek->second, 0u);
    }
  }
}

TYPED_TEST(ChannelSuite, ReservedBytesStayInvisibleUntilPublishedAndClaimsNeverStraddleTheWrap) {
  SKIP_UNLESS_VIABLE();
  auto p = TypeParam::Make();
  for (int from = 0; from < 2; ++from) {
    SendChannel* tx = p->send(from);
    RecvChannel* rx = p->recv(1 - from);
    if (!tx->dma() && !rx->dma()) continue;  // no ring end on this direction
    // Move the rings' positions close to their ends (one message alignment short), so that what follows wraps.
    constexpr size_t kEnd = kChannelAlign;
    ASSERT_TRUE(Pump(*p, from, {kRing - kEnd}));
    size_t room = 0;
    if (tx->dma()) {
      auto [ptr, n] = tx->Reserve(2 * kEnd);
      ASSERT_GT(n, 0u);
      ASSERT_LE(n, kEnd) << "a reservation crossed the end of the ring";
      for (size_t i = 0; i < n; ++i) ptr[i] = Byte(i);
      auto peek = rx->Peek();
      ASSERT_TRUE(peek.ok());
      EXPECT_EQ(peek->second, 0u) << "reserved bytes are visible before Publish";
      tx->Publish(n);
      room = n;
    } else {
      std::byte buf[2 * kEnd];
      for (size_t i = 0; i < sizeof(buf); ++i) buf[i] = Byte(i);
      auto n = tx->TrySend(buf, sizeof(buf));
      ASSERT_TRUE(n.ok());
      room = *n;
    }
    size_t got = 0;
    if (rx->dma()) {
      // Claims: multiples of the unit, and never across the wrap.
      std::pair<const std::byte*, size_t> claim{nullptr, 0};
      const auto bound = Clock::now() + 10s;
      while (claim.second == 0 && Clock::now() < bound) claim = rx->Claim(1 << 20, 8);
      ASSERT_GT(claim.second, 0u);
      EXPECT_EQ(claim.second % 8, 0u);
      EXPECT_LE(claim.second, kEnd) << "a claim crossed the end of the ring";
      for (size_t i = 0; i < claim.second; ++i) EXPECT_EQ(claim.first[i], Byte(i));
      rx->Consume(claim.second);
      got = claim.second;
    }
    // The rest by Peek, in order.
    const auto bound = Clock::now() + 10s;
    while (got < room && Clock::now() < bound) {
      auto peek = rx->Peek();
      ASSERT_TRUE(peek.ok());
      for (size_t i = 0; i < peek->second; ++i) EXPECT_EQ(peek->first[i], Byte(got + i));
      rx->Consume(peek->second);
      got += peek->second;
    }
    EXPECT_EQ(got, room);
  }
}

// Sends straight from the caller's memory and receives straight into it (rows whose library reads and writes a kind of
// memory itself: ucx, for the kinds UCX registers), mixed with ring sends, peeks and copy receives: the stream keeps
// its order, bytes a ring already holds reach the destination through the caller's copy, and a source is handed back
// only once SentFromDone says so. Kinds the row stages are refused, naming the kind; NPU memory always.
TYPED_TEST(ChannelSuite, SendsFromAndReceivesIntoCallersMemoryKeepTheStreamInOrder) {
  SKIP_UNLESS_VIABLE();
  auto p = TypeParam::Make();
  for (int from = 0; from < 2; ++from) {
    SendChannel* tx = p->send(from);
    RecvChannel* rx = p->recv(1 - from);
    EXPECT_FALSE(tx->sends_from("npu"));
    EXPECT_FALSE(rx->receives_into("npu"));
    EXPECT_FALSE(tx->TrySendFrom("x", 1, "npu").ok());
    if (!tx->sends_from("host")) continue;  // rows that always copy through their own memory
    auto refused = tx->TrySendFrom("x", 1, "npu");
    EXPECT_NE(refused.status().message().find("npu"), std::string::npos) << refused.status().ToString();
    constexpr uint64_t kTotal = 8 * kRing + 24;
    std::vector<std::byte> src(30011), dst(kRing + 77);
    int copies_in = 0;
    const RecvChannel::CopyIn copy_in = [&](void* d, const void* s, size_t n) {
      ++copies_in;
      std::memcpy(d, s, n);
      return Status::Ok();
    };
    uint64_t sent = 0, got = 0;
    int turn = 0;
    const auto bound = Clock::now() + 60s;
    auto send_some = [&] {  // odd turns from the caller's memory, kept until SentFromDone; even ones through the ring
      if (sent >= kTotal) return;
      auto done = tx->SentFromDone();
      ASSERT_TRUE(done.ok()) << done.status().ToString();
      if (!*done) return;  // src still being read
      const size_t n = static_cast<size_t>(std::min<uint64_t>(src.size(), kTotal - sent));
      for (size_t i = 0; i < n; ++i) src[i] = Byte(sent + i);
      auto took = turn % 2 ? tx->TrySendFrom(src.data(), n, "host") : tx->TrySend(src.data(), n);
      ASSERT_TRUE(took.ok()) << took.status().ToString();
      sent += *took;
    };
    while (got < kTotal) {
      ASSERT_LT(Clock::now(), bound) << "stalled at " << got << " of " << kTotal << " bytes received";
      ++turn;
      send_some();
      if (turn % 3 == 0) {  // a peek that leaves part of what it shows in the ring
        auto peek = rx->Peek();
        ASSERT_TRUE(peek.ok()) << peek.status().ToString();
        const size_t take = std::min<size_t>(peek->second / 2, 999);
        for (size_t i = 0; i < take; ++i) ASSERT_EQ(peek->first[i], Byte(got + i)) << "byte " << got + i;
        if (take > 0) rx->Consume(take);
        got += take;
        continue;
      }
      const size_t want = static_cast<size_t>(std::min<uint64_t>(dst.size() - (turn % 7) * 100, kTotal - got));
      size_t filled = 0;
      while (filled < want) {
        ASSERT_LT(Clock::now(), bound) << "a receive into the caller's memory stalled at " << got + filled;
        send_some();
        auto n = turn % 2 ? rx->RecvIntoMemory(dst.data() + filled, want - filled, "host", copy_in)
                          : rx->RecvInto(dst.data() + filled, want - filled);
        ASSERT_TRUE(n.ok()) << n.status().ToString();
        filled += *n;
      }
      for (size_t i = 0; i < want; ++i) ASSERT_EQ(dst[i], Byte(got + i)) << "byte " << got + i;
      got += want;
    }
    EXPECT_GT(copies_in, 0) << "no receive found bytes in the ring to copy in";
  }
}

#if TESSERA_HAVE_UCX_HEADERS
// A first message on a fresh ucx link, received into the caller's memory: it takes the ring's receive the channel
// posted when it came, so that the next receive is posted straight into the caller's destination.
void FirstMessageThroughTheRing(SendChannel* tx, RecvChannel* rx, Clock::time_point bound) {
  const std::byte hello[kChannelAlign] = {};
  std::byte sink[kChannelAlign];  // the receive into it completes (whole) before it goes
  for (size_t sent = 0, got = 0; got < sizeof(hello);) {
    ASSERT_LT(Clock::now(), bound) << "the first message stalled";
    if (sent < sizeof(hello)) {
      auto n = tx->TrySend(hello + sent, sizeof(hello) - sent);
      ASSERT_TRUE(n.ok()) << n.status().ToString();
      sent += *n;
    }
    auto n = rx->RecvInto(sink + got, sizeof(hello) - got);
    ASSERT_TRUE(n.ok()) << n.status().ToString();
    got += *n;
  }
}

// The ucx row keeps its sender within a ring of the receiver's credit (the other rows are bounded by memory itself:
// the shm ring, tcp's socket buffers), and counts a receive posted straight into the caller's memory as taken: the
// sender may run a ring ahead of that receive's end, not of what was consumed, so a large receive is not paced by
// credits coming back ring by ring.
TEST(UcxChannel, AReceivePostedIntoTheCallersMemoryLetsTheSenderRunAheadByItsSize) {
  std::string why;
  if (!UcxRow::Viable(&why)) GTEST_SKIP() << why;
  setenv("TESSERA_UCX_RING", "64K", 1);  // kRing: the window is a ring
  auto p = UcxRow::Make();
  unsetenv("TESSERA_UCX_RING");
  SendChannel* tx = p->send(0);
  RecvChannel* rx = p->recv(1);
  constexpr size_t kBig = 8 * kRing;
  std::vector<std::byte> src(kBig + kRing), dst(kBig);
  for (size_t i = 0; i < src.size(); ++i) src[i] = Byte(i);
  const auto bound = Clock::now() + 30s;
  ASSERT_NO_FATAL_FAILURE(FirstMessageThroughTheRing(tx, rx, bound));
  auto posted = rx->RecvInto(dst.data(), dst.size());  // nothing more has been sent: the receive stays posted
  ASSERT_TRUE(posted.ok()) << posted.status().ToString();
  ASSERT_EQ(*posted, 0u);
  // The sender alone, the receiver never called again until the sender has stopped taking bytes.
  uint64_t sent = 0;
  int zeros = 0;
  while (zeros < 50 && sent < src.size() && Clock::now() < bound) {
    auto n = tx->TrySendFrom(src.data() + sent, src.size() - sent, "host");
    ASSERT_TRUE(n.ok()) << n.status().ToString();
    sent += *n;
    zeros = *n == 0 ? zeros + 1 : 0;
    if (*n == 0) std::this_thread::sleep_for(2ms);
  }
  EXPECT_GT(sent, 2 * kRing) << "the sender stopped near one ring, as if the posted receive were not credited";
  // Everything arrives, in order: the posted receive's bytes, then the rest through the ring.
  size_t filled = 0;
  while (filled < dst.size()) {
    ASSERT_LT(Clock::now(), bound) << "the posted receive stalled at " << filled;
    auto n = rx->RecvInto(dst.data() + filled, dst.size() - filled);
    ASSERT_TRUE(n.ok()) << n.status().ToString();
    filled += *n;
    auto more = tx->TrySendFrom(src.data() + sent, src.size() - sent, "host");
    ASSERT_TRUE(more.ok());
    sent += *more;
  }
  for (size_t i = 0; i < dst.size(); ++i) ASSERT_EQ(dst[i], Byte(i)) << "byte " << i;
  uint64_t got = dst.size();
  while (got < src.size()) {
    ASSERT_LT(Clock::now(), bound) << "stalled at " << got << " of " << src.size();
    auto more = tx->TrySendFrom(src.data() + sent, src.size() - sent, "host");
    ASSERT_TRUE(more.ok());
    sent += *more;
    auto peek = rx->Peek();
    ASSERT_TRUE(peek.ok()) << peek.status().ToString();
    for (size_t i = 0; i < peek->second; ++i) ASSERT_EQ(peek->first[i], Byte(got + i)) << "byte " << got + i;
    rx->Consume(peek->second);
    got += peek->second;
  }
}

// A receive posted into the caller's memory is one receive of all it asks for (up to kUcxMaxDirectRecv): it does not
// end with the first segment to land, leaving the next ones queued in UCX until the caller posts again (one engine
// turn per segment: between two hosts over TCP the row moved 0.79 of what ucx_perftest does, 0.95 with this).
TEST(UcxChannel, AReceiveIntoTheCallersMemoryEndsWhenItIsFullNotAtItsFirstBytes) {
  std::string why;
  if (!UcxRow::Viable(&why)) GTEST_SKIP() << why;
  auto p = UcxRow::Make();
  SendChannel* tx = p->send(0);
  RecvChannel* rx = p->recv(1);
  constexpr size_t kHalf = 1 << 20, kMost = internal::kUcxMaxDirectRecv;
  constexpr size_t kLarge = 2 * kMost + 4096;
  std::vector<std::byte> src(2 * kHalf + kLarge), dst(src.size());
  for (size_t i = 0; i < src.size(); ++i) src[i] = Byte(i);
  const auto bound = Clock::now() + 30s;
  uint64_t sent = 0;
  auto send_to = [&](uint64_t end) {  // sends src up to `end` and waits until the row has handed it all on
    while (sent < end) {
      ASSERT_LT(Clock::now(), bound) << "the sender stalled at " << sent;
      auto n = tx->TrySendFrom(src.data() + sent, end - sent, "host");
      ASSERT_TRUE(n.ok()) << n.status().ToString();
      sent += *n;
    }
    for (;;) {
      ASSERT_LT(Clock::now(), bound) << "the sends up to " << end << " never completed";
      auto done = tx->SentFromDone();
      ASSERT_TRUE(done.ok()) << done.status().ToString();
      if (*done) break;
      std::this_thread::sleep_for(1ms);
    }
  };
  ASSERT_NO_FATAL_FAILURE(FirstMessageThroughTheRing(tx, rx, bound));
  auto posted = rx->RecvInto(dst.data(), 2 * kHalf);
  ASSERT_TRUE(posted.ok()) << posted.status().ToString();
  ASSERT_EQ(*posted, 0u);
  ASSERT_NO_FATAL_FAILURE(send_to(kHalf));
  // Half of it has landed by now: the receive is still posted for the rest.
  for (const auto until = Clock::now() + 300ms; Clock::now() < until;) {
    auto n = rx->RecvInto(dst.data(), 2 * kHalf);
    ASSERT_TRUE(n.ok()) << n.status().ToString();
    ASSERT_EQ(*n, 0u) << "the receive ended with part of what it asked for, before the rest was sent";
  }
  ASSERT_NO_FATAL_FAILURE(send_to(2 * kHalf));
  size_t got = 0;
  while (got == 0) {
    ASSERT_LT(Clock::now(), bound) << "the posted receive never completed";
    auto n = rx->RecvInto(dst.data(), 2 * kHalf);
    ASSERT_TRUE(n.ok()) << n.status().ToString();
    got = *n;
  }
  EXPECT_EQ(got, 2 * kHalf) << "one receive, all of it";
  // A receive larger than kUcxMaxDirectRecv takes it in parts of at most that.
  while (got < dst.size()) {
    ASSERT_LT(Clock::now(), bound) << "stalled at " << got << " of " << dst.size();
    auto more = tx->TrySendFrom(src.data() + sent, src.size() - sent, "host");
    ASSERT_TRUE(more.ok()) << more.status().ToString();
    sent += *more;
    auto n = rx->RecvInto(dst.data() + got, dst.size() - got);
    ASSERT_TRUE(n.ok()) << n.status().ToString();
    ASSERT_LE(*n, kMost);
    got += *n;
  }
  for (size_t i = 0; i < dst.size(); ++i) ASSERT_EQ(dst[i], Byte(i)) << "byte " << i;
}
#endif

TYPED_TEST(ChannelSuite, AConnectWhosePeerNeverComesEndsAtItsDeadline) {
  SKIP_UNLESS_VIABLE();
  for (int alone = 0; alone < 2; ++alone) {
    auto p = TypeParam::Unjoined();
    ConnectSide(*p, alone, Clock::now() + 300ms);
    EXPECT_FALSE(p->connected[alone].ok()) << "side " << alone << " connected to a peer that never came";
    EXPECT_FALSE(p->connected[alone].message().empty());
  }
}

}  // namespace
}  // namespace tessera::comm
