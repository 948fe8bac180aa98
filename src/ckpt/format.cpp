// ckpt/format: checkpoint names, safetensors dtype names, manifest JSON, and durable file helpers.
#include "ckpt/format.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fmt/format.h>
#include <mutex>
#include <nlohmann/json.hpp>

#include "ckpt/crc32c.hpp"

namespace tessera::ckpt {

using json = nlohmann::json;

std::string StepDirName(int64_t step) { return fmt::format("step-{:010d}", step); }

bool ParseStepDirName(const std::string& name, int64_t* step) {
  if (name.size() != 15 || name.rfind("step-", 0) != 0) return false;
  int64_t v = 0;
  for (size_t i = 5; i < name.size(); ++i) {
    if (name[i] < '0' || name[i] > '9') return false;
    v = v * 10 + (name[i] - '0');
  }
  *step = v;
  return true;
}

std::string ShardFileName(int rank, int world) { return fmt::format("rank-{:05d}-of-{:05d}.safetensors", rank, world); }
std::string PartFileName(int rank) { return fmt::format("rank-{:05d}.part.json", rank); }
std::string JoinPath(const std::string& a, const std::string& b) {
  if (a.empty()) return b;
  return a.back() == '/' ? a + b : a + "/" + b;
}

const char* SafetensorsDType(DType t) {
  switch (t) {
    case DType::kInt8: return "I8";
    case DType::kUint8: return "U8";
    case DType::kInt32: return "I32";
    case DType::kInt64: return "I64";
    case DType::kFloat16: return "F16";
    case DType::kBfloat16: return "BF16";
    case DType::kFloat32: return "F32";
    case DType::kFloat64: return "F64";
    default: return "?";
  }
}

bool ParseSafetensorsDType(const std::string& s, DType* t) {
  for (int i = 0; i < static_cast<int>(DType::kCount); ++i) {
    if (s == SafetensorsDType(static_cast<DType>(i))) {
      *t = static_cast<DType>(i);
      return true;
    }
  }
  return false;
}

uint64_t RowBytes(DType dtype, const std::vector<int64_t>& shape) {
  uint64_t n = DTypeSize(dtype);
  for (size_t i = 1; i < shape.size(); ++i) n *= static_cast<uint64_t>(shape[i]);
  return n;
}

uint64_t Manifest::TotalBytes() const {
  uint64_t n = 0;
  for (const auto& f : files) n += f.bytes;
  return n;
}

std::string ManifestToJson(const Manifest& m) {
  json j;
  j["format"] = kFormatName;
  j["step"] = m.step;
  j["world"] = m.world;
  j["created_unix"] = m.created_unix;
  j["files"] = json::array();
  for (const auto& f : m.files)
    j["files"].push_back({{"rank", f.rank}, {"name", f.name}, {"bytes", f.bytes}, {"crc32c", CrcHex(f.crc)}});
  j["tensors"] = json::array();
  for (const auto& t : m.tensors) {
    json jt{{"name", t.name},
            {"dtype", DTypeName(t.dtype)},
            {"shape", t.shape},
            {"sharding", t.sharding == Sharding::kRowSharded ? "row" : "replicated"}};
    jt["pieces"] = json::array();
    for (const auto& p : t.pieces)
      jt["pieces"].push_back({{"file", p.file},
                              {"row_offset", p.row_offset},
                              {"rows", p.rows},
                              {"byte_range", {p.begin, p.end}},
                              {"crc32c", CrcHex(p.crc)}});
    j["tensors"].push_back(std::move(jt));
  }
  return j.dump(1) + "\n";
}

Result<Manifest> ManifestFromJson(const std::string& text, const std::string& what) {
  Manifest m;
  try {
    json j = json::parse(text);
    if (j.value("format", "") != kFormatName)
      return Corrupt(fmt::format("{}: format is '{}', expected '{}'", what, j.value("format", ""), kFormatName));
    m.step = j.at("step").get<int64_t>();
    m.world = j.at("world").get<int>();
    m.created_unix = j.value("created_unix", int64_t{0});
    for (const auto& jf : j.at("files")) {
      ManifestFile f;
      f.rank = jf.at("rank").get<int>();
      f.name = jf.at("name").get<std::string>();
      f.bytes = jf.at("bytes").get<uint64_t>();
      if (!ParseCrcHex(jf.at("crc32c").get<std::string>(), &f.crc))
        return Corrupt(fmt::format("{}: bad crc32c for file {}", what, f.name));
      if (f.name.find('/') != std::string::npos || f.name.find("..") != std::string::npos)
        return Corrupt(fmt::format("{}: file name '{}' is not a plain name", what, f.name));
      m.files.push_back(std::move(f));
    }
    for (const auto& jt : j.at("tensors")) {
      ManifestTensor t;
      t.name = jt.at("name").get<std::string>();
      auto dt = ParseDType(jt.at("dtype").get<std::string>());
      if (!dt) return Corrupt(fmt::format("{}: tensor '{}' has unknown dtype", what, t.name));
      t.dtype = *dt;
      t.shape = jt.at("shape").get<std::vector<int64_t>>();
      t.sharding = jt.at("sharding").get<std::string>() == "row" ? Sharding::kRowSharded : Sharding::kReplicated;
      for (const auto& jp : jt.at("pieces")) {
        Piece p;
        p.file = jp.at("file").get<int>();
        p.row_offset = jp.at("row_offset").get<int64_t>();
        p.rows = jp.at("rows").get<int64_t>();
        auto br = jp.at("byte_range").get<std::vector<uint64_t>>();
        if (br.size() != 2 || br[1] < br[0]) return Corrupt(fmt::format("{}: tensor '{}' bad byte_range", what, t.name));
        p.begin = br[0];
        p.end = br[1];
        if (!ParseCrcHex(jp.at("crc32c").get<std::string>(), &p.crc))
          return Corrupt(fmt::format("{}: tensor '{}' bad crc32c", what, t.name));
        if (p.file < 0 || p.file >= static_cast<int>(m.files.size()))
          return Corrupt(fmt::format("{}: tensor '{}' refers to file #{} of {}", what, t.name, p.file, m.files.size()));
        t.pieces.push_back(p);
      }
      m.tensors.push_back(std::move(t));
    }
  } catch (const std::exception& e) {
    return Corrupt(fmt::format("{}: manifest does not parse: {}", what, e.what()));
  }
  return m;
}

// ---- file helpers ---------------------------------------------------------------------------------
Result<std::string> ReadFile(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return NotFound(fmt::format("{} does not exist", path));
    return ErrnoError("open " + path, errno);
  }
  struct stat st{};
  if (fstat(fd, &st) != 0) {
    int e = errno;
    ::close(fd);
    return ErrnoError("stat " + path, e);
  }
  std::string out(static_cast<size_t>(st.st_size), '\0');
  Status s = PreadAll(fd, out.data(), out.size(), 0, path);
  ::close(fd);
  if (!s.ok()) return s;
  return out;
}

