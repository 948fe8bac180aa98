// ckpt/writer: CheckpointWriter — snapshot into reusable host buffers (blocking), then a background
// thread writes the rank's safetensors file with parallel pwrite + fsync, publishes a part file, and on
// rank 0 merges every rank's part into manifest.json (written last, atomically).
#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <ctime>
#include <deque>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <thread>

#include "ckpt/crc32c.hpp"
#include "ckpt/device.hpp"
#include "ckpt/format.hpp"
#include "common/log.hpp"
#include "common/parallel.hpp"

namespace tessera::ckpt {

using json = nlohmann::json;

std::pair<int64_t, int64_t> EvenRows(int64_t global_rows, int rank, int world) {
  int64_t base = global_rows / world, extra = global_rows % world;
  int64_t begin = rank * base + std::min<int64_t>(rank, extra);
  return {begin, base + (rank < extra ? 1 : 0)};
}

namespace {

struct Buffer {
  std::unique_ptr<char[]> data;
  size_t cap = 0;
  bool busy = false;
};

struct StoredTensor {
  std::string name;
  DType dtype;
  std::vector<int64_t> local_shape, global_shape;
  Sharding sharding;
  int64_t row_offset;
  uint64_t begin, end;  // absolute offsets in the file
  const void* src;
};

struct Job {
  int64_t step;
  Buffer* buf;
  size_t size;
  size_t data_start;
  std::vector<StoredTensor> tensors;
};

// Header of a safetensors file: 8-byte little-endian length, then JSON padded with spaces to 8 bytes.
std::string SafetensorsHeader(std::vector<StoredTensor>& ts, int64_t step, int rank, int world, size_t* data_start) {
  json h = json::object();
  uint64_t off = 0;
  for (auto& t : ts) {
    uint64_t n = RowBytes(t.dtype, t.local_shape) * static_cast<uint64_t>(Rows(t.local_shape));
    if (t.local_shape.empty()) n = DTypeSize(t.dtype);
    h[t.name] = {{"dtype", SafetensorsDType(t.dtype)}, {"shape", t.local_shape}, {"data_offsets", {off, off + n}}};
    t.begin = off;
    t.end = off + n;
    off += n;
  }
  h["__metadata__"] = {{"format", "pt"},
                       {"tessera.step", std::to_string(step)},
                       {"tessera.rank", std::to_string(rank)},
                       {"tessera.world", std::to_string(world)}};
  std::string text = h.dump();
  while (text.size() % 8 != 0) text.push_back(' ');
  std::string out(8, '\0');
  uint64_t len = text.size();
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((len >> (8 * i)) & 0xff);
  out += text;
  *data_start = out.size();
  for (auto& t : ts) {
    t.begin += *data_start;
    t.end += *data_start;
  }
  return out;
}

class WriterImpl final : public CheckpointWriter {
 public:
  WriterImpl(std::string root, int rank, int world, WriterOptions opt)
      : root_(std::move(root)), rank_(rank), world_(world), opt_(opt) {
    bg_ = std::thread([this] { Loop(); });
  }
  ~WriterImpl() override {
    Status s = Wait();
    if (!s.ok()) TSR_LOG_ERROR("checkpoint writer (rank {}): {}", rank_, s.ToString());
    {
      std::lock_guard lk(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    bg_.join();
  }

  Status Save(int64_t step, const std::vector<TensorView>& tensors) override {
    auto t0 = std::chrono::steady_clock::now();
    if (step < 0) return InvalidArgument(fmt::format("checkpoint step {} is negative", step));
    {
      std::lock_guard lk(mu_);
      if (!error_.ok()) return error_;
    }
    std::string dir = JoinPath(root_, StepDirName(step));
    struct stat st {};
    if (::stat(JoinPath(dir, kManifestName).c_str(), &st) == 0)
      return InvalidArgument(fmt::format("checkpoint step {} is already committed in {}", step, dir));
    Job job;
    job.step = step;
    std::set<std::string> names;
    for (const auto& t : tensors) {
      std::string what = fmt::format("step {}: tensor '{}'", step, t.name);
      if (t.name.empty() || t.name == "__metadata__")
        return InvalidArgument(fmt::format("step {}: bad tensor name '{}'", step, t.name));
      if (!names.insert(t.name).second) return InvalidArgument(what + " appears twice");
      try {
        (void)json(t.name).dump();  // the name goes into the JSON header and manifest
      } catch (const json::exception&) {
        return InvalidArgument(fmt::format("step {}: tensor name {} (invalid bytes shown as U+FFFD) is not valid UTF-8",
                                           step, json(t.name).dump(-1, ' ', true, json::error_handler_t::replace)));
      }
      if (!IsValid(t.dtype)) return InvalidArgument(what + " has an invalid dtype");
      for (auto d : t.shape)
        if (d < 0) return InvalidArgument(what + " has a negative dimension");
      StoredTensor s{t.name, t.dtype, t.shape, t.shape, t.sharding, 0, 0, 0, t.data};
      if (t.sharding == Sharding::kRowSharded) {
        if (t.shape.empty()) return InvalidArgument(what + " is row-sharded but has no rows (0-d)");
        if (t.global_rows < 0 || t.row_offset < 0 || t.row_offset + t.shape[0] > t.global_rows)
          return InvalidArgument(fmt::format("{}: rows [{}, {}) are outside global_rows={}", what, t.row_offset,
                                             t.row_offset + t.shape[0], t.global_rows));
        s.row_offset = t.row_offset;
        s.global_shape[0] = t.global_rows;
      } else if (rank_ != 0) {
        continue;  // replicated: rank 0's copy is the stored one
      }
      job.tensors.push_back(std::move(s));
    }
    std::string header = SafetensorsHeader(job.tensors, step, rank_, world_, &job.data_start);
    job.size = job.tensors.empty() ? job.data_start : job.tensors.back().end;
    for (const auto& t : job.tensors)
      if (t.end > t.begin && t.src == nullptr)
        return InvalidArgument(fmt::format("step {}: tensor '{}' has no data", step, t.name));

    // Take a free buffer (waits while both are being persisted).
    Buffer* buf = nullptr;
    {
      std::unique_lock lk(mu_);
      cv_.wait(lk, [&] { return !bufs_[0].busy || !bufs_[1].busy || !error_.ok(); });
      if (!error_.ok()) return error_;
      buf = !bufs_[0].busy ? &bufs_[0] : &bufs_[1];
      buf->busy = true;
    }
    if (buf->cap < job.size) {
      buf->data.reset();
      buf->data.reset(new (std::nothrow) char[job.size]);
      if (!buf->data) {
        std::lock_guard lk(mu_);
        buf->cap = 0;
        buf->busy = false;
        return SystemError(fmt::format("step {}: cannot allocate a {}-byte snapshot buffer", step, job.size));
      }
      buf->cap = job.size;
    }
    std::memcpy(buf->data.get(), header.data(), header.size());
    for (const auto& t : job.tensors) {
      Status s = CopyToHost(buf->data.get() + t.begin, t.src, t.end - t.begin);
      if (!s.ok()) {
        std::lock_guard lk(mu_);
        buf->busy = false;
        return s.WithContext(fmt::format("step {}: snapshot of tensor '{}'", step, t.name));
      }
    }
    job.buf = buf;
    {
      std::lock_guard lk(mu_);
      queue_.push_back(std::move(job));
      ++pending_;
    }
    cv_.notify_all();
    last_snapshot_s_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return Status::Ok();
  }

  Status Wait() override {
    std::unique_lock lk(mu_);
    cv_.wait(lk, [&] { return pending_ == 0; });
    Status s = error_;
    error_ = Status::Ok();  // reported once; the writer is usable again (e.g. after space was freed)
    return s;
  }

  double LastSnapshotSeconds() const override { return last_snapshot_s_; }

 private:
  void Loop() {
    for (;;) {
      Job job;
      Status earlier;
      {
        std::unique_lock lk(mu_);
        cv_.wait(lk, [&] { return stop_ || !queue_.empty(); });
        if (queue_.empty()) return;
        job = std::move(queue_.front());
        queue_.pop_front();
        earlier = error_;
      }
      // After a failure, later queued steps are dropped (a step never commits past a failed one).
      Status s = earlier.ok() ? Persist(job) : earlier;
      if (s.ok() && opt_.progress) opt_.progress(job.step, job.size, job.size);
      {
        std::lock_guard lk(mu_);
        job.buf->busy = false;
        if (!s.ok() && error_.ok()) error_ = s;
        --pending_;
      }
      cv_.notify_all();
    }
  }

  // Writes the shard file: chunks of ≤ 8 MiB that never cross a tensor boundary are taken in order by
  // io_threads workers, each CRC'd just before its pwrite (cache-hot, in parallel, overlapped with I/O).
  // Fills crcs[i] for tensor i and *file_crc by combining the chunk CRCs in order.
  Status WriteShard(const Job& job, const std::string& dir, const std::string& name, std::vector<uint32_t>* crcs,
                    uint32_t* file_crc) {
    std::string path = JoinPath(dir, name);
    struct Chunk {
      uint64_t begin, end;
      int tensor;  // -1 = header
      uint32_t crc;
    };
    const uint64_t kChunk = uint64_t{8} << 20;
    std::vector<Chunk> chunks;
    chunks.push_back({0, job.data_start, -1, 0});
    for (size_t t = 0; t < job.tensors.size(); ++t)
      for (uint64_t b = job.tensors[t].begin; b < job.tensors[t].end; b += kChunk)
        chunks.push_back({b, std::min(job.tensors[t].end, b + kChunk), static_cast<int>(t), 0});
    // Atomic, not yet durable in its directory: one directory fsync covers every shard before the manifest.
    Status s =
        WriteFileAtomicWith(path, {.fsync = opt_.fsync, .fsync_dir = false}, [&](int fd, const std::string& tmp) {
          std::mutex mu;
          Status ws;
          uint64_t written = 0;  // under mu
          ParallelFor(chunks.size(), opt_.io_threads, [&](uint64_t i, int) {
            Chunk& c = chunks[i];
            const char* p = job.buf->data.get() + c.begin;
            c.crc = Crc32c(p, c.end - c.begin);
            Status w = PwriteAll(fd, p, c.end - c.begin, c.begin, tmp);
            std::lock_guard lk(mu);
            if (!w.ok()) {
              if (ws.ok()) ws = w;
              return false;
            }
            written += c.end - c.begin;
            // The last bytes are reported once the step is durable (Loop), not when they reach the cache.
            if (opt_.progress && written < job.size) opt_.progress(job.step, written, job.size);
            return true;
          });
          return ws;
        });
    if (!s.ok()) return s.WithContext(fmt::format("checkpoint step {}, file {}", job.step, path));
    crcs->assign(job.tensors.size(), 0);
    std::vector<bool> started(job.tensors.size(), false);
    *file_crc = chunks[0].crc;
    for (size_t i = 1; i < chunks.size(); ++i) {
      const Chunk& c = chunks[i];
      size_t t = static_cast<size_t>(c.tensor);
      (*crcs)[t] = started[t] ? Crc32cCombine((*crcs)[t], c.crc, c.end - c.begin) : c.crc;
      started[t] = true;
      *file_crc = Crc32cCombine(*file_crc, c.crc, c.end - c.begin);
    }
    return Status::Ok();
  }

  Status Persist(Job& job) {
    std::string dir = JoinPath(root_, StepDirName(job.step));
    TSR_RETURN_IF_ERROR(MakeDirs(dir));
    std::string part_path = JoinPath(dir, PartFileName(rank_));
    ::unlink(part_path.c_str());  // a leftover from a crashed earlier attempt at this step
    // Checksums: one per tensor piece and one per file, computed while writing (one pass over the data).
    std::vector<uint32_t> crcs;
    uint32_t file_crc = 0;
    std::string name = ShardFileName(rank_, world_);
    TSR_RETURN_IF_ERROR(WriteShard(job, dir, name, &crcs, &file_crc));
    CrashPoint("save:shard-written");
    json part{{"rank", rank_}, {"world", world_}, {"step", job.step}};
    part["file"] = {{"rank", rank_}, {"name", name}, {"bytes", job.size}, {"crc32c", CrcHex(file_crc)}};
    part["tensors"] = json::array();
    for (size_t i = 0; i < job.tensors.size(); ++i) {
      const auto& t = job.tensors[i];
      part["tensors"].push_back({{"name", t.name},
                                 {"dtype", DTypeName(t.dtype)},
                                 {"shape", t.global_shape},
                                 {"sharding", t.sharding == Sharding::kRowSharded ? "row" : "replicated"},
                                 {"row_offset", t.row_offset},
                                 {"rows", Rows(t.local_shape)},
                                 {"byte_range", {t.begin, t.end}},
                                 {"crc32c", CrcHex(crcs[i])}});
    }
    // The part file only has to be visible to rank 0 (atomic rename), not durable: after a crash before
    // the manifest the step does not exist anyway, and the manifest carries everything in it. Skipping
    // its fsyncs saves two journal commits per rank and step.
    Status s = WriteFileAtomic(part_path, part.dump(), {.fsync = false});
    if (!s.ok()) return s.WithContext(fmt::format("checkpoint step {}", job.step));
    if (rank_ != 0) return Status::Ok();
    return Commit(job.step, dir);
  }

  // Rank 0: wait for every rank's part, check that they fit together, write the manifest last.
  Status Commit(int64_t step, const std::string& dir) {
    auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(opt_.commit_timeout_ms);
    std::vector<json> parts(static_cast<size_t>(world_));
    for (int r = 0; r < world_; ++r) {
      std::string p = JoinPath(dir, PartFileName(r));
      for (;;) {
        auto text = ReadRegularFile(p);
        if (text.ok()) {
          try {
            parts[static_cast<size_t>(r)] = json::parse(*text);
            break;
          } catch (const std::exception& e) {
            return Corrupt(fmt::format("checkpoint step {}: part file {} does not parse: {}", step, p, e.what()));
          }
        }
        if (std::chrono::steady_clock::now() > deadline)
          return Timeout(fmt::format("checkpoint step {}: rank {} did not write {} within {} ms", step, r, p,
                                     opt_.commit_timeout_ms));
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      }
    }
    Manifest m;
    m.step = step;
    m.world = world_;
    m.created_unix = static_cast<int64_t>(std::time(nullptr));
    std::map<std::string, size_t> index;
    try {
      for (int r = 0; r < world_; ++r) {
        const json& p = parts[static_cast<size_t>(r)];
        if (p.at("world").get<int>() != world_ || p.at("step").get<int64_t>() != step)
          return InvalidArgument(fmt::format("checkpoint step {}: rank {} wrote its part with world={} step={}", step,
                                             r, p.at("world").get<int>(), p.at("step").get<int64_t>()));
        ManifestFile f;
        f.rank = r;
        f.name = p.at("file").at("name").get<std::string>();
        f.bytes = p.at("file").at("bytes").get<uint64_t>();
        ParseCrcHex(p.at("file").at("crc32c").get<std::string>(), &f.crc);
        m.files.push_back(f);
        for (const auto& jt : p.at("tensors")) {
          std::string name = jt.at("name").get<std::string>();
          auto dt = ParseDType(jt.at("dtype").get<std::string>());
          Sharding sh = jt.at("sharding").get<std::string>() == "row" ? Sharding::kRowSharded : Sharding::kReplicated;
          auto shape = jt.at("shape").get<std::vector<int64_t>>();
          auto it = index.find(name);
          if (it == index.end()) {
            index[name] = m.tensors.size();
            m.tensors.push_back(ManifestTensor{name, *dt, shape, sh, {}});
            it = index.find(name);
          }
          ManifestTensor& t = m.tensors[it->second];
          if (t.dtype != *dt || t.shape != shape || t.sharding != sh)
            return InvalidArgument(
                fmt::format("checkpoint step {}: tensor '{}' differs between ranks (rank {} has {} {})", step, name, r,
                            DTypeName(*dt), json(shape).dump()));
          Piece pc;
          pc.file = r;
          pc.row_offset = jt.at("row_offset").get<int64_t>();
          pc.rows = jt.at("rows").get<int64_t>();
          auto br = jt.at("byte_range").get<std::vector<uint64_t>>();
          pc.begin = br.at(0);
          pc.end = br.at(1);
          ParseCrcHex(jt.at("crc32c").get<std::string>(), &pc.crc);
          t.pieces.push_back(pc);
        }
      }
    } catch (const std::exception& e) {
      return Corrupt(fmt::format("checkpoint step {}: a part file in {} is malformed: {}", step, dir, e.what()));
    }
    // Row-sharded tensors must be covered exactly once, in row order; the manifest must pass every check a
    // reader applies (a writer never commits what Verify would refuse).
    for (auto& t : m.tensors)
      std::sort(t.pieces.begin(), t.pieces.end(), [](auto& a, auto& b) { return a.row_offset < b.row_offset; });
    Status valid = ValidateManifest(m, fmt::format("checkpoint step {}: the parts in {}", step, dir));
    if (!valid.ok()) return InvalidArgument(valid.message());
    // One directory fsync makes every rank's shard rename durable before the manifest names them.
    if (opt_.fsync) {
      Status d = FsyncDir(dir);
      if (!d.ok()) return d.WithContext(fmt::format("checkpoint step {}", step));
    }
    CrashPoint("save:before-manifest");
    // Exclusive: of two writers of one step (two imports started together), exactly one commits; the other
    // is refused here instead of replacing the first's manifest.
    Status s =
        WriteFileAtomic(JoinPath(dir, kManifestName), ManifestToJson(m), {.fsync = opt_.fsync, .replace = false});
    if (!s.ok()) return s.WithContext(fmt::format("checkpoint step {}: committing", step));
    CrashPoint("save:committed");
    for (int r = 0; r < world_; ++r) ::unlink(JoinPath(dir, PartFileName(r)).c_str());
    TSR_LOG_INFO("checkpoint step {} committed in {} ({} bytes)", step, dir, m.TotalBytes());
    return Status::Ok();
  }

  std::string root_;
  int rank_, world_;
  WriterOptions opt_;
  Buffer bufs_[2];
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Job> queue_;
  int pending_ = 0;
  bool stop_ = false;
  Status error_;
  double last_snapshot_s_ = 0;
  std::thread bg_;
};

}  // namespace

Result<std::unique_ptr<CheckpointWriter>> CheckpointWriter::Open(const std::string& root, int rank, int world,
                                                                 WriterOptions options) {
  if (root.empty()) return InvalidArgument("checkpoint root is empty (set TESSERA_CKPT_ROOT or pass a directory)");
  if (world < 1 || rank < 0 || rank >= world)
    return InvalidArgument(fmt::format("checkpoint writer: rank {} is not in a world of {}", rank, world));
  TSR_RETURN_IF_ERROR(MakeDirs(root));
  return std::unique_ptr<CheckpointWriter>(new WriterImpl(root, rank, world, options));
}

}  // namespace tessera::ckpt
