// tests/comm/tcp_channel_test: comm/transport/tcp through its public interface — the channels over
// socket pairs (so the test holds the other end of every stream) and the connection set-up over loopback:
// chunks are dealt round-robin over the streams, and a stream whose socket is full does not hold up the
// others' chunks; a receiver hands out partial chunks as they arrive and
// keeps an unconsumed tail when its buffer is full; RecvInto returns buffered bytes first; a receiver
// waiting for a late stream reads the other streams' data out of the kernel meanwhile, and streams
// written in any skewed order come out in stream order, aligned; a stream that ended early gives the
// bytes before its end and then an error, only when its bytes are needed; a peer that
// closes mid-message gives its buffered bytes and then RemoteError, and a send to it RemoteError (no
// SIGPIPE); a full socket makes TrySend return 0 instead of blocking; the hello carries rank and stream
// for any order of connections; and every wait of the set-up (no peer, no acknowledgement, nobody
// listening, a refused token) ends with an error within its timeout instead of hanging. And
// comm/transport/relay over the same socket pairs: bytes cross both ways through its rings (ring ends and
// copy calls alike), what was published before the relay goes is still sent, and a closed link is
// reported only after the bytes that arrived before it have been taken.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "comm/transport/relay.hpp"
#include "comm/transport/tcp.hpp"
#include "common/log.hpp"

namespace tessera::comm {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

constexpr const char* kToken = "tcp-channel-test-token";

// `streams` socket pairs: the channel's ends (in a TcpConnections, which closes them) and the test's.
struct Streams {
  explicit Streams(int streams) : conns(std::make_shared<TcpConnections>()) {
    for (int s = 0; s < streams; ++s) {
      int sv[2];
      EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
      EXPECT_TRUE(TcpTune(sv[0]).ok());
      conns->fds.push_back(sv[0]);
      other.push_back(sv[1]);
    }
  }
  ~Streams() {
    for (int fd : other)
      if (fd >= 0) ::close(fd);
  }
  void CloseOther(int s) {
    ::close(other[s]);
    other[s] = -1;
  }
  std::shared_ptr<TcpConnections> conns;
  std::vector<int> other;
};

std::string Pattern(size_t n, char seed) {
  std::string s(n, 0);
  for (size_t i = 0; i < n; ++i) s[i] = static_cast<char>(seed + i * 7 + i / 251);
  return s;
}

// Everything readable on fd now (non-blocking).
std::string Drain(int fd) {
  std::string out;
  char buf[65536];
  for (;;) {
    const ssize_t r = ::recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
    if (r <= 0) return out;
    out.append(buf, static_cast<size_t>(r));
  }
}

void SendAll(int fd, const std::string& bytes) {
  ASSERT_EQ(::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL), static_cast<ssize_t>(bytes.size()));
}

// Peeks and consumes until `want` bytes came or `deadline`.
std::string ReadN(RecvChannel* ch, size_t want, Clock::duration within = 5s) {
  std::string out;
  const auto end = Clock::now() + within;
  while (out.size() < want && Clock::now() < end) {
    auto p = ch->Peek();
    EXPECT_TRUE(p.ok()) << p.status().ToString();
    if (!p.ok()) break;
    const size_t n = std::min(p->second, want - out.size());
    out.append(reinterpret_cast<const char*>(p->first), n);
    ch->Consume(n);
  }
  return out;
}

TEST(TcpChannel, ChunksAreDealtRoundRobinOverTheStreams) {
  const size_t chunk = 4096;
  Streams st(3);
  auto tx = MakeTcpSender(st.conns, chunk);
  EXPECT_EQ(std::string(tx->transport()), "tcp");
  const std::string msg = Pattern(7 * chunk + 123, 'a');  // 7 chunks and an odd tail
  size_t off = 0;
  while (off < msg.size()) {
    auto n = tx->TrySend(msg.data() + off, msg.size() - off);
    ASSERT_TRUE(n.ok()) << n.status().ToString();
    ASSERT_GT(*n, 0u);         // socket buffers hold all of it
    EXPECT_LE(*n, 3 * chunk);  // never further than one chunk per stream ahead in one call
    off += *n;
  }
  for (int s = 0; s < 3; ++s) {
    std::string want;
    for (size_t c = s; c * chunk < msg.size(); c += 3) want += msg.substr(c * chunk, chunk);
    EXPECT_EQ(Drain(st.other[s]), want) << "stream " << s;
  }
  // The next byte goes to stream 7 % 3 = 1, after the tail's chunk is filled.
  EXPECT_EQ(tx->WaitFd(), st.conns->fds[1]);
}

