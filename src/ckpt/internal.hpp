// ckpt/internal: functions shared between the ckpt sources and the CLI/tests that are not part of the
// public API (manifest loading, progress-reporting variants).
#pragma once

#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "ckpt/format.hpp"
#include "tessera/ckpt.hpp"

namespace tessera::ckpt {

Result<Manifest> LoadManifest(const std::string& root, int64_t step);
CheckpointInfo InfoFromManifest(const Manifest& m, const std::string& dir);
Status VerifyDir(const Manifest& m, const std::string& dir, VerifyOptions options, const Progress& progress);
// VerifyDir of the directory open as `dirfd` (`dir` names it in errors): its files are resolved beneath it.
Status VerifyDirAt(const Manifest& m, int dirfd, const std::string& dir, VerifyOptions options,
                   const Progress& progress);

// Checks the bytes of one shard file against the manifest, the same way for every tier (hot: pread;
// warm: ranged GETs in parallel; cold: a decompressed stream). Header() takes the file's first 8 +
// header-length bytes and checks the safetensors header: exactly the tensors the manifest places in the
// file, with its dtypes, local shapes and byte ranges, covering the data bytes exactly, and the
// tessera.step/rank/world metadata. Add() takes every byte range of the file exactly once, in any order,
// from any thread. Finish() then checks the CRC32C of the file and of each piece in it.
class ShardCheck {
 public:
  // `name` names the file or object in errors ("file /x/rank-00000-of-00002.safetensors", "s3://b/k").
  ShardCheck(const Manifest& m, size_t file, std::string name);
  // The safetensors header length, from the first 8 bytes; Corrupt when it does not fit the file.
  Result<uint64_t> HeaderLength(const void* first8) const;
  Status Header(const std::string& first_bytes);
  void Add(uint64_t offset, const void* data, size_t n);
  Status Finish();
  std::string Where(const std::string& what) const;

 private:
  struct Segment {  // the header, then each piece in file order: together they tile the file
    uint64_t begin, end;
    const ManifestTensor* tensor;  // null for the header
    const Piece* piece;
  };
  const Manifest& m_;
  size_t fi_;
  std::string name_;
  std::vector<Segment> segs_;
  bool header_ok_ = false;
  std::mutex mu_;
  std::vector<std::map<uint64_t, std::pair<uint32_t, uint64_t>>> parts_;  // per segment: offset -> (crc, length)
};
Status VerifyWithProgress(const std::string& root, int64_t step, VerifyOptions options, const Progress& progress);
Status RestoreFrom(const Manifest& m, const std::string& dir, const std::vector<TensorSlot>& slots, int threads,
                   const Progress& progress);
Status RestoreWithProgress(const std::string& root, int64_t step, const std::vector<TensorSlot>& slots,
                           const Progress& progress);

}  // namespace tessera::ckpt
