#include "tessera/status.hpp"

#include <gtest/gtest.h>

namespace tessera {
namespace {

Result<int> Half(int x) {
  if (x % 2) return InvalidArgument("odd: " + std::to_string(x));
  return x / 2;
}

Status Chain(int x, int* out) {
  TSR_ASSIGN_OR_RETURN(int h, Half(x));
  TSR_ASSIGN_OR_RETURN(int q, Half(h));
  *out = q;
  return Status::Ok();
}

TEST(Status, OkAndErrors) {
  EXPECT_TRUE(Status::Ok().ok());
  Status s = Timeout("rank 3 did not answer");
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.code(), Code::kTimeout);
  EXPECT_EQ(s.ToString(), "Timeout: rank 3 did not answer");
  EXPECT_EQ(s.WithContext("allreduce").message(), "allreduce: rank 3 did not answer");
}

TEST(Status, ResultPropagates) {
  int out = 0;
  EXPECT_TRUE(Chain(8, &out).ok());
  EXPECT_EQ(out, 2);
  Status s = Chain(6, &out);
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_EQ(s.message(), "odd: 3");
}

}  // namespace
}  // namespace tessera
