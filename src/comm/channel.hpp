// comm/channel: a one-way byte stream to one peer, driven without blocking by the exchange engine.
//
// Every collective is a fixed schedule of messages, known to both ends, so channels carry no framing:
// messages follow each other, each padded to a multiple of kChannelAlign bytes so that elements never
// straddle a ring's wrap and every message starts 64-byte aligned in a ring: a device rank's copies between its
// memory and the rings may then be asynchronous where its runtime requires that alignment of both addresses (ACL's
// aclrtMemcpyAsync; DeviceRuntime::AsyncCopyAligned), whatever small messages (a barrier's) went before. The transport
// rows (transport/transport.hpp) implement it: `shm` (a ring in shared memory, same host) and `tcp` (several parallel
// TCP streams, chunks dealt round-robin across them); a GPU rank's device bridge sees a link without rings through
// `relay` (host rings in front of it, as shm's). Callers ask a channel what it can do (dma, direct, writes_peer_memory,
// sends_from / receives_into a kind of memory), never which transport it is: transport() names it in messages only.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>

#include "tessera/status.hpp"

namespace tessera::comm {

inline constexpr size_t kChannelAlign = 64;
inline size_t PadToChannel(size_t bytes) { return (bytes + kChannelAlign - 1) & ~(kChannelAlign - 1); }

class SendChannel {
 public:
  virtual ~SendChannel() = default;
  // Copies up to `bytes` from src into the stream without blocking; returns how many were taken
  // (0 when the stream is full). RemoteError when the peer is gone.
  virtual Result<size_t> TrySend(const void* src, size_t bytes) = 0;
  virtual const char* transport() const = 0;
  // A file descriptor that becomes writable when TrySend can take more (TCP: the stream it writes next),
  // so that an idle engine can sleep in poll() instead of spinning; -1 when there is none (shm).
  virtual int WaitFd() const { return -1; }
  // How many ready bytes TrySend should be handed at once even past the engine's per-turn step (TCP: its
  // streams' chunks, so that streams after a full one can send ahead); 0: the step is enough.
  virtual size_t Lookahead() const { return 0; }

  // Zero-copy writing, for a device's copy engine (shared-memory rings only; see dma()): Reserve hands
  // out up to `max` contiguous writable bytes after those already reserved (none when the ring is full),
  // Publish makes the oldest `bytes` reserved bytes visible to the reader once they are written.
  // TrySend must not be called while reserved bytes are unpublished.
  virtual bool dma() const { return false; }
  virtual std::pair<std::byte*, size_t> Reserve(size_t /*max*/) { return {nullptr, 0}; }
  virtual void Publish(size_t /*bytes*/) {}
  // Reserve hands out the receiver's own memory (a ring it reads in place: shm), so several threads may write
  // large pieces of one message there at once and the write is the delivery.
  virtual bool writes_peer_memory() const { return false; }
  // The ring Reserve writes (dma channels), to register with a device's copy engines; {nullptr, 0} otherwise.
  virtual std::pair<std::byte*, size_t> ring_memory() const { return {nullptr, 0}; }
  // An error the channel has seen outside a call (a relay's pump thread: transport/relay.hpp); Ok otherwise.
  virtual Status Health() const { return Status::Ok(); }

  // Sending straight out of memory of a device's kind (named as the runtime table names its rows: "cuda"), no
  // host ring between: where the row's library reads that memory itself (ucx: where the loaded UCX registers the
  // kind, UcxMemoryFor). TrySendFrom posts up to `bytes` of src without blocking (0 while the receiver's window is
  // full) and returns how many; src must stay as it is until SentFromDone() (every byte posted has left it).
  // Mixed with TrySend, the stream keeps its order.
  virtual bool sends_from(std::string_view /*memory*/) const { return false; }
  virtual Result<size_t> TrySendFrom(const void* /*src*/, size_t /*bytes*/, std::string_view memory) {
    return InternalError(std::string(transport()) + " channel: cannot send straight from " + std::string(memory) +
                         " memory");
  }
  virtual Result<bool> SentFromDone() { return true; }
};

class RecvChannel {
 public:
  virtual ~RecvChannel() = default;
  // The readable bytes at the head of the stream (possibly none), without blocking.
  virtual Result<std::pair<const std::byte*, size_t>> Peek() = 0;
  // Releases the first `bytes` of what Peek returned.
  virtual void Consume(size_t bytes) = 0;
  virtual const char* transport() const = 0;
  // A file descriptor that becomes readable when Peek can return more (TCP: the stream it reads next);
  // -1 when there is none (shm).
  virtual int WaitFd() const { return -1; }
  // Reading straight into the destination (a copy receive), without Peek's bounce buffer: up to
  // `bytes` into dst, without blocking; how many were read. Only where direct() (TCP); mixing it with
  // Peek is allowed (buffered bytes come first).
  virtual bool direct() const { return false; }
  virtual Result<size_t> RecvInto(void* /*dst*/, size_t /*bytes*/) { return size_t{0}; }

  // Zero-copy reading, for a device's copy engine (see dma()): Claim hands out up to `max` contiguous
  // readable bytes after those already claimed, a multiple of `unit` (an element size: elements never
  // straddle the wrap); Consume releases claimed bytes oldest first once the device has read them.
  virtual bool dma() const { return false; }
  virtual std::pair<const std::byte*, size_t> Claim(size_t /*max*/, size_t /*unit*/) { return {nullptr, 0}; }
  // The ring Claim reads (dma channels), to register with a device's copy engines; {nullptr, 0} otherwise.
  virtual std::pair<std::byte*, size_t> ring_memory() const { return {nullptr, 0}; }
  // As SendChannel::Health.
  virtual Status Health() const { return Status::Ok(); }

  // Receiving straight into memory of a device's kind (see SendChannel::sends_from): RecvInto for such a dst, with
  // its rules. Bytes the channel already holds in host memory are handed to `copy_in` (a copy from host memory into
  // dst, complete when it returns).
  using CopyIn = std::function<Status(void* dst, const void* host_src, size_t bytes)>;
  virtual bool receives_into(std::string_view /*memory*/) const { return false; }
  virtual Result<size_t> RecvIntoMemory(void* /*dst*/, size_t /*bytes*/, std::string_view memory,
                                        const CopyIn& /*copy_in*/) {
    return InternalError(std::string(transport()) + " channel: cannot receive straight into " + std::string(memory) +
                         " memory");
  }
};

}  // namespace tessera::comm
