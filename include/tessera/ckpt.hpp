// tessera/ckpt.hpp — checkpoints: sharded asynchronous save, verified restore with N→M resharding, tiers.
//
// Contract in a few sentences (see docs/ckpt.md for the guide):
//  * A checkpoint is a directory `<root>/step-<step, 10 digits>/` holding one safetensors file per rank
//    (`rank-RRRRR-of-WWWWW.safetensors`, readable by Hugging Face) and `manifest.json`, written LAST and
//    atomically (tmp → fsync → rename → fsync dir) by rank 0 once every rank's part is on disk. A step
//    without a manifest does not exist.
//  * CheckpointWriter::Save(step, tensors) copies the tensors (host memory, or device memory when built
//    with CUDA) into a reusable host buffer — the only blocking part — and persists in the background
//    (parallel pwrite + fsync). Wait() blocks until every queued step is committed and returns the first
//    error. Two snapshot buffers are kept, so a Save may overlap the previous step's persist.
//  * A tensor is replicated (every rank holds all of it; rank 0's copy is stored) or row-sharded (rank r
//    holds rows [row_offset, row_offset + shape[0]) of a tensor of `global_rows` rows). Restore() fills
//    caller buffers with any row range of the global tensor, so N writer ranks can be read by M ranks.
//  * Every shard file and every tensor piece carries a CRC32C in the manifest, and the manifest its own
//    digest (manifest_crc32c); reads verify them. Verify, Latest and Restore run the same checks of the
//    manifest (digest, structure: pieces tile each tensor exactly) and of the shard headers against it
//    before any tensor byte is read, so a step Restore would refuse is never "latest".
//    Latest(root) returns the newest committed step that verifies; a torn or corrupt newer step is
//    skipped with a warning naming the bad file (also returned in LatestInfo::warnings).
//  * Tiers: hot = a directory; warm = S3 (`s3://bucket/prefix`); cold = zstd archive files in a
//    directory. ApplyRetention() moves steps down (copy → verify → mark ready → delete source) and is
//    idempotent and crash-safe. Reading from warm/cold first stages the step back into hot (Stage()).
//  * No function throws; errors are Status values whose message names the checkpoint step and the file.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tessera/status.hpp"

namespace tessera {
enum class DType : int;  // common/dtype.hpp; values match tsrDataType_t (int8=0 … float64=7)
}

