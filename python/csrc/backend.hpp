// python/csrc/backend.hpp — the torch.distributed backend "tessera": a c10d::Backend over Tessera's C API
// (include/tessera/tessera.h). Its collectives and point-to-point calls are in backend.cpp, the subgroups made by
// tsrCommSplit (split_group, new_group) in split.cpp, its Python bindings in module.cpp.
//
// One backend object serves the whole process group on this rank, whatever its device: CPU tensors go to Tessera
// with a NULL stream (host memory, the call returns when done); tensors on this rank's accelerator go through the
// device half (device.hpp: the backend's own communication stream, as ProcessGroupNCCL does), and their Works keep
// the contract of work.hpp (STREAM WAIT in a group of one island, HOST WAIT in a group of several).
// Everything a call needs besides the tensors (island, device, token, timeout, unique id) comes from
// python/tessera/torch/_backend.py, which does the rendezvous through the process group's store.
// Errors: every failed Tessera call raises RuntimeError with Tessera's message (it names the rank, peer or value at
// fault); a dead peer gives it within the timeout given to init_process_group.
#pragma once

#include <ATen/ATen.h>
#include <tessera/tessera.h>
#include <torch/csrc/utils/pybind.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <vector>

#include "check.hpp"
#include "device.hpp"
#include "work.hpp"

namespace tessera_torch {

class Backend : public c10d::Backend {
 public:
  // `unique_id`: the bytes of group rank 0's tsrGetUniqueId; `device`: Tessera's device string, "host" or a device
  // family's PREFIX:N ("cuda:0", "npu:1", "corex:0"; this process's numbering); `torch_device`: the same device as
  // torch names it, its family's torch type ("cuda:0" for corex:0; python/tessera/torch/_devices.py), "" when it is
  // `device`; `island`/`vendor`: this rank's island in this group (0..k-1); `hybrid`: the group has ranks in more than
  // one island (decides how device calls complete: work.hpp).
  Backend(const std::string& unique_id, int rank, int size, int island, const std::string& vendor,
          const std::string& device, int64_t timeout_ms, bool hybrid, const std::string& torch_device = "");

  // A group made by tsrCommSplit of another's communicator (SplitOff): same device and completion rule.
  Backend(tsrComm_t comm, int rank, int size, const std::string& device, const std::string& torch_device,
          int64_t timeout_ms, bool hybrid);

  ~Backend() override { shutdown(); }

  const std::string getBackendName() const override { return "tessera"; }
  bool supportsCoalescing() const override { return true; }
  // Subgroups (split_group; new_group where python/tessera/torch/_backend.py allows it) are made by tsrCommSplit
  // of this group's communicator: no new unique id, store or rendezvous.
  bool supportsSplitting() const override { return true; }
  c10::intrusive_ptr<c10d::Backend::Options> getBackendOptions() override {
    return c10::make_intrusive<Options>(std::chrono::milliseconds(timeout_ms_));
  }
  // split_group: `ranks` are the sorted ranks of this group that form the new one, on every rank of this group; a
  // rank not among them takes part without joining and gets none. torch asks that the splits of one call be
  // disjoint, so each one's lowest rank names it (its colour). torch calls this once per device type of the group
  // (cpu, cuda), all served by this one backend: the calls after the first of a group name get the first's result.
  c10::intrusive_ptr<c10d::Backend> split(const c10::intrusive_ptr<c10d::Store>& /*store*/,
                                          const std::vector<int>& ranks,
                                          const c10::intrusive_ptr<c10d::Backend::Options>& opts) override;
  c10::intrusive_ptr<Backend> SplitFor(const std::vector<int>& ranks,
                                       const c10::intrusive_ptr<c10d::Backend::Options>& opts);
  // tsrCommSplit of this group's communicator: ranks of one `color` (>= 0) form a new group, ordered by `key`;
  // TSR_SPLIT_NOCOLOR takes part without joining (returns null). Collective over this group.
  c10::intrusive_ptr<Backend> SplitOff(int color, int key, int64_t timeout_ms);
  int64_t splitCount() const { return splits_; }
  int64_t timeoutMs() const { return timeout_ms_; }
  std::string describe() const { return comm_ ? tsrCommDescribe(comm_) : "(shut down)"; }
  const std::string& device() const { return device_; }

