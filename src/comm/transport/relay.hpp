// comm/transport/relay: a link without rings (TCP; UCX where it cannot take the device's memory) made to look like a
// shared-memory ring, for a GPU rank's device bridge.
//
// The device bridge's copy engines read and write host memory registered with CUDA, and publish or
// release it when a copy completes (SendChannel::Reserve/Publish, RecvChannel::Claim/Consume): shm rings
// do that natively. A TcpRelay gives a TCP link the same ends: two rings in this process's memory (an
// outbound one the engine writes and a pump thread drains into the TCP streams, an inbound one the pump
// fills from them and the engine reads), so the engine's device mode runs unchanged over TCP and the
// rank's GPU folds what arrives. The bytes on the wire are the TCP channel's, so the peer needs nothing
// special. A failure of the link is reported to the reader only once it has taken every byte that arrived
// before it (a peer that sent all it owed and closed is not an error). Costs: one host copy on receive (TCP's
// read-ahead window into the inbound ring) and the pump's thread; a pump idle for a while polls its sockets with a 1 ms
// timeout, which bounds the extra latency of a collective that starts after a pause. An error on the link (a peer gone)
// is kept and returned by both ends' Health(), so the engine fails with it instead of waiting for TESSERA_TIMEOUT.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "comm/channel.hpp"
#include "comm/transport/shm.hpp"

namespace tessera::comm {

class TcpRelay {
 public:
  // Takes over a TCP channel pair (which may already hold buffered bytes: they are relayed first).
  // `ring_bytes` (a multiple of 4096) per direction; `peer` names the other end in errors; `drain` bounds
  // how long the destructor lets the pump hand the last published bytes to TCP.
  static Result<std::unique_ptr<TcpRelay>> Create(std::unique_ptr<SendChannel> tcp_send,
                                                  std::unique_ptr<RecvChannel> tcp_recv, size_t ring_bytes,
                                                  std::string peer, std::chrono::milliseconds drain);
  // Stops the pump after it has handed every published outbound byte to TCP (or the link failed, or
  // `drain` passed).
  ~TcpRelay();

  // The engine's ends; valid while the relay lives.
  std::unique_ptr<SendChannel> Writer();
  std::unique_ptr<RecvChannel> Reader();
  // The rings' memory, to register with a device (kOut: the engine writes it; kIn: the engine reads it).
  enum Ring { kOut = 0, kIn = 1 };
  std::byte* ring(Ring r) const { return rings_->ring(r); }
  size_t ring_bytes(Ring r) const { return rings_->ring_bytes(r); }
  Status Health() const;
  // What the engine's ends report as their transport: the link's own, relayed ("ucx (relayed through host rings)").
  const char* transport() const { return transport_.c_str(); }
  // Bytes the pump has put into the inbound ring so far.
  uint64_t delivered() const { return delivered_.load(std::memory_order_acquire); }

 private:
  TcpRelay() = default;
  void Pump();
  void Fail(const Status& s);

  std::unique_ptr<SendChannel> tcp_send_;
  std::unique_ptr<RecvChannel> tcp_recv_;
  std::unique_ptr<ShmInbox> rings_;
  std::unique_ptr<RecvChannel> out_reader_;  // the pump's end of the outbound ring
  std::unique_ptr<SendChannel> in_writer_;   // the pump's end of the inbound ring
  std::string peer_;
  std::string link_;       // the relayed link's transport ("tcp", "ucx")
  std::string transport_;  // what the engine's ends report
  std::chrono::milliseconds drain_{0};
  std::atomic<bool> stop_{false};     // the owner is going: drain the outbound ring, then return
  std::atomic<bool> abandon_{false};  // return now (the drain took too long)
  std::atomic<bool> done_{false};     // the pump has returned
  std::atomic<bool> failed_{false};
  std::atomic<uint64_t> delivered_{0};
  mutable std::mutex mu_;
  Status error_;
  std::thread pump_;
};

}  // namespace tessera::comm
