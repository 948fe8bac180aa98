// python/csrc/backend.cpp — the backend's construction, collectives and point-to-point calls (backend.hpp says
// what the backend is).
#include "backend.hpp"

#include <ATen/ATen.h>
#include <c10/util/Exception.h>
#include <tessera/tessera.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "check.hpp"
#include "crash_trace.hpp"
#include "device.hpp"
#include "maps.hpp"
#include "work.hpp"

namespace tessera_torch {

namespace {

size_t Count(const at::Tensor& t) { return static_cast<size_t>(t.numel()); }

void CheckDense(const at::Tensor& t, const char* what) {
  TSR_CHECK(t.layout() == at::kStrided, "tessera: ", what, " needs dense tensors, got layout ", t.layout());
  TSR_CHECK(t.is_contiguous(), "tessera: ", what, " needs contiguous tensors (call .contiguous() first)");
}

void CheckOne(const std::vector<at::Tensor>& ts, const char* what) {
  TSR_CHECK(ts.size() == 1, "tessera: ", what, " takes one tensor per rank, got ", ts.size());
  CheckDense(ts[0], what);
}

// A flat, contiguous copy of `parts` (same dtype and device), for the list forms of the collectives.
at::Tensor Flatten(const std::vector<at::Tensor>& parts) {
  std::vector<at::Tensor> flat;
  flat.reserve(parts.size());
  for (const auto& p : parts) flat.push_back(p.reshape({-1}));
  return at::cat(flat);
}

}  // namespace

Backend::Backend(const std::string& unique_id, int rank, int size, int island, const std::string& vendor,
                 const std::string& device, int64_t timeout_ms, bool hybrid, const std::string& torch_device)
    : c10d::Backend(rank, size), device_(device), torch_device_(torch_device.empty() ? device : torch_device) {
  TSR_CHECK(unique_id.size() == sizeof(tsrUniqueId), "tessera: the unique id has ", unique_id.size(),
            " bytes, expected ", sizeof(tsrUniqueId), " (was it made by the same Tessera version?)");
  tsrUniqueId id;
  std::memcpy(id.internal, unique_id.data(), sizeof(id.internal));
  tsrConfig_t config = TSR_CONFIG_INITIALIZER;
  config.island = island;
  config.vendor = vendor.c_str();
  config.device = device_.c_str();
  config.timeout_ms = static_cast<int>(std::min<int64_t>(timeout_ms, INT32_MAX));
  // A device rank: its communication stream and completion thread (device.hpp).
  if (device_ != "host") device_queue_ = std::make_unique<DeviceQueue>(torch_device_, hybrid, rank, timeout_ms, ref_);
  const tsrResult_t r = tsrCommInitRank(&comm_, size, id, rank, &config);
  TSR_CHECK(r == tsrSuccess, "tessera: joining the group as rank ", rank, " of ", size, " (island ", island, " '",
            vendor, "', device ", device_, ") failed: ", tsrGetLastError(nullptr));
  ref_->comm = comm_;
  timeout_ms_ = config.timeout_ms;
  hybrid_ = hybrid;
  init();
}

Backend::Backend(tsrComm_t comm, int rank, int size, const std::string& device, const std::string& torch_device,
                 int64_t timeout_ms, bool hybrid)
    : c10d::Backend(rank, size),
      comm_(comm),
      device_(device),
      torch_device_(torch_device),
      timeout_ms_(timeout_ms),
      hybrid_(hybrid) {
  if (device_ != "host") device_queue_ = std::make_unique<DeviceQueue>(torch_device_, hybrid, rank, timeout_ms, ref_);
  ref_->comm = comm_;
  init();
}

void Backend::shutdown() {
  if (device_queue_) device_queue_->Stop();
  ref_->Destroy();
  comm_ = nullptr;
}

c10::intrusive_ptr<c10d::Work> Backend::allreduce(std::vector<at::Tensor>& tensors,
                                                  const c10d::AllreduceOptions& opts) {
  CheckOne(tensors, "allreduce");
  at::Tensor t = tensors[0];
  return Run(c10d::OpType::ALLREDUCE, "allreduce", {t}, {t}, [&](tsrStream_t s) {
    PreMul(t, opts.reduceOp);
    Check(tsrAllReduce(t.data_ptr(), t.data_ptr(), Count(t), TypeOf(t, "allreduce"),
                       RedOpOf(opts.reduceOp, t, "allreduce"), comm_, s),
          "allreduce");
  });
}

c10::intrusive_ptr<c10d::Work> Backend::allreduce_coalesced(std::vector<at::Tensor>& tensors,
                                                            const c10d::AllreduceCoalescedOptions& opts) {
  TSR_CHECK(!tensors.empty(), "tessera: allreduce_coalesced needs at least one tensor");
  for (const auto& t : tensors) {
    CheckDense(t, "allreduce_coalesced");
    TSR_CHECK(t.scalar_type() == tensors[0].scalar_type() && t.device() == tensors[0].device(),
              "tessera: allreduce_coalesced needs tensors of one dtype and device");
  }
  return Run(c10d::OpType::ALLREDUCE_COALESCED, "allreduce_coalesced", tensors, tensors, [&](tsrStream_t s) {
    at::Tensor flat = Flatten(tensors);
    PreMul(flat, opts.reduceOp);
    Check(tsrAllReduce(flat.data_ptr(), flat.data_ptr(), Count(flat), TypeOf(flat, "allreduce_coalesced"),
                       RedOpOf(opts.reduceOp, flat, "allreduce_coalesced"), comm_, s),
          "allreduce_coalesced");
    int64_t off = 0;
    for (auto& t : tensors) {
      t.copy_(flat.narrow(0, off, t.numel()).view_as(t));
      off += t.numel();
    }
  });
}

c10::intrusive_ptr<c10d::Work> Backend::broadcast(std::vector<at::Tensor>& tensors,
                                                  const c10d::BroadcastOptions& opts) {
  CheckOne(tensors, "broadcast");
  CheckRoot(opts.rootRank, "broadcast");
  at::Tensor t = tensors[0];
  return Run(c10d::OpType::BROADCAST, "broadcast", {t}, {t}, [&](tsrStream_t s) {
    Check(tsrBroadcast(t.data_ptr(), t.data_ptr(), Count(t), TypeOf(t, "broadcast"), static_cast<int>(opts.rootRank),
                       comm_, s),
          "broadcast");
  });
}

c10::intrusive_ptr<c10d::Work> Backend::reduce(std::vector<at::Tensor>& tensors, const c10d::ReduceOptions& opts) {
  CheckOne(tensors, "reduce");
  CheckRoot(opts.rootRank, "reduce");
  at::Tensor t = tensors[0];
  return Run(c10d::OpType::REDUCE, "reduce", {t}, {t}, [&](tsrStream_t s) {
    at::Tensor tmp = t.clone();
    PreMul(tmp, opts.reduceOp);
    Check(tsrAllReduce(tmp.data_ptr(), tmp.data_ptr(), Count(tmp), TypeOf(t, "reduce"),
                       RedOpOf(opts.reduceOp, t, "reduce"), comm_, s),
          "reduce");
    if (rank_ == opts.rootRank) t.copy_(tmp);
  });
}

c10::intrusive_ptr<c10d::Work> Backend::allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                                  std::vector<at::Tensor>& inputs,
                                                  const c10d::AllgatherOptions& /*opts*/) {
  CheckOne(inputs, "allgather");
  TSR_CHECK(outputs.size() == 1 && static_cast<int>(outputs[0].size()) == size_,
            "tessera: allgather needs one list of ", size_, " output tensors");
  at::Tensor in = inputs[0];
  for (const auto& o : outputs[0])
    TSR_CHECK(o.numel() == in.numel() && o.scalar_type() == in.scalar_type(),
              "tessera: allgather outputs must match the input's size and dtype");
  return Run(c10d::OpType::ALLGATHER, "allgather", {in}, outputs[0], [&](tsrStream_t s) {
    at::Tensor flat = at::empty({in.numel() * size_}, in.options());
    Check(tsrAllGather(in.data_ptr(), flat.data_ptr(), Count(in), TypeOf(in, "allgather"), comm_, s), "allgather");
    for (int r = 0; r < size_; ++r)
      outputs[0][r].copy_(flat.narrow(0, r * in.numel(), in.numel()).view_as(outputs[0][r]));
  });
}

