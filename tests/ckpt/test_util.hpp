// tests/ckpt/test_util: temporary directories and deterministic tensor data for the checkpoint tests.
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace tessera::ckpt::test {

class TempDir {
 public:
  TempDir() {
    std::string t = (std::filesystem::temp_directory_path() / "tsr-ckpt-XXXXXX").string();
    path_ = ::mkdtemp(t.data());
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }
  std::string operator/(const std::string& s) const { return path_ + "/" + s; }

 private:
  std::string path_;
};

// Value of element i of a tensor identified by `seed`: distinct across tensors, steps and positions.
inline float Val(uint64_t seed, uint64_t i) {
  return static_cast<float>((seed * 1000003u + i * 7919u) % 1000003u) * 0.5f;
}

inline std::vector<float> Fill(uint64_t seed, uint64_t begin, uint64_t n) {
  std::vector<float> v(n);
  for (uint64_t i = 0; i < n; ++i) v[i] = Val(seed, begin + i);
  return v;
}

inline std::string ReadText(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

// Rewrites the manifest at `path` as the previous format wrote it: "tessera-ckpt/1", no manifest_crc32c.
inline void ToLegacyManifest(const std::string& path) {
  nlohmann::json j = nlohmann::json::parse(ReadText(path));
  j["format"] = "tessera-ckpt/1";
  j.erase("manifest_crc32c");
  std::ofstream(path, std::ios::binary | std::ios::trunc) << j.dump(1) << "\n";
}

struct StTensor {
  std::string name, dtype;
  std::vector<int64_t> shape;
  std::string bytes;
};
// Writes a safetensors file as the format's spec lays it out (what Hugging Face's library writes).
inline void WriteSafetensors(const std::string& path, const std::vector<StTensor>& ts) {
  nlohmann::json h = nlohmann::json::object();
  h["__metadata__"] = {{"format", "pt"}};
  std::string data;
  for (const auto& t : ts) {
    h[t.name] = {{"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {data.size(), data.size() + t.bytes.size()}}};
    data += t.bytes;
  }
  std::string text = h.dump();
  while (text.size() % 8) text += ' ';
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((text.size() >> (8 * i)) & 0xff);
  std::ofstream(path, std::ios::binary) << out << text << data;
}

template <typename T>
std::string Bytes(const std::vector<T>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
}

// The source tree and the `tessera` binary: from the environment (ctest), else from the build
// (tests/CMakeLists.txt's ENVIRONMENT list reaches ctest as only its first entry).
inline std::string SourceDir() {
  const char* s = std::getenv("TESSERA_SOURCE_DIR");
  return s ? s : TESSERA_TEST_SOURCE_DIR;
}
inline std::string TesseraBin() {
  const char* s = std::getenv("TESSERA_BIN");
  return s ? s : TESSERA_TEST_BIN;
}

// `tessera ckpt ARGS` with stderr merged into out; under timeout(1), so that a command that hangs fails (rc 124)
// instead of hanging the test.
struct Run {
  int rc;
  std::string out;
};
inline Run Tessera(const std::string& args, int timeout_s = 60) {
  std::string cmd = "timeout " + std::to_string(timeout_s) + " " + TesseraBin() + " ckpt " + args + " 2>&1";
  FILE* p = ::popen(cmd.c_str(), "r");
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  int st = ::pclose(p);
  return {WEXITSTATUS(st), out};
}

}  // namespace tessera::ckpt::test
