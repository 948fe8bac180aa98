// ckpt/format: checkpoint names, safetensors dtype names, manifest JSON, and durable file helpers.
#include "ckpt/format.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <limits>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <type_traits>

#include "ckpt/crc32c.hpp"
#include "common/nesting.hpp"

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
    case DType::kInt8:
      return "I8";
    case DType::kUint8:
      return "U8";
    case DType::kInt32:
      return "I32";
    case DType::kInt64:
      return "I64";
    case DType::kFloat16:
      return "F16";
    case DType::kBfloat16:
      return "BF16";
    case DType::kFloat32:
      return "F32";
    case DType::kFloat64:
      return "F64";
    default:
      return "?";
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

bool CheckedRowBytes(DType dtype, const std::vector<int64_t>& shape, uint64_t* out) {
  uint64_t n = DTypeSize(dtype);
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] < 0) return false;
    if (i > 0 && !CheckedMul(n, static_cast<uint64_t>(shape[i]), &n)) return false;
  }
  *out = n;
  return true;
}

uint64_t Manifest::TotalBytes() const {
  uint64_t n = 0;
  for (const auto& f : files) n += f.bytes;
  return n;
}

namespace {

// The manifest object without its digest, serialized compactly: what the digest covers.
uint32_t ManifestDigest(json j) {
  j.erase("manifest_crc32c");
  std::string canon = j.dump();
  return Crc32c(canon.data(), canon.size());
}

// Strict reads of one JSON object's members: a member must exist with the JSON type asked for, and an
// integer must fit the C++ type (no silent conversion of 3.5, "2" or -1 into a count). The first
// problem is kept and reported naming `where` and the member.
class Fields {
 public:
  Fields(const json& j, std::string where, Status* error) : j_(j), where_(std::move(where)), error_(error) {
    if (!j_.is_object()) Fail("", "is not a JSON object");
  }
  template <typename T>
  T Int(const char* key, T min = std::numeric_limits<T>::min(), T max = std::numeric_limits<T>::max()) {
    const json* v = Find(key);
    if (v == nullptr) return T{};
    bool ok = false;
    T out{};
    if (v->is_number_integer() && !v->is_number_unsigned() && v->get<int64_t>() < 0) {
      if constexpr (std::is_signed_v<T>) ok = v->get<int64_t>() >= static_cast<int64_t>(min);
      if (ok) out = static_cast<T>(v->get<int64_t>());
    } else if (v->is_number_integer()) {
      uint64_t u = v->is_number_unsigned() ? v->get<uint64_t>() : static_cast<uint64_t>(v->get<int64_t>());
      ok = u <= static_cast<uint64_t>(max) && (min < T{1} || u >= static_cast<uint64_t>(min));
      if (ok) out = static_cast<T>(u);
    }
    if (!ok) Fail(key, fmt::format("is {}, not an integer in [{}, {}]", v->dump(), min, max));
    return out;
  }
  std::string Str(const char* key) {
    const json* v = Find(key);
    if (v == nullptr) return {};
    if (!v->is_string()) return Fail(key, fmt::format("is {}, not a string", v->dump())), std::string();
    return v->get<std::string>();
  }
  const json& Array(const char* key) {
    static const json kEmpty = json::array();
    const json* v = Find(key);
    if (v == nullptr) return kEmpty;
    if (!v->is_array()) return Fail(key, fmt::format("is {}, not an array", v->dump())), kEmpty;
    return *v;
  }
  uint32_t Crc(const char* key) {
    std::string s = Str(key);
    uint32_t crc = 0;
    if (error_->ok() && !ParseCrcHex(s, &crc)) Fail(key, fmt::format("is '{}', not 8 lower-case hex digits", s));
    return crc;
  }
  void Fail(const char* key, const std::string& what) {
    if (!error_->ok()) return;
    *error_ = Corrupt(fmt::format("{}{}{} {}", where_, *key ? "." : "", key, what));
  }

 private:
  const json* Find(const char* key) {
    if (!error_->ok() || !j_.is_object()) return nullptr;
    auto it = j_.find(key);
    if (it == j_.end()) {
      Fail(key, "is missing");
      return nullptr;
    }
    return &*it;
  }
  const json& j_;
  std::string where_;
  Status* error_;
};

}  // namespace

