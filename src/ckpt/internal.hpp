// ckpt/internal: functions shared between the ckpt sources and the CLI/tests that are not part of the
// public API (manifest loading, progress-reporting variants).
#pragma once

#include "ckpt/format.hpp"
#include "tessera/ckpt.hpp"

namespace tessera::ckpt {

Result<Manifest> LoadManifest(const std::string& root, int64_t step);
CheckpointInfo InfoFromManifest(const Manifest& m, const std::string& dir);
Status VerifyDir(const Manifest& m, const std::string& dir, VerifyOptions options, const Progress& progress);
Status VerifyWithProgress(const std::string& root, int64_t step, VerifyOptions options, const Progress& progress);
Status RestoreFrom(const Manifest& m, const std::string& dir, const std::vector<TensorSlot>& slots, int threads,
                   const Progress& progress);
Status RestoreWithProgress(const std::string& root, int64_t step, const std::vector<TensorSlot>& slots,
                           const Progress& progress);

}  // namespace tessera::ckpt
