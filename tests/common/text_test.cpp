// tests/common/text_test: common/text's splitting helpers.
#include "common/text.hpp"

#include <gtest/gtest.h>

namespace tessera {
namespace {

using V = std::vector<std::string>;

TEST(Text, SplitAtReadsAsGetlineDoes) {
  EXPECT_EQ(SplitAt("a|b|c", '|'), (V{"a", "b", "c"}));
  EXPECT_EQ(SplitAt("a||b", '|'), (V{"a", "", "b"}));
  EXPECT_EQ(SplitAt("|a", '|'), (V{"", "a"}));
  EXPECT_EQ(SplitAt("a|", '|'), (V{"a"}));  // a trailing separator adds no empty piece
  EXPECT_EQ(SplitAt("", '|'), V{});
  EXPECT_EQ(SplitAt("abc", ','), (V{"abc"}));
}

TEST(Text, SplitOutsideBracketsKeepsBracketedSeparators) {
  EXPECT_EQ(SplitOutsideBrackets("n[1-3],m", ','), (V{"n[1-3]", "m"}));
  EXPECT_EQ(SplitOutsideBrackets("gpu:2(S:0-1),npu:1", ','), (V{"gpu:2(S:0-1)", "npu:1"}));
}

}  // namespace
}  // namespace tessera
