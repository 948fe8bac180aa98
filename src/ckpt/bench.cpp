// ckpt/bench: measures the checkpoint library against plain tools in one run (see bench.hpp).
#include "ckpt/bench.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "ckpt/format.hpp"
#include "tessera/ckpt.hpp"
#ifdef TESSERA_HAVE_S3
#include "ckpt/s3.hpp"
#endif

namespace tessera::ckpt {
namespace {

using Clock = std::chrono::steady_clock;
double Since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

Status Shell(const std::string& cmd) {
  int rc = std::system(cmd.c_str());
  if (rc != 0) return SystemError(fmt::format("bench: `{}` exited with {}", cmd, rc));
  return Status::Ok();
}

#ifdef TESSERA_HAVE_S3
// Runs `cmd` and returns its standard output (the S3 comparison's only use).
Result<std::string> ShellOutput(const std::string& cmd) {
  FILE* p = ::popen(cmd.c_str(), "r");
  if (p == nullptr) return ErrnoError("bench: popen " + cmd, errno);
  std::string out;
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
  int rc = ::pclose(p);
  if (rc != 0) return SystemError(fmt::format("bench: `{}` exited with {} (output '{}')", cmd, rc, out));
  return out;
}
#endif

void DropCache(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) return;
  ::fdatasync(fd);
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  ::close(fd);
}

template <typename F>
void Parallel(int n, F&& f) {
  std::vector<std::thread> ts;
  for (int i = 0; i < n; ++i) ts.emplace_back([&, i] { f(i); });
  for (auto& t : ts) t.join();
}

// The first three fields of /proc/loadavg ("1.23 0.98 0.75"), or "?".
std::string LoadAverage() {
  std::ifstream f("/proc/loadavg");
  std::string a, b, c;
  if (!(f >> a >> b >> c)) return "?";
  return a + " " + b + " " + c;
}

std::string Machine() {
  utsname u{};
  uname(&u);
  std::string cpu;
  std::ifstream ci("/proc/cpuinfo");
  for (std::string line; std::getline(ci, line);)
    if (line.rfind("model name", 0) == 0) {
      cpu = line.substr(line.find(':') + 2);
      break;
    }
  return fmt::format("{} ({} cores online), Linux {}", cpu, std::thread::hardware_concurrency(), u.release);
}

}  // namespace