c10::intrusive_ptr<c10d::Work> Backend::_allgather_base(at::Tensor& out, at::Tensor& in,
                                                        const c10d::AllgatherOptions& /*opts*/) {
  CheckDense(in, "all_gather_into_tensor");
  CheckDense(out, "all_gather_into_tensor");
  CheckGathered(out, in, "all_gather_into_tensor");
  return Run(c10d::OpType::_ALLGATHER_BASE, "all_gather_into_tensor", {in}, {out}, [&](tsrStream_t s) {
    Check(tsrAllGather(in.data_ptr(), out.data_ptr(), Count(in), TypeOf(in, "all_gather_into_tensor"), comm_, s),
          "all_gather_into_tensor");
  });
}

c10::intrusive_ptr<c10d::Work> Backend::allgather_into_tensor_coalesced(std::vector<at::Tensor>& outs,
                                                                        std::vector<at::Tensor>& ins,
                                                                        const c10d::AllgatherOptions& /*opts*/) {
  TSR_CHECK(outs.size() == ins.size() && !ins.empty(),
            "tessera: allgather_into_tensor_coalesced needs as many outputs as inputs");
  for (size_t i = 0; i < ins.size(); ++i) {
    CheckDense(ins[i], "allgather_into_tensor_coalesced");
    CheckDense(outs[i], "allgather_into_tensor_coalesced");
    CheckGathered(outs[i], ins[i], "allgather_into_tensor_coalesced");
  }
  return Run(c10d::OpType::COALESCED, "allgather_into_tensor_coalesced", ins, outs, [&](tsrStream_t s) {
    for (size_t i = 0; i < ins.size(); ++i)
      Check(tsrAllGather(ins[i].data_ptr(), outs[i].data_ptr(), Count(ins[i]),
                         TypeOf(ins[i], "allgather_into_tensor_coalesced"), comm_, s),
            "allgather_into_tensor_coalesced");
  });
}

