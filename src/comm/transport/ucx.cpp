// comm/transport/ucx: the ucx row — channels over UCX's UCP stream API, for links with RDMA lanes (RoCE,
// InfiniBand), loaded at run time (dlopen of libucp.so.0), so a Tessera without UCX runs as before and says why
// the row is not viable.
//
// Three parts: the binding (ucx_ucp: the library, the process's one UCP context, a worker per communicator,
// registered memory), the channels (ucx_channel: one endpoint per peer in peer error-handling mode, host rings,
// credits), and the row itself here: its capabilities, its blob (the worker's address), and Connect, which ends
// with a hello carrying the job token both ways, by its deadline.
//
// TESSERA_UCX_DEVICES: the NIC of each local rank, rail-aligned (docs/architecture.md, "Transports").
#include "comm/transport/ucx.hpp"

#if TESSERA_HAVE_UCX_HEADERS
#include <fmt/format.h>

#include <algorithm>
#include <functional>
#include <thread>

#include "comm/transport/ucx_channel.hpp"
#include "common/env.hpp"

namespace tessera::comm {
namespace {

using Clock = std::chrono::steady_clock;
using internal::LoadUcx;
using internal::Ucx;
using internal::UcxEndpoint;
using internal::UcxErr;
using internal::UcxWorker;

class UcxTransport final : public Transport {
 public:
  const char* name() const override { return "ucx"; }
  // RDMA only where the kernel has an RDMA device and UCX found a transport on it: without a device UCX is not
  // even loaded (the default order asks every communicator).
  TransportCaps caps() const override {
    const bool rdma = internal::HasRdmaDevice() && LoadUcx()->status.ok() && LoadUcx()->rdma;
    return {.host_local = false, .rings = false, .rdma = rdma, .default_needs_rdma = true};
  }
  Status Viable() const override { return LoadUcx()->status; }
  std::string Domain() const override { return "ucx"; }
  Result<std::string> Listen(const TransportSetup& s) override {
    Ucx* u = LoadUcx();
    TSR_RETURN_IF_ERROR(u->status);
    TSR_ASSIGN_OR_RETURN(ring_bytes_, env::Bytes("TESSERA_UCX_RING"));
    if (ring_bytes_ < (64 << 10) || ring_bytes_ % 4096 != 0)
      return InvalidArgument(fmt::format("TESSERA_UCX_RING={} must be at least 64K and a multiple of 4K", ring_bytes_));
    worker_ = std::make_shared<UcxWorker>();
    worker_->ucx = u;
    ucp_worker_params_t wp{};
    wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
    wp.thread_mode = UCS_THREAD_MODE_SERIALIZED;  // UcxWorker::mu serializes the calls
    if (ucs_status_t st = u->api.worker_create(u->context, &wp, &worker_->w); st != UCS_OK) {
      worker_->w = nullptr;
      return Unsupported(fmt::format("rank {}: ucx worker: {}", s.rank, UcxErr(*u, st)));
    }
    if (u->api.worker_get_efd(worker_->w, &worker_->efd) != UCS_OK) worker_->efd = -1;  // then no sleeping
    worker_->Start();
    ucp_address_t* addr = nullptr;
    size_t len = 0;
    if (ucs_status_t st = u->api.worker_get_address(worker_->w, &addr, &len); st != UCS_OK)
      return Unsupported(fmt::format("rank {}: ucx worker address: {}", s.rank, UcxErr(*u, st)));
    std::string blob(reinterpret_cast<const char*>(addr), len);
    u->api.worker_release_address(worker_->w, addr);
    return blob;
  }
  Result<std::vector<Link>> Connect(const TransportSetup& s, const std::vector<int>& peers,
                                    Clock::time_point deadline) override {
    std::vector<Link> links;
    if (peers.empty()) return links;
    if (!worker_) return InternalError(fmt::format("rank {}: the ucx row has no worker", s.rank));
    Ucx& u = *worker_->ucx;
    std::vector<std::shared_ptr<UcxEndpoint>> eps;
    for (int p : peers) {
      auto e = std::make_shared<UcxEndpoint>();
      e->worker = worker_;
      e->peer = s.peer_name(p);
      TSR_RETURN_IF_ERROR(internal::MapUcxRing(u, worker_.get(), ring_bytes_, &e->send_ring));
      TSR_RETURN_IF_ERROR(internal::MapUcxRing(u, worker_.get(), ring_bytes_, &e->recv_ring));
      ucp_ep_params_t ep{};
      ep.field_mask =
          UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE | UCP_EP_PARAM_FIELD_ERR_HANDLER;
      ep.address = reinterpret_cast<const ucp_address_t*>(s.blobs[p].data());
      ep.err_mode = UCP_ERR_HANDLING_MODE_PEER;
      ep.err_handler.cb = &internal::OnUcxEndpointError;
      ep.err_handler.arg = e.get();
      e->my_rank = s.rank;
      e->peer_rank = p;
      ucs_status_t st;
      {
        std::lock_guard<std::mutex> l(worker_->mu);
        st = u.api.ep_create(worker_->w, &ep, &e->ep);
      }
      if (st != UCS_OK) {
        e->ep = nullptr;
        return RemoteError(fmt::format("ucx: an endpoint to {}: {}", e->peer, UcxErr(u, st)));
      }
      eps.push_back(e);
      links.push_back({p, internal::MakeUcxSend(e), internal::MakeUcxRecv(e)});
    }
    // The hello: the job token both ways on every link, by the deadline.
    const std::string hello = fmt::format("{:016x}", std::hash<std::string>{}("tessera-ucx|" + s.token));
    const std::string padded(PadToChannel(hello.size()) - hello.size(), '\0');
    const std::string out = hello + padded;
    std::vector<size_t> sent(links.size(), 0), got(links.size(), 0);
    std::vector<std::string> in(links.size());
    for (;;) {
      bool done = true;
      for (size_t i = 0; i < links.size(); ++i) {
        if (sent[i] < out.size()) {
          auto n = links[i].send->TrySend(out.data() + sent[i], out.size() - sent[i]);
          if (!n.ok()) return n.status().WithContext("ucx hello");
          sent[i] += *n;
        }
        while (got[i] < out.size()) {
          auto pk = links[i].recv->Peek();
          if (!pk.ok()) return pk.status().WithContext("ucx hello");
          const size_t take = std::min(pk->second, out.size() - got[i]);
          if (take == 0) break;
          in[i].append(reinterpret_cast<const char*>(pk->first), take);
          links[i].recv->Consume(take);
          got[i] += take;
        }
        if (got[i] == out.size() && in[i] != out)
          return RemoteError(fmt::format("ucx: {} answered with another job's token", eps[i]->peer));
        done &= sent[i] == out.size() && got[i] == out.size();
      }
      if (done) break;
      if (Clock::now() > deadline) {
        for (size_t i = 0; i < links.size(); ++i)
          if (got[i] < out.size())
            return Timeout(fmt::format("ucx: no hello from {} within the deadline", eps[i]->peer));
      }
      std::this_thread::sleep_for(std::chrono::microseconds(100));  // peers that join later: no spinning
    }
    return links;
  }

 private:
  std::shared_ptr<UcxWorker> worker_;
  uint64_t ring_bytes_ = 0;
};

}  // namespace

std::unique_ptr<Transport> MakeUcxTransport() { return std::make_unique<UcxTransport>(); }

}  // namespace tessera::comm

#endif  // TESSERA_HAVE_UCX_HEADERS
