// tessera/status.hpp — the error type used at every module boundary of Tessera's C++ API.
//
// A Status is either OK or carries a Code and a human-readable message that names the offending value
// (a variable, a file, a rank). Result<T> is a value or a non-OK Status. Neither throws; the C API maps
// Code one-to-one onto tsrResult_t.
#pragma once

#include <cassert>
#include <optional>
#include <string>
#include <utility>
#include <variant>

#include "tessera/export.h"

namespace tessera {

enum class Code : int {
  kOk = 0,
  kInvalidArgument = 1,  // bad input from the caller or the environment
  kSystemError = 2,      // an OS or library call failed (errno, CUDA, ...)
  kRemoteError = 3,      // a peer rank failed or went away
  kTimeout = 4,          // a bounded wait ran out (TESSERA_TIMEOUT)
  kInternalError = 5,    // a bug in Tessera
  kUnsupported = 6,      // valid but not supported here (no device, no vendor library)
  kNotFound = 7,         // a named thing (checkpoint, job, key) does not exist
  kCorrupt = 8,          // stored data failed verification
};

TESSERA_API const char* CodeName(Code code);

class [[nodiscard]] TESSERA_API Status {
 public:
  Status() = default;
  Status(Code code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status Ok() { return Status(); }
  bool ok() const { return code_ == Code::kOk; }
  Code code() const { return code_; }
  const std::string& message() const { return message_; }
  // "InvalidArgument: TESSERA_RANK='x' is not an integer"
  std::string ToString() const;
  // Prefix the message with context, keeping the code: "while saving step 7: ..."
  Status WithContext(const std::string& context) const;

 private:
  Code code_ = Code::kOk;
  std::string message_;
};

inline Status InvalidArgument(std::string m) { return {Code::kInvalidArgument, std::move(m)}; }
inline Status SystemError(std::string m) { return {Code::kSystemError, std::move(m)}; }
inline Status RemoteError(std::string m) { return {Code::kRemoteError, std::move(m)}; }
inline Status Timeout(std::string m) { return {Code::kTimeout, std::move(m)}; }
inline Status InternalError(std::string m) { return {Code::kInternalError, std::move(m)}; }
inline Status Unsupported(std::string m) { return {Code::kUnsupported, std::move(m)}; }
inline Status NotFound(std::string m) { return {Code::kNotFound, std::move(m)}; }
inline Status Corrupt(std::string m) { return {Code::kCorrupt, std::move(m)}; }
// SystemError with strerror(errno) appended: ErrnoError("open /x", errno).
TESSERA_API Status ErrnoError(const std::string& what, int err);

template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}        // NOLINT(google-explicit-constructor)
  Result(Status status) : v_(std::move(status)) {  // NOLINT(google-explicit-constructor)
    assert(!std::get<Status>(v_).ok() && "Result from an OK status has no value");
  }
  bool ok() const { return std::holds_alternative<T>(v_); }
  const Status& status() const {
    static const Status kOk;
    return ok() ? kOk : std::get<Status>(v_);
  }
  T& value() & { return std::get<T>(v_); }
  const T& value() const& { return std::get<T>(v_); }
  T&& value() && { return std::get<T>(std::move(v_)); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

 private:
  std::variant<T, Status> v_;
};

}  // namespace tessera

// Return early from the enclosing function when a Status is not OK.
#define TSR_RETURN_IF_ERROR(expr)              \
  do {                                         \
    ::tessera::Status tsr_status_ = (expr);    \
    if (!tsr_status_.ok()) return tsr_status_; \
  } while (0)

#define TSR_CONCAT_INNER_(a, b) a##b
#define TSR_CONCAT_(a, b) TSR_CONCAT_INNER_(a, b)
// TSR_ASSIGN_OR_RETURN(auto x, Foo()); declares x from a Result or returns its Status.
#define TSR_ASSIGN_OR_RETURN(lhs, rexpr) TSR_ASSIGN_OR_RETURN_IMPL_(TSR_CONCAT_(tsr_result_, __LINE__), lhs, rexpr)
#define TSR_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, rexpr) \
  auto tmp = (rexpr);                               \
  if (!tmp.ok()) return tmp.status();               \
  lhs = std::move(tmp).value()
