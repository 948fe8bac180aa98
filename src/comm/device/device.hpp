// comm/device/device: the interface through which the communicator hands collectives of a rank whose
// island is a device island (TESSERA_DEVICE=cuda:N) to that device backend. The backend decides, per
// call, between the island's vendor library on the caller's stream (a world of one island), the
// GPU<->host bridge (a hybrid world), and the host path (host memory, stream NULL).
//
// OpenDeviceRank is defined by the CUDA backend when the build has it, and otherwise returns
// Unsupported naming the device, so the communicator needs no #ifdef at its dispatch points.
#pragma once

#include <memory>
#include <string>

#include "tessera/status.hpp"
#include "tessera/tessera.h"

namespace tessera::comm {

class Comm;

class DeviceRank {
 public:
  virtual ~DeviceRank() = default;
  // Called once the world is known and the channels are up (before the init barrier).
  virtual Status Attach(Comm* comm) = 0;
  virtual std::string Describe() const = 0;  // "cuda:0 (NVIDIA H200), nccl 22803 direct"

  virtual Status AllReduce(const void* send, void* recv, size_t count, tsrDataType_t type, tsrRedOp_t op,
                           tsrStream_t stream) = 0;
  virtual Status ReduceScatter(const void* send, void* recv, size_t recvcount, tsrDataType_t type, tsrRedOp_t op,
                               tsrStream_t stream) = 0;
  virtual Status AllGather(const void* send, void* recv, size_t sendcount, tsrDataType_t type, tsrStream_t stream) = 0;
  virtual Status Broadcast(const void* send, void* recv, size_t count, tsrDataType_t type, int root,
                           tsrStream_t stream) = 0;
  virtual Status Send(const void* send, size_t count, tsrDataType_t type, int peer, tsrStream_t stream) = 0;
  virtual Status Recv(void* recv, size_t count, tsrDataType_t type, int peer, tsrStream_t stream) = 0;
  virtual Status Barrier() = 0;
  // The CCL communicator of a world of one device island (ncclComm_t for NCCL), else null. For
  // benchmarks that call the CCL on Tessera's own communicator (bench/gpu/gpu_bench direct).
  virtual void* CclHandle() const { return nullptr; }
};

// `device` is TESSERA_DEVICE ("cuda:N"). Selects the GPU; errors name the value.
Result<std::unique_ptr<DeviceRank>> OpenDeviceRank(const std::string& device);
// True when `p` is memory of a device backend (a host-island rank must not get such a pointer).
bool IsDevicePointer(const void* p);

}  // namespace tessera::comm