TEST(TcpChannel, AFullStreamDoesNotHoldUpTheOthers) {
  const size_t chunk = 4096;
  Streams st(3);
  int small = 4096;
  ::setsockopt(st.conns->fds[0], SOL_SOCKET, SO_SNDBUF, &small, sizeof(small));
  // Stream 0's socket full of earlier bytes (the test's own), so its next chunk cannot go.
  const std::string junk(1024, 'J');
  size_t filled = 0;
  for (ssize_t r; (r = ::send(st.conns->fds[0], junk.data(), junk.size(), MSG_DONTWAIT | MSG_NOSIGNAL)) > 0;)
    filled += static_cast<size_t>(r);
  ASSERT_GT(filled, 0u);
  auto tx = MakeTcpSender(st.conns, chunk);
  const std::string msg = Pattern(6 * chunk, 'z');
  auto n = tx->TrySend(msg.data(), msg.size());
  ASSERT_TRUE(n.ok()) << n.status().ToString();
  EXPECT_EQ(*n, 0u) << "chunk 0 cannot have gone: its stream is full";
  EXPECT_EQ(tx->WaitFd(), st.conns->fds[0]);  // the stream that holds the others up
  // Streams 1 and 2 sent their chunks of the range ahead.
  std::vector<std::string> got(3);
  got[1] = Drain(st.other[1]);
  got[2] = Drain(st.other[2]);
  EXPECT_EQ(got[1], msg.substr(chunk, chunk));
  EXPECT_EQ(got[2], msg.substr(2 * chunk, chunk));
  // Room again on stream 0: the rest goes, and nothing is sent twice.
  size_t off = 0;
  for (int i = 0; off < msg.size() && i < 10000; ++i) {
    got[0] += Drain(st.other[0]);
    auto k = tx->TrySend(msg.data() + off, msg.size() - off);
    ASSERT_TRUE(k.ok()) << k.status().ToString();
    off += *k;
  }
  ASSERT_EQ(off, msg.size());
  for (int s = 0; s < 3; ++s) got[s] += Drain(st.other[s]);
  EXPECT_EQ(got[0], std::string(filled, 'J') + msg.substr(0, chunk) + msg.substr(3 * chunk, chunk));
  EXPECT_EQ(got[1], msg.substr(chunk, chunk) + msg.substr(4 * chunk, chunk));
  EXPECT_EQ(got[2], msg.substr(2 * chunk, chunk) + msg.substr(5 * chunk, chunk));
}

TEST(TcpChannel, AReceiverReassemblesTheStreamsInOrder) {
  const size_t chunk = 4096;
  Streams st(2);
  auto rx = MakeTcpReceiver(st.conns, chunk);
  EXPECT_TRUE(rx->direct());
  const std::string msg = Pattern(5 * chunk + 1, 'q');
  // Written out of order on the wire: stream 1's chunks first.
  for (int s : {1, 0}) {
    std::string part;
    for (size_t c = s; c * chunk < msg.size(); c += 2) part += msg.substr(c * chunk, chunk);
    SendAll(st.other[s], part);
  }
  EXPECT_EQ(ReadN(rx.get(), msg.size()), msg);
}

TEST(TcpChannel, PartialChunksArriveAsTheyComeAndATailIsKept) {
  const size_t chunk = 4096;
  Streams st(2);
  auto rx = MakeTcpReceiver(st.conns, chunk);
  // One byte at a time: each is handed out as it arrives, without waiting for its chunk.
  for (int i = 0; i < 5; ++i) {
    SendAll(st.other[0], std::string(1, static_cast<char>('0' + i)));
    EXPECT_EQ(ReadN(rx.get(), 1), std::string(1, static_cast<char>('0' + i)));
  }
  // The rest of chunk 0, then chunk 1 on stream 1, consumed first in a piece that leaves the buffer
  // nearly full and then in small odd pieces: an unconsumed tail is kept (moved to the front when the
  // buffer is full) and the bytes come out in stream order.
  const std::string want = Pattern(chunk - 5, 'x') + Pattern(chunk, 'y');
  SendAll(st.other[0], want.substr(0, chunk - 5));
  SendAll(st.other[1], want.substr(chunk - 5));
  std::string got;
  for (auto end = Clock::now() + 5s; got.size() < want.size() && Clock::now() < end;) {
    auto p = rx->Peek();
    ASSERT_TRUE(p.ok()) << p.status().ToString();
    const size_t piece = got.size() < chunk - 8 ? chunk - 8 - got.size() : 5;
    const size_t n = std::min({p->second, piece, want.size() - got.size()});
    got.append(reinterpret_cast<const char*>(p->first), n);
    rx->Consume(n);
  }
  EXPECT_EQ(got, want);
}

