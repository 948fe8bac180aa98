// ckpt/reader: listing, verification, "latest good" selection and restore (with N→M resharding of
// row-sharded tensors) of checkpoints in a hot-tier directory.
#include <dirent.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>

#include "ckpt/crc32c.hpp"
#include "ckpt/device.hpp"
#include "ckpt/format.hpp"
#include "ckpt/internal.hpp"
#include "comm/runtime/runtime.hpp"
#include "common/log.hpp"
#include "common/nesting.hpp"
#include "common/parallel.hpp"

namespace tessera::ckpt {

using json = nlohmann::json;

Result<Manifest> LoadManifest(const std::string& root, int64_t step) {
  std::string dir = JoinPath(root, StepDirName(step));
  std::string path = JoinPath(dir, kManifestName);
  auto absent = [&] {
    return NotFound(fmt::format("checkpoint step {} does not exist in {} (no committed {})", step, root, path));
  };
  auto d = OpenStepDir(dir);
  if (!d.ok()) {
    if (d.status().code() == Code::kNotFound) return absent();
    return d.status().WithContext(fmt::format("checkpoint step {}", step));
  }
  auto fd = OpenRegularFileBeneath(d->get(), kManifestName, path);
  if (!fd.ok()) {
    if (fd.status().code() == Code::kNotFound) return absent();
    return fd.status().WithContext(fmt::format("checkpoint step {}", step));
  }
  auto text = ReadAndClose(fd->release(), path);
  if (!text.ok()) return text.status().WithContext(fmt::format("checkpoint step {}", step));
  return ManifestForStep(*text, fmt::format("checkpoint step {}: {}", step, path), step);
}

Result<std::vector<int64_t>> ListSteps(const std::string& root) {
  std::vector<int64_t> steps;
  DIR* d = ::opendir(root.c_str());
  if (d == nullptr) {
    if (errno == ENOENT) return steps;
    return ErrnoError("open checkpoint root " + root, errno);
  }
  while (dirent* e = ::readdir(d)) {
    int64_t step;
    if (!ParseStepDirName(e->d_name, &step)) continue;
    // A step with a manifest beneath the root (a linked step directory is not one; readers refuse it anyway).
    auto m = OpenBeneath(::dirfd(d), std::string(e->d_name) + "/" + kManifestName, O_PATH, e->d_name);
    if (m.ok()) steps.push_back(step);
  }
  ::closedir(d);
  std::sort(steps.begin(), steps.end());
  return steps;
}

CheckpointInfo InfoFromManifest(const Manifest& m, const std::string& dir) {
  CheckpointInfo info;
  info.step = m.step;
  info.world = m.world;
  info.dir = dir;
  info.bytes = m.TotalBytes();
  info.created_unix = m.created_unix;
  info.manifest_protected = m.digest;
  for (const auto& t : m.tensors) info.tensors.push_back({t.name, t.dtype, t.shape, t.sharding});
  for (const auto& f : m.files) info.files.push_back(f.name);
  return info;
}

Result<CheckpointInfo> Describe(const std::string& root, int64_t step) {
  TSR_ASSIGN_OR_RETURN(Manifest m, LoadManifest(root, step));
  return InfoFromManifest(m, JoinPath(root, StepDirName(step)));
}

namespace {

// The shape under which a piece is stored in its shard file: the global shape, with the piece's rows as
// dim 0 for a row-sharded tensor.
std::vector<int64_t> LocalShape(const ManifestTensor& t, const Piece& p) {
  std::vector<int64_t> s = t.shape;
  if (t.sharding == Sharding::kRowSharded) s[0] = p.rows;
  return s;
}

}  // namespace

ShardCheck::ShardCheck(const Manifest& m, size_t file, std::string name) : m_(m), fi_(file), name_(std::move(name)) {
  for (const auto& t : m.tensors)
    for (const auto& p : t.pieces)
      if (static_cast<size_t>(p.file) == fi_) segs_.push_back({p.begin, p.end, &t, &p});
  std::sort(segs_.begin(), segs_.end(),
            [](const Segment& a, const Segment& b) { return std::pair(a.begin, a.end) < std::pair(b.begin, b.end); });
  const uint64_t bytes = m.files[fi_].bytes;
  segs_.insert(segs_.begin(), Segment{0, segs_.empty() ? bytes : segs_.front().begin, nullptr, nullptr});
  parts_.resize(segs_.size());
}

std::string ShardCheck::Where(const std::string& what) const {
  return fmt::format("checkpoint step {}: {} {}", m_.step, name_, what);
}

Result<uint64_t> ShardCheck::HeaderLength(const void* first8) const {
  const uint64_t bytes = m_.files[fi_].bytes, hlen = SafetensorsHeaderLength(first8);
  if (bytes < 8 || hlen > bytes - 8)
    return Corrupt(Where(fmt::format("has a safetensors header length {} beyond its {} bytes", hlen, bytes)));
  return hlen;
}

Status ShardCheck::Header(const std::string& first_bytes) {
  if (first_bytes.size() < 8) return Corrupt(Where("is shorter than a safetensors header"));
  TSR_ASSIGN_OR_RETURN(uint64_t hlen, HeaderLength(first_bytes.data()));
  if (first_bytes.size() < 8 + hlen) return Corrupt(Where("is shorter than its safetensors header"));
  const uint64_t data_start = 8 + hlen, bytes = m_.files[fi_].bytes;
  const std::string_view header = std::string_view(first_bytes).substr(8, hlen);
  if (size_t at = NestingExceeds(header, Syntax::kJson); at != std::string::npos)
    return Corrupt(Where(
        fmt::format("has a safetensors header that nests deeper than {} levels (at byte {})", kMaxNesting, 8 + at)));
  try {
    json h = json::parse(header);
    if (!h.is_object()) return Corrupt(Where("has a safetensors header that is not a JSON object"));
    size_t entries = 0;
    for (auto it = h.begin(); it != h.end(); ++it) entries += it.key() != "__metadata__";
    if (entries != segs_.size() - 1)
      return Corrupt(Where(fmt::format("has {} tensors in its safetensors header, the manifest places {} in it",
                                       entries, segs_.size() - 1)));
    uint64_t covered = 0;
    for (size_t i = 1; i < segs_.size(); ++i) {
      const ManifestTensor& t = *segs_[i].tensor;
      const Piece& p = *segs_[i].piece;
      auto it = h.find(t.name);
      if (it == h.end() || !it->is_object())
        return Corrupt(
            Where(fmt::format("has no tensor '{}' in its safetensors header; the manifest places one there", t.name)));
      const json& e = *it;
      const json dtype = e.value("dtype", json()), shape = e.value("shape", json()),
                 off = e.value("data_offsets", json());
      if (dtype != json(SafetensorsDType(t.dtype)))
        return Corrupt(Where(fmt::format("stores tensor '{}' as dtype {}, the manifest says {} ({})", t.name,
                                         dtype.dump(), SafetensorsDType(t.dtype), DTypeName(t.dtype))));
      const json local = LocalShape(t, p);
      if (shape != local)
        return Corrupt(Where(
            fmt::format("stores tensor '{}' with shape {}, the manifest says {}", t.name, shape.dump(), local.dump())));
      if (p.begin < data_start || !off.is_array() || off.size() != 2 || !off[0].is_number_unsigned() ||
          !off[1].is_number_unsigned() || off[0].get<uint64_t>() != p.begin - data_start ||
          off[1].get<uint64_t>() != p.end - data_start)
        return Corrupt(Where(fmt::format(
            "stores tensor '{}' at data_offsets {}, the manifest says bytes [{}, {}) of the file (data starts at {})",
            t.name, off.dump(), p.begin, p.end, data_start)));
      covered += p.end - p.begin;
    }
    // The manifest's pieces do not overlap (ValidateManifest), start after the header and cover the data.
    if (covered != bytes - data_start)
      return Corrupt(Where(fmt::format("has {} data bytes, its tensors cover {}", bytes - data_start, covered)));
    const json meta = h.value("__metadata__", json::object());
    const std::pair<const char*, int64_t> expect[] = {
        {"tessera.step", m_.step}, {"tessera.rank", static_cast<int64_t>(fi_)}, {"tessera.world", m_.world}};
    for (const auto& [key, value] : expect)
      if (meta.is_object() && meta.contains(key) && meta[key] != json(std::to_string(value)))
        return Corrupt(Where(
            fmt::format("has {} {} in its safetensors metadata, the manifest says {}", key, meta[key].dump(), value)));
  } catch (const std::exception& e) {
    return Corrupt(Where(fmt::format("has a bad safetensors header: {}", e.what())));
  }
  header_ok_ = true;
  return Status::Ok();
}

void ShardCheck::Add(uint64_t offset, const void* data, size_t n) {
  const char* p = static_cast<const char*>(data);
  // The last segment starting at or before `offset` (zero-length segments sort before the one they touch).
  size_t s = static_cast<size_t>(
      std::upper_bound(segs_.begin(), segs_.end(), offset, [](uint64_t o, const Segment& g) { return o < g.begin; }) -
      segs_.begin());
  for (s = s == 0 ? 0 : s - 1; s < segs_.size() && segs_[s].begin < offset + n; ++s) {
    const uint64_t b = std::max(offset, segs_[s].begin), e = std::min(offset + n, segs_[s].end);
    if (b >= e) continue;
    uint32_t crc = Crc32c(p + (b - offset), e - b);
    std::lock_guard lk(mu_);
    parts_[s][b] = {crc, e - b};
  }
}

Status ShardCheck::Finish() {
  if (!header_ok_) return Corrupt(Where("was not checked against its safetensors header"));
  std::vector<uint32_t> crcs(segs_.size(), 0);
  uint32_t file_crc = 0;
  for (size_t s = 0; s < segs_.size(); ++s) {
    uint64_t at = segs_[s].begin;
    for (const auto& [off, part] : parts_[s]) {
      if (off != at) break;
      crcs[s] = at == segs_[s].begin ? part.first : Crc32cCombine(crcs[s], part.first, part.second);
      at += part.second;
    }
    if (at != segs_[s].end)
      return Corrupt(Where(fmt::format("was not read completely (bytes {} to {})", at, segs_[s].end)));
    file_crc = s == 0 ? crcs[0] : Crc32cCombine(file_crc, crcs[s], segs_[s].end - segs_[s].begin);
  }
  const ManifestFile& f = m_.files[fi_];
  if (file_crc != f.crc)
    return Corrupt(
        Where(fmt::format("fails its checksum: CRC32C {}, the manifest says {}", CrcHex(file_crc), CrcHex(f.crc))));
  for (size_t s = 1; s < segs_.size(); ++s) {
    const Piece& p = *segs_[s].piece;
    if (crcs[s] != p.crc)
      return Corrupt(Where(fmt::format("holds tensor '{}' rows [{}, {}) with CRC32C {}, the manifest says {}",
                                       segs_[s].tensor->name, p.row_offset, p.row_offset + p.rows, CrcHex(crcs[s]),
                                       CrcHex(p.crc))));
  }
  return Status::Ok();
}

// Checks one hot shard file against the manifest: size, the safetensors header and, with `checksums`, the
// CRC32C of the file and of every piece in it (ShardCheck, one pass over the bytes).
Status VerifyFile(const Manifest& m, size_t fi, int dirfd, const std::string& dir, bool checksums,
                  const Progress& progress, std::atomic<uint64_t>* done, uint64_t total) {
  const ManifestFile& f = m.files[fi];
  std::string path = JoinPath(dir, f.name);
  ShardCheck check(m, fi, "file " + path);
  auto opened = OpenRegularFileBeneath(dirfd, f.name, path);
  if (!opened.ok()) {
    if (opened.status().code() == Code::kNotFound) return Corrupt(check.Where("is missing"));
    return opened.status().WithContext(fmt::format("checkpoint step {}", m.step));
  }
  const int fd = opened->get();
  struct stat st {};
  if (fstat(fd, &st) != 0) return ErrnoError(check.Where("cannot be stat'ed"), errno);
  if (static_cast<uint64_t>(st.st_size) != f.bytes)
    return Corrupt(check.Where(fmt::format("is torn: {} bytes, the manifest says {}", st.st_size, f.bytes)));
  if (f.bytes < 8) return Corrupt(check.Where("is shorter than a safetensors header"));
  std::string first(8, '\0');
  TSR_RETURN_IF_ERROR(PreadAll(fd, first.data(), 8, 0, path));
  TSR_ASSIGN_OR_RETURN(uint64_t hlen, check.HeaderLength(first.data()));
  first.resize(8 + hlen);
  TSR_RETURN_IF_ERROR(PreadAll(fd, first.data() + 8, hlen, 8, path));
  TSR_RETURN_IF_ERROR(check.Header(first));
  if (!checksums) return Status::Ok();
  constexpr size_t kChunk = size_t{16} << 20;
  std::unique_ptr<char[]> buf(new char[kChunk]);
  for (uint64_t off = 0; off < f.bytes; off += kChunk) {
    size_t n = static_cast<size_t>(std::min<uint64_t>(kChunk, f.bytes - off));
    Status s = PreadAll(fd, buf.get(), n, off, path);
    if (!s.ok()) return s.WithContext(fmt::format("checkpoint step {}", m.step));
    check.Add(off, buf.get(), n);
    if (done) {
      uint64_t d = done->fetch_add(n) + n;
      if (progress) progress(d, total);
    }
  }
  return check.Finish();
}

Status VerifyDir(const Manifest& m, const std::string& dir, VerifyOptions options, const Progress& progress) {
  auto d = OpenStepDir(dir);
  if (!d.ok()) return d.status().WithContext(fmt::format("checkpoint step {}", m.step));
  return VerifyDirAt(m, d->get(), dir, options, progress);
}

Status VerifyDirAt(const Manifest& m, int dirfd, const std::string& dir, VerifyOptions options,
                   const Progress& progress) {
  if (static_cast<int>(m.files.size()) != m.world)
    return Corrupt(fmt::format("checkpoint step {}: manifest in {} lists {} files for world {}", m.step, dir,
                               m.files.size(), m.world));
  std::atomic<uint64_t> done{0};
  std::vector<Status> st(m.files.size());
  std::mutex pmu;
  Progress locked = progress ? Progress([&](uint64_t d, uint64_t t) {
    std::lock_guard lk(pmu);
    progress(d, t);
  })
                             : Progress();
  ParallelFor(m.files.size(), 4, [&](uint64_t i, int) {
    st[i] = VerifyFile(m, i, dirfd, dir, options.checksums, locked, &done, m.TotalBytes());
    return true;
  });
  for (auto& s : st) TSR_RETURN_IF_ERROR(s);
  return Status::Ok();
}

Status VerifyWithProgress(const std::string& root, int64_t step, VerifyOptions options, const Progress& progress) {
  TSR_ASSIGN_OR_RETURN(Manifest m, LoadManifest(root, step));
  return VerifyDir(m, JoinPath(root, StepDirName(step)), options, progress);
}

Status Verify(const std::string& root, int64_t step, VerifyOptions options) {
  return VerifyWithProgress(root, step, options, {});
}

Result<LatestInfo> Latest(const std::string& root, VerifyOptions options) {
  TSR_ASSIGN_OR_RETURN(auto steps, ListSteps(root));
  LatestInfo info;
  for (auto it = steps.rbegin(); it != steps.rend(); ++it) {
    Status s = Verify(root, *it, options);
    if (s.ok()) {
      info.step = *it;
      return info;
    }
    std::string w = fmt::format("skipping checkpoint step {}: {}", *it, s.message());
    TSR_LOG_WARN("{}", w);
    info.warnings.push_back(w);
  }
  std::string msg = fmt::format("no good checkpoint in {}", root);
  if (!info.warnings.empty()) msg += fmt::format(" ({} bad: {})", info.warnings.size(), info.warnings.front());
  return NotFound(msg);
}

namespace {
struct Task {
  const TensorSlot* slot;
  const ManifestTensor* tensor;
  const Piece* piece;
  uint64_t row_bytes;
  int64_t slot_begin, slot_rows;
  // Direct reads (a whole piece into host memory) are split into chunks read in parallel; their CRCs
  // are combined per piece afterwards. chunk_begin/end are offsets inside the piece.
  bool direct = false;
  uint64_t chunk_begin = 0, chunk_end = 0;
  size_t group = 0;  // index into the per-piece CRC groups (direct tasks)
  uint32_t crc = 0;
};
}  // namespace

Status RestoreFrom(const Manifest& m, const std::string& dir, const std::vector<TensorSlot>& slots, int threads,
                   const Progress& progress) {
  std::map<std::string, const ManifestTensor*> byname;
  for (const auto& t : m.tensors) byname[t.name] = &t;
  std::vector<Task> tasks;
  uint64_t total = 0;
  size_t groups = 0;
  for (const auto& s : slots) {
    auto it = byname.find(s.name);
    if (it == byname.end())
      return NotFound(fmt::format("checkpoint step {} in {} has no tensor '{}'", m.step, dir, s.name));
    const ManifestTensor& t = *it->second;
    uint64_t rb = RowBytes(t.dtype, t.shape);
    int64_t grows = Rows(t.shape);
    int64_t rows = s.rows < 0 ? grows - s.row_begin : s.rows;
    if (s.row_begin < 0 || rows < 0 || s.row_begin > grows || rows > grows - s.row_begin)
      return InvalidArgument(fmt::format("checkpoint step {}: tensor '{}' has {} rows; rows [{}, {}) were asked for",
                                         m.step, t.name, grows, s.row_begin, s.row_begin + rows));
    if (s.bytes != rb * static_cast<uint64_t>(rows))
      return InvalidArgument(fmt::format(
          "checkpoint step {}: tensor '{}' ({}, {} bytes per row): {} rows need {} bytes, the buffer has {}", m.step,
          t.name, DTypeName(t.dtype), rb, rows, rb * rows, s.bytes));
    if (s.data == nullptr && s.bytes > 0)
      return InvalidArgument(fmt::format("checkpoint step {}: tensor '{}': null buffer", m.step, t.name));
    for (const auto& p : t.pieces) {
      if (p.row_offset + p.rows <= s.row_begin || p.row_offset >= s.row_begin + rows) continue;
      if (p.end - p.begin != rb * static_cast<uint64_t>(p.rows))
        return Corrupt(fmt::format("checkpoint step {}: tensor '{}' piece in {} has {} bytes for {} rows", m.step,
                                   t.name, m.files[static_cast<size_t>(p.file)].name, p.end - p.begin, p.rows));
      bool whole = p.row_offset >= s.row_begin && p.row_offset + p.rows <= s.row_begin + rows;
      if (whole && !comm::IsDeviceMemory(s.data) && p.end > p.begin) {
        const uint64_t kChunk = uint64_t{32} << 20;
        for (uint64_t b = 0; b < p.end - p.begin; b += kChunk) {
          Task k{&s, &t, &p, rb, s.row_begin, rows};
          k.direct = true;
          k.chunk_begin = b;
          k.chunk_end = std::min(p.end - p.begin, b + kChunk);
          k.group = groups;
          tasks.push_back(k);
        }
        ++groups;
      } else {
        tasks.push_back({&s, &t, &p, rb, s.row_begin, rows});
      }
      total += p.end - p.begin;
    }
  }
  auto stepdir = OpenStepDir(dir);
  if (!stepdir.ok()) return stepdir.status().WithContext(fmt::format("checkpoint step {}", m.step));
  std::vector<int> fds(m.files.size(), -1);
  for (const auto& task : tasks) {
    size_t fi = static_cast<size_t>(task.piece->file);
    if (fds[fi] >= 0) continue;
    std::string path = JoinPath(dir, m.files[fi].name);
    auto opened = OpenRegularFileBeneath(stepdir->get(), m.files[fi].name, path);
    if (!opened.ok()) {
      for (int fd : fds)
        if (fd >= 0) ::close(fd);
      return opened.status().WithContext(fmt::format("checkpoint step {}", m.step));
    }
    fds[fi] = opened->release();
    ::posix_fadvise(fds[fi], 0, 0, POSIX_FADV_SEQUENTIAL);
  }
  std::atomic<uint64_t> done{0};
  std::mutex mu;
  Status first;
  std::vector<std::vector<char>> tmps(static_cast<size_t>(std::max(1, threads)));  // per thread
  ParallelFor(tasks.size(), threads, [&](uint64_t i, int t) {
    std::vector<char>& tmp = tmps[static_cast<size_t>(t)];
    Task& k = tasks[i];
    const Piece& p = *k.piece;
    std::string path = JoinPath(dir, m.files[static_cast<size_t>(p.file)].name);
    size_t n;
    Status s;
    if (k.direct) {
      n = k.chunk_end - k.chunk_begin;
      char* dst = static_cast<char*>(k.slot->data) + static_cast<uint64_t>(p.row_offset - k.slot_begin) * k.row_bytes +
                  k.chunk_begin;
      s = PreadAll(fds[static_cast<size_t>(p.file)], dst, n, p.begin + k.chunk_begin, path);
      if (s.ok()) k.crc = Crc32c(dst, n);
    } else {
      int64_t ov_b = std::max(k.slot_begin, p.row_offset);
      int64_t ov_e = std::min(k.slot_begin + k.slot_rows, p.row_offset + p.rows);
      char* dst = static_cast<char*>(k.slot->data) + static_cast<uint64_t>(ov_b - k.slot_begin) * k.row_bytes;
      n = p.end - p.begin;
      tmp.resize(n);
      s = PreadAll(fds[static_cast<size_t>(p.file)], tmp.data(), n, p.begin, path);
      if (s.ok()) {
        uint32_t crc = Crc32c(tmp.data(), n);
        if (crc != p.crc)
          s = Corrupt(fmt::format(
              "checkpoint step {}: tensor '{}' in file {} fails its checksum: CRC32C {}, the manifest says {}", m.step,
              k.tensor->name, path, CrcHex(crc), CrcHex(p.crc)));
      }
      if (s.ok())
        s = CopyFromHost(dst, tmp.data() + static_cast<uint64_t>(ov_b - p.row_offset) * k.row_bytes,
                         static_cast<uint64_t>(ov_e - ov_b) * k.row_bytes, /*bind_thread=*/t != 0);
    }
    if (!s.ok()) {
      std::lock_guard lk(mu);
      if (first.ok()) first = s.code() == Code::kCorrupt ? s : s.WithContext(fmt::format("checkpoint step {}", m.step));
      return true;  // the other pieces are still read; the first error is the one reported
    }
    uint64_t d = done.fetch_add(n) + n;
    if (progress) {
      std::lock_guard lk(mu);
      progress(d, total);
    }
    return true;
  });
  for (int fd : fds)
    if (fd >= 0) ::close(fd);
  TSR_RETURN_IF_ERROR(first);
  // Direct pieces: combine the chunk CRCs in order and compare.
  std::vector<uint32_t> crc(groups, 0);
  std::vector<bool> started(groups, false);
  std::vector<const Task*> head(groups, nullptr);
  for (const auto& k : tasks) {
    if (!k.direct) continue;
    crc[k.group] = started[k.group] ? Crc32cCombine(crc[k.group], k.crc, k.chunk_end - k.chunk_begin) : k.crc;
    started[k.group] = true;
    head[k.group] = &k;
  }
  for (size_t g = 0; g < groups; ++g) {
    const Task& k = *head[g];
    if (crc[g] != k.piece->crc)
      return Corrupt(
          fmt::format("checkpoint step {}: tensor '{}' in file {} fails its checksum: CRC32C {}, the manifest says {}",
                      m.step, k.tensor->name, JoinPath(dir, m.files[static_cast<size_t>(k.piece->file)].name),
                      CrcHex(crc[g]), CrcHex(k.piece->crc)));
  }
  return Status::Ok();
}

Status Restore(const std::string& root, int64_t step, const std::vector<TensorSlot>& slots) {
  return RestoreWithProgress(root, step, slots, {});
}

Status RestoreWithProgress(const std::string& root, int64_t step, const std::vector<TensorSlot>& slots,
                           const Progress& progress) {
  TSR_ASSIGN_OR_RETURN(Manifest m, LoadManifest(root, step));
  std::string dir = JoinPath(root, StepDirName(step));
  TSR_RETURN_IF_ERROR(VerifyDir(m, dir, VerifyOptions{false}, {}));  // presence, sizes, headers
  return RestoreFrom(m, dir, slots, 4, progress);                    // as many readers as the writer's io_threads
}

Status Remove(const std::string& root, int64_t step) {
  const std::string name = StepDirName(step), dir = JoinPath(root, name);
  auto absent = [&] { return NotFound(fmt::format("checkpoint step {} does not exist in {}", step, root)); };
  auto rootfd = OpenDir(root);
  if (!rootfd.ok()) return rootfd.status().code() == Code::kNotFound ? absent() : rootfd.status();
  // Everything below goes through descriptors: the step directory opened beneath the root (a link there is
  // refused), its manifest unlinked in it, and the tree removed without following a link — a directory swapped
  // for a link meanwhile loses only the link.
  auto d = OpenBeneath(rootfd->get(), name, O_RDONLY | O_DIRECTORY, dir);
  if (!d.ok()) {
    if (d.status().code() == Code::kNotFound) return absent();
    return d.status().WithContext(fmt::format("checkpoint step {}: not removed", step));
  }
  CrashPoint("remove:opened");
  if (::unlinkat(d->get(), kManifestName, 0) != 0 && errno != ENOENT)
    return ErrnoError(fmt::format("checkpoint step {}: remove {}", step, JoinPath(dir, kManifestName)), errno);
  if (::fsync(d->get()) != 0) return ErrnoError(fmt::format("checkpoint step {}: fsync {}", step, dir), errno);
  return RemoveTreeAt(rootfd->get(), name, dir);
}

}  // namespace tessera::ckpt
