// bench/gpu/stream_lock_probe: which CUDA calls of a second thread (a communicator's worker) are held up
// while a first thread (the training thread) sits in a copy to pageable host memory whose stream waits for
// the worker? The hazard behind the PyTorch backend's hang (docs/devices.md, "Why no CUDA call on the worker").
//
//   stream_lock_probe MODE DST [CALL]   MODE: legacy | side | legacy-event | side-event   DST: pageable | pinned
//   DST devsync: thread A calls cudaDeviceSynchronize instead of copying; streamsync: cudaStreamSynchronize(SA)
//   CALL: only the call whose name starts so (each call then meets thread A's copy first, unconfounded)
//
// Thread A queues, on stream SA (torch's legacy default stream, or a non-blocking side stream), a wait for
// a host-mapped flag (cuStreamWaitValue32) — directly, or (…-event) on a separate "communication" stream
// that SA then waits for through an event, as the torch backend's Work::wait() does — and then copies
// 64 MiB device→DST on SA and synchronizes SA. Thread B, 300 ms later, makes each call a worker makes, on a
// non-blocking stream of its own, timed; a watchdog raises the flag after 3 s if B is stuck, so every run
// ends. Output: one line per call with its time ("HELD" when it returned only after the watchdog).
#include <cuda.h>
#include <cuda_runtime.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace {

__global__ void Touch(int* p) { p[threadIdx.x] += 1; }

