// ckpt/device: copies between caller memory (host, or CUDA device memory when built with CUDA) and the
// checkpoint's host buffers. Device pointers are recognised with cudaPointerGetAttributes; without a
// GPU (or without CUDA) every pointer is host memory.
#pragma once

#include <cstddef>

#include "tessera/status.hpp"

namespace tessera::ckpt {

bool IsDevicePointer(const void* p);
// Number of usable CUDA devices (0 without CUDA or GPU).
int CudaDeviceCount();
// dst is host memory; src host or device.
Status CopyToHost(void* dst, const void* src, size_t n);
// src is host memory; dst host or device.
Status CopyFromHost(void* dst, const void* src, size_t n);

}  // namespace tessera::ckpt