TEST(TcpChannel, RecvIntoReturnsBufferedBytesFirst) {
  const size_t chunk = 4096;
  Streams st(1);
  auto rx = MakeTcpReceiver(st.conns, chunk);
  const std::string msg = Pattern(1000, 'm');
  SendAll(st.other[0], msg);
  // Peek buffers what arrived; consume 10 of it.
  std::string got;
  for (auto end = Clock::now() + 5s; Clock::now() < end;) {
    auto p = rx->Peek();
    ASSERT_TRUE(p.ok());
    if (p->second >= 10) break;
  }
  rx->Consume(10);
  EXPECT_EQ(rx->WaitFd(), -1);  // bytes are buffered: nothing to sleep on
  std::string dst(990, 0);
  size_t off = 0;
  for (auto end = Clock::now() + 5s; off < dst.size() && Clock::now() < end;) {
    auto n = rx->RecvInto(dst.data() + off, dst.size() - off);
    ASSERT_TRUE(n.ok()) << n.status().ToString();
    off += *n;
  }
  EXPECT_EQ(dst, msg.substr(10));
  // Then straight from the socket.
  SendAll(st.other[0], "tail");
  std::string t(4, 0);
  off = 0;
  for (auto end = Clock::now() + 5s; off < 4 && Clock::now() < end;) {
    auto n = rx->RecvInto(t.data() + off, 4 - off);
    ASSERT_TRUE(n.ok());
    off += *n;
  }
  EXPECT_EQ(t, "tail");
  EXPECT_EQ(rx->WaitFd(), st.conns->fds[0]);
}

// Every message on a channel starts at a multiple of kChannelAlign bytes of the stream (channel.hpp), so
// the engine folds elements in place from what Peek returns. After RecvInto took a message whose size
// is not a multiple of 8 straight from the socket, Peek's buffer starts at that odd stream offset and
// the next message's first element lies misaligned in it (UBSan: "load of misaligned address" in the
// folds of comm/reduce). The receiver's window keeps the byte at stream offset g at a window offset
// congruent to g modulo kChannelAlign, so the message after the first one's padding is handed out aligned.
TEST(TcpChannel, ElementsAfterAnOddDirectReceiveAreAligned) {
  const size_t chunk = 4096;
  Streams st(1);
  auto rx = MakeTcpReceiver(st.conns, chunk);
  // A 13-byte message, its padding, then a message of 8-byte elements.
  const size_t pad = PadToChannel(13) - 13;
  std::string wire = Pattern(13, 'o') + std::string(pad, '\0') + Pattern(64, 'e');
  SendAll(st.other[0], wire);
  char first[13];
  size_t off = 0;
  for (auto end = Clock::now() + 5s; off < 13 && Clock::now() < end;) {
    auto n = rx->RecvInto(first + off, 13 - off);
    ASSERT_TRUE(n.ok());
    off += *n;
  }
  std::string padding = ReadN(rx.get(), pad);
  EXPECT_EQ(padding, std::string(pad, '\0'));
  auto p = rx->Peek();
  ASSERT_TRUE(p.ok());
  ASSERT_GT(p->second, 0u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(p->first) % kChannelAlign, 0u)
      << "the message at stream offset " << PadToChannel(13) << " is handed out at a misaligned address";
}

// Bytes waiting in the kernel for the channel's end of stream s.
int Unread(const Streams& st, int s) {
  int n = -1;
  EXPECT_EQ(::ioctl(st.conns->fds[s], FIONREAD, &n), 0);
  return n;
}

