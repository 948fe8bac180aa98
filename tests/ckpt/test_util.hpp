// tests/ckpt/test_util: temporary directories and deterministic tensor data for the checkpoint tests.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
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
inline float Val(uint64_t seed, uint64_t i) { return static_cast<float>((seed * 1000003u + i * 7919u) % 1000003u) * 0.5f; }

inline std::vector<float> Fill(uint64_t seed, uint64_t begin, uint64_t n) {
  std::vector<float> v(n);
  for (uint64_t i = 0; i < n; ++i) v[i] = Val(seed, begin + i);
  return v;
}

}  // namespace tessera::ckpt::test
