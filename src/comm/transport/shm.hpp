// comm/transport/shm: channels through rings in POSIX shared memory, for ranks on one host.
//
// Each rank creates one segment holding a ring per same-host peer for the bytes that peer sends it
// (its "inbox"); peers map it by name. Head/tail counters are atomics on their own cache lines; the
// writer publishes with release, the reader observes with acquire. Segments are unlinked as soon as
// every peer has mapped them, so a crash leaves nothing behind in /dev/shm.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "comm/channel.hpp"

namespace tessera::comm {

class ShmInbox {
 public:
  // Creates the inbox of one ring per slot, ring_bytes[slot] bytes each (multiples of 4096; a ring may
  // be larger where a device's copy engines use it).
  static Result<std::unique_ptr<ShmInbox>> Create(const std::string& name, const std::vector<size_t>& ring_bytes);
  // Rings of the same layout in this process's memory only (no name; page-aligned, so a device can
  // register them): for threads of one process, as TcpRelay's.
  static Result<std::unique_ptr<ShmInbox>> CreatePrivate(const std::vector<size_t>& ring_bytes);
  // Maps a peer's inbox created under `name` with the same ring sizes.
  static Result<std::unique_ptr<ShmInbox>> Open(const std::string& name, const std::vector<size_t>& ring_bytes);
  ~ShmInbox();
  void Unlink();  // removes the name; mappings stay valid

  // The reading end of ring `slot` (in the inbox's owner) and a writing end (in the peer).
  std::unique_ptr<RecvChannel> Reader(int slot);
  std::unique_ptr<SendChannel> Writer(int slot);
  // Ring `slot`'s bytes, for registering them with a device's copy engines.
  std::byte* ring(int slot) const { return static_cast<std::byte*>(base_) + offset_[slot]; }
  size_t ring_bytes(int slot) const { return ring_bytes_[slot]; }

 private:
  ShmInbox(std::string name, void* base, size_t size, std::vector<size_t> ring_bytes, bool owner);
  std::string name_;
  void* base_;
  size_t size_;
  std::vector<size_t> ring_bytes_, offset_;
  bool owner_;
  bool unlinked_ = false;
};

}  // namespace tessera::comm