// The sender is one chunk ahead on streams 1-3 while chunk 0 (stream 0) is late: a receiver waiting for
// chunk 0 takes the others' chunks out of their sockets meanwhile (so their TCP windows stay open and
// the sender is not held up by them), and hands everything out in stream order once chunk 0 arrives.
// Reading one stream at a time in round-robin order, it left them in the kernel until their turn.
TEST(TcpChannel, WhileOneStreamIsLateTheOthersAreReadAhead) {
  const size_t chunk = 4096;
  for (bool direct : {true, false}) {
    SCOPED_TRACE(direct ? "RecvInto" : "Peek");
    Streams st(4);
    auto rx = MakeTcpReceiver(st.conns, chunk);
    const std::string msg = Pattern(6 * chunk + 40, 'L');  // chunks 4-6 (streams 0-2) come later
    for (int s = 1; s < 4; ++s) SendAll(st.other[s], msg.substr(s * chunk, chunk));
    std::string dst(msg.size(), 0);
    size_t off = 0;
    for (int i = 0; i < 3; ++i) {  // nothing can be handed out yet
      if (direct) {
        auto n = rx->RecvInto(dst.data(), dst.size());
        ASSERT_TRUE(n.ok()) << n.status().ToString();
        EXPECT_EQ(*n, 0u);
      } else {
        auto p = rx->Peek();
        ASSERT_TRUE(p.ok()) << p.status().ToString();
        EXPECT_EQ(p->second, 0u);
      }
    }
    for (int s = 1; s < 4; ++s) EXPECT_EQ(Unread(st, s), 0) << "stream " << s << "'s chunk was left in the kernel";
    EXPECT_EQ(rx->WaitFd(), st.conns->fds[0]);  // what it waits for is stream 0
    SendAll(st.other[0], msg.substr(0, chunk) + msg.substr(4 * chunk, chunk));
    SendAll(st.other[1], msg.substr(5 * chunk, chunk));
    SendAll(st.other[2], msg.substr(6 * chunk));
    if (direct) {
      for (auto end = Clock::now() + 5s; off < dst.size() && Clock::now() < end;) {
        auto n = rx->RecvInto(dst.data() + off, dst.size() - off);
        ASSERT_TRUE(n.ok()) << n.status().ToString();
        off += *n;
      }
      EXPECT_EQ(off, msg.size());
      EXPECT_TRUE(dst == msg) << "the bytes differ";
    } else {
      const std::string got = ReadN(rx.get(), msg.size());
      EXPECT_EQ(got.size(), msg.size());
      EXPECT_TRUE(got == msg) << "the bytes differ";
    }
  }
}

