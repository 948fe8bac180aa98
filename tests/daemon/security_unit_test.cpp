// tests/daemon/security_unit_test: the pieces of daemon/security on their own — the tenants file's checks,
// token hashes, control characters, and path confinement ('..', symlinks, absolute paths) with creation
// that does not follow symlinks.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include "daemon/security.hpp"

namespace tessera::daemon {
namespace {

std::string Hex(char c) { return std::string(64, c); }

TEST(DaemonTenants, ParsesNamesHashesAndUsers) {
  auto t = ParseTenants("tenants:\n  - {name: alice, token_sha256: " + Hex('A') +
                            "}\n  - {name: bob.b, token_sha256: " + Hex('b') + ", user: nobody}\n",
                        "t.yaml");
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  ASSERT_EQ(t->size(), 2u);
  EXPECT_EQ((*t)[0].name, "alice");
  EXPECT_EQ((*t)[0].token_sha256, Hex('a'));  // lower-cased, as TokenHash writes it
  EXPECT_EQ((*t)[1].user, "nobody");
  EXPECT_TRUE(ParseTenants("", "t.yaml").ok());
}

TEST(DaemonTenants, RefusesPlainTokensBadHashesDuplicatesAndBadNames) {
  auto err = [](const std::string& yaml) {
    auto t = ParseTenants(yaml, "t.yaml");
    EXPECT_FALSE(t.ok()) << yaml;
    return t.ok() ? std::string() : t.status().message();
  };
  std::string m = err("tenants:\n  - {name: a, token: secret}\n");
  EXPECT_NE(m.find("t.yaml:2"), std::string::npos) << m;
  EXPECT_NE(m.find("token_sha256"), std::string::npos) << m;
  m = err("tenants:\n  - {name: a, token_sha256: abc}\n");
  EXPECT_NE(m.find("64 hex digits"), std::string::npos) << m;
  m = err("tenants:\n  - {name: a, token_sha256: " + Hex('a') + "}\n  - {name: a, token_sha256: " + Hex('b') + "}\n");
  EXPECT_NE(m.find("listed twice"), std::string::npos) << m;
  m = err("tenants:\n  - {name: a, token_sha256: " + Hex('a') + "}\n  - {name: b, token_sha256: " + Hex('a') + "}\n");
  EXPECT_NE(m.find("same token"), std::string::npos) << m;
  for (const char* bad : {"../x", "a/b", ".hidden", "-x", "admin", "a b"}) {
    m = err(std::string("tenants:\n  - {name: '") + bad + "', token_sha256: " + Hex('a') + "}\n");
    EXPECT_NE(m.find(bad), std::string::npos) << m;
  }
  m = err("tenants:\n  - {name: a, token_sha256: " + Hex('a') + ", colour: red}\n");
  EXPECT_NE(m.find("colour"), std::string::npos) << m;
}

TEST(DaemonTokens, HashIsSha256AndComparisonIsExact) {
  EXPECT_EQ(TokenHash("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");  // FIPS 180-2
  EXPECT_TRUE(ConstantTimeEqual("abc", "abc"));
  EXPECT_FALSE(ConstantTimeEqual("abc", "abd"));
  EXPECT_FALSE(ConstantTimeEqual("abc", "abcd"));
}

TEST(DaemonNames, ControlCharactersAreRefusedWithTheirPosition) {
  EXPECT_TRUE(CheckNoControlChars("name", "digits-mlp #2 (ü)").ok());
  auto s = CheckNoControlChars("name", std::string("a\0b", 3));
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("0x00 at byte 1"), std::string::npos) << s.message();
  EXPECT_FALSE(CheckNoControlChars("name", "a\x7f").ok());
}

// `x\u202egnp.exe` rendered as "xexe.png" in the queue, the bill and the console; a name of 100,000 characters
// was accepted.
TEST(DaemonNames, FormatCharactersAndOverlongNamesAreRefused) {
  auto s = CheckNoControlChars("name", "x\u202egnp.exe");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("U+202E at byte 1"), std::string::npos) << s.message();
  for (const char* bad : {"a\u2066b", "a\u200bb", "a\u200fb", "a\ufeffb", "a\u0085b", "a\u00adb", "a\u061cb"})
    EXPECT_FALSE(CheckNoControlChars("name", bad).ok()) << bad;
  for (const char* good : {"résumé", "训练-任务", "a\u2010b" /* a hyphen */, "a\u00a0b"})
    EXPECT_TRUE(CheckNoControlChars("name", good).ok()) << good;
  EXPECT_TRUE(CheckNoControlChars("name", std::string(256, 'x')).ok());
  auto l = CheckNoControlChars("name", std::string(100000, 'x'));
  ASSERT_FALSE(l.ok());
  EXPECT_NE(l.message().find("100000 bytes long; at most 256"), std::string::npos) << l.message();
}

class DaemonConfine : public ::testing::Test {
 protected:
  void SetUp() override {
    char t[] = "/tmp/tessera-confine-XXXXXX";
    ASSERT_NE(::mkdtemp(t), nullptr);
    root_ = t;
    area_ = root_ + "/area";
    ASSERT_EQ(::mkdir(area_.c_str(), 0755), 0);
    ASSERT_EQ(::mkdir((root_ + "/outside").c_str(), 0755), 0);
    ASSERT_EQ(::symlink((root_ + "/outside").c_str(), (area_ + "/out").c_str()), 0);
    ASSERT_EQ(::mkdir((area_ + "/in").c_str(), 0755), 0);
    ASSERT_EQ(::symlink((area_ + "/in").c_str(), (area_ + "/alias").c_str()), 0);
  }
  void TearDown() override {
    std::error_code ec;  // best effort, as rm -rf
    std::filesystem::remove_all(root_, ec);
  }
  std::string root_, area_;
};

TEST_F(DaemonConfine, ResolvesDotDotAndSymlinksBeforeChecking) {
  auto ok = [&](const std::string& p, const std::string& want) {
    auto r = ConfinePath("checkpoint.dir", p, area_, area_);
    ASSERT_TRUE(r.ok()) << p << ": " << r.status().ToString();
    EXPECT_EQ(*r, want) << p;
  };
  ok("ckpt", area_ + "/ckpt");
  ok("a/b/../c", area_ + "/a/c");
  ok(".", area_);
  ok("alias/x", area_ + "/in/x");  // a symlink that stays inside is fine
  ok(area_ + "/in/../z", area_ + "/z");
  for (const std::string& p : {std::string("../outside"), std::string("out/x"), std::string("a/../../x"),
                               std::string("/etc"), area_ + "/out", std::string("in/../../outside")}) {
    auto r = ConfinePath("checkpoint.dir", p, area_, area_);
    ASSERT_FALSE(r.ok()) << p << " -> " << (r.ok() ? *r : "");
    EXPECT_NE(r.status().message().find("checkpoint.dir"), std::string::npos) << r.status().message();
    EXPECT_NE(r.status().message().find("outside the tenant's area"), std::string::npos) << r.status().message();
  }
}

TEST_F(DaemonConfine, CreationDoesNotFollowSymlinks) {
  ASSERT_TRUE(MakeDirsInside(area_, area_ + "/j/1/ckpt", 0700, -1, -1).ok());
  struct stat st {};
  ASSERT_EQ(::stat((area_ + "/j/1/ckpt").c_str(), &st), 0);
  EXPECT_TRUE(S_ISDIR(st.st_mode));
  // A component replaced by a symlink (a job's doing) is refused, and nothing is created through it.
  auto s = MakeDirsInside(area_, area_ + "/out/new", 0700, -1, -1);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("symlink"), std::string::npos) << s.message();
  EXPECT_NE(::stat((root_ + "/outside/new").c_str(), &st), 0);
}

