// common/token: see token.hpp. getrandom(2) from the urandom pool, blocking only until the pool is first
// initialised at boot; interrupted or partial reads are continued, never returned short.
#include "common/token.hpp"

#include <fmt/format.h>
#include <sys/random.h>

#include <cerrno>

namespace tessera {

Result<std::string> RandomToken(const char* what) {
  unsigned char bytes[kTokenHexDigits / 2];
  size_t got = 0;
  while (got < sizeof(bytes)) {
    const ssize_t n = ::getrandom(bytes + got, sizeof(bytes) - got, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0)
      return ErrnoError(fmt::format("cannot draw 128 random bits for {} (getrandom)", what), n < 0 ? errno : EIO);
    got += static_cast<size_t>(n);
  }
  std::string token;
  token.reserve(kTokenHexDigits);
  for (unsigned char b : bytes) token += fmt::format("{:02x}", b);
  return token;
}

}  // namespace tessera