// A fake sender writes the round-robin stream in a skewed order — random pieces on random streams, each
// stream in its own order, interleaved with the receiver — and the receiver takes messages of random
// sizes, each padded to kChannelAlign as the engine sends them, alternately with RecvInto (a copy) and
// with Peek (a fold: whole 8-byte elements, each message's first one aligned). Every byte comes out in
// stream order. The chunk is not a multiple of kChannelAlign, so elements straddle chunk boundaries.
TEST(TcpChannel, StreamsWrittenInASkewedOrderComeOutInOrderAndAligned) {
  for (size_t streams : {1u, 3u, 4u}) {
    SCOPED_TRACE("streams " + std::to_string(streams));
    const size_t chunk = 4099;
    Streams st(static_cast<int>(streams));
    auto rx = MakeTcpReceiver(st.conns, chunk);
    std::mt19937 rng(1234 + static_cast<unsigned>(streams));
    std::vector<size_t> sizes;
    std::string wire;
    while (wire.size() < 300000) {
      const size_t n = std::uniform_int_distribution<size_t>(1, 3 * chunk)(rng);
      sizes.push_back(n);
      wire += Pattern(n, static_cast<char>('a' + sizes.size() % 26)) + std::string(PadToChannel(n) - n, '\0');
    }
    std::vector<std::string> per(streams);  // what each stream carries, in its order
    for (size_t c = 0; c * chunk < wire.size(); ++c) per[c % streams] += wire.substr(c * chunk, chunk);
    std::vector<size_t> written(streams, 0);
    auto feed = [&] {  // one random piece on one random stream, as much of it as the socket takes now
      const size_t s = std::uniform_int_distribution<size_t>(0, streams - 1)(rng);
      const size_t n = std::min(per[s].size() - written[s], std::uniform_int_distribution<size_t>(1, 2 * chunk)(rng));
      if (n == 0) return;
      const ssize_t r = ::send(st.other[s], per[s].data() + written[s], n, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (r > 0) written[s] += static_cast<size_t>(r);
    };
    size_t at = 0;  // stream offset of the current message
    const auto end = Clock::now() + 20s;
    for (size_t m = 0; m < sizes.size() && Clock::now() < end; ++m) {
      const size_t n = sizes[m], padded = PadToChannel(n);
      std::string got;
      bool misaligned = false;
      while (got.size() < padded && Clock::now() < end) {
        feed();
        if (m % 2 == 0 && got.size() < n) {
          std::string tmp(n - got.size(), 0);
          auto r = rx->RecvInto(tmp.data(), tmp.size());
          ASSERT_TRUE(r.ok()) << r.status().ToString();
          got.append(tmp.data(), *r);
          continue;
        }
        auto p = rx->Peek();
        ASSERT_TRUE(p.ok()) << p.status().ToString();
        size_t take = std::min(p->second, padded - got.size());
        if (m % 2 == 1 && got.size() < n) {
          take -= take % kChannelAlign;  // whole elements
          if (take > 0 && got.empty()) misaligned |= reinterpret_cast<uintptr_t>(p->first) % kChannelAlign != 0;
        }
        got.append(reinterpret_cast<const char*>(p->first), take);
        rx->Consume(take);
      }
      ASSERT_EQ(got.size(), padded) << "message " << m << " did not arrive";
      ASSERT_EQ(got, wire.substr(at, padded)) << "message " << m << " at stream offset " << at;
      EXPECT_FALSE(misaligned) << "message " << m << " handed out at a misaligned address";
      at += padded;
    }
    EXPECT_EQ(at, wire.size());
  }
}

// A stream that ends (its peer closed it) while another is still behind: the bytes that came before
// the end are all handed out, and the error comes only when the next bytes are due on that stream.
TEST(TcpChannel, AStreamThatEndedEarlyFailsOnlyWhenItsBytesAreDue) {
  const size_t chunk = 4096;
  Streams st(2);
  auto rx = MakeTcpReceiver(st.conns, chunk);
  const std::string c0 = Pattern(chunk, 'A'), c1 = Pattern(100, 'B');
  SendAll(st.other[1], c1);
  st.CloseOther(1);
  for (int i = 0; i < 3; ++i) {  // stream 0 is behind: no error, nothing to hand out
    auto p = rx->Peek();
    ASSERT_TRUE(p.ok()) << p.status().ToString();
    EXPECT_EQ(p->second, 0u);
  }
  SendAll(st.other[0], c0);
  EXPECT_EQ(ReadN(rx.get(), c0.size() + c1.size()), c0 + c1);
  char buf[8];
  auto n = rx->RecvInto(buf, sizeof(buf));
  ASSERT_FALSE(n.ok());
  EXPECT_EQ(n.status().code(), Code::kRemoteError) << n.status().ToString();
  EXPECT_NE(n.status().message().find("closed by the peer"), std::string::npos) << n.status().ToString();
}

TEST(TcpChannel, APeerClosingMidMessageGivesItsBytesThenAnError) {
  const size_t chunk = 4096;
  {
    Streams st(1);
    auto rx = MakeTcpReceiver(st.conns, chunk);
    SendAll(st.other[0], "half a mess");
    st.CloseOther(0);
    EXPECT_EQ(ReadN(rx.get(), 11), "half a mess");  // what was sent before the close is not lost
    Status last;
    for (auto end = Clock::now() + 5s; last.ok() && Clock::now() < end;) last = rx->Peek().status();
    EXPECT_EQ(last.code(), Code::kRemoteError) << last.ToString();
    EXPECT_NE(last.message().find("closed by the peer"), std::string::npos) << last.ToString();
  }
  {
    Streams st(1);
    auto rx = MakeTcpReceiver(st.conns, chunk);
    st.CloseOther(0);
    char buf[16];
    auto n = rx->RecvInto(buf, sizeof(buf));
    ASSERT_FALSE(n.ok());
    EXPECT_EQ(n.status().code(), Code::kRemoteError) << n.status().ToString();
  }
  {
    Streams st(2);
    auto tx = MakeTcpSender(st.conns, chunk);
    st.CloseOther(0);
    const std::string msg = Pattern(100, 's');
    auto n = tx->TrySend(msg.data(), msg.size());  // EPIPE, not SIGPIPE (which would end this process)
    ASSERT_FALSE(n.ok());
    EXPECT_EQ(n.status().code(), Code::kRemoteError) << n.status().ToString();
  }
}

TEST(TcpChannel, AFullSocketTakesNothingInsteadOfBlocking) {
  Streams st(1);
  int small = 4096;
  ::setsockopt(st.conns->fds[0], SOL_SOCKET, SO_SNDBUF, &small, sizeof(small));
  const size_t chunk = 1 << 20;
  auto tx = MakeTcpSender(st.conns, chunk);
  const std::string block = Pattern(65536, 'f');
  size_t sent = 0;
  bool full = false;
  const auto t0 = Clock::now();
  for (int i = 0; i < 100000 && !full; ++i) {
    auto n = tx->TrySend(block.data(), block.size());
    ASSERT_TRUE(n.ok()) << n.status().ToString();
    full = *n == 0;
    sent += *n;
  }
  EXPECT_TRUE(full) << sent << " bytes went into a socket nobody reads";
  EXPECT_LT(Clock::now() - t0, 30s);
  // Reading makes room again.
  EXPECT_GT(Drain(st.other[0]).size(), 0u);
  bool moved = false;
  for (auto end = Clock::now() + 5s; !moved && Clock::now() < end;) {
    auto n = tx->TrySend(block.data(), block.size());
    ASSERT_TRUE(n.ok());
    moved = *n > 0;
  }
  EXPECT_TRUE(moved);
}

TEST(TcpSetUp, HellosCarryRankAndStreamInAnyOrderAndAreAcknowledged) {
  log::Init();
  auto l = TcpListener::Listen("127.0.0.1");
  ASSERT_TRUE(l.ok()) << l.status().ToString();
  const std::string addr = "127.0.0.1:" + std::to_string((*l)->port());
  std::vector<int> fds;
  for (int s : {2, 0, 1}) {
    auto fd = TcpConnect(addr, 7, s, kToken, 5s);
    ASSERT_TRUE(fd.ok()) << fd.status().ToString();
    fds.push_back(*fd);
  }
  auto in = (*l)->AcceptHellos(3, kToken, 10s);
  ASSERT_TRUE(in.ok()) << in.status().ToString();
  ASSERT_EQ(in->size(), 3u);
  std::vector<int> streams;
  for (const auto& c : *in) {
    EXPECT_EQ(c.from_rank, 7);
    streams.push_back(c.stream);
    EXPECT_TRUE(TcpSendAck(c.fd).ok());
  }
  std::sort(streams.begin(), streams.end());
  EXPECT_EQ(streams, (std::vector<int>{0, 1, 2}));
  for (int fd : fds) EXPECT_TRUE(TcpAwaitAck(fd, addr, 5s).ok());
  // An accepted connection, tuned, carries bytes to the connector of its stream.
  ASSERT_TRUE(TcpTune((*in)[0].fd).ok());
  SendAll((*in)[0].fd, "ping");
  const std::vector<int> order = {2, 0, 1};  // the streams in the order they connected
  const int peer = fds[std::find(order.begin(), order.end(), (*in)[0].stream) - order.begin()];
  std::string got;
  for (auto end = Clock::now() + 5s; got.size() < 4 && Clock::now() < end;) got += Drain(peer);
  EXPECT_EQ(got, "ping");
  for (const auto& c : *in) ::close(c.fd);
  for (int fd : fds) ::close(fd);
}

TEST(TcpSetUp, AcceptHellosWithNoPeerTimesOut) {
  auto l = TcpListener::Listen("127.0.0.1");
  ASSERT_TRUE(l.ok());
  const auto t0 = Clock::now();
  auto in = (*l)->AcceptHellos(2, kToken, 300ms);
  ASSERT_FALSE(in.ok());
  EXPECT_EQ(in.status().code(), Code::kTimeout) << in.status().ToString();
  EXPECT_NE(in.status().message().find("0 of 2 peer connections"), std::string::npos) << in.status().ToString();
  EXPECT_LT(Clock::now() - t0, 20s);
}

TEST(TcpSetUp, AwaitAckWithoutAnAcknowledgementIsAnError) {
  auto l = TcpListener::Listen("127.0.0.1");
  ASSERT_TRUE(l.ok());
  const std::string addr = "127.0.0.1:" + std::to_string((*l)->port());
  auto fd = TcpConnect(addr, 1, 0, kToken, 5s);
  ASSERT_TRUE(fd.ok()) << fd.status().ToString();
  const auto t0 = Clock::now();
  Status s = TcpAwaitAck(*fd, addr, 300ms);  // the listener never accepts it
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.code(), Code::kRemoteError) << s.ToString();
  EXPECT_NE(s.message().find("timed out"), std::string::npos) << s.ToString();
  EXPECT_LT(Clock::now() - t0, 20s);
  ::close(*fd);
}

