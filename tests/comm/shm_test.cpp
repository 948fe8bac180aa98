// tests/comm/shm_test: comm/transport/shm's rings, in one process (the owner's inbox and a peer's mapping
// of it): bytes arrive intact across the ring's wrap, lap after lap, for messages of 1 byte and odd sizes;
// a full ring takes nothing until the reader consumes; Peek and Claim never hand out bytes across the wrap;
// reserved bytes stay invisible until published; rings of one inbox are independent; names are unlinked
// (and a second create or an open of a missing name fails naming it); and a writer and a reader on two
// threads move megabytes through a small ring (the atomics' ordering, under TSan).
#include "comm/transport/shm.hpp"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace tessera::comm {
namespace {

std::string UniqueName(const char* what) {
  static std::atomic<int> n{0};
  return "/tsr-test-" + std::to_string(getpid()) + "-" + what + "-" + std::to_string(n++);
}

bool NameExists(const std::string& name) {
  const int fd = shm_open(name.c_str(), O_RDWR, 0600);
  if (fd < 0) return false;
  close(fd);
  return true;
}

// An inbox and a peer's mapping of it: writer(slot) in the peer, reader(slot) in the owner.
struct Rings {
  explicit Rings(std::vector<size_t> sizes, const char* what = "ring") : name(UniqueName(what)) {
    auto o = ShmInbox::Create(name, sizes);
    EXPECT_TRUE(o.ok()) << o.status().ToString();
    owner = std::move(o).value();
    auto p = ShmInbox::Open(name, sizes);
    EXPECT_TRUE(p.ok()) << p.status().ToString();
    peer = std::move(p).value();
  }
  std::string name;
  std::unique_ptr<ShmInbox> owner, peer;
};

std::byte Byte(uint64_t i) { return static_cast<std::byte>((i * 2654435761u) >> 13); }

// Writes `bytes` of the pattern starting at stream offset `at`, as far as the ring takes them.
size_t Write(SendChannel* w, uint64_t at, size_t bytes) {
  std::vector<std::byte> buf(bytes);
  for (size_t i = 0; i < bytes; ++i) buf[i] = Byte(at + i);
  size_t done = 0;
  while (done < bytes) {
    auto n = w->TrySend(buf.data() + done, bytes - done);
    EXPECT_TRUE(n.ok()) << n.status().ToString();
    if (!n.ok() || *n == 0) break;
    done += *n;
  }
  return done;
}

// Reads everything readable, checking it against the pattern from stream offset *at.
size_t ReadAll(RecvChannel* r, uint64_t* at) {
  size_t total = 0;
  for (;;) {
    auto p = r->Peek();
    EXPECT_TRUE(p.ok()) << p.status().ToString();
    if (!p.ok() || p->second == 0) return total;
    for (size_t i = 0; i < p->second; ++i)
      if (p->first[i] != Byte(*at + i)) {
        ADD_FAILURE() << "byte " << *at + i << " of the stream is wrong";
        return total;
      }
    r->Consume(p->second);
    *at += p->second;
    total += p->second;
  }
}

TEST(ShmRing, CreateOpenUnlinkAndErrorsNameTheSegment) {
  Rings r({4096, 8192}, "names");
  EXPECT_TRUE(NameExists(r.name));
  EXPECT_EQ(r.owner->ring_bytes(0), 4096u);
  EXPECT_EQ(r.owner->ring_bytes(1), 8192u);
  // A second inbox of the same name is refused (O_EXCL).
  auto again = ShmInbox::Create(r.name, {4096});
  ASSERT_FALSE(again.ok());
  EXPECT_NE(again.status().message().find(r.name), std::string::npos) << again.status().ToString();
  r.owner->Unlink();
  r.owner->Unlink();  // twice is harmless
  EXPECT_FALSE(NameExists(r.name));
  // The mappings outlive the name.
  auto w = r.peer->Writer(1);
  auto rd = r.owner->Reader(1);
  uint64_t at = 0;
  EXPECT_EQ(Write(w.get(), 0, 100), 100u);
  EXPECT_EQ(ReadAll(rd.get(), &at), 100u);
  // Opening a name that is gone fails, naming it.
  auto missing = ShmInbox::Open(r.name, {4096, 8192});
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find(r.name), std::string::npos) << missing.status().ToString();
}

