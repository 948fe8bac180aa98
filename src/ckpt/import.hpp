// ckpt/import: safetensors files (a Hugging Face model, another framework's export) → one committed
// checkpoint step, through CheckpointWriter (so: CRC32C, manifest last, progress). Every tensor is stored
// replicated (world 1), which any reader world size can restore. `tessera ckpt import` is the front.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "tessera/ckpt.hpp"

namespace tessera::ckpt {

struct ImportSummary {
  std::vector<std::string> files;  // the safetensors files read, in order
  size_t tensors = 0;
  uint64_t bytes = 0;  // tensor bytes saved
  std::string dir;     // the committed step's directory
};

// The tensors of one safetensors file held in memory (`data`, `size` bytes; `path` names it in errors), added to
// `views` (pointing into `data`): the header must lie inside the file, parse as a JSON object of at most 64
// levels with each key once, and give every tensor a stored dtype, integer dimensions whose byte size does not
// overflow, and data_offsets holding exactly those bytes inside the data. `owner` maps names already taken (by
// another file) to that file. InvalidArgument naming the file and the tensor otherwise.
Status ParseSafetensors(const char* data, uint64_t size, const std::string& path, std::vector<TensorView>* views,
                        std::map<std::string, std::string>* owner);

// `paths`: safetensors files, or directories whose *.safetensors files (sorted by name) are all taken.
// Tensor names must be unique across the files; dtypes must be ones checkpoints store (I8 U8 I32 I64
// F16 BF16 F32 F64). Memory: the writer snapshots every tensor, so one copy of the tensor bytes.
// Errors name the file (and tensor) at fault, or the step.
Result<ImportSummary> ImportSafetensors(const std::string& root, int64_t step, const std::vector<std::string>& paths,
                                        const SaveProgress& progress = {});

}  // namespace tessera::ckpt