Status RunBench(const BenchOptions& opt) {
  if (opt.shards < 1 || opt.gib <= 0 || opt.reps < 1)
    return InvalidArgument("bench: --shards, --gib and --reps must be positive");
  const uint64_t kBs = uint64_t{16} << 20;
  uint64_t shard = static_cast<uint64_t>(opt.gib * 1024 * 1024 * 1024 / opt.shards) / kBs * kBs;
  if (shard == 0) return InvalidArgument("bench: --gib too small for --shards (each shard needs ≥ 16 MiB)");
  uint64_t total = shard * static_cast<uint64_t>(opt.shards);
  std::string root = JoinPath(opt.dir, fmt::format("tessera-bench-{}", ::getpid()));
  TSR_RETURN_IF_ERROR(MakeDirs(root));
  const int64_t cols = 1024;  // float32 rows of 4 KiB
  int64_t rows_per = static_cast<int64_t>(shard / (cols * 4));
  int64_t grows = rows_per * opt.shards;

  // Source tensors (one per rank), touched so they are resident; destinations likewise.
  std::vector<std::unique_ptr<float[]>> src(static_cast<size_t>(opt.shards)), dst(static_cast<size_t>(opt.shards));
  Parallel(opt.shards, [&](int r) {
    src[r].reset(new float[shard / 4]);
    dst[r].reset(new float[shard / 4]);
    for (uint64_t i = 0; i < shard / 4; ++i)
      src[r][i] = static_cast<float>((i * 2654435761u + static_cast<uint64_t>(r)) % 65521);
    std::memset(dst[r].get(), 1, shard);
  });
  std::vector<std::unique_ptr<CheckpointWriter>> ws;
  for (int r = 0; r < opt.shards; ++r) {
    TSR_ASSIGN_OR_RETURN(auto w, CheckpointWriter::Open(root, r, opt.shards));
    ws.push_back(std::move(w));
  }
  auto save = [&](int64_t step, double* snapshot_s) -> Status {
    std::vector<Status> st(static_cast<size_t>(opt.shards));
    std::vector<double> snap(static_cast<size_t>(opt.shards));
    Parallel(opt.shards, [&](int r) {
      st[r] = ws[r]->Save(
          step, {{"w", DType::kFloat32, {rows_per, cols}, src[r].get(), Sharding::kRowSharded, r * rows_per, grows}});
      snap[r] = ws[r]->LastSnapshotSeconds();
      if (st[r].ok()) st[r] = ws[r]->Wait();
    });
    for (auto& s : st) TSR_RETURN_IF_ERROR(s);
    if (snapshot_s) *snapshot_s = *std::max_element(snap.begin(), snap.end());
    return Status::Ok();
  };
  // Warm-up: allocates and faults in the writers' snapshot buffers (steady state is what training sees).
  TSR_RETURN_IF_ERROR(save(0, nullptr));
  TSR_RETURN_IF_ERROR(Remove(root, 0));

  // The raw-write reference writes the same (non-zero) bytes: from a tmpfs copy of a shard. Zeros would
  // flatter dd on virtual disks that detect zero writes (and its read-back would then do no I/O at all).
  std::string shm = fmt::format("/dev/shm/tessera-bench-{}", ::getpid());
  {
    int fd = ::open(shm.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd < 0) return ErrnoError("bench: create " + shm, errno);
    Status s = PwriteAll(fd, src[0].get(), shard, 0, shm);
    ::close(fd);
    TSR_RETURN_IF_ERROR(s);
  }
  struct ShmCleanup {
    std::string p;
    ~ShmCleanup() { ::unlink(p.c_str()); }
  } shm_cleanup{shm};
  std::vector<double> dd_w, save_w, memcpy_t, snap_t, dd_r, rest_r, curl_t, s3_t;
  std::string s3_settings, load_before = LoadAverage();
  std::string files_dd;
  for (int r = 0; r < opt.shards; ++r) files_dd += fmt::format(" {}/dd-{}", root, r);
  for (int rep = 0; rep < opt.reps; ++rep) {
    int64_t step = rep + 1;
    // 1. raw write: M parallel dd with the same file size, fsync at the end (as our save does).
    auto t0 = Clock::now();
    TSR_RETURN_IF_ERROR(
        Shell(fmt::format("bash -c 'for i in $(seq 0 {}); do dd if={} of={}/dd-$i bs=16M count={} "
                          "conv=fsync status=none & done; wait'",
                          opt.shards - 1, shm, root, shard / kBs)));
    dd_w.push_back(Since(t0));
    // 2. save (snapshot + persist + commit), M writer ranks in parallel.
    double snap = 0;
    t0 = Clock::now();
    TSR_RETURN_IF_ERROR(save(step, &snap));
    save_w.push_back(Since(t0));
    snap_t.push_back(snap);
    // 3. memcpy of the same bytes into resident buffers, M threads in parallel (as the ranks snapshot).
    t0 = Clock::now();
    Parallel(opt.shards, [&](int r) { std::memcpy(dst[r].get(), src[r].get(), shard); });
    memcpy_t.push_back(Since(t0));
    // 4. restore vs raw read, page cache of the files dropped first.
    for (int r = 0; r < opt.shards; ++r) {
      DropCache(fmt::format("{}/dd-{}", root, r));
      DropCache(JoinPath(JoinPath(root, StepDirName(step)), ShardFileName(r, opt.shards)));
    }
    t0 = Clock::now();
    TSR_RETURN_IF_ERROR(
        Shell(fmt::format("bash -c 'for f in{}; do dd if=$f of=/dev/null bs=16M status=none & done; wait'", files_dd)));
    dd_r.push_back(Since(t0));
    std::vector<Status> st(static_cast<size_t>(opt.shards));
    t0 = Clock::now();
    Parallel(opt.shards, [&](int r) {
      st[r] = Restore(root, step, {{"w", dst[r].get(), shard, r * rows_per, rows_per}});
    });
    rest_r.push_back(Since(t0));
    for (auto& s : st) TSR_RETURN_IF_ERROR(s);
    if (std::memcmp(dst[0].get(), src[0].get(), shard) != 0) return InternalError("bench: restored data differs");
#ifdef TESSERA_HAVE_S3
    // 5. S3: one shard file, our client vs curl, to the same server. The order alternates between reps
    //    (the first upload after the restore pays for whatever the disk is still flushing). curl's time
    //    is its own time_total (connect to last byte of the answer), not the process start-up around it;
    //    ours is PutFile (open, mmap, connect, send, answer).
    if (!opt.s3_uri.empty()) {
      std::string rest = opt.s3_uri.substr(5);
      std::string bucket = rest.substr(0, rest.find('/'));
      TSR_ASSIGN_OR_RETURN(auto cfg, s3::Config::Load(bucket));
      s3::Client c(cfg);
      s3_settings = cfg.Describe();
      TSR_RETURN_IF_ERROR(c.CreateBucket());
      std::string file = JoinPath(JoinPath(root, StepDirName(step)), ShardFileName(0, opt.shards));
      auto ours = [&]() -> Status {
        auto t = Clock::now();
        TSR_RETURN_IF_ERROR(c.PutFile(fmt::format("bench/ours-{}", rep), file));
        s3_t.push_back(Since(t));
        return Status::Ok();
      };
      auto curl = [&]() -> Status {
        TSR_ASSIGN_OR_RETURN(
            std::string out,
            ShellOutput(fmt::format(
                "curl -s -o /dev/null -w '%{{http_code}} %{{time_total}}' -H 'x-amz-content-sha256: UNSIGNED-PAYLOAD' "
                "--aws-sigv4 'aws:amz:{}:s3' --user '{}:{}' --upload-file {} '{}'",
                cfg.region, cfg.access_key, cfg.secret_key, file, c.Url(fmt::format("bench/curl-{}", rep)))));
        double secs = 0;
        if (out.rfind("200 ", 0) != 0 || (secs = std::strtod(out.c_str() + 4, nullptr)) <= 0)
          return SystemError(fmt::format("bench: curl --upload-file to {} answered '{}'",
                                         c.Url(fmt::format("bench/curl-{}", rep)), out));
        curl_t.push_back(secs);
        return Status::Ok();
      };
      TSR_RETURN_IF_ERROR(rep % 2 == 0 ? ours() : curl());
      TSR_RETURN_IF_ERROR(rep % 2 == 0 ? curl() : ours());
      (void)c.Delete(fmt::format("bench/ours-{}", rep));
      (void)c.Delete(fmt::format("bench/curl-{}", rep));
    }
#endif
    TSR_RETURN_IF_ERROR(Remove(root, step));
  }
  ws.clear();
  (void)RemoveTree(root);

  double gibs = static_cast<double>(total) / (1024.0 * 1024 * 1024);
  double mibs_shard = static_cast<double>(shard) / (1024.0 * 1024);
  struct Row {
    std::string metric, ours, ref, ratio, target;
    bool met;
  };
  std::vector<Row> rows;
  auto bw = [&](double s) { return fmt::format("{:.0f} MiB/s", gibs * 1024 / s); };
  double r_save = Median(dd_w) / Median(save_w), r_rest = Median(dd_r) / Median(rest_r);
  double r_snap = Median(snap_t) / Median(memcpy_t);
  rows.push_back({"save (snapshot+write+fsync+commit)", bw(Median(save_w)), bw(Median(dd_w)) + " dd conv=fsync",
                  fmt::format("{:.2f}", r_save), ">= 0.90", r_save >= 0.9});
  rows.push_back({"blocking snapshot", fmt::format("{:.1f} ms", Median(snap_t) * 1e3),
                  fmt::format("{:.1f} ms memcpy", Median(memcpy_t) * 1e3), fmt::format("{:.2f}x", r_snap), "<= 1.20x",
                  r_snap <= 1.2});
  rows.push_back({"restore (cold page cache)", bw(Median(rest_r)), bw(Median(dd_r)) + " dd read",
                  fmt::format("{:.2f}", r_rest), ">= 0.90", r_rest >= 0.9});
  double r_s3 = 0;
  std::vector<double> r_s3_reps;  // curl / ours within each rep
  for (size_t i = 0; i < s3_t.size() && i < curl_t.size(); ++i) r_s3_reps.push_back(curl_t[i] / s3_t[i]);
  if (!s3_t.empty()) {
    r_s3 = Median(curl_t) / Median(s3_t);
    rows.push_back({fmt::format("S3 upload ({:.0f} MiB object)", mibs_shard),
                    fmt::format("{:.0f} MiB/s", mibs_shard / Median(s3_t)),
                    fmt::format("{:.0f} MiB/s curl", mibs_shard / Median(curl_t)), fmt::format("{:.2f}", r_s3),
                    ">= 1.00", r_s3 >= 1.0});
  }
  std::printf("tessera ckpt bench: %.2f GiB in %d shards of %.0f MiB, %d reps (median), dir %s\nmachine: %s\n", gibs,
              opt.shards, mibs_shard, opt.reps, opt.dir.c_str(), Machine().c_str());
  std::printf("load average (1, 5, 15 min): %s before, %s after\n", load_before.c_str(), LoadAverage().c_str());
  if (!s3_settings.empty()) {
    std::string reps;
    for (double r : r_s3_reps) reps += fmt::format("{}{:.2f}", reps.empty() ? "" : " ", r);
    std::printf("S3 client: %s\nS3 ratio per rep (curl time / ours): %s\n", s3_settings.c_str(), reps.c_str());
  }
  std::printf("\n");
  std::printf("%-36s %-16s %-28s %-8s %-8s %s\n", "METRIC", "TESSERA", "REFERENCE", "RATIO", "TARGET", "MET");
  for (const auto& r : rows)
    std::printf("%-36s %-16s %-28s %-8s %-8s %s\n", r.metric.c_str(), r.ours.c_str(), r.ref.c_str(), r.ratio.c_str(),
                r.target.c_str(), r.met ? "yes" : "NO");
  if (!opt.json_out.empty()) {
    nlohmann::json j{{"machine", Machine()},
                     {"gib", gibs},
                     {"shards", opt.shards},
                     {"reps", opt.reps},
                     {"dir", opt.dir},
                     {"save_s", save_w},
                     {"dd_write_s", dd_w},
                     {"snapshot_s", snap_t},
                     {"memcpy_s", memcpy_t},
                     {"restore_s", rest_r},
                     {"dd_read_s", dd_r},
                     {"s3_put_s", s3_t},
                     {"curl_put_s", curl_t},
                     {"s3_ratio_per_rep", r_s3_reps},
                     {"s3_client", s3_settings},
                     {"load_average_before", load_before},
                     {"load_average_after", LoadAverage()},
                     {"ratios", {{"save", r_save}, {"snapshot", r_snap}, {"restore", r_rest}, {"s3", r_s3}}}};
    std::ofstream(opt.json_out) << j.dump(1) << "\n";
  }
  return Status::Ok();
}

}  // namespace tessera::ckpt