c10::intrusive_ptr<c10d::Work> Backend::allgather_coalesced(std::vector<std::vector<at::Tensor>>& outputs,
                                                            std::vector<at::Tensor>& inputs,
                                                            const c10d::AllgatherOptions& /*opts*/) {
  TSR_CHECK(static_cast<int>(outputs.size()) == size_, "tessera: allgather_coalesced needs ", size_,
            " output lists (one per rank), got ", outputs.size());
  std::vector<at::Tensor> all_out;
  for (const auto& in : inputs) CheckDense(in, "allgather_coalesced");
  for (int r = 0; r < size_; ++r) {
    TSR_CHECK(outputs[r].size() == inputs.size(), "tessera: allgather_coalesced: output list ", r, " has ",
              outputs[r].size(), " tensors, expected one per input (", inputs.size(), ")");
    for (size_t i = 0; i < inputs.size(); ++i) {
      TSR_CHECK(outputs[r][i].numel() == inputs[i].numel() && outputs[r][i].scalar_type() == inputs[i].scalar_type(),
                "tessera: allgather_coalesced: output [", r, "][", i, "] does not match input ", i,
                " in size or dtype");
      all_out.push_back(outputs[r][i]);
    }
  }
  return Run(c10d::OpType::ALLGATHER_COALESCED, "allgather_coalesced", inputs, all_out, [&](tsrStream_t s) {
    for (size_t i = 0; i < inputs.size(); ++i) {
      const at::Tensor in = inputs[i].contiguous();
      at::Tensor flat = at::empty({in.numel() * size_}, in.options());
      Check(tsrAllGather(in.data_ptr(), flat.data_ptr(), Count(in), TypeOf(in, "allgather_coalesced"), comm_, s),
            "allgather_coalesced");
      for (int r = 0; r < size_; ++r)
        outputs[r][i].copy_(flat.narrow(0, r * in.numel(), in.numel()).view_as(outputs[r][i]));
    }
  });
}

