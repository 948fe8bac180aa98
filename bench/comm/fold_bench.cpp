// bench/comm/fold_bench: the host engine's fold kernels (comm/reduce) per dtype × op × path, in bytes of
// the element type per second (Google Benchmark's bytes_per_second: n · sizeof(dtype) per call).
//   Fold      acc[i] = op(acc[i], src[i])            (a received contribution; f32 acc for f16/bf16)
//   Fold2     acc[i] = op(a[i], b[i])                (the first two contributions, both 16-bit)
//   Finalize  out[i] = round(acc[i] (/ 2 for avg))   (f32 acc to the element type)
//   Fold2Finalize  out[i] = round(op(a[i], b[i]))    (the engine's 1+1 job: both, accumulator in L1; for
//                                                     float32 a Fold2 into the output, as the engine does)
// Paths: portable, avx2, avx512 (those this CPU runs; float32 has one path, the portable loops). Sizes:
// 64Ki elements (the engine folds 256 KiB channel steps, in cache) and 8Mi elements (from memory).
// Compare paths side by side in one run, interleaved and repeated:
//   build/bench/comm/fold_bench --benchmark_repetitions=5 --benchmark_enable_random_interleaving=true
//       --benchmark_report_aggregates_only=true --benchmark_min_time=0.1 --benchmark_filter='/(sum|max)/'
// (one line; all 168 benchmarks take long on a busy machine: the 8Mi-element buffers are filled per run).
// bytes_per_second is from CPU time (Google Benchmark's default), which on a shared machine is the
// kernel's own speed; wall time also counts the time the process waited for a core.
#include <benchmark/benchmark.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "comm/reduce/reduce.hpp"
#include "common/dtype.hpp"

namespace {

using tessera::DType;
using tessera::RedOp;
using namespace tessera::comm;

enum class Kind { kFold, kFold2, kFinalize, kFold2Finalize };

struct Buffers {
  std::vector<float> acc, acc32;
  std::vector<uint16_t> a, b, out16;
  std::vector<float> a32, out32;
};

// Values in (-2, 2); for prod ±1, so that the accumulator neither overflows nor sinks into denormals
// (whose arithmetic is slow on x86, on every path alike) over millions of folds.
Buffers Make(DType t, RedOp op, size_t n) {
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> u(-2.0f, 2.0f);
  auto d = [&](std::mt19937& r) { return op == RedOp::kProd ? (r() & 1 ? 1.0f : -1.0f) : u(r); };
  Buffers B;
  B.acc.resize(n);
  B.a.resize(n);
  B.b.resize(n);
  B.out16.resize(n);
  B.a32.resize(n);
  B.out32.resize(n);
  for (size_t i = 0; i < n; ++i) {
    B.acc[i] = d(rng);
    B.a32[i] = d(rng);
    tessera::StoreElement(B.a.data(), i, t == DType::kFloat32 ? DType::kFloat16 : t, d(rng));
    tessera::StoreElement(B.b.data(), i, t == DType::kFloat32 ? DType::kFloat16 : t, d(rng));
  }
  return B;
}

void Run(benchmark::State& state, Kind kind, DType t, RedOp op, FoldPath path, size_t n) {
  SetFoldPath(path);
  Buffers B = Make(t, op, n);
  bool f32 = t == DType::kFloat32;
  for (auto _ : state) {
    switch (kind) {
      case Kind::kFold:
        Fold(B.acc.data(), f32 ? static_cast<const void*>(B.a32.data()) : B.a.data(), n, t, t, op, false);
        break;
      case Kind::kFold2:
        if (f32)
          Fold2(B.acc.data(), B.a32.data(), t, B.acc.data(), t, n, t, op);
        else
          Fold2(B.acc.data(), B.a.data(), t, B.b.data(), t, n, t, op);
        break;
      case Kind::kFold2Finalize:  // f32: Fold2 into the output, as the engine does (no finalize for sum)
        if (f32)
          Fold2(B.out32.data(), B.a32.data(), t, B.acc.data(), t, n, t, op);
        else
          Fold2Finalize(B.out16.data(), B.a.data(), t, B.b.data(), t, n, t, op, 2);
        break;
      case Kind::kFinalize:
        Finalize(f32 ? static_cast<void*>(B.out32.data()) : B.out16.data(), B.acc.data(), n, t, op, 2);
        break;
    }
    benchmark::DoNotOptimize(B.acc.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * static_cast<int64_t>(n * tessera::DTypeSize(t)));
  state.SetLabel(FoldPathName(SetFoldPath(path)));
}

}  // namespace

int main(int argc, char** argv) {
  struct K {
    Kind kind;
    const char* name;
  };
  const K kinds[] = {{Kind::kFold, "Fold"},
                     {Kind::kFold2, "Fold2"},
                     {Kind::kFinalize, "Finalize"},
                     {Kind::kFold2Finalize, "Fold2Finalize"}};
  const DType types[] = {DType::kFloat32, DType::kFloat16, DType::kBfloat16};
  const char* tnames[] = {"f32", "f16", "bf16"};
  for (const K& k : kinds) {
    for (int ti = 0; ti < 3; ++ti) {
      for (int o = 0; o < static_cast<int>(RedOp::kCount); ++o) {
        RedOp op = static_cast<RedOp>(o);
        if ((k.kind == Kind::kFinalize || k.kind == Kind::kFold2Finalize) && op != RedOp::kSum && op != RedOp::kAvg)
          continue;  // the rest = sum
        for (int p = 0; p < static_cast<int>(FoldPath::kCount); ++p) {
          FoldPath path = static_cast<FoldPath>(p);
          if (!FoldPathSupported(path)) continue;
          if (types[ti] == DType::kFloat32 && path != FoldPath::kPortable) continue;
          for (size_t n : {size_t{1} << 16, size_t{1} << 23}) {
            std::string name = std::string(k.name) + "/" + tnames[ti] + "/" + tessera::RedOpName(op) + "/" +
                               FoldPathName(path) + "/" + std::to_string(n);
            benchmark::RegisterBenchmark(name.c_str(), Run, k.kind, types[ti], op, path, n)
                ->Unit(benchmark::kMicrosecond);
          }
        }
      }
    }
  }
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
