// bench/gpu/gpu_bench: the GPU numbers of scripts/device-check.sh that `tessera bench` does not measure, one
// JSON object per line on stdout. (Collectives on device memory, hybrid jobs included, are `tessera bench`'s:
// `tessera run --island nvidia=cuda:1 --island ascend=host:3 -- tessera bench allreduce`.)
//   gpu_bench copy [--mib N] [--gpus N] [--procs P]
//                                               pinned cudaMemcpyAsync bandwidth D2H, H2D and both at once,
//                                               per GPU, with the first N GPUs (default 1) copying at once,
//                                               from P processes at once (default 1; no communicator);
//   gpu_bench direct [--sizes ..] [--iters N] [--rounds R] [--nccl-first]
//                                               a world of one CUDA island (one rank per GPU): tsrAllReduce
//                                               on a stream against NCCL's allreduce called directly on the
//                                               same GPUs (a second NCCL communicator of the same ranks,
//                                               a third one, NCCL against NCCL, for the resolution; NCCL
//                                               called on Tessera's own NCCL communicator; and the device
//                                               rank's full path, without the communicator's lean path
//                                               for known-good calls), R rounds (default 7) of N calls each,
//                                               interleaved, medians of CUDA-event times and of the host
//                                               time spent in the calls (the slowest rank's per round);
//                                               --nccl-first (a world of one rank): the first direct
//                                               communicator is made before Tessera's, not after.
//   gpu_bench folds [--mib N] [--iters N]        where a CUDA rank's bridge is TCP, the bytes it receives
//                                               arrive in host memory: folding them there (the host engine's
//                                               fold, one thread, the CPU's fastest path) against copying
//                                               them to the GPU and folding there (pinned H2D copy + the
//                                               device fold kernel, timed together with events; and the
//                                               kernel alone), f32/bf16/f16 sum into an f32 accumulator of
//                                               N MiB of elements (default 64), medians of N calls (10)
// Sizes are in bytes with K/M/G suffixes.
#include <cuda_runtime.h>
#include <pthread.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "comm/ccl/ccl.hpp"
#include "comm/comm.hpp"
#include "comm/device/device.hpp"
#include "comm/kernels/kernels.hpp"
#include "comm/reduce/reduce.hpp"
#include "common/dtype.hpp"
#include "tessera/tessera.h"

namespace {

[[noreturn]] void Die(const std::string& why) {
  std::fprintf(stderr, "gpu_bench: %s\n", why.c_str());
  std::exit(1);
}
void Cuda(cudaError_t e, const char* what) {
  if (e != cudaSuccess) Die(std::string(what) + ": " + cudaGetErrorString(e));
}
size_t ParseSize(const std::string& s) {
  size_t v = std::stoull(s);
  char c = s.back();
  if (c == 'K' || c == 'k') v <<= 10;
  if (c == 'M' || c == 'm') v <<= 20;
  if (c == 'G' || c == 'g') v <<= 30;
  return v;
}
std::vector<size_t> ParseSizes(const std::string& s) {
  std::vector<size_t> out;
  for (size_t p = 0; p <= s.size();) {
    size_t c = s.find(',', p);
    out.push_back(ParseSize(s.substr(p, c - p)));
    if (c == std::string::npos) break;
    p = c + 1;
  }
  return out;
}
double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}
double Now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

// Pinned copy bandwidth of the first `gpus` GPUs copying at once (each its own buffers and streams,
// issued from one thread, timed to the last one's end): per GPU, D2H alone, H2D alone, both at once.
// With procs > 1, that many processes (each its own CUDA context, as the ranks of a job have) do the
// same at the same moments, and the bandwidth is all processes' bytes over the slowest one's time.
constexpr int kCopyIters = 12, kCopyWarm = 2;
struct CopyShared {  // in memory shared by the processes
  pthread_barrier_t barrier;
  double t[3][16][kCopyIters];  // [D2H, H2D, both][process][iteration]
};