c10::intrusive_ptr<c10d::Work> Backend::gather(std::vector<std::vector<at::Tensor>>& outputs,
                                               std::vector<at::Tensor>& inputs, const c10d::GatherOptions& opts) {
  CheckOne(inputs, "gather");
  CheckRoot(opts.rootRank, "gather");
  at::Tensor in = inputs[0];
  const bool root = rank_ == opts.rootRank;
  if (root)
    TSR_CHECK(outputs.size() == 1 && static_cast<int>(outputs[0].size()) == size_, "tessera: gather needs one list of ",
              size_, " outputs on the root");
  std::vector<at::Tensor> outs = root ? outputs[0] : std::vector<at::Tensor>{};
  // Group send/recv: every rank sends its input to the root, the root receives one tensor from each.
  return Run(c10d::OpType::GATHER, "gather", {in}, outs, [&](tsrStream_t s) {
    std::vector<at::Tensor> bufs;
    Check(tsrGroupStart(), "gather");
    tsrResult_t r = tsrSuccess;
    if (root) {
      for (int p = 0; p < size_ && r == tsrSuccess; ++p) {
        if (p == rank_) continue;
        bufs.push_back(at::empty_like(in));
        r = tsrRecv(bufs.back().data_ptr(), Count(in), TypeOf(in, "gather"), p, comm_, s);
      }
    } else {
      r = tsrSend(in.data_ptr(), Count(in), TypeOf(in, "gather"), static_cast<int>(opts.rootRank), comm_, s);
    }
    const tsrResult_t e = tsrGroupEnd();
    Check(r != tsrSuccess ? r : e, "gather");
    if (root) {
      size_t k = 0;
      for (int p = 0; p < size_; ++p) outs[p].copy_((p == rank_ ? in : bufs[k++]).view_as(outs[p]));
    }
  });
}

c10::intrusive_ptr<c10d::Work> Backend::scatter(std::vector<at::Tensor>& outputs,
                                                std::vector<std::vector<at::Tensor>>& inputs,
                                                const c10d::ScatterOptions& opts) {
  CheckOne(outputs, "scatter");
  CheckRoot(opts.rootRank, "scatter");
  at::Tensor out = outputs[0];
  const bool root = rank_ == opts.rootRank;
  if (root)
    TSR_CHECK(inputs.size() == 1 && static_cast<int>(inputs[0].size()) == size_, "tessera: scatter needs one list of ",
              size_, " inputs on the root");
  std::vector<at::Tensor> ins = root ? inputs[0] : std::vector<at::Tensor>{};
  return Run(c10d::OpType::SCATTER, "scatter", ins, {out}, [&](tsrStream_t s) {
    std::vector<at::Tensor> bufs;
    Check(tsrGroupStart(), "scatter");
    tsrResult_t r = tsrSuccess;
    if (root) {
      for (int p = 0; p < size_ && r == tsrSuccess; ++p) {
        if (p == rank_) continue;
        bufs.push_back(ins[p].contiguous());
        r = tsrSend(bufs.back().data_ptr(), Count(out), TypeOf(out, "scatter"), p, comm_, s);
      }
    } else {
      r = tsrRecv(out.data_ptr(), Count(out), TypeOf(out, "scatter"), static_cast<int>(opts.rootRank), comm_, s);
    }
    const tsrResult_t e = tsrGroupEnd();
    Check(r != tsrSuccess ? r : e, "scatter");
    if (root) out.copy_(ins[rank_].view_as(out));
  });
}

c10::intrusive_ptr<c10d::Work> Backend::reduce_scatter(std::vector<at::Tensor>& outputs,
                                                       std::vector<std::vector<at::Tensor>>& inputs,
                                                       const c10d::ReduceScatterOptions& opts) {
  CheckOne(outputs, "reduce_scatter");
  TSR_CHECK(inputs.size() == 1 && static_cast<int>(inputs[0].size()) == size_,
            "tessera: reduce_scatter needs one list of ", size_, " inputs");
  at::Tensor out = outputs[0];
  for (const auto& i : inputs[0])
    TSR_CHECK(i.numel() == out.numel() && i.scalar_type() == out.scalar_type(),
              "tessera: reduce_scatter inputs must match the output's size and dtype");
  return Run(c10d::OpType::REDUCE_SCATTER, "reduce_scatter", inputs[0], {out}, [&](tsrStream_t s) {
    at::Tensor flat = Flatten(inputs[0]);
    PreMul(flat, opts.reduceOp);
    Check(tsrReduceScatter(flat.data_ptr(), out.data_ptr(), Count(out), TypeOf(out, "reduce_scatter"),
                           RedOpOf(opts.reduceOp, out, "reduce_scatter"), comm_, s),
          "reduce_scatter");
  });
}

