#include "common/env.hpp"

#include <gtest/gtest.h>
#include <stdlib.h>

namespace tessera {
namespace {

TEST(Env, IntParsesAndNamesBadValues) {
  setenv("TSR_TEST_INT", "42", 1);
  EXPECT_EQ(*env::Int("TSR_TEST_INT", 0, 0, 100), 42);
  setenv("TSR_TEST_INT", "4x", 1);
  auto r = env::Int("TSR_TEST_INT", 0, 0, 100);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("TSR_TEST_INT='4x'"), std::string::npos);
  setenv("TSR_TEST_INT", "101", 1);
  EXPECT_NE(env::Int("TSR_TEST_INT", 0, 0, 100).status().message().find("out of range"), std::string::npos);
  unsetenv("TSR_TEST_INT");
  EXPECT_EQ(*env::Int("TSR_TEST_INT", 7, 0, 100), 7);
  EXPECT_FALSE(env::RequireInt("TSR_TEST_INT", 0, 10).ok());
}

TEST(Env, Switches) {
  EXPECT_TRUE(*env::ParseBool("X", "1"));
  EXPECT_TRUE(*env::ParseBool("X", "true"));
  EXPECT_TRUE(*env::ParseBool("X", "on"));
  EXPECT_FALSE(*env::ParseBool("X", "0"));
  EXPECT_FALSE(*env::ParseBool("X", "no"));
  auto r = env::ParseBool("TSR_TEST_SWITCH", "maybe");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("TSR_TEST_SWITCH='maybe'"), std::string::npos) << r.status().message();
}

TEST(Env, Durations) {
  using std::chrono::milliseconds;
  EXPECT_EQ(*env::ParseDuration("X", "30"), milliseconds(30000));
  EXPECT_EQ(*env::ParseDuration("X", "500ms"), milliseconds(500));
  EXPECT_EQ(*env::ParseDuration("X", "2m"), milliseconds(120000));
  EXPECT_EQ(*env::ParseDuration("X", "1.5s"), milliseconds(1500));
  EXPECT_FALSE(env::ParseDuration("X", "soon").ok());
  EXPECT_FALSE(env::ParseDuration("X", "0").ok());
  EXPECT_FALSE(env::ParseDuration("X", "5 parsecs").ok());
}

TEST(Env, BytesAndChoice) {
  EXPECT_EQ(*env::ParseBytes("X", "4M"), 4u << 20);
  EXPECT_EQ(*env::ParseBytes("X", "512K"), 512u << 10);
  EXPECT_EQ(*env::ParseBytes("X", "1GiB"), 1ull << 30);
  EXPECT_FALSE(env::ParseBytes("X", "lots").ok());
  setenv("TSR_TEST_CHOICE", "udp", 1);
  auto r = env::Choice("TSR_TEST_CHOICE", "tcp", {"shm", "tcp"});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(), "TSR_TEST_CHOICE='udp' is not one of shm|tcp");
  unsetenv("TSR_TEST_CHOICE");
}

}  // namespace
}  // namespace tessera
