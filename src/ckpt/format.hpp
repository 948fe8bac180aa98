// ckpt/format: on-disk layout of a checkpoint — names, the safetensors header, the manifest (JSON) —
// and the small file helpers (atomic write, pread/pwrite loops) that every tier uses.
// Internal to src/ckpt; the public contract is include/tessera/ckpt.hpp.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "common/beneath.hpp"
#include "common/dtype.hpp"
#include "common/file.hpp"
#include "tessera/ckpt.hpp"

namespace tessera::ckpt {

inline constexpr const char* kManifestName = "manifest.json";
// Manifests written now carry their own digest ("manifest_crc32c"); those of the previous format
// ("tessera-ckpt/1", written before the digest existed) are still read, as unprotected manifests.
inline constexpr const char* kFormatName = "tessera-ckpt/2";
inline constexpr const char* kLegacyFormatName = "tessera-ckpt/1";

std::string StepDirName(int64_t step);  // "step-0000000042"
bool ParseStepDirName(const std::string& name, int64_t* step);
std::string ShardFileName(int rank, int world);  // "rank-00000-of-00004.safetensors"
std::string PartFileName(int rank);              // "rank-00000.part.json" (pre-commit)
std::string JoinPath(const std::string& a, const std::string& b);

const char* SafetensorsDType(DType t);  // "F32", "BF16", ...
bool ParseSafetensorsDType(const std::string& s, DType* t);
// A safetensors file starts with its JSON header's length, 8 bytes little-endian.
inline uint64_t SafetensorsHeaderLength(const void* first8) {
  const auto* b = static_cast<const unsigned char*>(first8);
  uint64_t len = 0;
  for (int i = 7; i >= 0; --i) len = (len << 8) | b[i];
  return len;
}

struct Piece {   // one rank's part of one tensor, as stored
  int file = 0;  // index into Manifest::files (= writer rank)
  int64_t row_offset = 0;
  int64_t rows = 0;
  uint64_t begin = 0, end = 0;  // absolute byte range in the file
  uint32_t crc = 0;
};
struct ManifestTensor {
  std::string name;
  DType dtype = DType::kFloat32;
  std::vector<int64_t> shape;  // global
  Sharding sharding = Sharding::kReplicated;
  std::vector<Piece> pieces;
};
struct ManifestFile {
  int rank = 0;
  std::string name;
  uint64_t bytes = 0;
  uint32_t crc = 0;
};
struct Manifest {
  int64_t step = -1;
  int world = 0;
  int64_t created_unix = 0;
  std::vector<ManifestFile> files;
  std::vector<ManifestTensor> tensors;
  // true: written (and read back) as kFormatName with its digest. false: read from a kLegacyFormatName
  // manifest, which has none; ManifestToJson then writes it in that format again, so that a tier move
  // never vouches for contents that nobody sealed.
  bool digest = true;
  uint64_t TotalBytes() const;
};

// JSON text of the manifest. With m.digest, the member "manifest_crc32c" is the CRC32C of the compact
// serialization (nlohmann::json::dump(), keys sorted) of the manifest object without that member.
std::string ManifestToJson(const Manifest& m);
// Parses and checks a manifest: its digest (kFormatName), strict field types and ranges, then
// ValidateManifest. `what` names the source in errors ("checkpoint step 42: /x/manifest.json").
Result<Manifest> ManifestFromJson(const std::string& text, const std::string& what);
// ManifestFromJson, and the manifest must be the one of `step` (what every tier's ReadManifest uses).
Result<Manifest> ManifestForStep(const std::string& text, const std::string& what, int64_t step);
// The structural checks a manifest must pass before any byte is read on its word (Corrupt, naming
// `what`, the tensor, the piece and the value): world and files (rank i is file i, named
// ShardFileName(i, world)); unique tensor names; storable dtypes; non-negative dimensions whose byte
// sizes do not overflow; a replicated tensor has one piece of all rows; a row-sharded tensor's pieces,
// in row order and in distinct files, tile [0, shape[0]) exactly; every piece's byte range holds
// exactly rows × row size bytes, lies after the 8-byte length inside its file, and does not overlap
// another piece of that file. The agreement with the shard files' own headers is checked by the reader.
Status ValidateManifest(const Manifest& m, const std::string& what);

// Row size in bytes (product of dims after the first × element size); for 0-d tensors the element size.
uint64_t RowBytes(DType dtype, const std::vector<int64_t>& shape);
// The same, false when a dimension is negative or the product overflows 64 bits.
bool CheckedRowBytes(DType dtype, const std::vector<int64_t>& shape, uint64_t* out);
// a × b, false on overflow.
inline bool CheckedMul(uint64_t a, uint64_t b, uint64_t* out) { return !__builtin_mul_overflow(a, b, out); }
inline int64_t Rows(const std::vector<int64_t>& shape) { return shape.empty() ? 1 : shape[0]; }

// ---- file helpers -------------------------------------------------------------------------------
// ReadFile, WriteFileAtomic, FsyncDir, PwriteAll, PreadAll: common/file.hpp.
Status MakeDirs(const std::string& dir);
Status RemoveTree(const std::string& path);
// A job owns its checkpoint root and may plant links in it, or swap a directory for one while a command runs:
// no command follows one out of the root. The root's own path is the operator's (followed as given); beneath
// it, a step directory is opened once (OpenStepDir) and everything in it is resolved from that descriptor
// (common/beneath: openat2 RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS, or an openat(O_NOFOLLOW) walk), so a check and
// the use that follows it see the same directory.
// Opens the step directory `dir` (ROOT/step-N) beneath ROOT: NotFound when absent; Corrupt naming it ("... is a
// symbolic link ...") when it is a link or not a directory.
Result<Fd> OpenStepDir(const std::string& dir);
// Creates `name` in the directory `dirfd` for writing, exclusively (O_CREAT|O_EXCL|O_NOFOLLOW): whatever is
// already there — a stale file, or a link planted to make the write land elsewhere — is unlinked first (the
// link, never its target). `what` names it in errors.
Result<int> CreateFileExclusiveAt(int dirfd, const std::string& name, const std::string& what, int mode = 0644);
// The same for a path (its directory part resolved as given).
Result<int> CreateFileExclusive(const std::string& path, int mode = 0644);

// ---- test hooks (fault injection) ------------------------------------------------------------------
namespace testing {
// Called before every data write of a checkpoint file (every PwriteAll); a non-zero return is used as errno
// (e.g. ENOSPC). The hook is common/file's.
using ::tessera::fault::SetWriteHook;
// Called at named points ("save:shard-written", "save:before-manifest", "demote:copied",
// "demote:marked", ...); tests use it to SIGKILL a forked child at that point.
void SetCrashHook(std::function<void(const char* point)> hook);
}  // namespace testing
void CrashPoint(const char* point);

}  // namespace tessera::ckpt