void CopyProcess(size_t bytes, int gpus, int me, CopyShared* sh) {
  struct Bufs {
    void *h1, *h2, *d1, *d2;
    cudaStream_t s1, s2;
  };
  std::vector<Bufs> g(gpus);
  for (int d = 0; d < gpus; ++d) {
    Cuda(cudaSetDevice(d), "cudaSetDevice");
    Cuda(cudaHostAlloc(&g[d].h1, bytes, cudaHostAllocDefault), "cudaHostAlloc");
    Cuda(cudaHostAlloc(&g[d].h2, bytes, cudaHostAllocDefault), "cudaHostAlloc");
    Cuda(cudaMalloc(&g[d].d1, bytes), "cudaMalloc");
    Cuda(cudaMalloc(&g[d].d2, bytes), "cudaMalloc");
    std::memset(g[d].h1, 1, bytes);
    std::memset(g[d].h2, 2, bytes);
    Cuda(cudaStreamCreateWithFlags(&g[d].s1, cudaStreamNonBlocking), "stream");
    Cuda(cudaStreamCreateWithFlags(&g[d].s2, cudaStreamNonBlocking), "stream");
  }
  for (int which = 0; which < 3; ++which)
    for (int i = 0; i < kCopyIters; ++i) {
      pthread_barrier_wait(&sh->barrier);
      double t0 = Now();
      for (int d = 0; d < gpus; ++d) {
        Cuda(cudaSetDevice(d), "cudaSetDevice");
        if (which != 1) Cuda(cudaMemcpyAsync(g[d].h1, g[d].d1, bytes, cudaMemcpyDeviceToHost, g[d].s1), "D2H");
        if (which != 0) Cuda(cudaMemcpyAsync(g[d].d2, g[d].h2, bytes, cudaMemcpyHostToDevice, g[d].s2), "H2D");
      }
      for (int d = 0; d < gpus; ++d) {
        Cuda(cudaStreamSynchronize(g[d].s1), "sync");
        Cuda(cudaStreamSynchronize(g[d].s2), "sync");
      }
      sh->t[which][me][i] = Now() - t0;
    }
  for (int d = 0; d < gpus; ++d) {
    Cuda(cudaSetDevice(d), "cudaSetDevice");
    Cuda(cudaFreeHost(g[d].h1), "cudaFreeHost");
    Cuda(cudaFreeHost(g[d].h2), "cudaFreeHost");
    Cuda(cudaFree(g[d].d1), "cudaFree");
    Cuda(cudaFree(g[d].d2), "cudaFree");
  }
}