  // c10d's sequence number of the group (torch checks it across ranks to spot desynchronised calls): the
  // number of calls this backend has run. Every rank's backend starts at 0, so setting the group's
  // initial number needs no exchange; the counts agree while the ranks make the same calls.
  void setSequenceNumberForGroup() override { sequence_ = 0; }
  uint64_t getSequenceNumberForGroup() override { return sequence_; }

  void abort() override {
    if (comm_ != nullptr) (void)tsrCommAbort(comm_);
  }
  void shutdown() override;

  // ---- collectives --------------------------------------------------------------------------------

  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors,
                                           const c10d::AllreduceOptions& opts) override;

  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(std::vector<at::Tensor>& tensors,
                                                     const c10d::AllreduceCoalescedOptions& opts) override;

  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors,
                                           const c10d::BroadcastOptions& opts) override;

  c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor>& tensors, const c10d::ReduceOptions& opts) override;

  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                           std::vector<at::Tensor>& inputs,
                                           const c10d::AllgatherOptions& /*opts*/) override;

  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& out, at::Tensor& in,
                                                 const c10d::AllgatherOptions& /*opts*/) override;

  c10::intrusive_ptr<c10d::Work> allgather_into_tensor_coalesced(std::vector<at::Tensor>& outs,
                                                                 std::vector<at::Tensor>& ins,
                                                                 const c10d::AllgatherOptions& /*opts*/) override;

  // outputs[r][i] receives rank r's inputs[i] (c10d's layout, as ProcessGroupGloo::allgather_coalesced).
  c10::intrusive_ptr<c10d::Work> allgather_coalesced(std::vector<std::vector<at::Tensor>>& outputs,
                                                     std::vector<at::Tensor>& inputs,
                                                     const c10d::AllgatherOptions& /*opts*/) override;

  c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
                                        const c10d::GatherOptions& opts) override;

  c10::intrusive_ptr<c10d::Work> scatter(std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
                                         const c10d::ScatterOptions& opts) override;

  c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor>& outputs,
                                                std::vector<std::vector<at::Tensor>>& inputs,
                                                const c10d::ReduceScatterOptions& opts) override;

  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(at::Tensor& out, at::Tensor& in,
                                                      const c10d::ReduceScatterOptions& opts) override;

  c10::intrusive_ptr<c10d::Work> reduce_scatter_tensor_coalesced(std::vector<at::Tensor>& outs,
                                                                 std::vector<at::Tensor>& ins,
                                                                 const c10d::ReduceScatterOptions& opts) override;

  c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor& out, at::Tensor& in, std::vector<int64_t>& out_splits,
                                               std::vector<int64_t>& in_splits,
                                               const c10d::AllToAllOptions& /*opts*/) override;

  c10::intrusive_ptr<c10d::Work> alltoall(std::vector<at::Tensor>& outs, std::vector<at::Tensor>& ins,
                                          const c10d::AllToAllOptions& /*opts*/) override;

  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& /*opts*/) override;

  // ---- point to point (tags are not supported: as with NCCL, matching is by order per peer) ---------

  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors, int dst, int /*tag*/) override;

  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors, int src, int /*tag*/) override;

  c10::intrusive_ptr<c10d::Work> recvAnysource(std::vector<at::Tensor>& /*tensors*/, int /*tag*/) override {
    TSR_CHECK(false, "tessera: recv from any source is not supported (name the peer)");
  }

  // batch_isend_irecv: the sends and receives between start and end run as one Tessera group, so they
  // progress together whatever the order of matching pairs.
  void startCoalescing() override;

  c10::intrusive_ptr<c10d::Work> endCoalescing() override;

 private:
  struct P2P {
    bool send;
    at::Tensor t;
    int peer;
  };

  void Check(tsrResult_t r, const char* what) const;
  void CheckRoot(int64_t root, const char* what) const;
  void CheckPeer(int peer, const char* what) const;
  // `big` holds size_ blocks of `small`'s size (allgather output, reduce-scatter input).
  void CheckGathered(const at::Tensor& big, const at::Tensor& small, const char* what) const;
  // all_to_all_single splits (rows of dim 0) -> per-peer element counts and displacements.
  void SplitsToCounts(const at::Tensor& t, const std::vector<int64_t>& splits, const char* which,
                      std::vector<size_t>* counts, std::vector<size_t>* displs) const;
  // PREMUL_SUM: scale the (private) input by the factor before the sum, as NCCL's premul does.
  static void PreMul(at::Tensor& t, const c10d::ReduceOp& op);

  // A Work that completes when everything queued so far on the communication stream has (CPU: complete).
  c10::intrusive_ptr<c10d::Work> Marker(const char* title);

  // A Work already complete (CPU, or nothing to wait for).
  c10::intrusive_ptr<c10d::Work> Done(c10d::OpType type, const char* title, std::vector<at::Tensor> outputs);

  // Runs `body(stream)` for tensors on one device: a CPU call completes inside; a device call is queued on the
  // communication stream after the caller's current stream (device.hpp).
  template <typename F>
  c10::intrusive_ptr<c10d::Work> Run(c10d::OpType type, const char* title, const std::vector<at::Tensor>& inputs,
                                     const std::vector<at::Tensor>& outputs, F&& body) {
    // Counted while it runs: shutdown() on another thread aborts it and waits for it before freeing the communicator.
    TSR_CHECK(ref_->Enter(), "tessera: ", title, " on a process group that was shut down (destroy_process_group)");
    struct Leave {
      CommRef* ref;
      ~Leave() { ref->Leave(); }
    } leave{ref_.get()};
    ++sequence_;
    // Inside a coalescing block a collective runs at once (torch's fast path hands whole coalesced calls
    // here); only after queued sends/receives would it be out of order, so that is refused.
    TSR_CHECK(!coalescing_ || type == c10d::OpType::COALESCED || pending_.empty(), "tessera: ", title,
              " after send/recv inside one coalescing block is not supported (only send/recv are grouped)");
    std::optional<at::Device> dev;
    for (const auto* list : {&inputs, &outputs})
      for (const auto& t : *list) {
        if (!dev) dev = t.device();
        TSR_CHECK(t.device() == *dev, "tessera: ", title, " needs all tensors on one device, got ", *dev, " and ",
                  t.device());
      }
    if (!dev || dev->is_cpu()) {
      body(nullptr);
      return Done(type, title, outputs);
    }
    TSR_CHECK(device_queue_ != nullptr, "tessera: ", title, " got a tensor on ", *dev, " on a rank whose device is ",
              device_, " (set TESSERA_DEVICE or the backend's device for this rank)");
    device_queue_->CheckDevice(*dev, title);
    return device_queue_->Run(type, title, inputs, outputs, body);
  }

  // The options torch copies from a parent (split_group deep-copies them): deep-copyable, unlike c10d's own.
  struct Options : c10d::Backend::Options {
    explicit Options(std::chrono::milliseconds timeout) : c10d::Backend::Options("tessera", timeout) {}
  };
  friend void BindBackend(pybind11::module& m);

  tsrComm_t comm_ = nullptr;  // null after shutdown()
  std::shared_ptr<CommRef> ref_ = std::make_shared<CommRef>();
  std::string device_;
  std::string torch_device_;  // device_ as torch names it
  int64_t timeout_ms_ = 0;
  bool hybrid_ = true;
  std::atomic<int64_t> splits_{0};  // tsrCommSplit calls on this group's communicator (comm_split_count)
  std::string last_split_name_;     // split(): the group name of the last split and what it made (none: null)
  c10::weak_intrusive_ptr<c10d::Backend> last_split_{c10::intrusive_ptr<c10d::Backend>()};
  bool coalescing_ = false;
  std::vector<P2P> pending_;
  std::atomic<uint64_t> sequence_{0};          // calls run (getSequenceNumberForGroup)
  std::unique_ptr<DeviceQueue> device_queue_;  // a device rank's half (null on a host rank)
};

}  // namespace tessera_torch