c10::intrusive_ptr<c10d::Work> Backend::_reduce_scatter_base(at::Tensor& out, at::Tensor& in,
                                                             const c10d::ReduceScatterOptions& opts) {
  CheckDense(in, "reduce_scatter_tensor");
  CheckDense(out, "reduce_scatter_tensor");
  CheckGathered(in, out, "reduce_scatter_tensor");
  return Run(c10d::OpType::_REDUCE_SCATTER_BASE, "reduce_scatter_tensor", {in}, {out}, [&](tsrStream_t s) {
    at::Tensor src = in;
    if (opts.reduceOp.op_ == c10d::ReduceOp::PREMUL_SUM) {
      src = in.clone();
      PreMul(src, opts.reduceOp);
    }
    Check(tsrReduceScatter(src.data_ptr(), out.data_ptr(), Count(out), TypeOf(out, "reduce_scatter_tensor"),
                           RedOpOf(opts.reduceOp, out, "reduce_scatter_tensor"), comm_, s),
          "reduce_scatter_tensor");
  });
}

c10::intrusive_ptr<c10d::Work> Backend::reduce_scatter_tensor_coalesced(std::vector<at::Tensor>& outs,
                                                                        std::vector<at::Tensor>& ins,
                                                                        const c10d::ReduceScatterOptions& opts) {
  TSR_CHECK(outs.size() == ins.size() && !ins.empty(),
            "tessera: reduce_scatter_tensor_coalesced needs as many outputs as inputs");
  for (size_t i = 0; i < ins.size(); ++i) {
    CheckDense(ins[i], "reduce_scatter_tensor_coalesced");
    CheckDense(outs[i], "reduce_scatter_tensor_coalesced");
    CheckGathered(ins[i], outs[i], "reduce_scatter_tensor_coalesced");
  }
  return Run(c10d::OpType::COALESCED, "reduce_scatter_tensor_coalesced", ins, outs, [&](tsrStream_t s) {
    for (size_t i = 0; i < ins.size(); ++i) {
      at::Tensor src = ins[i];
      if (opts.reduceOp.op_ == c10d::ReduceOp::PREMUL_SUM) {
        src = ins[i].clone();
        PreMul(src, opts.reduceOp);
      }
      Check(tsrReduceScatter(src.data_ptr(), outs[i].data_ptr(), Count(outs[i]),
                             TypeOf(outs[i], "reduce_scatter_tensor_coalesced"),
                             RedOpOf(opts.reduceOp, outs[i], "reduce_scatter_tensor_coalesced"), comm_, s),
            "reduce_scatter_tensor_coalesced");
    }
  });
}

c10::intrusive_ptr<c10d::Work> Backend::alltoall_base(at::Tensor& out, at::Tensor& in, std::vector<int64_t>& out_splits,
                                                      std::vector<int64_t>& in_splits,
                                                      const c10d::AllToAllOptions& /*opts*/) {
  CheckDense(in, "all_to_all_single");
  CheckDense(out, "all_to_all_single");
  TSR_CHECK(in.scalar_type() == out.scalar_type(), "tessera: all_to_all_single needs one dtype");
  const tsrDataType_t dt = TypeOf(in, "all_to_all_single");
  if (out_splits.empty() && in_splits.empty()) {
    TSR_CHECK(in.numel() % size_ == 0 && out.numel() == in.numel(),
              "tessera: all_to_all_single without splits "
              "needs input and output of one size divisible by the world size ",
              size_, " (got ", in.numel(), " and ", out.numel(), ")");
    return Run(c10d::OpType::ALLTOALL_BASE, "all_to_all_single", {in}, {out}, [&](tsrStream_t s) {
      Check(tsrAllToAll(in.data_ptr(), out.data_ptr(), Count(in) / size_, dt, comm_, s), "all_to_all_single");
    });
  }
  std::vector<size_t> sc, sd, rc, rd;
  SplitsToCounts(in, in_splits, "input", &sc, &sd);
  SplitsToCounts(out, out_splits, "output", &rc, &rd);
  return Run(c10d::OpType::ALLTOALL_BASE, "all_to_all_single", {in}, {out}, [&](tsrStream_t s) {
    Check(tsrAllToAllv(in.data_ptr(), sc.data(), sd.data(), out.data_ptr(), rc.data(), rd.data(), dt, comm_, s),
          "all_to_all_single");
  });
}

