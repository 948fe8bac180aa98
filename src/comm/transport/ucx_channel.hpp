// comm/transport/ucx_channel: the ucx row's channels — one endpoint per peer, and the send and receive channels over
// its UCP streams; see ucx.cpp for the row. Included only where UCX's headers are (TESSERA_HAVE_UCX_HEADERS).
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <utility>

#include "comm/channel.hpp"
#include "comm/transport/ucx_ucp.hpp"

namespace tessera::comm::internal {

// Control messages between the two ends of a link, tagged kUcxControlTag | sender's rank: a receiver's credit (the
// bytes it has consumed: a sender keeps at most one ring of bytes beyond it, so UCX never buffers more than that at
// the receiver) and the closing notice (the bytes sent in all: the receiver reports the close after them).
constexpr uint64_t kUcxControlTag = uint64_t{0x7e55} << 48;
struct UcxControl {
  uint64_t kind;  // kUcxCredit or kUcxBye
  uint64_t value;
};
constexpr uint64_t kUcxCredit = 1, kUcxBye = 2;

// The most one receive posted into a caller's buffer takes (it completes only when full): the engine sees a large
// copy receive move, and the link's stream position advance, at least this often.
constexpr size_t kUcxMaxDirectRecv = size_t{8} << 20;

// One peer: its endpoint, both rings, and the error its handler saw. Closed (flushed, then with force) when both
// channels are gone.
struct UcxEndpoint {
  std::shared_ptr<UcxWorker> worker;
  ucp_ep_h ep = nullptr;
  std::string peer;
  int my_rank = 0, peer_rank = 0;
  std::atomic<int> error{UCS_OK};
  UcxRing send_ring, recv_ring;
  std::deque<std::pair<void*, uint64_t>> sends;  // posted sends (null: done at once) and the stream end each reaches
  uint64_t sent = 0;                             // bytes posted in all (UcxSend)
  uint64_t credited = 0;                         // the peer's last credit: bytes it consumed
  uint64_t bye_at = UINT64_MAX;                  // the peer closed after sending this many bytes
  UcxControl in{}, out{};
  void* in_req = nullptr;    // the posted control receive
  void* out_req = nullptr;   // the control send in flight
  void* stream_req[2] = {};  // the stream receives posted when the receiving channel went (ring, direct)
  ~UcxEndpoint();
  // Takes in what control messages came, and keeps one control receive posted. Under worker->mu.
  void PollControl();
  void Take();
  // Sends a control message unless one is still in flight (then false: try again later). Under worker->mu.
  bool SendControl(uint64_t kind, uint64_t value);
  Status Failure() const;
  bool failed() const { return error.load(std::memory_order_acquire) != UCS_OK; }
};

// The endpoint's error handler (its argument: the UcxEndpoint).
void OnUcxEndpointError(void* arg, ucp_ep_h, ucs_status_t status);

// Both channels of a link over `e`.
std::unique_ptr<SendChannel> MakeUcxSend(std::shared_ptr<UcxEndpoint> e);
std::unique_ptr<RecvChannel> MakeUcxRecv(std::shared_ptr<UcxEndpoint> e);

}  // namespace tessera::comm::internal
