// comm/transport/shm: shared-memory rings; see shm.hpp.
#include "comm/transport/shm.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/mman.h>
#include <sys/uio.h>
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
  // Single copy (shm.hpp): bytes of described messages the owner has copied out of the writer's memory.
  alignas(64) std::atomic<uint64_t> pulled;
  // Set up once, before the channels exist: the writer's offer (a word of this block and where the writer
  // sees it) and the owner's verdict (1: it pulls).
  alignas(64) uint64_t probe;
  uint64_t probe_addr;
  uint32_t single_copy;
};
static_assert(sizeof(RingCtl) == 256);
static_assert(std::atomic<uint64_t>::is_always_lock_free);

size_t CtlBytes(int nslots) { return (sizeof(RingCtl) * nslots + 4095) & ~size_t{4095}; }

// A descriptor of a single-copy message, as it travels in the ring.
struct Descriptor {
  uint64_t addr, bytes;
};
static_assert(sizeof(Descriptor) % kChannelAlign == 0);

class ShmReader final : public RecvChannel {
 public:
  ShmReader(RingCtl* ctl, std::byte* ring, size_t size, int writer_pid)
      : ctl_(ctl), ring_(ring), size_(size), pid_(ctl->single_copy == 1 ? writer_pid : 0) {}
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
  bool single_copy() const override { return pid_ != 0; }
  bool TakeDescriptor(uint64_t* addr, size_t* bytes) override {
    if (ctl_->head.load(std::memory_order_acquire) - tail_ < sizeof(Descriptor)) return false;
    Descriptor d;
    const size_t at = tail_ % size_, first = std::min(sizeof d, size_ - at);
    std::memcpy(&d, ring_ + at, first);
    std::memcpy(reinterpret_cast<std::byte*>(&d) + first, ring_, sizeof d - first);  // across the wrap
    Consume(sizeof d);
    *addr = d.addr;
    *bytes = d.bytes;
    return true;
  }
  Status Pull(void* dst, uint64_t addr, size_t bytes) const override {
    auto* d = static_cast<std::byte*>(dst);
    while (bytes > 0) {
      iovec local{d, bytes}, remote{reinterpret_cast<void*>(addr), bytes};
      const ssize_t n = process_vm_readv(pid_, &local, 1, &remote, 1, 0);
      if (n <= 0) {
        const int err = n == 0 ? EFAULT : errno;
        if (err == ESRCH) return RemoteError(fmt::format("the sending process (pid {}) has exited", pid_));
        return ErrnoError(fmt::format("process_vm_readv of {} bytes at {:#x} from pid {}", bytes, addr, pid_), err);
      }
      d += n;
      addr += static_cast<uint64_t>(n);
      bytes -= static_cast<size_t>(n);
    }
    return Status::Ok();
  }
  void MarkPulled(size_t bytes) override {
    pulled_ += bytes;
    ctl_->pulled.store(pulled_, std::memory_order_release);
  }

 private:
  RingCtl* ctl_;
  std::byte* ring_;
  size_t size_;
  const int pid_;  // the writer's, where this reader pulls (single copy); 0 otherwise
  uint64_t tail_ = 0;
  uint64_t claimed_ = 0;  // >= tail_: handed out by Claim, not yet consumed
  uint64_t pulled_ = 0;
};

class ShmWriter final : public SendChannel {
 public:
  ShmWriter(RingCtl* ctl, std::byte* ring, size_t size)
      : ctl_(ctl), ring_(ring), size_(size), single_copy_(ctl->single_copy == 1) {}
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
  bool single_copy() const override { return single_copy_; }
  bool TryDescribe(const void* src, size_t bytes) override {
    const Descriptor d{reinterpret_cast<uint64_t>(src), bytes};
    if (size_ - (head_ - ctl_->tail.load(std::memory_order_acquire)) < sizeof d) return false;
    const size_t at = head_ % size_, first = std::min(sizeof d, size_ - at);
    std::memcpy(ring_ + at, &d, first);
    std::memcpy(ring_, reinterpret_cast<const std::byte*>(&d) + first, sizeof d - first);  // across the wrap
    head_ += sizeof d;
    reserved_ = head_;
    described_ += bytes;
    ctl_->head.store(head_, std::memory_order_release);
    return true;
  }
  uint64_t Described() const override { return described_; }
  uint64_t Pulled() const override { return ctl_->pulled.load(std::memory_order_acquire); }

 private:
  RingCtl* ctl_;
  std::byte* ring_;
  size_t size_;
  const bool single_copy_;
  uint64_t head_ = 0;
  uint64_t reserved_ = 0;  // >= head_: handed out by Reserve, not yet published
  uint64_t described_ = 0;
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

std::unique_ptr<RecvChannel> ShmInbox::Reader(int slot, int writer_pid) {
  return std::make_unique<ShmReader>(static_cast<RingCtl*>(base_) + slot, ring(slot), ring_bytes_[slot], writer_pid);
}

void ShmInbox::OfferSingleCopy(int slot, uint64_t token) {
  RingCtl* ctl = static_cast<RingCtl*>(base_) + slot;
  ctl->probe = token | 1;  // never 0, the value of a block nobody offered
  ctl->probe_addr = reinterpret_cast<uint64_t>(&ctl->probe);
}

Status ShmInbox::AcceptSingleCopy(int slot, int writer_pid) {
  RingCtl* ctl = static_cast<RingCtl*>(base_) + slot;
  ctl->single_copy = 0;
  if (ctl->probe == 0) return Unsupported("the writer did not offer single copy");
  uint64_t seen = 0;
  iovec local{&seen, sizeof seen}, remote{reinterpret_cast<void*>(ctl->probe_addr), sizeof seen};
  if (process_vm_readv(writer_pid, &local, 1, &remote, 1, 0) != static_cast<ssize_t>(sizeof seen))
    return ErrnoError(fmt::format("process_vm_readv from pid {}", writer_pid), errno);
  if (seen != ctl->probe)
    return Unsupported(fmt::format("pid {} holds {:#x} where the shared word holds {:#x}: not the process "
                                          "that mapped this ring (another pid namespace?)",
                                          writer_pid, seen, ctl->probe));
  ctl->single_copy = 1;
  return Status::Ok();
}

std::unique_ptr<SendChannel> ShmInbox::Writer(int slot) {
  return std::make_unique<ShmWriter>(static_cast<RingCtl*>(base_) + slot, ring(slot), ring_bytes_[slot]);
}

}  // namespace tessera::comm
