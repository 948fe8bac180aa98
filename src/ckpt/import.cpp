// ckpt/import: safetensors files → one committed checkpoint step (see import.hpp). Files are mapped
// read-only; the writer's snapshot is the one copy, then it persists and commits as any save does.
#include "ckpt/import.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>

#include "ckpt/format.hpp"

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
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoError("import: open " + path, errno);
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

// Adds the tensors of one mapped safetensors file to `views`, checking the header against the file.
Status ReadTensors(const Mapped& m, std::vector<TensorView>* views, std::map<std::string, std::string>* owner) {
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
  try {
    h = json::parse(std::string(m.data + 8, hlen));
  } catch (const std::exception& e) {
    return bad(fmt::format("is not a safetensors file: its header is not JSON ({})", e.what()));
  }
  if (!h.is_object()) return bad("is not a safetensors file: its header is not a JSON object");
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
      shape = t.at("shape").get<std::vector<int64_t>>();
      off = t.at("data_offsets").get<std::vector<uint64_t>>();
    } catch (const std::exception& e) {
      return bad(fmt::format("{} has a bad header entry: {}", where, e.what()));
    }
    uint64_t n = DTypeSize(dt);
    for (int64_t d : shape) {
      if (d < 0) return bad(fmt::format("{} has a negative dimension", where));
      n *= static_cast<uint64_t>(d);
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