TEST(ShmRing, TheOwnerUnlinksItsNameWhenDestroyed) {
  const std::string name = UniqueName("dtor");
  {
    auto o = ShmInbox::Create(name, {4096});
    ASSERT_TRUE(o.ok()) << o.status().ToString();
    EXPECT_TRUE(NameExists(name));
  }
  EXPECT_FALSE(NameExists(name));
}

TEST(ShmRing, EmptyRingAndZeroBytes) {
  Rings r({4096});
  auto w = r.peer->Writer(0);
  auto rd = r.owner->Reader(0);
  auto p = rd->Peek();
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->second, 0u);
  auto n = w->TrySend("x", 0);
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(*n, 0u);
  EXPECT_EQ(rd->Peek()->second, 0u);
  EXPECT_EQ(std::string(w->transport()), "shm");
  EXPECT_EQ(w->WaitFd(), -1);
  EXPECT_EQ(rd->WaitFd(), -1);
  EXPECT_FALSE(rd->direct());
}

TEST(ShmRing, AFullRingTakesNothingUntilTheReaderConsumes) {
  const size_t ring = 4096;
  Rings r({ring});
  auto w = r.peer->Writer(0);
  auto rd = r.owner->Reader(0);
  EXPECT_EQ(Write(w.get(), 0, ring + 100), ring);  // only a ring's worth
  auto n = w->TrySend("abc", 3);
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(*n, 0u);
  auto p = rd->Peek();
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->second, ring);
  rd->Consume(10);  // ten bytes free: exactly ten more go in
  EXPECT_EQ(Write(w.get(), ring, 50), 10u);
}

TEST(ShmRing, WrapAroundHandsOutContiguousPiecesAndKeepsTheBytes) {
  const size_t ring = 4096;
  Rings r({ring});
  auto w = r.peer->Writer(0);
  auto rd = r.owner->Reader(0);
  uint64_t at = 0;
  EXPECT_EQ(Write(w.get(), 0, 3000), 3000u);
  EXPECT_EQ(ReadAll(rd.get(), &at), 3000u);
  // 3000 more: 1096 to the end of the ring, then 1904 from its start.
  std::vector<std::byte> buf(3000);
  for (size_t i = 0; i < buf.size(); ++i) buf[i] = Byte(3000 + i);
  auto first = w->TrySend(buf.data(), buf.size());
  ASSERT_TRUE(first.ok());
  EXPECT_EQ(*first, ring - 3000);  // one call stops at the wrap
  auto second = w->TrySend(buf.data() + *first, buf.size() - *first);
  ASSERT_TRUE(second.ok());
  EXPECT_EQ(*first + *second, 3000u);
  auto p = rd->Peek();
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->second, ring - 3000);  // the reader too sees the piece up to the wrap first
  EXPECT_EQ(ReadAll(rd.get(), &at), 3000u);
  EXPECT_EQ(at, 6000u);
}

TEST(ShmRing, ManyLapsOfOddSizedMessages) {
  const size_t ring = 4096;
  Rings r({ring});
  auto w = r.peer->Writer(0);
  auto rd = r.owner->Reader(0);
  uint64_t wrote = 0, read = 0;
  const size_t sizes[] = {1, 3, 7, 13, 255, 4095, 1000, 2, 4096};
  for (int lap = 0; lap < 200; ++lap)
    for (size_t s : sizes) {
      size_t done = 0;
      while (done < s) {  // the reader drains whenever the ring is full
        const size_t n = Write(w.get(), wrote, s - done);
        wrote += n;
        done += n;
        ReadAll(rd.get(), &read);
      }
    }
  ReadAll(rd.get(), &read);
  EXPECT_EQ(read, wrote);
  EXPECT_GT(wrote, 100 * ring);
}

TEST(ShmRing, RingsOfOneInboxAreIndependent) {
  Rings r({4096, 4096, 8192});
  auto w0 = r.peer->Writer(0), w2 = r.peer->Writer(2);
  auto r0 = r.owner->Reader(0), r1 = r.owner->Reader(1), r2 = r.owner->Reader(2);
  EXPECT_EQ(Write(w0.get(), 0, 4096), 4096u);  // ring 0 full
  EXPECT_EQ(Write(w2.get(), 0, 8192), 8192u);  // ring 2 takes its own size, untouched by ring 0
  EXPECT_EQ(r1->Peek()->second, 0u);
  uint64_t a0 = 0, a2 = 0;
  EXPECT_EQ(ReadAll(r0.get(), &a0), 4096u);
  EXPECT_EQ(ReadAll(r2.get(), &a2), 8192u);
  EXPECT_NE(r.owner->ring(0), r.owner->ring(1));
}

