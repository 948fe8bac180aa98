// tests/gpu/framework_gpu_worker: one rank of framework_gpu_test — the framework C API (tsrCommInitRank,
// tsrCommSplit, tsrAllToAll(v), groups, abort) with device memory on CUDA ranks, started without the
// launcher or any TESSERA_* identity variable.
//
//   framework_gpu_worker SCENARIO --ids FILE --rank R --spec ISLAND:VENDOR:DEVICE,...   (one per rank)
//
// Scenarios: "all" (init, allreduce, alltoall, alltoallv, a ring group, a split); "abort" (rank 0's
// queued device recv ended by tsrCommAbort from another thread).
// A CUDA rank uses device memory on a stream of its own; a host rank host memory and a NULL stream.
// Prints "OK rank R: ..." or "FAIL rank R: why".
#include <cuda_runtime.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "tessera/tessera.h"

namespace {

struct Spec {
  int island;
  std::string vendor, device;
};
std::vector<Spec> g_spec;
int g_rank = -1, g_world = 0;

[[noreturn]] void Fail(const std::string& why) {
  std::printf("FAIL rank %d: %s\n", g_rank, why.c_str());
  std::fflush(stdout);
  std::exit(1);
}
void Check(tsrResult_t r, tsrComm_t c, const std::string& what) {
  if (r != tsrSuccess) Fail(what + ": " + tsrGetErrorString(r) + ": " + tsrGetLastError(c));
}
void Cuda(cudaError_t e, const std::string& what) {
  if (e != cudaSuccess) Fail(what + ": " + cudaGetErrorString(e));
}

bool OnGpu(int rank) { return g_spec[rank].device != "host"; }

// A buffer in this rank's memory kind, with host copies in and out.
struct Buf {
  size_t bytes = 0;
  void* p = nullptr;
  bool dev = false;
  Buf(size_t n, bool on_dev) : bytes(n), dev(on_dev) {
    if (dev)
      Cuda(cudaMalloc(&p, n == 0 ? 1 : n), "cudaMalloc");
    else
      p = std::malloc(n == 0 ? 1 : n);
  }
  ~Buf() {
    if (dev)
      (void)cudaFree(p);
    else
      std::free(p);
  }
  void Put(const std::vector<unsigned char>& h) {
    if (dev) {
      Cuda(cudaMemcpy(p, h.data(), h.size(), cudaMemcpyHostToDevice), "H2D");
      // From pageable memory cudaMemcpy may return once the bytes are staged, before the DMA has written
      // the device buffer (CUDA Runtime API, "API synchronization behavior"), and the collectives run on a
      // non-blocking stream that does not wait for it: without this the test raced its own inputs
      // (TwoGpuIslandsSharingOneGpu failed about one run in two, with wrong alltoallv or split results).
      Cuda(cudaDeviceSynchronize(), "cudaDeviceSynchronize after H2D");
    } else
      std::memcpy(p, h.data(), h.size());
  }
  std::vector<unsigned char> Get() const {
    std::vector<unsigned char> h(bytes);
    if (dev)
      Cuda(cudaMemcpy(h.data(), p, bytes, cudaMemcpyDeviceToHost), "D2H");
    else
      std::memcpy(h.data(), p, bytes);
    return h;
  }
};

unsigned char Pat(int from, int to, size_t i) {
  return static_cast<unsigned char>(from * 41 + to * 11 + i * 7 + (i >> 8));
}

int RunAll(const tsrUniqueId& id) {
  const bool gpu = OnGpu(g_rank);
  cudaStream_t stream = nullptr;
  if (gpu) Cuda(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
  tsrStream_t s = gpu ? static_cast<tsrStream_t>(stream) : nullptr;
  auto sync = [&] {
    if (gpu) Cuda(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  };
  tsrConfig_t cfg = TSR_CONFIG_INITIALIZER;
  cfg.island = g_spec[g_rank].island;
  cfg.vendor = g_spec[g_rank].vendor.c_str();
  cfg.device = g_spec[g_rank].device.c_str();
  cfg.timeout_ms = 60000;
  tsrComm_t c = nullptr;
  if (tsrCommInitRank(&c, g_world, id, g_rank, &cfg) != tsrSuccess)
    Fail(std::string("tsrCommInitRank: ") + tsrGetLastError(nullptr));
  const int W = g_world, me = g_rank;

  // Allreduce of int32 (exact): the sum of ranks + 1.
  {
    const size_t n = 100000;
    std::vector<int32_t> h(n, me + 1);
    Buf b(n * 4, gpu);
    b.Put(std::vector<unsigned char>(reinterpret_cast<unsigned char*>(h.data()),
                                     reinterpret_cast<unsigned char*>(h.data()) + n * 4));
    Check(tsrAllReduce(b.p, b.p, n, tsrInt32, tsrSum, c, s), c, "allreduce");
    sync();
    auto out = b.Get();
    const int32_t want = W * (W + 1) / 2;
    for (size_t i = 0; i < n; ++i) {
      int32_t v;
      std::memcpy(&v, out.data() + i * 4, 4);
      if (v != want) Fail("allreduce element " + std::to_string(i) + " = " + std::to_string(v));
    }
  }
  // Alltoall, equal blocks of bytes.
  {
    const size_t n = 300000;
    std::vector<unsigned char> h(n * W);
    for (int p = 0; p < W; ++p)
      for (size_t i = 0; i < n; ++i) h[p * n + i] = Pat(me, p, i);
    Buf in(n * W, gpu), out(n * W, gpu);
    in.Put(h);
    Check(tsrAllToAll(in.p, out.p, n, tsrUint8, c, s), c, "alltoall");
    sync();
    auto o = out.Get();
    for (int p = 0; p < W; ++p)
      for (size_t i = 0; i < n; ++i)
        if (o[p * n + i] != Pat(p, me, i))
          Fail("alltoall from rank " + std::to_string(p) + " byte " + std::to_string(i));
  }
  // Alltoallv, uneven and zero counts, float32 (bytes moved, never folded).
  {
    auto cnt = [&](int from, int to) { return static_cast<size_t>((from * 3 + to) % 3) * 5000; };
    std::vector<size_t> sc(W), sd(W), rc(W), rd(W);
    size_t so = 0, ro = 0;
    for (int p = 0; p < W; ++p) {
      sc[p] = cnt(me, p), sd[p] = so, so += sc[p];
      rc[p] = cnt(p, me), rd[p] = ro + 1, ro = rd[p] + rc[p];
    }
    std::vector<unsigned char> h(so * 4), g((ro + 1) * 4, 0x77);
    for (int p = 0; p < W; ++p)
      for (size_t i = 0; i < sc[p] * 4; ++i) h[sd[p] * 4 + i] = Pat(me, p, i);
    Buf in(so * 4, gpu), out((ro + 1) * 4, gpu);
    in.Put(h);
    out.Put(g);
    Check(tsrAllToAllv(in.p, sc.data(), sd.data(), out.p, rc.data(), rd.data(), tsrFloat32, c, s), c, "alltoallv");
    sync();
    auto o = out.Get();
    std::vector<bool> hit(o.size(), false);
    for (int p = 0; p < W; ++p)
      for (size_t i = 0; i < rc[p] * 4; ++i) {
        hit[rd[p] * 4 + i] = true;
        if (o[rd[p] * 4 + i] != Pat(p, me, i)) Fail("alltoallv from rank " + std::to_string(p));
      }
    for (size_t i = 0; i < o.size(); ++i)
      if (!hit[i] && o[i] != 0x77) Fail("alltoallv wrote a gap at byte " + std::to_string(i));
  }
  // A group: ring shift in both directions, receives first on odd ranks.
  {
    const size_t n = 3u << 20;
    std::vector<unsigned char> h(n);
    for (size_t i = 0; i < n; ++i) h[i] = Pat(me, (me + 1) % W, i);
    Buf sb(n, gpu), rb(n, gpu);
    sb.Put(h);
    Check(tsrGroupStart(), c, "group start");
    if (me % 2) Check(tsrRecv(rb.p, n, tsrUint8, (me + W - 1) % W, c, s), c, "recv");
    Check(tsrSend(sb.p, n, tsrUint8, (me + 1) % W, c, s), c, "send");
    if (me % 2 == 0) Check(tsrRecv(rb.p, n, tsrUint8, (me + W - 1) % W, c, s), c, "recv");
    Check(tsrGroupEnd(), c, "group end");
    sync();
    auto o = rb.Get();
    for (size_t i = 0; i < n; ++i)
      if (o[i] != Pat((me + W - 1) % W, me, i)) Fail("group ring byte " + std::to_string(i));
  }
  // Split: ranks 0 and 1 together (in reverse order), the others each alone; each child allreduces.
  {
    const int color = me < 2 ? 0 : 1 + me;
    tsrComm_t child = nullptr;
    Check(tsrCommSplit(c, color, -me, &child, nullptr), c, "split");
    int cr = -1, cs = -1;
    Check(tsrCommRank(child, &cr), child, "child rank");
    Check(tsrCommSize(child, &cs), child, "child size");
    const int want_size = me < 2 ? std::min(2, W) : 1;
    if (cs != want_size || (me < 2 && W >= 2 && cr != 1 - me)) Fail("child rank/size");
    const size_t n = 4099;
    std::vector<float> h(n, static_cast<float>(me + 1));
    Buf b(n * 4, gpu);
    b.Put(std::vector<unsigned char>(reinterpret_cast<unsigned char*>(h.data()),
                                     reinterpret_cast<unsigned char*>(h.data()) + n * 4));
    Check(tsrAllReduce(b.p, b.p, n, tsrFloat32, tsrSum, child, s), child, "child allreduce");
    sync();
    auto o = b.Get();
    const float want = me < 2 ? (W >= 2 ? 3.0f : 1.0f) : static_cast<float>(me + 1);
    for (size_t i = 0; i < n; ++i) {
      float v;
      std::memcpy(&v, o.data() + i * 4, 4);
      if (v != want) Fail("child allreduce element " + std::to_string(i) + " = " + std::to_string(v));
    }
    tsrCommDestroy(child);
  }
  Check(tsrBarrier(c), c, "barrier");
  tsrCommDestroy(c);
  if (stream) (void)cudaStreamDestroy(stream);
  std::printf("OK rank %d (%s): init, allreduce, alltoall(v), group, split on %s\n", me, g_spec[me].device.c_str(),
              gpu ? "device memory" : "host memory");
  return 0;
}

// Rank 0 queues a recv on device memory that rank 1 never matches; another thread aborts: the caller's
// stream is released (cudaStreamSynchronize returns), the async error is set, the next call fails, and
// rank 1's pending host recv from rank 0 fails naming the abort.
int RunAbort(const tsrUniqueId& id) {
  const bool gpu = OnGpu(g_rank);
  cudaStream_t stream = nullptr;
  if (gpu) Cuda(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
  tsrConfig_t cfg = TSR_CONFIG_INITIALIZER;
  cfg.island = g_spec[g_rank].island;
  cfg.vendor = g_spec[g_rank].vendor.c_str();
  cfg.device = g_spec[g_rank].device.c_str();
  cfg.timeout_ms = 60000;  // an abort that did not work would show as a timeout after 60 s
  tsrComm_t c = nullptr;
  if (tsrCommInitRank(&c, g_world, id, g_rank, &cfg) != tsrSuccess)
    Fail(std::string("tsrCommInitRank: ") + tsrGetLastError(nullptr));
  Check(tsrBarrier(c), c, "barrier");
  if (g_rank == 0) {
    Buf b(1024, gpu);
    tsrStream_t s = gpu ? static_cast<tsrStream_t>(stream) : nullptr;
    std::thread t([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
      tsrCommAbort(c);
    });
    tsrResult_t r = tsrRecv(b.p, 256, tsrInt32, 1, c, s);  // device memory: queued, returns at once
    t.join();
    if (gpu) Cuda(cudaStreamSynchronize(stream), "cudaStreamSynchronize after abort");
    tsrResult_t e = tsrSuccess;
    Check(tsrCommGetAsyncError(c, &e), c, "tsrCommGetAsyncError");
    if (e == tsrSuccess) Fail("no async error after abort");
    if (r == tsrSuccess) r = tsrBarrier(c);
    if (r == tsrSuccess) Fail("a call after abort succeeded");
  } else {
    int v = 0;
    const tsrResult_t r = tsrRecv(&v, 1, tsrInt32, 0, c, nullptr);
    if (r != tsrRemoteError || !std::strstr(tsrGetLastError(c), "aborted"))
      Fail(std::string("peer of an aborted rank: ") + tsrGetErrorString(r) + ": " + tsrGetLastError(c));
  }
  tsrCommDestroy(c);
  if (stream) (void)cudaStreamDestroy(stream);
  std::printf("OK rank %d: abort\n", g_rank);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  setvbuf(stdout, nullptr, _IOLBF, 0);
  std::string ids_file, scenario = argc > 1 ? argv[1] : "";
  for (int i = 2; i + 1 < argc; i += 2) {
    const std::string a = argv[i], v = argv[i + 1];
    if (a == "--ids")
      ids_file = v;
    else if (a == "--rank")
      g_rank = std::atoi(v.c_str());
    else if (a == "--spec") {
      size_t pos = 0;
      while (pos <= v.size()) {
        size_t e = v.find(',', pos);
        const std::string item = v.substr(pos, e == std::string::npos ? std::string::npos : e - pos);
        const size_t c1 = item.find(':'), c2 = item.find(':', c1 + 1);
        g_spec.push_back(
            {std::atoi(item.substr(0, c1).c_str()), item.substr(c1 + 1, c2 - c1 - 1), item.substr(c2 + 1)});
        if (e == std::string::npos) break;
        pos = e + 1;
      }
    }
  }
  g_world = static_cast<int>(g_spec.size());
  tsrUniqueId id;
  for (int i = 0;; ++i) {
    std::ifstream f(ids_file, std::ios::binary);
    if (f.read(id.internal, sizeof(id.internal))) break;
    if (i > 600) Fail("no id in " + ids_file);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  if (scenario == "all") return RunAll(id);
  if (scenario == "abort") return RunAbort(id);
  Fail("unknown scenario " + scenario);
}