int Copy(size_t mib, int gpus, int procs) {
  const size_t bytes = mib << 20;
  if (procs < 1 || procs > 16) Die("--procs " + std::to_string(procs) + ": 1 to 16");
  auto* sh = static_cast<CopyShared*>(
      mmap(nullptr, sizeof(CopyShared), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0));
  if (sh == MAP_FAILED) Die("mmap");
  pthread_barrierattr_t attr;
  pthread_barrierattr_init(&attr);
  pthread_barrierattr_setpshared(&attr, PTHREAD_PROCESS_SHARED);
  pthread_barrier_init(&sh->barrier, &attr, procs);
  if (procs == 1) {
    int visible = 0;
    Cuda(cudaGetDeviceCount(&visible), "cudaGetDeviceCount");
    if (gpus < 1 || gpus > visible) Die("--gpus " + std::to_string(gpus) + ": " + std::to_string(visible) + " visible");
    CopyProcess(bytes, gpus, 0, sh);
  } else {  // fork before this process touches CUDA
    std::vector<pid_t> kids;
    for (int p = 0; p < procs; ++p) {
      pid_t pid = fork();
      if (pid < 0) Die("fork");
      if (pid == 0) {
        CopyProcess(bytes, gpus, p, sh);
        std::fflush(stdout);
        _exit(0);
      }
      kids.push_back(pid);
    }
    // A process that fails leaves the others waiting at the barrier: stop them, then say so.
    bool failed = false;
    for (size_t left = kids.size(); left > 0; --left) {
      int st = 0;
      pid_t pid = waitpid(-1, &st, 0);
      if (pid < 0) Die("waitpid");
      if ((!WIFEXITED(st) || WEXITSTATUS(st) != 0) && !failed) {
        failed = true;
        for (pid_t k : kids)
          if (k != pid) kill(k, SIGKILL);
      }
    }
    if (failed) Die("a copy process failed");
  }
  pthread_barrier_destroy(&sh->barrier);
  double bw[3];
  for (int which = 0; which < 3; ++which) {
    std::vector<double> t;
    for (int i = kCopyWarm; i < kCopyIters; ++i) {
      double slowest = 0;
      for (int p = 0; p < procs; ++p) slowest = std::max(slowest, sh->t[which][p][i]);
      t.push_back(slowest);
    }
    bw[which] = static_cast<double>(procs) * bytes / Median(t) / 1e9;
  }
  std::printf(
      "{\"bench\":\"pinned_copy\",\"gpus\":%d,\"procs\":%d,\"bytes\":%zu,\"d2h_GBps\":%.2f,\"h2d_GBps\":%.2f,"
      "\"bidir_each_GBps\":%.2f}\n",
      gpus, procs, bytes, bw[0], bw[1], bw[2]);
  munmap(sh, sizeof(CopyShared));
  return 0;
}