Status FsyncDir(const std::string& dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return ErrnoError("open directory " + dir, errno);
  int rc = ::fsync(fd);
  int e = errno;
  ::close(fd);
  if (rc != 0) return ErrnoError("fsync directory " + dir, e);
  return Status::Ok();
}

Status WriteFileAtomic(const std::string& path, const std::string& data, bool do_fsync) {
  std::string tmp = path + ".tmp";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoError("create " + tmp, errno);
  Status s = PwriteAll(fd, data.data(), data.size(), 0, tmp);
  if (s.ok() && do_fsync && ::fsync(fd) != 0) s = ErrnoError("fsync " + tmp, errno);
  ::close(fd);
  if (s.ok() && ::rename(tmp.c_str(), path.c_str()) != 0) s = ErrnoError("rename " + tmp + " to " + path, errno);
  if (!s.ok()) {
    ::unlink(tmp.c_str());
    return s;
  }
  if (do_fsync) {
    auto slash = path.rfind('/');
    return FsyncDir(slash == std::string::npos ? "." : (slash == 0 ? "/" : path.substr(0, slash)));
  }
  return Status::Ok();
}

Status MakeDirs(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return SystemError(fmt::format("cannot create directory {}: {}", dir, ec.message()));
  return Status::Ok();
}

Status RemoveTree(const std::string& path) {
  std::error_code ec;
  std::filesystem::remove_all(path, ec);
  if (ec) return SystemError(fmt::format("cannot remove {}: {}", path, ec.message()));
  return Status::Ok();
}

Status PwriteAll(int fd, const void* data, size_t n, uint64_t offset, const std::string& path) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    size_t chunk = std::min<size_t>(n, size_t{1} << 30);
    int injected = RunWriteHook(path, offset, chunk);
    if (injected != 0) return ErrnoError(fmt::format("write {} at offset {}", path, offset), injected);
    ssize_t w = ::pwrite(fd, p, chunk, static_cast<off_t>(offset));
    if (w < 0) {
      if (errno == EINTR) continue;
      return ErrnoError(fmt::format("write {} at offset {}", path, offset), errno);
    }
    p += w;
    n -= static_cast<size_t>(w);
    offset += static_cast<uint64_t>(w);
  }
  return Status::Ok();
}

Status PreadAll(int fd, void* data, size_t n, uint64_t offset, const std::string& path) {
  char* p = static_cast<char*>(data);
  while (n > 0) {
    ssize_t r = ::pread(fd, p, std::min<size_t>(n, size_t{1} << 30), static_cast<off_t>(offset));
    if (r < 0) {
      if (errno == EINTR) continue;
      return ErrnoError(fmt::format("read {} at offset {}", path, offset), errno);
    }
    if (r == 0) return Corrupt(fmt::format("{} is truncated: end of file at offset {}", path, offset));
    p += r;
    n -= static_cast<size_t>(r);
    offset += static_cast<uint64_t>(r);
  }
  return Status::Ok();
}

// ---- hooks ---------------------------------------------------------------------------------------------
namespace {
std::mutex g_hook_mu;
std::function<int(const std::string&, uint64_t, size_t)> g_write_hook;
std::function<void(const char*)> g_crash_hook;
}  // namespace
namespace testing {
void SetWriteHook(std::function<int(const std::string&, uint64_t, size_t)> hook) {
  std::lock_guard lk(g_hook_mu);
  g_write_hook = std::move(hook);
}
void SetCrashHook(std::function<void(const char*)> hook) {
  std::lock_guard lk(g_hook_mu);
  g_crash_hook = std::move(hook);
}
}  // namespace testing
int RunWriteHook(const std::string& path, uint64_t offset, size_t n) {
  std::function<int(const std::string&, uint64_t, size_t)> h;
  {
    std::lock_guard lk(g_hook_mu);
    h = g_write_hook;
  }
  return h ? h(path, offset, n) : 0;
}
void CrashPoint(const char* point) {
  std::function<void(const char*)> h;
  {
    std::lock_guard lk(g_hook_mu);
    h = g_crash_hook;
  }
  if (h) h(point);
}

}  // namespace tessera::ckpt