void Die(const char* what, int e) {
  std::fprintf(stderr, "%s failed: %d\n", what, e);
  std::exit(2);
}
#define CK(x)                                                     \
  do {                                                            \
    auto e_ = (x);                                                \
    if (static_cast<int>(e_) != 0) Die(#x, static_cast<int>(e_)); \
  } while (0)

double Now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s legacy|side|legacy-event|side-event pageable|pinned|devsync|streamsync [CALL]\n",
                 argv[0]);
    return 64;
  }
  const std::string mode = argv[1], dst_kind = argv[2];
  const bool legacy = mode.rfind("legacy", 0) == 0, via_event = mode.find("event") != std::string::npos;
  const size_t kBytes = 64u << 20;
  CK(cudaSetDevice(0));
  CK(cudaFree(nullptr));
  void* dev = nullptr;
  CK(cudaMalloc(&dev, kBytes));
  void* dst = nullptr;
  if (dst_kind == "pinned" || dst_kind == "devsync" || dst_kind == "streamsync") {
    CK(cudaMallocHost(&dst, kBytes));
  } else {
    dst = std::malloc(kBytes);
    std::memset(dst, 0, kBytes);
  }
  std::vector<char> reg_buf(4u << 20);
  CK(cudaHostRegister(reg_buf.data(), reg_buf.size(), cudaHostRegisterDefault));
  uint32_t* flag = nullptr;
  CK(cudaHostAlloc(reinterpret_cast<void**>(&flag), 64, cudaHostAllocMapped));
  *reinterpret_cast<volatile uint32_t*>(flag) = 0;
  CUdeviceptr flag_dev = 0;
  CK(cuMemHostGetDevicePointer(&flag_dev, flag, 0));
  int* scratch = nullptr;
  CK(cudaMalloc(reinterpret_cast<void**>(&scratch), 4096));
  Touch<<<1, 32>>>(scratch);  // loaded now: a lazy first load takes a context-wide lock of its own
  CK(cudaDeviceSynchronize());

  cudaStream_t sa = cudaStreamLegacy, comm = nullptr, sb = nullptr, wb = nullptr;
  if (!legacy) CK(cudaStreamCreateWithFlags(&sa, cudaStreamNonBlocking));
  CK(cudaStreamCreateWithFlags(&comm, cudaStreamNonBlocking));
  CK(cudaStreamCreateWithFlags(&sb, cudaStreamNonBlocking));
  CK(cudaStreamCreateWithFlags(&wb, cudaStreamNonBlocking));
  cudaEvent_t end = nullptr, eb = nullptr;
  CK(cudaEventCreateWithFlags(&end, cudaEventDisableTiming));
  CK(cudaEventCreateWithFlags(&eb, cudaEventDisableTiming));

  std::atomic<bool> released{false};
  auto release = [&] {
    if (!released.exchange(true)) *reinterpret_cast<volatile uint32_t*>(flag) = 1;
  };
  double t_a0 = 0, t_a1 = 0;
  std::thread a([&] {
    CK(cudaSetDevice(0));
    if (via_event) {
      CK(cuStreamWaitValue32(reinterpret_cast<CUstream>(comm), flag_dev, 1, CU_STREAM_WAIT_VALUE_GEQ));
      CK(cudaEventRecord(end, comm));
      CK(cudaStreamWaitEvent(sa, end, 0));
    } else {
      CK(cuStreamWaitValue32(reinterpret_cast<CUstream>(sa), flag_dev, 1, CU_STREAM_WAIT_VALUE_GEQ));
    }
    t_a0 = Now();
    if (dst_kind == "devsync") {
      CK(cudaDeviceSynchronize());
    } else if (dst_kind != "streamsync") {
      CK(cudaMemcpyAsync(dst, dev, kBytes, cudaMemcpyDeviceToHost, sa));
    }
    CK(cudaStreamSynchronize(sa));
    t_a1 = Now();
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  std::atomic<bool> stop_watch{false};
  std::thread watch([&] {
    double t0 = Now();
    while (!stop_watch && Now() - t0 < 3.0) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    if (!stop_watch) release();
  });
  struct Row {
    const char* call;
    double ms;
    bool held;
  };
  std::vector<Row> rows;
  const std::string only = argc > 3 ? argv[3] : "";
  auto timed = [&](const char* call, auto&& fn) {
    if (!only.empty() && std::string(call).find(only) != 0) return;
    bool before = released.load();
    double t0 = Now();
    fn();
    double ms = (Now() - t0) * 1e3;
    rows.push_back({call, ms, !before && released.load() && ms > 1000});
  };
  CK(cudaSetDevice(0));
  timed("cudaEventRecord", [&] { CK(cudaEventRecord(eb, sb)); });
  timed("cudaEventQuery", [&] { (void)cudaEventQuery(eb); });
  timed("cudaMemcpyAsync H2D (registered)",
        [&] { CK(cudaMemcpyAsync(dev, reg_buf.data(), 1 << 20, cudaMemcpyHostToDevice, sb)); });
  timed("cudaMemcpyAsync D2H (registered)",
        [&] { CK(cudaMemcpyAsync(reg_buf.data(), dev, 1 << 20, cudaMemcpyDeviceToHost, sb)); });
  timed("kernel launch", [&] {
    Touch<<<1, 32, 0, sb>>>(scratch);
    CK(cudaGetLastError());
  });
  timed("cudaMemcpyAsync D2D", [&] { CK(cudaMemcpyAsync(scratch, dev, 4096, cudaMemcpyDeviceToDevice, sb)); });
  timed("cudaStreamWaitEvent", [&] { CK(cudaStreamWaitEvent(sb, eb, 0)); });
  timed("cuStreamWriteValue32", [&] {
    CK(cuStreamWriteValue32(reinterpret_cast<CUstream>(wb), flag_dev + 4, 7, CU_STREAM_WRITE_VALUE_DEFAULT));
  });
  timed("cudaStreamSynchronize (own stream)", [&] { CK(cudaStreamSynchronize(sb)); });
  stop_watch = true;
  release();
  watch.join();
  a.join();
  std::printf("mode=%s dst=%s: thread A's copy+sync returned %.0f ms after it began\n", mode.c_str(), dst_kind.c_str(),
              (t_a1 - t_a0) * 1e3);
  for (const auto& r : rows)
    std::printf("  %-36s %9.3f ms%s\n", r.call, r.ms, r.held ? "  HELD (returned only after the watchdog)" : "");
  return 0;
}
