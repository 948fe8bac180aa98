// comm/transport/shm: shared-memory rings; see shm.hpp.
#include "comm/transport/shm.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>

namespace tessera::comm {
namespace {

struct alignas(64) RingCtl {
  alignas(64) std::atomic<uint64_t> head;  // bytes written (by the peer)
  alignas(64) std::atomic<uint64_t> tail;  // bytes read (by the owner)
};
static_assert(sizeof(RingCtl) == 128);
static_assert(std::atomic<uint64_t>::is_always_lock_free);

size_t CtlBytes(int nslots) { return (sizeof(RingCtl) * nslots + 4095) & ~size_t{4095}; }

class ShmReader final : public RecvChannel {
 public:
  ShmReader(RingCtl* ctl, std::byte* ring, size_t size) : ctl_(ctl), ring_(ring), size_(size) {}
  Result<std::pair<const std::byte*, size_t>> Peek() override {
    uint64_t head = ctl_->head.load(std::memory_order_acquire);
    uint64_t tail = tail_;
    size_t avail = head - tail;
    size_t at = tail % size_;
    return std::pair<const std::byte*, size_t>(ring_ + at, std::min(avail, size_ - at));
  }
  void Consume(size_t bytes) override {
    tail_ += bytes;
    claimed_ = std::max(claimed_, tail_);
    ctl_->tail.store(tail_, std::memory_order_release);
  }
  const char* transport() const override { return "shm"; }
  bool dma() const override { return true; }
  std::pair<const std::byte*, size_t> Claim(size_t max, size_t unit) override {
    uint64_t head = ctl_->head.load(std::memory_order_acquire);
    size_t at = claimed_ % size_;
    size_t n = std::min({max, static_cast<size_t>(head - claimed_), size_ - at});
    n -= n % unit;
    claimed_ += n;
    return {ring_ + at, n};
  }
  std::pair<std::byte*, size_t> ring_memory() const override { return {ring_, size_}; }

 private:
  RingCtl* ctl_;
  std::byte* ring_;
  size_t size_;
  uint64_t tail_ = 0;
  uint64_t claimed_ = 0;  // >= tail_: handed out by Claim, not yet consumed
};

class ShmWriter final : public SendChannel {
 public:
  ShmWriter(RingCtl* ctl, std::byte* ring, size_t size) : ctl_(ctl), ring_(ring), size_(size) {}
  Result<size_t> TrySend(const void* src, size_t bytes) override {
    uint64_t tail = ctl_->tail.load(std::memory_order_acquire);
    size_t space = size_ - (head_ - tail);
    size_t at = head_ % size_;
    size_t n = std::min({bytes, space, size_ - at});
    if (n == 0) return size_t{0};
    std::memcpy(ring_ + at, src, n);
    head_ += n;
    reserved_ = head_;
    ctl_->head.store(head_, std::memory_order_release);
    return n;
  }
  const char* transport() const override { return "shm"; }
  bool dma() const override { return true; }
  std::pair<std::byte*, size_t> Reserve(size_t max) override {
    uint64_t tail = ctl_->tail.load(std::memory_order_acquire);
    size_t at = reserved_ % size_;
    size_t n = std::min({max, size_ - static_cast<size_t>(reserved_ - tail), size_ - at});
    reserved_ += n;
    return {ring_ + at, n};
  }
  void Publish(size_t bytes) override {
    head_ += bytes;
    ctl_->head.store(head_, std::memory_order_release);
  }
  bool writes_peer_memory() const override { return true; }
  std::pair<std::byte*, size_t> ring_memory() const override { return {ring_, size_}; }

