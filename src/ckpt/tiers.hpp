// ckpt/tiers: one interface over the three tiers (hot directory, warm S3, cold zstd archive) so that
// demotion, staging and listing are written once: copy the data → verify it → commit (manifest or
// index = "mark ready") → delete the source (uncommit first). Internal to src/ckpt.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "ckpt/format.hpp"
#include "tessera/ckpt.hpp"

namespace tessera::ckpt {

class TierStore {
 public:
  virtual ~TierStore() = default;
  virtual Tier tier() const = 0;
  virtual std::string Describe() const = 0;                 // "hot /x", "warm s3://b/p", ...
  virtual Result<std::vector<int64_t>> List() = 0;          // committed steps, ascending
  virtual Result<Manifest> ReadManifest(int64_t step) = 0;  // NotFound when not committed here
  // Copies the data files of `m` from the local directory `src_dir` (not committed yet).
  virtual Status Put(const Manifest& m, const std::string& src_dir, const Progress& progress) = 0;
  // Reads the copy back and checks every file's CRC32C against `m`.
  virtual Status VerifyCopy(const Manifest& m, const Progress& progress) = 0;
  virtual Status Commit(const Manifest& m) = 0;  // mark ready (last, atomic)
  // Copies the committed step's data files into local `dst_dir` (manifest not included).
  virtual Status Fetch(const Manifest& m, const std::string& dst_dir, const Progress& progress) = 0;
  virtual Status Delete(int64_t step) = 0;  // uncommit first, then data
};

std::unique_ptr<TierStore> MakeHotStore(const std::string& root);
Result<std::unique_ptr<TierStore>> MakeWarmStore(const std::string& uri);  // s3://bucket/prefix
Result<std::unique_ptr<TierStore>> MakeColdStore(const std::string& dir);
// The stores configured in `t`, hot first; missing warm/cold are skipped.
Result<std::vector<std::unique_ptr<TierStore>>> OpenStores(const TierConfig& t);

}  // namespace tessera::ckpt