int Direct(const std::vector<size_t>& sizes, int iters, int rounds, bool nccl_first) {
  auto lib = tessera::comm::CclLibrary::LoadFromEnv();
  if (!lib.ok()) Die(lib.status().message());
  const tessera::comm::NcclCalls* nccl_calls = (*lib)->nccl();
  if (nccl_calls == nullptr) Die((*lib)->name() + " is not NCCL-shaped: --direct drives NCCL's own calls");
  const tessera::comm::NcclCalls& L = *nccl_calls;
  const int f32 = (*lib)->DataType(tessera::DType::kFloat32);
  tessera::comm::NcclCalls::UniqueId id{};
  void* nccl = nullptr;
  if (nccl_first) {  // the direct communicator made before Tessera's (a world of one rank: no id exchange)
    const char* w = std::getenv("TESSERA_WORLD_SIZE");
    const char* dev = std::getenv("TESSERA_DEVICE");
    if (w == nullptr || std::atoi(w) != 1 || dev == nullptr || std::strncmp(dev, "cuda:", 5) != 0)
      Die("--nccl-first needs a world of one CUDA rank");
    Cuda(cudaSetDevice(std::atoi(dev + 5)), "cudaSetDevice");
    if (L.GetUniqueId(&id) != 0 || L.CommInitRank(&nccl, 1, id, 0) != 0) Die("direct NCCL communicator");
  }
  tsrComm_t comm;
  if (tsrCommInitFromEnv(&comm) != tsrSuccess) Die(std::string("init: ") + tsrGetLastError(nullptr));
  int rank = 0, size = 1;
  tsrCommRank(comm, &rank);
  tsrCommSize(comm, &size);
  // A direct NCCL communicator of the same ranks, its id sent through Tessera.
  auto direct_comm = [&](const char* what) {
    void* c = nullptr;
    if (rank == 0 && L.GetUniqueId(&id) != 0) Die("ncclGetUniqueId");
    if (tsrBroadcast(&id, &id, sizeof(id), tsrUint8, 0, comm, nullptr) != tsrSuccess) Die(tsrGetLastError(comm));
    if (L.CommInitRank(&c, size, id, rank) != 0) Die(what);
    return c;
  };
  if (nccl == nullptr) nccl = direct_comm("direct NCCL communicator");
  // Tessera's own CCL communicator, to call NCCL on it directly: Tessera's call path against NCCL's
  // call on the same communicator.
  void* mine = nullptr;
  tessera::comm::DeviceRank* dev = nullptr;
  if (auto* cc = tessera::comm::Unwrap(comm); cc && cc->device()) {
    dev = cc->device();
    mine = dev->CclHandle();
  }
  if (mine == nullptr) Die("direct: this rank's communicator has no CCL communicator (not a world of one CUDA island)");
  // A second direct communicator of the same ranks: NCCL against NCCL (an A/A comparison) gives the
  // resolution of this measurement — what two communicators differ by with no Tessera in the way.
  void* nccl2 = direct_comm("second direct NCCL communicator");
  cudaStream_t s;
  Cuda(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "stream");
  cudaEvent_t e0, e1;
  Cuda(cudaEventCreate(&e0), "event");
  Cuda(cudaEventCreate(&e1), "event");
  for (size_t bytes : sizes) {
    size_t count = bytes / 4;
    void *a, *b;
    Cuda(cudaMalloc(&a, bytes), "cudaMalloc");
    Cuda(cudaMalloc(&b, bytes), "cudaMalloc");
    Cuda(cudaMemset(a, 0, bytes), "memset");
    // The variants, timed in rotating order: 0 tsrAllReduce (the C API, as an application calls it), 1 NCCL
    // called directly, 2 a second direct NCCL communicator (NCCL against NCCL: the resolution), 3 NCCL on
    // Tessera's own communicator, 4 the device rank's full path (DeviceRank::AllReduce, without the
    // communicator's lean path for known-good calls: an A/B of that path in the same run).
    constexpr int kVariants = 5;
    struct Time {
      double gpu_us, enqueue_us;  // per call: CUDA-event time on the stream; host time spent in the calls
    };
    auto round = [&](int which) {
      Cuda(cudaEventRecord(e0, s), "record");
      auto h0 = std::chrono::steady_clock::now();
      for (int i = 0; i < iters; ++i) {
        if (which == 0) {
          if (tsrAllReduce(a, b, count, tsrFloat32, tsrSum, comm, s) != tsrSuccess) Die(tsrGetLastError(comm));
        } else if (which == 4) {
          if (auto st = dev->AllReduce(a, b, count, tsrFloat32, tsrSum, s); !st.ok()) Die(st.message());
        } else if (L.AllReduce(a, b, count, f32, 0, which == 1 ? nccl : which == 2 ? nccl2 : mine, s) != 0) {
          Die("ncclAllReduce");
        }
      }
      double host_us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - h0).count() / iters;
      Cuda(cudaEventRecord(e1, s), "record");
      Cuda(cudaEventSynchronize(e1), "sync");
      float ms = 0;
      Cuda(cudaEventElapsedTime(&ms, e0, e1), "elapsed");
      double mine_t[2] = {ms * 1e3 / iters, host_us};
      std::vector<double> all(2 * size);  // the slowest rank's times
      if (tsrAllGather(mine_t, all.data(), 2, tsrFloat64, comm, nullptr) != tsrSuccess) Die(tsrGetLastError(comm));
      Time t{0, 0};
      for (int r = 0; r < size; ++r) t = {std::max(t.gpu_us, all[2 * r]), std::max(t.enqueue_us, all[2 * r + 1])};
      return t;
    };
    for (int w = 0; w < kVariants; ++w) round(w);
    std::vector<double> t[kVariants], q[kVariants];
    for (int r = 0; r < rounds; ++r)  // the order rotates, so no variant always runs first
      for (int w = 0; w < kVariants; ++w) {
        int which = (r + w) % kVariants;
        Time x = round(which);
        t[which].push_back(x.gpu_us);
        q[which].push_back(x.enqueue_us);
      }
    double m[kVariants], mq[kVariants];
    for (int w = 0; w < kVariants; ++w) m[w] = Median(t[w]), mq[w] = Median(q[w]);
    auto pct = [&](double x, double ref) { return 100.0 * (x - ref) / ref; };
    if (rank == 0)
      std::printf(
          "{\"bench\":\"single_island\",\"ranks\":%d,\"bytes\":%zu,\"tessera_us\":%.2f,\"nccl_us\":%.2f,"
          "\"overhead_pct\":%.2f,\"nccl2_us\":%.2f,\"nccl_vs_nccl_pct\":%.2f,\"nccl_on_tessera_comm_us\":%.2f,"
          "\"nccl_on_tessera_comm_pct\":%.2f,\"tessera_full_path_us\":%.2f,\"full_path_pct\":%.2f,"
          "\"enqueue_us\":{\"tessera\":%.3f,\"nccl\":%.3f,\"nccl2\":%.3f,\"nccl_on_tessera_comm\":%.3f,"
          "\"tessera_full_path\":%.3f},\"ccl\":\"%s %d\"}\n",
          size, bytes, m[0], m[1], pct(m[0], m[1]), m[2], pct(m[2], m[1]), m[3], pct(m[3], m[1]), m[4], pct(m[4], m[1]),
          mq[0], mq[1], mq[2], mq[3], mq[4], (*lib)->name().c_str(), (*lib)->version());
    Cuda(cudaFree(a), "free");
    Cuda(cudaFree(b), "free");
  }
  (void)L.CommDestroy(nccl);
  (void)L.CommDestroy(nccl2);
  tsrCommDestroy(comm);
  return 0;
}