 private:
  RingCtl* ctl_;
  std::byte* ring_;
  size_t size_;
  uint64_t head_ = 0;
  uint64_t reserved_ = 0;  // >= head_: handed out by Reserve, not yet published
};

Result<void*> MapFd(int fd, size_t size, const std::string& name) {
  void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  int err = errno;
  close(fd);
  if (p == MAP_FAILED) return ErrnoError(fmt::format("mmap of shared memory {} ({} bytes)", name, size), err);
  return p;
}

size_t TotalBytes(const std::vector<size_t>& rings) {
  size_t size = CtlBytes(static_cast<int>(rings.size()));
  for (size_t r : rings) size += r;
  return size;
}
}  // namespace

ShmInbox::ShmInbox(std::string name, void* base, size_t size, std::vector<size_t> ring_bytes, bool owner)
    : name_(std::move(name)), base_(base), size_(size), ring_bytes_(std::move(ring_bytes)), owner_(owner) {
  size_t at = CtlBytes(static_cast<int>(ring_bytes_.size()));
  for (size_t r : ring_bytes_) {
    offset_.push_back(at);
    at += r;
  }
}

Result<std::unique_ptr<ShmInbox>> ShmInbox::Create(const std::string& name, const std::vector<size_t>& ring_bytes) {
  size_t size = TotalBytes(ring_bytes);
  int fd = shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  if (fd < 0) return ErrnoError("shm_open " + name, errno);
  if (ftruncate(fd, static_cast<off_t>(size)) != 0) {
    int err = errno;
    close(fd);
    shm_unlink(name.c_str());
    return ErrnoError(fmt::format("sizing shared memory {} to {} bytes (is /dev/shm large enough? "
                                  "lower TESSERA_SHM_RING / TESSERA_DEVICE_RING)",
                                  name, size),
                      err);
  }
  auto p = MapFd(fd, size, name);
  if (!p.ok()) {
    shm_unlink(name.c_str());
    return p.status();
  }
  auto* ctl = static_cast<RingCtl*>(*p);
  for (size_t i = 0; i < ring_bytes.size(); ++i) new (&ctl[i]) RingCtl{};
  return std::unique_ptr<ShmInbox>(new ShmInbox(name, *p, size, ring_bytes, true));
}

Result<std::unique_ptr<ShmInbox>> ShmInbox::CreatePrivate(const std::vector<size_t>& ring_bytes) {
  size_t size = TotalBytes(ring_bytes);
  void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return ErrnoError(fmt::format("mmap of {} bytes of rings", size), errno);
  auto* ctl = static_cast<RingCtl*>(p);
  for (size_t i = 0; i < ring_bytes.size(); ++i) new (&ctl[i]) RingCtl{};
  auto box = std::unique_ptr<ShmInbox>(new ShmInbox("", p, size, ring_bytes, false));
  box->unlinked_ = true;
  return box;
}

Result<std::unique_ptr<ShmInbox>> ShmInbox::Open(const std::string& name, const std::vector<size_t>& ring_bytes) {
  size_t size = TotalBytes(ring_bytes);
  int fd = shm_open(name.c_str(), O_RDWR, 0600);
  if (fd < 0) return ErrnoError("shm_open of a peer's inbox " + name, errno);
  TSR_ASSIGN_OR_RETURN(void* p, MapFd(fd, size, name));
  return std::unique_ptr<ShmInbox>(new ShmInbox(name, p, size, ring_bytes, false));
}

ShmInbox::~ShmInbox() {
  if (owner_) Unlink();
  munmap(base_, size_);
}

void ShmInbox::Unlink() {
  if (!unlinked_) shm_unlink(name_.c_str());
  unlinked_ = true;
}

std::unique_ptr<RecvChannel> ShmInbox::Reader(int slot) {
  return std::make_unique<ShmReader>(static_cast<RingCtl*>(base_) + slot, ring(slot), ring_bytes_[slot]);
}

std::unique_ptr<SendChannel> ShmInbox::Writer(int slot) {
  return std::make_unique<ShmWriter>(static_cast<RingCtl*>(base_) + slot, ring(slot), ring_bytes_[slot]);
}

}  // namespace tessera::comm