c10::intrusive_ptr<c10d::Work> Backend::alltoall(std::vector<at::Tensor>& outs, std::vector<at::Tensor>& ins,
                                                 const c10d::AllToAllOptions& /*opts*/) {
  TSR_CHECK(static_cast<int>(outs.size()) == size_ && static_cast<int>(ins.size()) == size_,
            "tessera: all_to_all needs ", size_, " input and ", size_, " output tensors");
  const tsrDataType_t dt = TypeOf(ins[0], "all_to_all");
  std::vector<size_t> sc(size_), sd(size_), rc(size_), rd(size_);
  size_t so = 0, ro = 0;
  for (int p = 0; p < size_; ++p) {
    TSR_CHECK(ins[p].scalar_type() == ins[0].scalar_type() && outs[p].scalar_type() == ins[0].scalar_type(),
              "tessera: all_to_all needs one dtype");
    sc[p] = Count(ins[p]);
    sd[p] = so;
    so += sc[p];
    rc[p] = Count(outs[p]);
    rd[p] = ro;
    ro += rc[p];
  }
  return Run(c10d::OpType::ALLTOALL, "all_to_all", ins, outs, [&](tsrStream_t s) {
    at::Tensor send = Flatten(ins);
    at::Tensor recv = at::empty({static_cast<int64_t>(ro)}, outs[0].options());
    Check(tsrAllToAllv(send.data_ptr(), sc.data(), sd.data(), recv.data_ptr(), rc.data(), rd.data(), dt, comm_, s),
          "all_to_all");
    for (int p = 0; p < size_; ++p)
      outs[p].copy_(recv.narrow(0, static_cast<int64_t>(rd[p]), static_cast<int64_t>(rc[p])).view_as(outs[p]));
  });
}

c10::intrusive_ptr<c10d::Work> Backend::barrier(const c10d::BarrierOptions& /*opts*/) {
  TSR_CHECK(pending_.empty(), "tessera: barrier after send/recv inside a coalescing block is not supported");
  Check(tsrBarrier(comm_), "barrier");
  return Done(c10d::OpType::BARRIER, "barrier", {});
}

c10::intrusive_ptr<c10d::Work> Backend::send(std::vector<at::Tensor>& tensors, int dst, int /*tag*/) {
  CheckOne(tensors, "send");
  CheckPeer(dst, "send");
  at::Tensor t = tensors[0];
  if (coalescing_) {
    pending_.push_back({true, t, dst});
    return Done(c10d::OpType::SEND, "send", {});
  }
  return Run(c10d::OpType::SEND, "send", {t}, {},
             [&](tsrStream_t s) { Check(tsrSend(t.data_ptr(), Count(t), TypeOf(t, "send"), dst, comm_, s), "send"); });
}

c10::intrusive_ptr<c10d::Work> Backend::recv(std::vector<at::Tensor>& tensors, int src, int /*tag*/) {
  CheckOne(tensors, "recv");
  CheckPeer(src, "recv");
  at::Tensor t = tensors[0];
  if (coalescing_) {
    pending_.push_back({false, t, src});
    return Done(c10d::OpType::RECV, "recv", {});
  }
  return Run(c10d::OpType::RECV, "recv", {t}, {t},
             [&](tsrStream_t s) { Check(tsrRecv(t.data_ptr(), Count(t), TypeOf(t, "recv"), src, comm_, s), "recv"); });
}

void Backend::startCoalescing() {
  TSR_CHECK(!coalescing_, "tessera: startCoalescing while already coalescing");
  coalescing_ = true;
  pending_.clear();
}

c10::intrusive_ptr<c10d::Work> Backend::endCoalescing() {
  TSR_CHECK(coalescing_, "tessera: endCoalescing without startCoalescing");
  coalescing_ = false;
  std::vector<P2P> ops = std::move(pending_);
  pending_.clear();
  if (ops.empty()) return Marker("coalesced");  // covers the collectives the block ran on the comm stream
  std::vector<at::Tensor> ins, outs;
  for (const auto& op : ops) (op.send ? ins : outs).push_back(op.t);
  return Run(c10d::OpType::COALESCED, "batch_isend_irecv", ins, outs, [&](tsrStream_t s) {
    Check(tsrGroupStart(), "batch_isend_irecv");
    tsrResult_t r = tsrSuccess;
    for (const auto& op : ops) {
      if (r != tsrSuccess) break;
      r = op.send ? tsrSend(op.t.data_ptr(), Count(op.t), TypeOf(op.t, "isend"), op.peer, comm_, s)
                  : tsrRecv(op.t.data_ptr(), Count(op.t), TypeOf(op.t, "irecv"), op.peer, comm_, s);
    }
    const tsrResult_t e = tsrGroupEnd();
    Check(r != tsrSuccess ? r : e, "batch_isend_irecv");
  });
}

