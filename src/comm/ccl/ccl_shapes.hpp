// comm/ccl/ccl_shapes: what the CCL loader (ccl.cpp) shares with the objects of call shapes other than NCCL's
// (ccl_hccl.cpp): each shape's constructor over the files the loader opened.
#pragma once

#include <memory>
#include <string>

#include "comm/ccl/ccl.hpp"

namespace tessera::comm::internal {

// The HCCL-shaped library of `row` over `files`: every symbol bound (ccl_hccl.cpp).
Result<std::shared_ptr<CclLibrary>> LoadHcclShape(const CclRow& row, const CclLibrary::Files& files);

}  // namespace tessera::comm::internal
