// common/c_result: the one mapping from Status codes to the C API's tsrResult_t, shared by every C API
// (comm's tessera.h, ckpt's ckpt.h). The two enums have the same values; this keeps them in step. And the one
// check of a C API datatype, which both take.
#pragma once

#include <fmt/format.h>

#include "common/dtype.hpp"
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

// A caller's tsrDataType_t as a DType, or InvalidArgument naming the value (the caller adds which call and argument,
// on the error only). The raw int is checked before it becomes a Tessera enum: tessera.h fixes the C API enums'
// underlying type as int, so any int a caller passes is a value of the type and reading it here is defined.
inline Status FromCDataType(tsrDataType_t type, DType* dt) {
  const int v = static_cast<int>(type);
  if (v < 0 || v >= static_cast<int>(DType::kCount))
    return InvalidArgument(fmt::format("datatype {} is not a tsrDataType_t (tsrInt8 = 0 ... tsrFloat64 = {})", v,
                                       static_cast<int>(DType::kCount) - 1));
  *dt = static_cast<DType>(v);
  return Status::Ok();
}

}  // namespace tessera
