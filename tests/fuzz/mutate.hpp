// tests/fuzz/mutate: the seeded mutator of the property tests of what tenants reach (tests/fuzz): one input
// mutated by flips, inserts of tokens the parsers treat specially, deletions, repeats and truncations.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

namespace tessera::fuzz {

// FUZZ_SEED, FUZZ_ITERS: test knobs (not the product's variables) for longer runs by hand.
inline uint64_t EnvOr(const char* name, uint64_t fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::strtoull(v, nullptr, 10) : fallback;
}

inline std::string Mutate(std::string s, std::mt19937_64& rng) {
  static const std::vector<std::string> kTokens = {"[",
                                                   "]",
                                                   "{",
                                                   "}",
                                                   "\"",
                                                   "'",
                                                   "#",
                                                   "\n- ",
                                                   ": ",
                                                   ",",
                                                   "*a",
                                                   "&a ",
                                                   "!!binary ",
                                                   "4.5",
                                                   "1e400",
                                                   "-1",
                                                   "0",
                                                   "4611686018427387904",
                                                   "18446744073709551615",
                                                   "99999999999999999999",
                                                   "\\u202e",
                                                   "\xe2\x80\xae",
                                                   "\xff",
                                                   std::string(1, '\0'),
                                                   "\n",
                                                   "  ",
                                                   "null",
                                                   "true",
                                                   std::string(70, '['),
                                                   std::string(70, '{'),
                                                   "\"crc32c\":",
                                                   "\"byte_range\":[",
                                                   "\"shape\":[",
                                                   "\"data_offsets\":[",
                                                   "\"dtype\":\"F32\"",
                                                   "\"__metadata__\":",
                                                   "../"};
  const int n = 1 + static_cast<int>(rng() % 4);
  for (int k = 0; k < n; ++k) {
    const size_t at = s.empty() ? 0 : rng() % (s.size() + 1);
    switch (rng() % 6) {
      case 0:
        if (!s.empty() && at < s.size()) s[at] = static_cast<char>(rng());
        break;
      case 1:
      case 2:
        s.insert(at, kTokens[rng() % kTokens.size()]);
        break;
      case 3:
        if (!s.empty()) s.erase(at, 1 + rng() % 16);
        break;
      case 4:
        if (at < s.size()) s.insert(at, s.substr(at, 1 + rng() % 32));
        break;
      default:
        s.resize(at);
        break;
    }
  }
  return s;
}

// The first bytes of an input, printable, for a failure's message.
inline std::string Head(const std::string& s) {
  std::string h = s.substr(0, 120);
  for (auto& c : h)
    if (static_cast<unsigned char>(c) < 0x20 || static_cast<unsigned char>(c) >= 0x7f) c = '.';
  return h;
}

}  // namespace tessera::fuzz
