// The structs whose members stand for TESSERA_* settings default to the declared defaults (common/env_vars.inc):
// a default-constructed StoreLimits, launcher::Options, comm::InitParams and ckpt::s3::Config hold what the
// declaration's value parses to, and the S3 defaults that are not one constant are the ones documented. With
// EnvRegistry.NoMemberInitialiserRepeatsADeclaredDefault (a literal copy in a header fails there) a default is
// written once.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <string>

#include "ckpt/s3.hpp"
#include "comm/comm.hpp"
#include "comm/store/store.hpp"
#include "common/env.hpp"
#include "common/env_vars.hpp"
#include "launch/launcher.hpp"

namespace tessera {
namespace {

// The declared value of `name`, parsed here with the parsers of its variable (not through the Declared*
// accessors that the structs use).
std::string Value(const char* name) {
  const env::Variable* v = env::FindVariable(name);
  EXPECT_TRUE(v != nullptr && v->value != nullptr) << name << " has no declared default";
  return v != nullptr && v->value != nullptr ? v->value : "";
}
std::chrono::milliseconds Duration(const char* name) { return env::ParseDuration(name, Value(name)).value(); }
int64_t Int(const char* name) { return env::ParseInt(name, Value(name), INT64_MIN, INT64_MAX).value(); }
uint64_t Bytes(const char* name) { return env::ParseBytes(name, Value(name)).value(); }

TEST(EnvDefaults, StoreLimits) {
  comm::StoreLimits l;
  EXPECT_EQ(l.handshake_timeout, Duration("TESSERA_TIMEOUT"));
  EXPECT_EQ(l.max_connections, Int("TESSERA_STORE_MAX_CONNS"));
  EXPECT_EQ(l.max_connections, 4096);  // docs/env.md: `4096`; the value itself, so that a change is deliberate
}

TEST(EnvDefaults, LauncherOptions) {
  launch::Options o;
  EXPECT_EQ(o.timeout, Duration("TESSERA_TIMEOUT"));
  EXPECT_EQ(o.timeout, std::chrono::seconds(60));
}

TEST(EnvDefaults, InitParams) {
  comm::InitParams p;
  EXPECT_EQ(p.island, Int("TESSERA_ISLAND"));
  EXPECT_EQ(p.device, Value("TESSERA_DEVICE"));
  EXPECT_EQ(p.timeout, Duration("TESSERA_TIMEOUT"));
}

TEST(EnvDefaults, S3Config) {
  ckpt::s3::Config c;
  EXPECT_EQ(c.region, Value("TESSERA_S3_REGION"));
  EXPECT_EQ(c.virtual_host, Value("TESSERA_S3_ADDRESSING") == "virtual");
  EXPECT_EQ(c.part_size, Bytes("TESSERA_S3_PART_SIZE"));
  EXPECT_EQ(c.part_size, uint64_t{16} << 20);
  EXPECT_EQ(c.concurrency, Int("TESSERA_S3_CONCURRENCY"));
  EXPECT_EQ(c.retries, Int("TESSERA_S3_RETRIES"));
  // Not one constant (it follows the endpoint): Load's two values are the documented ones.
  const env::Variable* t = env::FindVariable("TESSERA_S3_MULTIPART_THRESHOLD");
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(std::string(t->default_text), std::to_string(ckpt::s3::kMaxSinglePut >> 30) +
                                              " GiB on a loopback endpoint, else " +
                                              std::to_string(ckpt::s3::kRemoteMultipartThreshold >> 20) + " MiB");
  EXPECT_EQ(c.multipart_threshold, ckpt::s3::kRemoteMultipartThreshold);
}

// The accessors agree with the getters: with the variable unset, env::Int/Duration/Bytes/GetOrDefault give
// what DeclaredInt/DeclaredDuration/DeclaredBytes/DeclaredString give.
TEST(EnvDefaults, AccessorsAgreeWithTheGetters) {
  int checked = 0;
  for (const auto& v : env::Variables()) {
    if (v.value == nullptr || env::Get(v.name)) continue;
    ++checked;
    EXPECT_EQ(env::GetOrDefault(v.name), env::DeclaredString(v.name)) << v.name;
    switch (v.parser) {
      case env::Parser::kInt:
        EXPECT_EQ(env::Int(v.name, INT64_MIN, INT64_MAX).value(), env::DeclaredInt(v.name)) << v.name;
        break;
      case env::Parser::kDuration:
        EXPECT_EQ(env::Duration(v.name).value(), env::DeclaredDuration(v.name)) << v.name;
        break;
      case env::Parser::kBytes:
        EXPECT_EQ(env::Bytes(v.name).value(), env::DeclaredBytes(v.name)) << v.name;
        break;
      default:
        break;
    }
  }
  EXPECT_GE(checked, 10);
}

TEST(EnvDefaultsDeathTest, AnUndeclaredDefaultAbortsNamingTheVariable) {
  EXPECT_DEATH(env::DeclaredInt("TESSERA_RANK"), "TESSERA_RANK has no declared default");
  EXPECT_DEATH(env::DeclaredString("TESSERA_NO_SUCH_VARIABLE"), "TESSERA_NO_SUCH_VARIABLE");
}

}  // namespace
}  // namespace tessera
