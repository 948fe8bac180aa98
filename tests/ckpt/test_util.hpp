// tests/ckpt/test_util: temporary directories and deterministic tensor data for the checkpoint tests.
#pragma once

#include <unistd.h>

#include <cstdint>
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

}  // namespace tessera::ckpt::test
