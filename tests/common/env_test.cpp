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

TEST(Env, GettersWithoutAFallbackTakeTheDeclaredDefault) {
  using std::chrono::milliseconds;
  unsetenv("TESSERA_TIMEOUT");
  unsetenv("TESSERA_TCP_STREAMS");
  unsetenv("TESSERA_SHM_RING");
  unsetenv("TESSERA_BRIDGE");
  unsetenv("TESSERA_DEVICE");
  // The declared values (common/env_vars.inc), as documented in docs/env.md.
  EXPECT_EQ(*env::Duration("TESSERA_TIMEOUT"), milliseconds(60000));
  EXPECT_EQ(*env::Int("TESSERA_TCP_STREAMS", 1, 64), 4);
  EXPECT_EQ(*env::Bytes("TESSERA_SHM_RING"), uint64_t{2} << 20);
  EXPECT_EQ(*env::Choice("TESSERA_BRIDGE", {"auto", "shm", "tcp"}), "auto");
  EXPECT_EQ(env::GetOrDefault("TESSERA_DEVICE"), "host");
  // A value that is set wins, and a bad one is an error naming it.
  setenv("TESSERA_TIMEOUT", "500ms", 1);
  EXPECT_EQ(*env::Duration("TESSERA_TIMEOUT"), milliseconds(500));
  setenv("TESSERA_TCP_STREAMS", "99", 1);
  auto r = env::Int("TESSERA_TCP_STREAMS", 1, 64);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("TESSERA_TCP_STREAMS='99'"), std::string::npos) << r.status().message();
  setenv("TESSERA_DEVICE", "cuda:1", 1);
  EXPECT_EQ(env::GetOrDefault("TESSERA_DEVICE"), "cuda:1");
  unsetenv("TESSERA_TIMEOUT");
  unsetenv("TESSERA_TCP_STREAMS");
  unsetenv("TESSERA_DEVICE");
}

TEST(Env, AVariableWithoutADeclaredDefaultIsAnInternalErrorNamingIt) {
  unsetenv("TESSERA_RANK");
  auto r = env::Int("TESSERA_RANK", 0, 10);  // set by the launcher: no constant default
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kInternalError);
  EXPECT_NE(r.status().message().find("TESSERA_RANK"), std::string::npos) << r.status().message();
  EXPECT_FALSE(env::Duration("TSR_NOT_DECLARED").ok());
  EXPECT_EQ(env::GetOrDefault("TSR_NOT_DECLARED"), "");
}

}  // namespace
}  // namespace tessera