TEST(TcpSetUp, AWrongTokenIsRefusedOnBothSides) {
  log::Init();
  auto l = TcpListener::Listen("127.0.0.1");
  ASSERT_TRUE(l.ok());
  const std::string addr = "127.0.0.1:" + std::to_string((*l)->port());
  ::testing::internal::CaptureStderr();
  auto fd = TcpConnect(addr, 1, 0, "some-other-job", 5s);
  ASSERT_TRUE(fd.ok()) << fd.status().ToString();
  Status connector;
  std::thread t([&] { connector = TcpAwaitAck(*fd, addr, 10s); });
  auto in = (*l)->AcceptHellos(1, kToken, 1s);  // drops it: nobody valid arrives
  t.join();
  const std::string log = ::testing::internal::GetCapturedStderr();
  ASSERT_FALSE(in.ok());
  EXPECT_EQ(in.status().code(), Code::kTimeout);
  EXPECT_EQ(connector.code(), Code::kRemoteError) << connector.ToString();
  EXPECT_NE(connector.message().find("refused the job token"), std::string::npos) << connector.ToString();
  EXPECT_NE(log.find("wrong job token"), std::string::npos) << log;
  ::close(*fd);
}

TEST(TcpSetUp, ConnectingToNobodyGivesUpAtTheTimeout) {
  int port = 0;
  {  // a port that was free a moment ago
    auto l = TcpListener::Listen("127.0.0.1");
    ASSERT_TRUE(l.ok());
    port = (*l)->port();
  }
  const auto t0 = Clock::now();
  auto fd = TcpConnect("127.0.0.1:" + std::to_string(port), 0, 0, kToken, 300ms);
  ASSERT_FALSE(fd.ok());
  EXPECT_EQ(fd.status().code(), Code::kTimeout) << fd.status().ToString();
  EXPECT_NE(fd.status().message().find("gave up after 300 ms"), std::string::npos) << fd.status().ToString();
  EXPECT_GE(Clock::now() - t0, 300ms);  // it retried until then (the peer may still be starting)
  EXPECT_LT(Clock::now() - t0, 20s);
  auto bad = TcpConnect("no-port-here", 0, 0, kToken, 300ms);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), Code::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("no-port-here"), std::string::npos) << bad.status().ToString();
}

