// common/c_result: the one mapping from Status codes to the C API's tsrResult_t, shared by every C API
// (comm's tessera.h, ckpt's ckpt.h). The two enums have the same values; this keeps them in step.
#pragma once

#include "tessera/status.hpp"
#include "tessera/tessera.h"

namespace tessera {

static_assert(static_cast<int>(Code::kInvalidArgument) == tsrInvalidArgument &&
                  static_cast<int>(Code::kSystemError) == tsrSystemError &&
                  static_cast<int>(Code::kRemoteError) == tsrRemoteError &&
                  static_cast<int>(Code::kTimeout) == tsrTimeout &&
                  static_cast<int>(Code::kInternalError) == tsrInternalError &&
                  static_cast<int>(Code::kUnsupported) == tsrUnsupported &&
                  static_cast<int>(Code::kNotFound) == tsrNotFound && static_cast<int>(Code::kCorrupt) == tsrCorrupt,
              "tessera::Code and tsrResult_t must stay value for value the same");

inline tsrResult_t ToResult(const Status& s) {
  switch (s.code()) {
    case Code::kOk:
      return tsrSuccess;
    case Code::kInvalidArgument:
      return tsrInvalidArgument;
    case Code::kSystemError:
      return tsrSystemError;
    case Code::kRemoteError:
      return tsrRemoteError;
    case Code::kTimeout:
      return tsrTimeout;
    case Code::kInternalError:
      return tsrInternalError;
    case Code::kUnsupported:
      return tsrUnsupported;
    case Code::kNotFound:
      return tsrNotFound;
    case Code::kCorrupt:
      return tsrCorrupt;
  }
  return tsrInternalError;
}

}  // namespace tessera