// The work directory a root daemon gives its jobs: STATE-work when the job user reaches it; for the default
// state directory (~/.tessera, under /root) the system one; otherwise an error naming who and what blocks.
TEST(DaemonWorkDir, JobUserMustReachItAndTheDefaultStateFallsBack) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to take the job user's identity";
  auto id = ChooseJobIdentity("", false);
  ASSERT_TRUE(id.ok()) << id.status().ToString();
  char t[] = "/tmp/tessera-workdir-XXXXXX";
  ASSERT_NE(::mkdtemp(t), nullptr);
  std::string home = t;  // 0700 like /root
  std::string open = home + "-open";
  ASSERT_EQ(::mkdir(open.c_str(), 0755), 0);
  auto blocked = FirstUnreachable(home + "/.tessera-work", id->uid, id->gid);
  ASSERT_TRUE(blocked.ok()) << blocked.status().ToString();
  EXPECT_EQ(*blocked, home);
  auto fine = FirstUnreachable(open + "/not/yet", id->uid, id->gid);
  ASSERT_TRUE(fine.ok());
  EXPECT_EQ(*fine, "");

  auto dflt = ChooseWorkDir("", home + "/.tessera", true, open + "/work", *id);
  ASSERT_TRUE(dflt.ok()) << dflt.status().ToString();
  EXPECT_EQ(*dflt, open + "/work");
  auto reachable = ChooseWorkDir("", open + "/state", false, "/unused", *id);
  ASSERT_TRUE(reachable.ok());
  EXPECT_EQ(*reachable, open + "/state-work");
  for (auto [flag, is_default] : {std::pair{std::string(), false}, std::pair{home + "/work", true}}) {
    auto r = ChooseWorkDir(flag, home + "/.tessera", is_default, open + "/work", *id);
    ASSERT_FALSE(r.ok()) << flag;
    EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
    std::string m = r.status().message();
    EXPECT_NE(m.find("user nobody"), std::string::npos) << m;
    EXPECT_NE(m.find(home + " (mode 0700) blocks it"), std::string::npos) << m;
    EXPECT_NE(m.find("--work-dir"), std::string::npos) << m;
  }
  std::filesystem::remove_all(home);
  std::filesystem::remove_all(open);
}

}  // namespace
}  // namespace tessera::daemon