std::string ManifestToJson(const Manifest& m) {
  json j;
  j["format"] = m.digest ? kFormatName : kLegacyFormatName;
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
  if (m.digest) j["manifest_crc32c"] = CrcHex(ManifestDigest(j));
  return j.dump(1) + "\n";
}

Result<Manifest> ManifestFromJson(const std::string& text, const std::string& what) {
  Manifest m;
  Status err;
  if (size_t at = NestingExceeds(text, Syntax::kJson); at != std::string::npos)
    return Corrupt(fmt::format("{}: the manifest nests deeper than {} levels (at byte {})", what, kMaxNesting, at));
  try {
    json j = json::parse(text);
    Fields top(j, what + ": manifest", &err);
    std::string format = top.Str("format");
    if (!err.ok()) return err;
    if (format == kFormatName) {
      uint32_t recorded = top.Crc("manifest_crc32c");
      if (!err.ok()) return err;
      uint32_t actual = ManifestDigest(j);
      if (actual != recorded)
        return Corrupt(
            fmt::format("{}: the manifest fails its checksum: CRC32C {} of its contents, manifest_crc32c "
                        "says {} (it was changed after it was written)",
                        what, CrcHex(actual), CrcHex(recorded)));
    } else if (format == kLegacyFormatName) {
      if (j.contains("manifest_crc32c"))
        return Corrupt(fmt::format("{}: format '{}' has no manifest_crc32c, but this manifest has one", what, format));
      m.digest = false;
    } else {
      return Corrupt(
          fmt::format("{}: format is '{}', expected '{}' (or '{}')", what, format, kFormatName, kLegacyFormatName));
    }
    m.step = top.Int<int64_t>("step", 0);
    m.world = top.Int<int>("world", 1);
    m.created_unix = j.contains("created_unix") ? top.Int<int64_t>("created_unix") : 0;
    const json& files = top.Array("files");
    for (size_t i = 0; err.ok() && i < files.size(); ++i) {
      Fields jf(files[i], fmt::format("{}: files[{}]", what, i), &err);
      ManifestFile f;
      f.rank = jf.Int<int>("rank", 0);
      f.name = jf.Str("name");
      f.bytes = jf.Int<uint64_t>("bytes");
      f.crc = jf.Crc("crc32c");
      if (err.ok() && (f.name.find('/') != std::string::npos || f.name.find("..") != std::string::npos))
        return Corrupt(fmt::format("{}: file name '{}' is not a plain name", what, f.name));
      m.files.push_back(std::move(f));
    }
    const json& tensors = top.Array("tensors");
    for (size_t i = 0; err.ok() && i < tensors.size(); ++i) {
      Fields jt(tensors[i], fmt::format("{}: tensors[{}]", what, i), &err);
      ManifestTensor t;
      t.name = jt.Str("name");
      std::string dtype = jt.Str("dtype"), sharding = jt.Str("sharding");
      const json& shape = jt.Array("shape");
      const json& pieces = jt.Array("pieces");
      if (!err.ok()) break;
      auto dt = ParseDType(dtype);
      if (!dt || dtype != DTypeName(*dt))
        return Corrupt(fmt::format("{}: tensor '{}' has unknown dtype '{}'", what, t.name, dtype));
      t.dtype = *dt;
      if (sharding != "row" && sharding != "replicated")
        return Corrupt(
            fmt::format("{}: tensor '{}' has sharding '{}', expected 'row' or 'replicated'", what, t.name, sharding));
      t.sharding = sharding == "row" ? Sharding::kRowSharded : Sharding::kReplicated;
      for (size_t d = 0; d < shape.size(); ++d) {
        if (!shape[d].is_number_integer() || (!shape[d].is_number_unsigned() && shape[d].get<int64_t>() < 0) ||
            (shape[d].is_number_unsigned() &&
             shape[d].get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())))
          return Corrupt(fmt::format("{}: tensor '{}' has shape {}: dimension {} is not a non-negative integer", what,
                                     t.name, shape.dump(), d));
        t.shape.push_back(shape[d].get<int64_t>());
      }
      for (size_t k = 0; err.ok() && k < pieces.size(); ++k) {
        Fields jp(pieces[k], fmt::format("{}: tensor '{}' pieces[{}]", what, t.name, k), &err);
        Piece p;
        p.file = jp.Int<int>("file", 0);
        p.row_offset = jp.Int<int64_t>("row_offset", 0);
        p.rows = jp.Int<int64_t>("rows", 0);
        const json& br = jp.Array("byte_range");
        p.crc = jp.Crc("crc32c");
        if (!err.ok()) break;
        if (br.size() != 2) {
          jp.Fail("byte_range", fmt::format("is {}, not [begin, end]", br.dump()));
          break;
        }
        const json range{{"begin", br[0]}, {"end", br[1]}};
        Fields jr(range, fmt::format("{}: tensor '{}' pieces[{}].byte_range", what, t.name, k), &err);
        p.begin = jr.Int<uint64_t>("begin");
        p.end = jr.Int<uint64_t>("end");
        if (!err.ok()) break;
        t.pieces.push_back(p);
      }
      m.tensors.push_back(std::move(t));
    }
  } catch (const std::exception& e) {
    return Corrupt(fmt::format("{}: manifest does not parse: {}", what, e.what()));
  }
  if (!err.ok()) return err;
  TSR_RETURN_IF_ERROR(ValidateManifest(m, what));
  return m;
}

