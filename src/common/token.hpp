// common/token: the one generator of secrets — job tokens (`tessera run`, tsrGetUniqueId, the daemon's
// jobs) and the daemon's admin token: 128 bits from the kernel's random source, as 32 lowercase hex digits.
#pragma once

#include <string>

#include "tessera/status.hpp"

namespace tessera {

inline constexpr size_t kTokenHexDigits = 32;  // 128 bits

// SystemError naming `what` (e.g. "the job token") when the kernel gives no randomness.
Result<std::string> RandomToken(const char* what = "a token");

}  // namespace tessera