// See the usage above. Prints one JSON line per type: GB/s of element bytes folded (n * sizeof(dtype)).
int Folds(size_t mib, int iters) {
  using tessera::DType;
  using tessera::RedOp;
  Cuda(cudaSetDevice(0), "cudaSetDevice");
  cudaStream_t s;
  Cuda(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate");
  cudaEvent_t e0, e1, e2;
  for (cudaEvent_t* e : {&e0, &e1, &e2}) Cuda(cudaEventCreate(e), "cudaEventCreate");
  Cuda(tessera::comm::kernels::Preload(), "loading the fold kernels");
  for (DType t : {DType::kFloat32, DType::kBfloat16, DType::kFloat16}) {
    const size_t esz = tessera::DTypeSize(t), n = (mib << 20) / esz;
    void *src_h = nullptr, *src_d = nullptr, *acc_d = nullptr;
    Cuda(cudaHostAlloc(&src_h, n * esz, cudaHostAllocDefault), "cudaHostAlloc");
    Cuda(cudaMalloc(&src_d, n * esz), "cudaMalloc");
    Cuda(cudaMalloc(&acc_d, n * sizeof(float)), "cudaMalloc");
    std::vector<float> acc_h(n);
    for (size_t i = 0; i < n; ++i) {  // values in [-1, 1): no denormals, no overflow over the calls
      const float v = static_cast<float>((i * 2654435761u) % 2000) / 1000.0f - 1.0f;
      tessera::StoreElement(src_h, i, t, v);
      acc_h[i] = v;
    }
    Cuda(cudaMemcpy(acc_d, acc_h.data(), n * sizeof(float), cudaMemcpyHostToDevice), "cudaMemcpy");
    std::vector<double> host, both, kernel;
    for (int it = 0; it < iters + 1; ++it) {  // the first of each is a warm-up
      double t0 = Now();
      tessera::comm::Fold(acc_h.data(), src_h, n, t, t, RedOp::kSum, false);
      double th = Now() - t0;
      Cuda(cudaEventRecord(e0, s), "cudaEventRecord");
      Cuda(cudaMemcpyAsync(src_d, src_h, n * esz, cudaMemcpyHostToDevice, s), "cudaMemcpyAsync");
      Cuda(cudaEventRecord(e1, s), "cudaEventRecord");
      Cuda(tessera::comm::kernels::Fold(acc_d, src_d, n, t, t, RedOp::kSum, false, s), "the fold kernel");
      Cuda(cudaEventRecord(e2, s), "cudaEventRecord");
      Cuda(cudaEventSynchronize(e2), "cudaEventSynchronize");
      float ms_all = 0, ms_kernel = 0;
      Cuda(cudaEventElapsedTime(&ms_all, e0, e2), "cudaEventElapsedTime");
      Cuda(cudaEventElapsedTime(&ms_kernel, e1, e2), "cudaEventElapsedTime");
      if (it == 0) continue;
      host.push_back(th);
      both.push_back(ms_all / 1e3);
      kernel.push_back(ms_kernel / 1e3);
    }
    // The same sums on both sides: the accumulators must agree bit for bit (same element rules).
    std::vector<float> back(n);
    Cuda(cudaMemcpy(back.data(), acc_d, n * sizeof(float), cudaMemcpyDeviceToHost), "cudaMemcpy");
    const bool same = std::memcmp(back.data(), acc_h.data(), n * sizeof(float)) == 0;
    const double bytes = static_cast<double>(n * esz);
    std::printf(
        "{\"bench\":\"fold_choice\",\"dtype\":\"%s\",\"bytes\":%.0f,\"host_path\":\"%s\",\"host_GBps\":%.2f,"
        "\"gpu_copy_and_fold_GBps\":%.2f,\"gpu_fold_only_GBps\":%.2f,\"same_bits\":%s}\n",
        tessera::DTypeName(t), bytes, tessera::comm::FoldPathName(tessera::comm::ActiveFoldPath()),
        bytes / Median(host) / 1e9, bytes / Median(both) / 1e9, bytes / Median(kernel) / 1e9, same ? "true" : "false");
    Cuda(cudaFreeHost(src_h), "cudaFreeHost");
    Cuda(cudaFree(src_d), "cudaFree");
    Cuda(cudaFree(acc_d), "cudaFree");
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  setvbuf(stdout, nullptr, _IOLBF, 0);
  if (argc < 2) Die("usage: gpu_bench copy|direct|folds [options] (collectives: tessera bench)");
  std::string mode = argv[1];
  std::vector<size_t> sizes = ParseSizes("1M,16M,64M,256M");
  int iters = 10;
  size_t mib = 256;
  int gpus = 1, rounds = 7, procs = 1;
  bool nccl_first = false, mib_given = false;
  for (int i = 2; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--nccl-first")
      nccl_first = true;
    else if (i + 1 < argc && a == "--sizes")
      sizes = ParseSizes(argv[++i]);
    else if (i + 1 < argc && a == "--iters")
      iters = std::atoi(argv[++i]);
    else if (i + 1 < argc && a == "--mib")
      mib = std::stoull(argv[++i]), mib_given = true;
    else if (i + 1 < argc && a == "--gpus")
      gpus = std::atoi(argv[++i]);
    else if (i + 1 < argc && a == "--procs")
      procs = std::atoi(argv[++i]);
    else if (i + 1 < argc && a == "--rounds")
      rounds = std::atoi(argv[++i]);
    else
      Die("unknown argument " + a);
  }
  if (iters < 1 || rounds < 1 || mib < 1)
    Die("--iters " + std::to_string(iters) + ", --rounds " + std::to_string(rounds) + ", --mib " + std::to_string(mib) +
        ": each must be at least 1");
  if (mode == "copy") return Copy(mib, gpus, procs);
  if (mode == "folds") return Folds(mib_given ? mib : 64, iters);
  if (mode == "allreduce")
    Die("gpu_bench allreduce is now `tessera bench allreduce` (device memory on CUDA ranks; --host-memory, --batch)");
  if (mode == "direct") return Direct(sizes, iters, rounds, nccl_first);
  Die("unknown mode " + mode);
}
