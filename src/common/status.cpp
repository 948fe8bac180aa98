// Status helpers: code names, context prefixes and errno formatting.
#include "tessera/status.hpp"

#include <cstring>

namespace tessera {

const char* CodeName(Code code) {
  switch (code) {
    case Code::kOk:
      return "OK";
    case Code::kInvalidArgument:
      return "InvalidArgument";
    case Code::kSystemError:
      return "SystemError";
    case Code::kRemoteError:
      return "RemoteError";
    case Code::kTimeout:
      return "Timeout";
    case Code::kInternalError:
      return "InternalError";
    case Code::kUnsupported:
      return "Unsupported";
    case Code::kNotFound:
      return "NotFound";
    case Code::kCorrupt:
      return "Corrupt";
  }
  return "Unknown";
}

std::string Status::ToString() const {
  if (ok()) return "OK";
  return std::string(CodeName(code_)) + ": " + message_;
}

Status Status::WithContext(const std::string& context) const {
  if (ok()) return *this;
  return Status(code_, context + ": " + message_);
}

Status ErrnoError(const std::string& what, int err) { return SystemError(what + ": " + std::strerror(err)); }

}  // namespace tessera
