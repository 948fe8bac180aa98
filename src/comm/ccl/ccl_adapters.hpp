// comm/ccl/ccl_adapters: what the CCL loader (ccl.cpp) shares with the adapters of call shapes other than
// NCCL's (ccl_hccl.cpp): binding a library's symbols to CclLibrary's NCCL-shaped pointers, and the errors.
#pragma once

#include <string>

#include "comm/ccl/ccl.hpp"

namespace tessera::comm::internal {

// Unsupported: `file` (the `row` library) lacks `symbol`; names TESSERA_CCL_LIB (and TESSERA_CCL_PREFIX).
Status MissingSymbol(const std::string& row, const std::string& file, const std::string& symbol,
                     const std::string& prefix);

// Binds every CclLibrary pointer of `lib` to adapters over HCCL's symbols in `handle` (`file`), the group
// calls from `group_handle` (`group_file`). At most a few distinct HCCL files per process (adapter slots).
Status BindHccl(CclLibrary& lib, void* handle, void* group_handle, const std::string& file,
                const std::string& group_file);
// HCCL's symbol for an NCCL-named call: "GetUniqueId" -> "HcclGetRootInfo", "AllReduce" -> "HcclAllReduce".
std::string HcclSymbol(const char* what);

}  // namespace tessera::comm::internal