TEST(ShmRing, ReservedBytesAreInvisibleUntilPublished) {
  const size_t ring = 4096;
  Rings r({ring});
  auto w = r.peer->Writer(0);
  auto rd = r.owner->Reader(0);
  ASSERT_TRUE(w->dma());
  ASSERT_TRUE(rd->dma());
  auto [p1, n1] = w->Reserve(1000);
  ASSERT_EQ(n1, 1000u);
  auto [p2, n2] = w->Reserve(ring);  // only what is left
  ASSERT_EQ(n2, ring - 1000);
  EXPECT_EQ(p2, p1 + 1000);
  EXPECT_EQ(w->Reserve(1).second, 0u);  // everything is reserved
  for (size_t i = 0; i < ring; ++i) p1[i] = Byte(i);
  EXPECT_EQ(rd->Peek()->second, 0u);
  w->Publish(1000);  // the oldest reserved bytes first
  EXPECT_EQ(rd->Peek()->second, 1000u);
  w->Publish(ring - 1000);
  uint64_t at = 0;
  EXPECT_EQ(ReadAll(rd.get(), &at), ring);
}

TEST(ShmRing, ClaimHandsOutWholeUnitsAndNeverCrossesTheWrap) {
  const size_t ring = 4096;
  Rings r({ring});
  auto w = r.peer->Writer(0);
  auto rd = r.owner->Reader(0);
  uint64_t at = 0;
  EXPECT_EQ(Write(w.get(), 0, 4000), 4000u);
  EXPECT_EQ(ReadAll(rd.get(), &at), 4000u);
  EXPECT_EQ(Write(w.get(), 4000, 1003), 96u + 907u);  // 96 bytes to the wrap, 907 after it (two calls)
  // Units of 8: the 96 bytes before the wrap, then 904 of the 907 after it, leaving 3.
  auto [c1, n1] = rd->Claim(4096, 8);
  EXPECT_EQ(n1, 96u);
  EXPECT_EQ(c1, r.owner->ring(0) + 4000);
  auto [c2, n2] = rd->Claim(4096, 8);
  EXPECT_EQ(n2, 904u);
  EXPECT_EQ(c2, r.owner->ring(0));
  EXPECT_EQ(rd->Claim(4096, 8).second, 0u);
  for (size_t i = 0; i < 96; ++i) ASSERT_EQ(c1[i], Byte(4000 + i));
  for (size_t i = 0; i < 904; ++i) ASSERT_EQ(c2[i], Byte(4096 + i));
  // Claimed bytes are still the writer's to wait for until consumed.
  EXPECT_EQ(Write(w.get(), 5003, 4096), 4096u - 1003u);
  rd->Consume(96 + 904);
  EXPECT_EQ(rd->Claim(3, 1).second, 3u);
}

TEST(ShmRing, AWriterAndAReaderOnTwoThreads) {
  const size_t ring = 4096;
  Rings r({ring});
  auto w = r.peer->Writer(0);
  auto rd = r.owner->Reader(0);
  const uint64_t total = 8 << 20;
  std::thread writer([&] {
    uint64_t at = 0;
    size_t step = 1;
    while (at < total) {
      const size_t want = std::min<uint64_t>(step, total - at);
      at += Write(w.get(), at, want);
      step = step * 3 % 5003 + 1;  // odd, varying sizes
      if (at < total) std::this_thread::yield();
    }
  });
  uint64_t at = 0;
  bool bad = false;
  while (at < total && !bad) {
    auto p = rd->Peek();
    ASSERT_TRUE(p.ok());
    for (size_t i = 0; i < p->second && !bad; ++i) bad = p->first[i] != Byte(at + i);
    rd->Consume(p->second);
    at += p->second;
    if (p->second == 0) std::this_thread::yield();
  }
  writer.join();
  EXPECT_FALSE(bad) << "a byte near stream offset " << at << " is wrong";
  EXPECT_EQ(at, total);
}

}  // namespace
}  // namespace tessera::comm