void Backend::Check(tsrResult_t r, const char* what) const {
  if (r == tsrSuccess) return;
  const char* kind = tsrGetErrorString(r);
  const char* detail = comm_ != nullptr ? tsrGetLastError(comm_) : tsrGetLastError(nullptr);
  const char* destroyed =
      ref_->Closing() ? "the process group was destroyed (destroy_process_group) while this call was pending: " : "";
  std::string msg = std::string("tessera: ") + what + " failed on rank " + std::to_string(rank_) + ": " + destroyed +
                    (kind != nullptr ? kind : "?") + ": " + (detail != nullptr ? detail : "");
  if (CrashTraceOn()) std::fprintf(stderr, "%s\n", msg.c_str());  // seen even if raising fails
  TSR_CHECK(false, msg);
}

void Backend::CheckRoot(int64_t root, const char* what) const {
  TSR_CHECK(root >= 0 && root < size_, "tessera: ", what, " root ", root, " is not a rank of this group (0..",
            size_ - 1, ")");
}

void Backend::CheckPeer(int peer, const char* what) const {
  TSR_CHECK(peer >= 0 && peer < size_ && peer != rank_, "tessera: ", what, " peer ", peer,
            " is not another rank of this group (0..", size_ - 1, ", this is ", rank_, ")");
}

void Backend::CheckGathered(const at::Tensor& big, const at::Tensor& small, const char* what) const {
  TSR_CHECK(big.numel() == small.numel() * size_ && big.scalar_type() == small.scalar_type(), "tessera: ", what,
            " needs a tensor of world size (", size_, ") x ", small.numel(), " elements of ", small.scalar_type(),
            ", got ", big.numel(), " of ", big.scalar_type());
}

void Backend::SplitsToCounts(const at::Tensor& t, const std::vector<int64_t>& splits, const char* which,
                             std::vector<size_t>* counts, std::vector<size_t>* displs) const {
  const int64_t rows = t.dim() == 0 ? 1 : t.size(0);
  const int64_t row = rows == 0 ? 0 : t.numel() / rows;
  counts->assign(size_, 0);
  displs->assign(size_, 0);
  std::vector<int64_t> s = splits;
  if (s.empty()) {
    TSR_CHECK(rows % size_ == 0, "tessera: all_to_all_single ", which, " of ", rows,
              " rows is not divisible by the world size ", size_, "; give split sizes");
    s.assign(size_, rows / size_);
  }
  TSR_CHECK(static_cast<int>(s.size()) == size_, "tessera: all_to_all_single ", which, " split sizes have ", s.size(),
            " entries, expected ", size_);
  int64_t off = 0;
  for (int p = 0; p < size_; ++p) {
    TSR_CHECK(s[p] >= 0, "tessera: all_to_all_single ", which, " split size ", s[p], " for rank ", p, " is negative");
    (*counts)[p] = static_cast<size_t>(s[p] * row);
    (*displs)[p] = static_cast<size_t>(off * row);
    off += s[p];
  }
  TSR_CHECK(off == rows, "tessera: all_to_all_single ", which, " split sizes sum to ", off, ", but the tensor has ",
            rows, " rows");
}

void Backend::PreMul(at::Tensor& t, const c10d::ReduceOp& op) {
  if (op.op_ != c10d::ReduceOp::PREMUL_SUM) return;
  auto* sup = dynamic_cast<c10d::NCCLPreMulSumSupplement*>(op.supplement_.get());
  TSR_CHECK(sup != nullptr, "tessera: PREMUL_SUM without a factor");
  if (sup->tensor_factor.defined())
    t.mul_(sup->tensor_factor.to(t.device()));
  else
    t.mul_(sup->double_factor);
}

c10::intrusive_ptr<c10d::Work> Backend::Marker(const char* title) {
  if (device_queue_) return device_queue_->Marker(c10d::OpType::COALESCED, title);
  return Done(c10d::OpType::COALESCED, title, {});
}

c10::intrusive_ptr<c10d::Work> Backend::Done(c10d::OpType type, const char* title, std::vector<at::Tensor> outputs) {
  auto fut = c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()));
  fut->markCompleted(c10::IValue(outputs));
  return c10::make_intrusive<Work>(rank_, type, title, std::move(outputs), std::move(fut), ref_);
}

}  // namespace tessera_torch