// The test's end of a relayed link: TCP channels over the other ends of the socket pairs (which it then owns).
struct PeerEnd {
  PeerEnd(Streams& st, size_t chunk) : conns(std::make_shared<TcpConnections>()) {
    for (int& fd : st.other) {
      conns->fds.push_back(fd);
      fd = -1;
    }
    tx = MakeTcpSender(conns, chunk);
    rx = MakeTcpReceiver(conns, chunk);
  }
  void SendAllOf(const std::string& bytes) {
    size_t off = 0;
    for (auto end = Clock::now() + 5s; off < bytes.size() && Clock::now() < end;) {
      auto n = tx->TrySend(bytes.data() + off, bytes.size() - off);
      ASSERT_TRUE(n.ok()) << n.status().ToString();
      off += *n;
    }
    ASSERT_EQ(off, bytes.size());
  }
  std::shared_ptr<TcpConnections> conns;
  std::unique_ptr<SendChannel> tx;
  std::unique_ptr<RecvChannel> rx;
};

// Claims (the device bridge's way of reading) and consumes until `want` bytes came or 5 s passed.
std::string ClaimN(RecvChannel* ch, size_t want) {
  std::string out;
  for (auto end = Clock::now() + 5s; out.size() < want && Clock::now() < end;) {
    auto [p, n] = ch->Claim(want - out.size(), 1);
    out.append(reinterpret_cast<const char*>(p), n);
    ch->Consume(n);
  }
  return out;
}

