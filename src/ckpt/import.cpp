// ckpt/import: safetensors files → one committed checkpoint step (see import.hpp). Files are mapped
// read-only; the writer's snapshot is the one copy, then it persists and commits as any save does.
#include "ckpt/import.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "ckpt/format.hpp"
#include "common/nesting.hpp"

namespace tessera::ckpt {
namespace {

using json = nlohmann::json;

// A read-only mapping of one input file, unmapped when done.
struct Mapped {
  std::string path;
  const char* data = nullptr;
  uint64_t size = 0;
  Mapped() = default;
  Mapped(const Mapped&) = delete;
  Mapped& operator=(const Mapped&) = delete;
  ~Mapped() {
    if (data && size) ::munmap(const_cast<char*>(data), size);
  }
};

Status MapFile(const std::string& path, Mapped* m) {
  m->path = path;
  // The files to import may be links (a model cache's are), but must end at regular files: never a FIFO.
  auto opened = OpenRegularFile(path, /*follow_links=*/true);
  if (!opened.ok()) return opened.status().WithContext("import");
  int fd = *opened;
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    int e = errno;
    ::close(fd);
    return ErrnoError("import: stat " + path, e);
  }
  m->size = static_cast<uint64_t>(st.st_size);
  if (m->size > 0) {
    void* p = ::mmap(nullptr, m->size, PROT_READ, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
      int e = errno;
      ::close(fd);
      m->size = 0;
      return ErrnoError("import: mmap " + path, e);
    }
    ::madvise(p, m->size, MADV_SEQUENTIAL);
    m->data = static_cast<const char*>(p);
  }
  ::close(fd);
  return Status::Ok();
}

std::string StoredDTypes() {
  std::string s;
  for (int i = 0; i < static_cast<int>(DType::kCount); ++i)
    s += fmt::format("{}{}", s.empty() ? "" : " ", SafetensorsDType(static_cast<DType>(i)));
  return s;
}

}  // namespace

Status ParseSafetensors(const char* data, uint64_t size, const std::string& path, std::vector<TensorView>* views,
                        std::map<std::string, std::string>* owner) {
  struct {
    const std::string& path;
    const char* data;
    uint64_t size;
  } m{path, data, size};
  // `what` reads after the file name: "is shorter ...", or ": tensor 'x' has ...".
  auto bad = [&](const std::string& what) {
    return InvalidArgument(fmt::format("import: {}{}{}", m.path, what.rfind(":", 0) == 0 ? "" : " ", what));
  };
  if (m.size < 8) return bad("is shorter than a safetensors header (8-byte length + JSON)");
  const uint64_t hlen = SafetensorsHeaderLength(m.data);
  if (hlen > m.size - 8) return bad(fmt::format("has a header length of {} bytes, beyond its {} bytes", hlen, m.size));
  const char* base = m.data + 8 + hlen;
  uint64_t data_size = m.size - 8 - hlen;
  json h;
  std::string twice;  // a key the header's top-level object names twice (parsing keeps only the last)
  std::set<std::string> keys;
  auto note_keys = [&](int depth, json::parse_event_t event, json& parsed) {
    if (depth == 1 && event == json::parse_event_t::key && !keys.insert(parsed.get<std::string>()).second &&
        twice.empty())
      twice = parsed.get<std::string>();
    return true;
  };
  if (size_t at = NestingExceeds(std::string_view(m.data + 8, hlen), Syntax::kJson); at != std::string::npos)
    return bad(fmt::format("has a header that nests deeper than {} levels (at byte {})", kMaxNesting, 8 + at));
  try {
    h = json::parse(std::string(m.data + 8, hlen), note_keys);
  } catch (const std::exception& e) {
    return bad(fmt::format("is not a safetensors file: its header is not JSON ({})", e.what()));
  }
  if (!h.is_object()) return bad("is not a safetensors file: its header is not a JSON object");
  if (!twice.empty()) return bad(fmt::format(": tensor '{}' is given twice in its header", twice));
  for (const auto& [name, t] : h.items()) {
    if (name == "__metadata__") continue;
    std::string where = fmt::format(": tensor '{}'", name);
    DType dt;
    std::vector<int64_t> shape;
    std::vector<uint64_t> off;
    try {
      std::string ds = t.at("dtype").get<std::string>();
      if (!ParseSafetensorsDType(ds, &dt))
        return bad(
            fmt::format("{} has dtype {}, which checkpoints do not store (they store {})", where, ds, StoredDTypes()));
      for (const auto& d : t.at("shape"))
        if (!d.is_number_integer())
          return bad(fmt::format("{} has a dimension {}, not an integer", where, d.dump().substr(0, 40)));
      shape = t.at("shape").get<std::vector<int64_t>>();
      off = t.at("data_offsets").get<std::vector<uint64_t>>();
    } catch (const std::exception& e) {
      return bad(fmt::format("{} has a bad header entry: {}", where, e.what()));
    }
    uint64_t n = DTypeSize(dt);
    for (int64_t d : shape) {
      if (d < 0) return bad(fmt::format("{} has a negative dimension", where));
      // A product that wraps could match a small byte range while the shape says far more.
      if (!CheckedMul(n, static_cast<uint64_t>(d), &n))
        return bad(fmt::format("{} has shape {} whose size overflows", where, json(shape).dump()));
    }
    if (off.size() != 2 || off[0] > off[1] || off[1] > data_size || off[1] - off[0] != n)
      return bad(fmt::format("{} has data_offsets that do not hold its {} bytes inside the file's {} data bytes", where,
                             n, data_size));
    auto [it, fresh] = owner->emplace(name, m.path);
    if (!fresh) return bad(fmt::format("{} is also in {} (names must be unique)", where, it->second));
    views->push_back({name, dt, shape, base + off[0]});
  }
  return Status::Ok();
}

