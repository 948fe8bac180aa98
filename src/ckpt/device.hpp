// ckpt/device: copies between caller memory (host, or device memory of any device runtime this process has
// started: CUDA, ACL, MUSA, the emulated device; comm/runtime) and the checkpoint's host buffers. A pointer is
// device memory when the runtime table says so (comm::DeviceMemoryOwner, comm::IsDeviceMemory); its own runtime
// then copies it.
#pragma once

#include <cstddef>

#include "tessera/status.hpp"

namespace tessera::ckpt {

// dst is host memory; src host or device. `bind_thread`: the calling thread is one Tessera made for this work
// (a reader's helper), which no runtime knows yet: it is bound to src's device first, as the runtime table asks
// of every thread before its calls (DeviceRuntime::SetDevice). A caller's own thread is left as it is: its
// current device is the application's.
Status CopyToHost(void* dst, const void* src, size_t n, bool bind_thread = false);
// src is host memory; dst host or device (`bind_thread` as above, for dst's device).
Status CopyFromHost(void* dst, const void* src, size_t n, bool bind_thread = false);

}  // namespace tessera::ckpt
