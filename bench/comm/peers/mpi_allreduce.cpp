// bench/comm/peers/mpi_allreduce.cpp — the OpenMPI peer of `tessera bench`: MPI_Allreduce (and
// MPI_Reduce_scatter_block, MPI_Allgather, MPI_Bcast) on f32 with the same sizes, timing, table and JSON
// rows. Launch: `mpirun --allow-run-as-root --oversubscribe -np N mpi_allreduce [allreduce] --sizes ...`.
// On one host OpenMPI 4.1 normally picks the ob1 PML with the vader (shared memory) BTL; the harness
// prints the PML/BTL selection it was given (OMPI_MCA_pml / OMPI_MCA_btl) and the script records it.
// Timing: every iteration is bracketed by MPI_Barrier, per-iteration time is the max over ranks, the row
// reports the median over iterations. Out-of-place buffers, as nccl-tests.
#include <mpi.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "harness.hpp"

namespace {

using Clock = std::chrono::steady_clock;

int Main(int argc, char** argv, int rank, int world) {
  CLI::App app{"OpenMPI collective peer harness (f32 sum); run under mpirun"};
  std::string collective = "allreduce", sizes_text = "16M,64M,256M", json_path;
  int iters = 20, warmup = 3;
  app.add_option("collective", collective, "allreduce | reduce_scatter | allgather | broadcast")
      ->check(CLI::IsMember({"allreduce", "reduce_scatter", "allgather", "broadcast"}));
  app.add_option("--sizes", sizes_text, "Sizes in bytes: list and/or ranges (16M,64M or 1K:256M:x4)");
  app.add_option("--iters", iters, "Timed iterations per size")->check(CLI::Range(1, 100000));
  app.add_option("--warmup", warmup, "Untimed iterations per size")->check(CLI::Range(0, 100000));
  app.add_option("--json", json_path, "Write the results to this JSON file (rank 0)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (rank == 0) app.exit(e);
    return e.get_exit_code() == 0 ? 0 : 2;
  }
  std::vector<uint64_t> sizes;
  try {
    sizes = tessera::bench::ParseSizes(sizes_text);
  } catch (const std::exception& e) {
    if (rank == 0) std::fprintf(stderr, "mpi_allreduce: %s\n", e.what());
    return 2;
  }

  char version[MPI_MAX_LIBRARY_VERSION_STRING] = {};
  int vlen = 0;
  MPI_Get_library_version(version, &vlen);
  std::string lib(version, static_cast<size_t>(vlen));
  if (auto nl = lib.find_first_of("\n,"); nl != std::string::npos) lib.resize(nl);
  const char* pml = std::getenv("OMPI_MCA_pml");
  const char* btl = std::getenv("OMPI_MCA_btl");
  std::string transport = std::string("pml=") + (pml ? pml : "default") + " btl=" + (btl ? btl : "default");
  if (rank == 0) {
    std::printf("# %s, ranks %d, %s f32 sum, %s\n", lib.c_str(), world, collective.c_str(), transport.c_str());
    std::printf("# timing: barrier before each iteration, max over ranks, median of %d iterations (%d warmup)\n", iters,
                warmup);
    tessera::bench::PrintHeader(("openmpi " + collective).c_str());
  }

  nlohmann::json rows = nlohmann::json::array();
  for (uint64_t bytes : sizes) {
    // count: elements per rank's block for reduce_scatter/allgather (nccl-tests: size is the whole buffer).
    const bool blocked = collective == "reduce_scatter" || collective == "allgather";
    uint64_t total = bytes / sizeof(float);
    uint64_t block = blocked ? total / static_cast<uint64_t>(world) : total;
    if (block == 0 || block > static_cast<uint64_t>(INT32_MAX)) {
      if (rank == 0)
        std::printf("# skipping size %llu: no whole float per rank, or over 2^31-1\n",
                    static_cast<unsigned long long>(bytes));
      continue;
    }
    if (blocked) total = block * static_cast<uint64_t>(world);
    const int n = static_cast<int>(block);
    std::vector<float> in, out;
    if (collective == "allreduce") {
      in.resize(total), out.resize(total);
      for (uint64_t i = 0; i < total; ++i) in[i] = tessera::bench::CheckValue(rank, i);
    } else if (collective == "reduce_scatter") {
      in.resize(total), out.resize(block);
      for (uint64_t i = 0; i < total; ++i) in[i] = tessera::bench::CheckValue(rank, i);
    } else if (collective == "allgather") {
      in.resize(block), out.resize(total);
      for (uint64_t i = 0; i < block; ++i) in[i] = tessera::bench::CheckValue(rank, i);
    } else {
      out.resize(total);
    }
    auto fill_bcast = [&] {
      for (uint64_t i = 0; i < total; ++i) out[i] = rank == 0 ? tessera::bench::CheckValue(0, i) : 0.0f;
    };
    if (collective == "broadcast") fill_bcast();
    auto run = [&] {
      if (collective == "allreduce")
        MPI_Allreduce(in.data(), out.data(), n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      else if (collective == "reduce_scatter")
        MPI_Reduce_scatter_block(in.data(), out.data(), n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      else if (collective == "allgather")
        MPI_Allgather(in.data(), n, MPI_FLOAT, out.data(), n, MPI_FLOAT, MPI_COMM_WORLD);
      else
        MPI_Bcast(out.data(), n, MPI_FLOAT, 0, MPI_COMM_WORLD);
    };
    for (int i = 0; i < warmup; ++i) run();
    std::vector<double> times(iters), tmax(iters);
    for (int i = 0; i < iters; ++i) {
      MPI_Barrier(MPI_COMM_WORLD);
      auto t0 = Clock::now();
      run();
      times[i] = std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
    }
    MPI_Allreduce(times.data(), tmax.data(), iters, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    // Check one more call.
    if (collective == "broadcast") fill_bcast();
    run();
    long long wrong = 0, wrong_all = 0;
    for (uint64_t i = 0; i < out.size(); ++i) {
      float want;
      if (collective == "allreduce")
        want = tessera::bench::CheckSum(world, i);
      else if (collective == "reduce_scatter")
        want = tessera::bench::CheckSum(world, rank * block + i);
      else if (collective == "allgather")
        want = tessera::bench::CheckValue(static_cast<int>(i / block), i % block);
      else
        want = tessera::bench::CheckValue(0, i);
      wrong += out[i] != want;
    }
    MPI_Allreduce(&wrong, &wrong_all, 1, MPI_LONG_LONG, MPI_SUM, MPI_COMM_WORLD);
    auto row = tessera::bench::MakeRow(collective, world, total * sizeof(float), total, tessera::bench::Median(tmax),
                                       wrong_all);
    if (rank == 0)
      tessera::bench::PrintRow(row, "float",
                               collective == "allreduce" || collective == "reduce_scatter" ? "sum" : "none");
    rows.push_back(tessera::bench::RowJson(row));
  }
  if (rank == 0 && !json_path.empty()) {
    nlohmann::json j;
    j["peer"] = "openmpi";
    j["collective"] = collective;
    j["dtype"] = "float32";
    j["op"] = "sum";
    j["world_size"] = world;
    j["library"] = lib;
    j["transport"] = transport;
    j["machine"] = tessera::bench::Machine();
    j["iters"] = iters;
    j["warmup"] = warmup;
    j["rows"] = rows;
    tessera::bench::WriteJson(json_path, j);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, world = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  int rc = 0;
  try {
    rc = Main(argc, argv, rank, world);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mpi_allreduce: rank %d: %s\n", rank, e.what());
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  MPI_Finalize();
  return rc;
}