namespace {
Status ReadTensors(const Mapped& m, std::vector<TensorView>* views, std::map<std::string, std::string>* owner) {
  return ParseSafetensors(m.data, m.size, m.path, views, owner);
}
}  // namespace

Result<ImportSummary> ImportSafetensors(const std::string& root, int64_t step, const std::vector<std::string>& paths,
                                        const SaveProgress& progress) {
  ImportSummary sum;
  namespace fs = std::filesystem;
  for (const auto& p : paths) {
    std::error_code ec;
    if (!fs::is_directory(p, ec)) {
      sum.files.push_back(p);
      continue;
    }
    std::vector<std::string> found;
    for (const auto& e : fs::directory_iterator(p, ec))
      if (e.is_regular_file() && e.path().extension() == ".safetensors") found.push_back(e.path().string());
    if (ec) return SystemError(fmt::format("import: cannot list {}: {}", p, ec.message()));
    if (found.empty()) return InvalidArgument(fmt::format("import: {} holds no .safetensors files", p));
    std::sort(found.begin(), found.end());
    sum.files.insert(sum.files.end(), found.begin(), found.end());
  }
  if (sum.files.empty()) return InvalidArgument("import: no input files");
  std::vector<std::unique_ptr<Mapped>> maps;
  std::vector<TensorView> views;
  std::map<std::string, std::string> owner;
  for (const auto& f : sum.files) {
    maps.push_back(std::make_unique<Mapped>());
    TSR_RETURN_IF_ERROR(MapFile(f, maps.back().get()));
    TSR_RETURN_IF_ERROR(ReadTensors(*maps.back(), &views, &owner));
  }
  if (views.empty()) return InvalidArgument(fmt::format("import: {} hold no tensors", fmt::join(sum.files, ", ")));
  // One import of a step at a time: two started together would write the same shard names and both commit.
  // The lock is the kernel's (flock), so a killed import leaves no stale lock; the file stays (removing it
  // would let a third import lock a new file while the second holds the old one).
  TSR_RETURN_IF_ERROR(MakeDirs(root));
  const std::string lock = JoinPath(root, fmt::format(".{}.import-lock", StepDirName(step)));
  int lfd = ::open(lock.c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (lfd < 0) return ErrnoError("import: create " + lock, errno);
  struct LockCloser {
    int fd;
    ~LockCloser() { ::close(fd); }
  } lock_closer{lfd};
  if (::flock(lfd, LOCK_EX | LOCK_NB) != 0) {
    if (errno == EWOULDBLOCK)
      return InvalidArgument(fmt::format(
          "import: checkpoint step {} is being imported into {} by another process (it holds {}); nothing was "
          "written",
          step, root, lock));
    return ErrnoError("import: lock " + lock, errno);
  }
  WriterOptions wo;
  wo.progress = progress;
  TSR_ASSIGN_OR_RETURN(auto w, CheckpointWriter::Open(root, 0, 1, wo));
  TSR_RETURN_IF_ERROR(w->Save(step, views));
  TSR_RETURN_IF_ERROR(w->Wait());
  sum.tensors = views.size();
  for (const auto& v : views) {
    uint64_t n = DTypeSize(v.dtype);
    for (int64_t d : v.shape) n *= static_cast<uint64_t>(d);
    sum.bytes += n;
  }
  sum.dir = JoinPath(root, StepDirName(step));
  return sum;
}

}  // namespace tessera::ckpt
