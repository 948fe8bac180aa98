// common/token: the job and admin tokens are 128 random bits in 32 lowercase hex digits, and draws differ.
#include "common/token.hpp"

#include <gtest/gtest.h>

#include <set>
#include <string>

namespace tessera {
namespace {

TEST(RandomToken, Is32LowercaseHexDigits) {
  auto t = RandomToken("a test token");
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  ASSERT_EQ(t->size(), kTokenHexDigits);
  for (char c : *t) EXPECT_TRUE((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f')) << *t;
}

TEST(RandomToken, DrawsDifferAndUseEveryDigit) {
  std::set<std::string> seen;
  std::set<char> digits;
  for (int i = 0; i < 1000; ++i) {
    auto t = RandomToken();
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    seen.insert(*t);
    digits.insert(t->begin(), t->end());
  }
  EXPECT_EQ(seen.size(), 1000u);  // 1000 draws of 128 bits: a repeat means the source is broken
  EXPECT_EQ(digits.size(), 16u);  // 32,000 hex digits without one of the 16 would be as broken
}

}  // namespace
}  // namespace tessera