namespace tessera::ckpt {

// Element types for code that does not include common/dtype.hpp (same values as tsrDataType_t).
namespace dtype {
inline constexpr DType kInt8 = static_cast<DType>(0), kUint8 = static_cast<DType>(1), kInt32 = static_cast<DType>(2),
                       kInt64 = static_cast<DType>(3), kFloat16 = static_cast<DType>(4),
                       kBfloat16 = static_cast<DType>(5), kFloat32 = static_cast<DType>(6),
                       kFloat64 = static_cast<DType>(7);
}  // namespace dtype

enum class Sharding : int { kReplicated = 0, kRowSharded = 1 };

// One tensor to save: this rank's piece, row-major and contiguous.
struct TensorView {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;  // this rank's local shape
  const void* data = nullptr;  // host memory, or device memory of a runtime this process has started (CUDA, ACL, MUSA)
  Sharding sharding = Sharding::kReplicated;
  int64_t row_offset = 0;    // row-sharded: first global row held here
  int64_t global_rows = -1;  // row-sharded: dim 0 of the whole tensor (required)
};

// One tensor to restore: rows [row_begin, row_begin + rows) of the global tensor into `data` (host or
// device memory). rows = -1 means all rows. `bytes` must equal rows × (row size); dtype is checked.
struct TensorSlot {
  std::string name;
  void* data = nullptr;
  size_t bytes = 0;
  int64_t row_begin = 0;
  int64_t rows = -1;
};

// The even split used by helpers and tests: rows of `global_rows` held by `rank` of `world`
// (the first global_rows % world ranks get one extra row). Returns {row_begin, rows}.
TESSERA_API std::pair<int64_t, int64_t> EvenRows(int64_t global_rows, int rank, int world);

// Progress of a save in the background: `done` of `total` bytes of this rank's shard file for `step`.
using SaveProgress = std::function<void(int64_t step, uint64_t done, uint64_t total)>;

struct WriterOptions {
  int io_threads = 4;                  // parallel pwrite/fsync workers per shard file
  int64_t commit_timeout_ms = 600000;  // rank 0 waits this long for the other ranks' parts
  bool fsync = true;                   // false only for tests/benchmarks of the non-durable path
  // Called from the writer's background threads (keep it cheap) as a step's shard file is written:
  // bytes written so far. Calls for a step are serialized, in step order, and `done` only grows;
  // (total, total) comes exactly once, when the step is durable (rank 0: committed), never for a step
  // that fails. Empty = no calls.
  SaveProgress progress;
};

// Saves this rank's tensors for each step. One writer per rank process; not thread-safe.
class TESSERA_API CheckpointWriter {
 public:
  // root: the hot-tier directory (created if absent). rank/world: this process in the job.
  static Result<std::unique_ptr<CheckpointWriter>> Open(const std::string& root, int rank, int world,
                                                        WriterOptions options = {});
  virtual ~CheckpointWriter() = default;  // waits for queued persists (errors are logged)
  // Snapshots `tensors` into a host buffer (blocking), then persists and commits in the background.
  // Fails at once on bad input (duplicate names, bad sharding) or when an earlier persist failed.
  virtual Status Save(int64_t step, const std::vector<TensorView>& tensors) = 0;
  // Blocks until every saved step is committed (manifest renamed into place on rank 0; on other ranks:
  // this rank's part is durable). Returns the first persist error since the last Wait (naming the step
  // and file) and clears it; steps queued after a failed one are dropped, never committed.
  virtual Status Wait() = 0;
  // Seconds the last Save() blocked (snapshot only) — for benchmarks and logs.
  virtual double LastSnapshotSeconds() const = 0;
};

struct TensorInfo {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;  // global shape
  Sharding sharding;
};

struct CheckpointInfo {
  int64_t step = -1;
  int world = 0;
  std::string dir;           // hot directory (or staged copy) holding the step
  uint64_t bytes = 0;        // sum of shard file sizes
  int64_t created_unix = 0;  // commit time (seconds since the epoch)
  std::vector<TensorInfo> tensors;
  std::vector<std::string> files;  // shard file names, rank order
  // false: the manifest is of the previous format (tessera-ckpt/1), written before manifests carried a
  // digest. It is still checked against the shard files, but a consistent edit of it cannot be detected.
  bool manifest_protected = true;
};

struct LatestInfo {
  int64_t step = -1;                  // -1 when no good checkpoint exists (then status is NotFound)
  std::vector<std::string> warnings;  // one per skipped torn/corrupt step, naming the bad file
};

struct VerifyOptions {
  bool checksums = true;  // false: only the manifest, file presence and sizes (cheap)
};

// Committed steps under a hot root, ascending (no verification beyond "manifest parses").
TESSERA_API Result<std::vector<int64_t>> ListSteps(const std::string& root);
// The manifest of one step.
TESSERA_API Result<CheckpointInfo> Describe(const std::string& root, int64_t step);
// Full check of one step: every shard file present, right size, header matches, CRC32C matches.
TESSERA_API Status Verify(const std::string& root, int64_t step, VerifyOptions options = {});
// The newest committed step that verifies; skips bad ones with a warning naming the bad file.
TESSERA_API Result<LatestInfo> Latest(const std::string& root, VerifyOptions options = {});
// Fills `slots` from step `step` (any reader world size). Verifies the CRC32C of every tensor piece read.
TESSERA_API Status Restore(const std::string& root, int64_t step, const std::vector<TensorSlot>& slots);
// Removes a step (manifest first, so a crash never leaves a half-deleted step that looks committed).
TESSERA_API Status Remove(const std::string& root, int64_t step);

// ---- tiers and retention ----------------------------------------------------------------------------
struct TESSERA_API TierConfig {
  std::string hot;   // directory
  std::string warm;  // "s3://bucket/prefix" (endpoint, region, credentials: env or S3 config file); "" = none
  std::string cold;  // directory of archive files; "" = none
  // From TESSERA_CKPT_ROOT, TESSERA_CKPT_WARM, TESSERA_CKPT_COLD, overridden by non-empty fields of `base`.
  static TierConfig FromEnv(TierConfig base = {});
};

enum class Tier : int { kHot = 0, kWarm = 1, kCold = 2 };
TESSERA_API const char* TierName(Tier t);

struct StepLocation {
  int64_t step;
  std::vector<Tier> tiers;  // every tier holding a committed copy
  uint64_t bytes = 0;
  int64_t created_unix = 0;
};
// Every committed step in any tier, ascending.
TESSERA_API Result<std::vector<StepLocation>> ListAll(const TierConfig& tiers);

// Progress callback for long work: done/total bytes. May be empty.
using Progress = std::function<void(uint64_t done, uint64_t total)>;

// Copies a step from warm or cold back into hot (verified); a no-op when hot already has it.
TESSERA_API Status Stage(const TierConfig& tiers, int64_t step, const Progress& progress = {});
// Copies hot → `to` (warm or cold), verifies, marks ready, deletes the hot copy (if delete_source).
TESSERA_API Status Demote(const TierConfig& tiers, int64_t step, Tier to, bool delete_source,
                          const Progress& progress = {});

struct RetentionPolicy {
  int keep_hot = 2;                   // newest K steps always stay hot
  int64_t demote_to_warm_after = -1;  // seconds of age; -1 = never
  int64_t demote_to_cold_after = -1;  // seconds of age; -1 = never
  int64_t expire_after = -1;          // seconds of age; -1 = never (keep_every steps never expire)
  int64_t keep_every = 0;             // steps divisible by this are kept forever (0 = none)
  // YAML keys as above; durations as "3600", "30m", "7d", "2w". Error names the file and key.
  static Result<RetentionPolicy> Load(const std::string& yaml_path);
};

struct RetentionAction {
  int64_t step;
  std::string action;  // "demote hot->warm", "demote ->cold", "expire", ...
  Status status;
};
// Applies `policy` at time `now_unix` (0 = now). Idempotent; safe to rerun after a crash.
TESSERA_API Result<std::vector<RetentionAction>> ApplyRetention(const TierConfig& tiers, const RetentionPolicy& policy,
                                                                int64_t now_unix = 0, bool dry_run = false,
                                                                const Progress& progress = {});

}  // namespace tessera::ckpt
