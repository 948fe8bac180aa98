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
  // Creates the inbox of `nslots` rings of `ring_bytes` each (a multiple of kChannelAlign).
  static Result<std::unique_ptr<ShmInbox>> Create(const std::string& name, int nslots, size_t ring_bytes);
  // Maps a peer's inbox created under `name`.
  static Result<std::unique_ptr<ShmInbox>> Open(const std::string& name, int nslots, size_t ring_bytes);
  ~ShmInbox();
  void Unlink();  // removes the name; mappings stay valid

  // The reading end of ring `slot` (in the inbox's owner) and a writing end (in the peer).
  std::unique_ptr<RecvChannel> Reader(int slot);
  std::unique_ptr<SendChannel> Writer(int slot);
  // The whole mapping (control words and rings), for registering it with a device's copy engines.
  void* base() const { return base_; }
  size_t bytes() const { return size_; }

 private:
  ShmInbox(std::string name, void* base, size_t size, int nslots, size_t ring_bytes, bool owner)
      : name_(std::move(name)), base_(base), size_(size), nslots_(nslots), ring_bytes_(ring_bytes), owner_(owner) {}
  std::string name_;
  void* base_;
  size_t size_;
  int nslots_;
  size_t ring_bytes_;
  bool owner_;
  bool unlinked_ = false;
};

}  // namespace tessera::comm