TEST(TcpRelay, BytesCrossBothWaysThroughItsRingsAndWhatWasPublishedIsSentAtTheEnd) {
  const size_t chunk = 4096, ring = 16384;
  Streams st(2);
  auto relay = TcpRelay::Create(MakeTcpSender(st.conns, chunk), MakeTcpReceiver(st.conns, chunk), ring, "rank 9", 5s);
  ASSERT_TRUE(relay.ok()) << relay.status().ToString();
  PeerEnd peer(st, chunk);
  auto out = (*relay)->Writer();
  auto in = (*relay)->Reader();
  EXPECT_TRUE(out->dma() && in->dma());
  // Outbound: a copy call, then ring ends written in place (as a copy engine does), 5 rings' worth in all.
  const std::string msg = Pattern(5 * ring, 'o');
  size_t off = 0;
  for (auto end = Clock::now() + 5s; off < 4096 && Clock::now() < end;) {
    auto n = out->TrySend(msg.data() + off, 4096 - off);
    ASSERT_TRUE(n.ok()) << n.status().ToString();
    off += *n;
  }
  std::string got;
  for (auto end = Clock::now() + 5s; off < msg.size() && Clock::now() < end;) {
    auto [p, n] = out->Reserve(msg.size() - off);
    std::memcpy(p, msg.data() + off, n);
    out->Publish(n);
    off += n;
    got += ReadN(peer.rx.get(), msg.size() - got.size(), 1ms);  // what has come so far
  }
  ASSERT_EQ(off, msg.size());
  // Inbound, through the wrap of the inbound ring several times.
  const std::string back = Pattern(3 * ring + 8, 'i');
  std::thread sender([&] { peer.SendAllOf(back); });
  EXPECT_EQ(ClaimN(in.get(), back.size()), back);
  sender.join();
  // The last outbound bytes may still be in the ring: the relay's end hands them to TCP before it goes.
  in.reset();
  out.reset();
  relay->reset();
  got += ReadN(peer.rx.get(), msg.size() - got.size());
  EXPECT_EQ(got, msg);
  EXPECT_TRUE(Drain(peer.conns->fds[0]).empty() && Drain(peer.conns->fds[1]).empty());
}

TEST(TcpRelay, AClosedLinkIsReportedAfterTheBytesThatArrivedBeforeIt) {
  const size_t chunk = 4096;
  Streams st(1);
  auto relay = TcpRelay::Create(MakeTcpSender(st.conns, chunk), MakeTcpReceiver(st.conns, chunk), 16384, "rank 9", 5s);
  ASSERT_TRUE(relay.ok()) << relay.status().ToString();
  auto out = (*relay)->Writer();
  auto in = (*relay)->Reader();
  SendAll(st.other[0], "half a mess");
  st.CloseOther(0);
  // The pump delivers the bytes, then meets the end of the stream.
  for (auto end = Clock::now() + 5s; (*relay)->Health().ok() && Clock::now() < end;) std::this_thread::sleep_for(1ms);
  ASSERT_FALSE((*relay)->Health().ok());
  EXPECT_EQ((*relay)->delivered(), 11u);
  EXPECT_TRUE(in->Health().ok()) << "bytes that arrived before the close are still to be read";
  EXPECT_EQ(ClaimN(in.get(), 11), "half a mess");
  Status s = in->Health();
  EXPECT_EQ(s.code(), Code::kRemoteError) << s.ToString();
  EXPECT_NE(s.message().find("the link to rank 9 (tcp, relayed for the device bridge)"), std::string::npos)
      << s.ToString();
  EXPECT_NE(s.message().find("closed by the peer"), std::string::npos) << s.ToString();
  EXPECT_EQ(out->Health().code(), Code::kRemoteError);
  auto n = out->TrySend("x", 1);
  EXPECT_FALSE(n.ok());
  auto p = in->Peek();
  EXPECT_FALSE(p.ok());
}

}  // namespace
}  // namespace tessera::comm