Result<Manifest> ManifestForStep(const std::string& text, const std::string& what, int64_t step) {
  TSR_ASSIGN_OR_RETURN(Manifest m, ManifestFromJson(text, what));
  if (m.step != step) return Corrupt(fmt::format("{}: the manifest says step {}", what, m.step));
  return m;
}

Status ValidateManifest(const Manifest& m, const std::string& what) {
  auto bad = [&](const std::string& msg) { return Corrupt(fmt::format("{}: {}", what, msg)); };
  if (m.world < 1 || static_cast<size_t>(m.world) != m.files.size())
    return bad(fmt::format("world {} with {} files listed", m.world, m.files.size()));
  for (size_t i = 0; i < m.files.size(); ++i) {
    const ManifestFile& f = m.files[i];
    if (f.rank != static_cast<int>(i) || f.name != ShardFileName(static_cast<int>(i), m.world))
      return bad(fmt::format("files[{}] is rank {} named '{}'; expected rank {} named '{}'", i, f.rank, f.name, i,
                             ShardFileName(static_cast<int>(i), m.world)));
  }
  std::set<std::string> names;
  // Byte ranges per file, to check that no two pieces share bytes.
  std::vector<std::vector<std::pair<uint64_t, uint64_t>>> ranges(m.files.size());
  for (const auto& t : m.tensors) {
    std::string tw = fmt::format("tensor '{}'", t.name);
    if (t.name.empty() || t.name == "__metadata__" || !names.insert(t.name).second)
      return bad(fmt::format("{} is empty, reserved or listed twice", tw));
    if (!IsValid(t.dtype) || std::string(SafetensorsDType(t.dtype)) == "?")
      return bad(fmt::format("{} has a dtype checkpoints do not store", tw));
    uint64_t row_bytes = 0, total = 0;
    const int64_t rows = Rows(t.shape);
    if (!CheckedRowBytes(t.dtype, t.shape, &row_bytes) || !CheckedMul(row_bytes, static_cast<uint64_t>(rows), &total))
      return bad(fmt::format("{} has shape {} whose size overflows", tw, json(t.shape).dump()));
    if (t.sharding == Sharding::kRowSharded && t.shape.empty())
      return bad(fmt::format("{} is row-sharded but 0-d", tw));
    if (t.sharding == Sharding::kReplicated && t.pieces.size() != 1)
      return bad(fmt::format("{} is replicated but has {} pieces (one expected)", tw, t.pieces.size()));
    int64_t next = 0;
    std::set<int> files;
    for (size_t k = 0; k < t.pieces.size(); ++k) {
      const Piece& p = t.pieces[k];
      std::string pw = fmt::format("{} piece {} (file #{}, rows [{}, {}))", tw, k, p.file, p.row_offset,
                                   static_cast<uint64_t>(p.row_offset) + static_cast<uint64_t>(p.rows));
      if (p.file < 0 || static_cast<size_t>(p.file) >= m.files.size())
        return bad(fmt::format("{} refers to file #{} of {}", pw, p.file, m.files.size()));
      if (!files.insert(p.file).second) return bad(fmt::format("{}: a second piece in that file", pw));
      if (p.row_offset != next || p.rows < 0 || p.rows > rows - next)
        return bad(
            fmt::format("{}: pieces must cover rows [0, {}) once, in row order; the next row is {}", pw, rows, next));
      next += p.rows;
      uint64_t bytes = 0;
      CheckedMul(row_bytes, static_cast<uint64_t>(p.rows), &bytes);  // ≤ total: cannot overflow
      const ManifestFile& f = m.files[static_cast<size_t>(p.file)];
      if (p.end < p.begin || p.end - p.begin != bytes || p.begin < 8 || p.end > f.bytes)
        return bad(fmt::format("{}: byte range [{}, {}) for {} bytes ({} rows of {}) in a file of {} bytes", pw,
                               p.begin, p.end, bytes, p.rows, row_bytes, f.bytes));
      ranges[static_cast<size_t>(p.file)].push_back({p.begin, p.end});
    }
    if (next != rows) return bad(fmt::format("{} has rows [0, {}) of {} stored", tw, next, rows));
  }
  for (size_t i = 0; i < ranges.size(); ++i) {
    auto& r = ranges[i];
    std::sort(r.begin(), r.end());
    for (size_t k = 1; k < r.size(); ++k)
      if (r[k].first < r[k - 1].second)
        return bad(fmt::format("file {} has pieces overlapping at bytes [{}, {})", m.files[i].name, r[k].first,
                               r[k - 1].second));
  }
  return Status::Ok();
}

