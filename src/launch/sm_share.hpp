// launch/sm_share: `tessera run --sm-share VENDOR=PERCENT` — an island's ranks run on a share of their GPU's
// streaming multiprocessors, through NVIDIA MPS (CUDA_MPS_ACTIVE_THREAD_PERCENTAGE per client process).
// This models a slower card next to a faster one on one GPU; such an island is *emulated* and every
// output says so ("emulated on an SM share of <GPU>"). The launcher starts its own MPS control daemon
// (pipe and log directories in a fresh temporary folder, so it never touches a system-wide one) before
// the ranks and stops it after them; where MPS is not available it refuses with the reason.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "launch/launcher.hpp"
#include "tessera/status.hpp"

namespace tessera::launch {

// Parses the --sm-share values ("ascend=40": 1..100 percent of the SMs) against the islands: each must
// name a cuda island, once. Errors name the value.
Result<std::map<std::string, int>> ParseSmShares(const std::vector<std::string>& texts,
                                                 const std::vector<IslandSpec>& islands);

// The label every output carries for an emulated island: "emulated on an SM share of NVIDIA H200 (40%)".
std::string EmulatedLabel(const std::string& gpu_name, int percent);

// The variables of each rank of an island on `percent` of the SMs: CUDA_MPS_ACTIVE_THREAD_PERCENTAGE,
// TESSERA_SM_SHARE, TESSERA_EMULATED (`label`) and CUDA_DEVICE_MAX_CONNECTIONS=32 unless the environment
// sets it. Why the last: MPS clients share one pool of hardware work queues, so streams alias onto fewer
// queues than without MPS, and a stream waiting for the device bridge then held up the bridge's own copies
// queued behind it on the same queue (the hybrid LM hung in its first allreduce on the H200 at the
// default; it trained with 32, the most CUDA takes).
std::vector<std::pair<std::string, std::string>> SmShareEnvironment(int percent, const std::string& label);

// The name of CUDA device `n` as this process sees it ("NVIDIA H200"); "GPU n" without CUDA.
std::string CudaDeviceName(int n);

// One MPS control daemon for the job's lifetime.
class MpsDaemon {
 public:
  // Starts `nvidia-cuda-mps-control -d` with its own pipe/log directories; an error (naming what is
  // missing or what the daemon said) where MPS is unavailable.
  static Result<std::unique_ptr<MpsDaemon>> Start();
  ~MpsDaemon();  // asks the daemon to quit and removes its directories
  // CUDA_MPS_PIPE_DIRECTORY and CUDA_MPS_LOG_DIRECTORY, for every rank of the job.
  std::vector<std::pair<std::string, std::string>> ClientEnvironment() const;

 private:
  MpsDaemon() = default;
  std::string dir_, control_;
};

}  // namespace tessera::launch