// ---- file helpers (ReadFile, WriteFileAtomic, PwriteAll, PreadAll: common/file) ----------------------
Status MakeDirs(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return SystemError(fmt::format("cannot create directory {}: {}", dir, ec.message()));
  return Status::Ok();
}

Result<Fd> OpenStepDir(const std::string& dir) {
  const std::string name = dir.substr(dir.rfind('/') == std::string::npos ? 0 : dir.rfind('/') + 1);
  auto root = OpenDir(DirName(dir));
  if (!root.ok()) return root.status();
  auto d = OpenBeneath(root->get(), name, O_RDONLY | O_DIRECTORY, dir);
  if (!d.ok() && d.status().code() == Code::kCorrupt)
    return Corrupt(
        fmt::format("{} (checkpoint commands never follow a link out of their root, nor read what is not a step "
                    "directory)",
                    d.status().message()));
  return d;
}

Result<int> CreateFileExclusiveAt(int dirfd, const std::string& name, const std::string& what, int mode) {
  if (::unlinkat(dirfd, name.c_str(), 0) != 0 && errno != ENOENT) return ErrnoError("remove " + what, errno);
  int fd = ::openat(dirfd, name.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode);
  if (fd < 0) return ErrnoError("create " + what, errno);
  return fd;
}

Result<int> CreateFileExclusive(const std::string& path, int mode) {
  return CreateFileExclusiveAt(AT_FDCWD, path, path, mode);
}

Status RemoveTree(const std::string& path) {
  std::error_code ec;
  std::filesystem::remove_all(path, ec);
  if (ec) return SystemError(fmt::format("cannot remove {}: {}", path, ec.message()));
  return Status::Ok();
}

// ---- hooks ---------------------------------------------------------------------------------------------
namespace {
std::mutex g_hook_mu;
std::function<void(const char*)> g_crash_hook;
}  // namespace
namespace testing {
void SetCrashHook(std::function<void(const char*)> hook) {
  std::lock_guard lk(g_hook_mu);
  g_crash_hook = std::move(hook);
}
}  // namespace testing
void CrashPoint(const char* point) {
  std::function<void(const char*)> h;
  {
    std::lock_guard lk(g_hook_mu);
    h = g_crash_hook;
  }
  if (h) h(point);
}

}  // namespace tessera::ckpt
