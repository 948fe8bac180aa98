// tests/ckpt/s3_test: the S3 client and the warm tier against a real S3 server (moto's standalone server)
// on loopback that the test starts itself, checking every request's SigV4 signature: objects, multipart
// uploads with parallel parts, ranged downloads, virtual-host addressing, retries through a proxy that
// injects 503s and dropped connections, a bad signature refused, demote/stage/verify.
#include "ckpt/s3.hpp"

#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <random>

#include "ckpt/format.hpp"
#include "ckpt/s3_harness.hpp"
#include "ckpt/sigv4.hpp"
#include "ckpt/tiers.hpp"
#include "tessera/ckpt.hpp"

namespace tessera::ckpt {
namespace {

using test::TempDir;

class S3Test : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    server_ = new test::S3Server();
    if (!server_->Start(&why_)) {
      missing_ = server_->missing();
      delete server_;
      server_ = nullptr;
    }
  }
  static void TearDownTestSuite() {
    delete server_;
    server_ = nullptr;
  }
  void SetUp() override {
    // Missing (not installed): skip; installed but not working: fail.
    if (server_ == nullptr && missing_) GTEST_SKIP() << "no S3 server for this test: " << why_;
    if (server_ == nullptr) FAIL() << "the S3 server did not start: " << why_;
    server_->SetCredentials();
    setenv("TESSERA_S3_ENDPOINT", server_->endpoint().c_str(), 1);
    setenv("TESSERA_S3_PART_SIZE", "5MiB", 1);
    setenv("TESSERA_S3_MULTIPART_THRESHOLD", "5MiB", 1);
    setenv("TESSERA_S3_CONCURRENCY", "3", 1);
    unsetenv("TESSERA_S3_ADDRESSING");
  }
  s3::Client MakeClient(const std::string& bucket) {
    auto c = s3::Config::Load(bucket);
    EXPECT_TRUE(c.ok()) << c.status().ToString();
    s3::Client client(*c);
    Status s = client.CreateBucket();
    EXPECT_TRUE(s.ok()) << s.ToString();
    return client;
  }
  static std::string RandomFile(const std::string& path, size_t n, uint64_t seed) {
    std::mt19937_64 rng(seed);
    std::string data(n, '\0');
    for (auto& c : data) c = static_cast<char>(rng());
    std::ofstream(path, std::ios::binary) << data;
    return data;
  }
  static std::string Slurp(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
  }
  static test::S3Server* server_;
  static std::string why_;
  static bool missing_;
};
test::S3Server* S3Test::server_ = nullptr;
std::string S3Test::why_;
bool S3Test::missing_ = false;

TEST_F(S3Test, ObjectsListAndDelete) {
  auto c = MakeClient("objects");
  std::string body = "hello, warm tier";
  ASSERT_TRUE(c.Put("dir/a b+c.txt", body.data(), body.size()).ok());
  ASSERT_TRUE(c.Put("dir/x", "1", 1).ok());
  auto got = c.Get("dir/a b+c.txt");
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(*got, body);
  auto head = c.Head("dir/a b+c.txt");
  ASSERT_TRUE(head.ok());
  EXPECT_EQ(head->size, body.size());
  auto list = c.List("dir/");
  ASSERT_TRUE(list.ok());
  ASSERT_EQ(list->size(), 2u);
  EXPECT_EQ((*list)[0].key, "dir/a b+c.txt");
  ASSERT_TRUE(c.Delete("dir/x").ok());
  EXPECT_EQ(c.List("dir/")->size(), 1u);
  auto missing = c.Get("dir/nope");
  EXPECT_EQ(missing.status().code(), Code::kNotFound);
  EXPECT_NE(missing.status().message().find("s3://objects/dir/nope"), std::string::npos) << missing.status().message();
  EXPECT_EQ(c.Head("dir/nope").status().code(), Code::kNotFound);
}

TEST_F(S3Test, MultipartUploadAndRangedDownload) {
  auto c = MakeClient("multipart");
  TempDir d;
  std::string data = RandomFile(d / "big", (13 << 20) + 12345, 1);  // 3 parts of 5 MiB
  std::vector<uint64_t> seen;
  ASSERT_TRUE(c.PutFile("big.bin", d / "big", [&](uint64_t done, uint64_t) { seen.push_back(done); }).ok());
  EXPECT_EQ(seen.size(), 3u);
  EXPECT_EQ(seen.back(), data.size());
  EXPECT_EQ(c.Head("big.bin")->size, data.size());
  ASSERT_TRUE(c.GetToFile("big.bin", d / "back", data.size()).ok());
  EXPECT_TRUE(Slurp(d / "back") == data);
}

TEST_F(S3Test, VirtualHostAddressing) {
  auto path_style = MakeClient("vhost");
  setenv("TESSERA_S3_ENDPOINT", ("http://s3.localhost:" + std::to_string(server_->port())).c_str(), 1);
  setenv("TESSERA_S3_ADDRESSING", "virtual", 1);
  auto cfg = s3::Config::Load("vhost");
  ASSERT_TRUE(cfg.ok());
  s3::Client v(*cfg);
  EXPECT_EQ(v.Url("k"), "http://vhost.s3.localhost:" + std::to_string(server_->port()) + "/k");
  Status s = v.Put("via-vhost", "abc", 3);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(*path_style.Get("via-vhost"), "abc");  // the same bucket, seen path-style
  ASSERT_TRUE(path_style.Put("via-path", "xyz", 3).ok());
  EXPECT_EQ(*v.Get("via-path"), "xyz");
}

TEST_F(S3Test, RetriesThrough503sAndDroppedConnections) {
  MakeClient("retry");
  test::FaultProxy proxy(server_->port(), [](int i, const std::string&) {
    if (i % 3 == 1) return test::FaultProxy::k503;
    if (i % 4 == 2) return test::FaultProxy::kDrop;
    return test::FaultProxy::kPass;
  });
  setenv("TESSERA_S3_ENDPOINT", proxy.endpoint().c_str(), 1);
  auto cfg = s3::Config::Load("retry");
  cfg->backoff_ms = 5;
  cfg->retries = 8;
  s3::Client c(*cfg);
  TempDir d;
  std::string data = RandomFile(d / "f", (11 << 20) + 7, 2);
  Status s = c.PutFile("f.bin", d / "f");
  ASSERT_TRUE(s.ok()) << s.ToString();
  ASSERT_TRUE(c.GetToFile("f.bin", d / "back", data.size()).ok());
  EXPECT_TRUE(Slurp(d / "back") == data);
  EXPECT_GE(proxy.faults(), 3) << "the proxy injected faults and the client retried past them";
}

// What goes on the wire (seen through the proxy): by default on a loopback endpoint a 6 MiB object goes up
// as one PUT with UNSIGNED-PAYLOAD; with TESSERA_S3_SIGN_PAYLOAD=1 the header carries the body's SHA-256;
// a lowered TESSERA_S3_MULTIPART_THRESHOLD still gives parts, each unsigned.
TEST_F(S3Test, LoopbackDefaultsSendOneUnsignedPutAndTheOverrideSigns) {
  MakeClient("wire");
  test::FaultProxy proxy(server_->port(), [](int, const std::string&) { return test::FaultProxy::kPass; });
  setenv("TESSERA_S3_ENDPOINT", proxy.endpoint().c_str(), 1);
  unsetenv("TESSERA_S3_MULTIPART_THRESHOLD");
  unsetenv("TESSERA_S3_SIGN_PAYLOAD");
  TempDir d;
  std::string data = RandomFile(d / "f", (6 << 20) + 3, 3);
  auto count = [](const std::vector<std::string>& heads, const std::string& needle) {
    int n = 0;
    for (const auto& h : heads) n += h.find(needle) != std::string::npos;
    return n;
  };
  // Loads the configuration from the environment, uploads the file as `key`; returns the requests made.
  size_t seen = 0;
  s3::Config cfg;
  auto upload = [&](const std::string& key) {
    auto c = s3::Config::Load("wire");
    EXPECT_TRUE(c.ok()) << c.status().ToString();
    if (c.ok()) cfg = *c;
    Status st = s3::Client(cfg).PutFile(key, d / "f");
    EXPECT_TRUE(st.ok()) << st.ToString();
    auto heads = proxy.heads();
    std::vector<std::string> mine(heads.begin() + static_cast<std::ptrdiff_t>(seen), heads.end());
    seen = heads.size();
    return mine;
  };
  auto heads = upload("plain.bin");
  EXPECT_FALSE(cfg.sign_payload);
  EXPECT_EQ(cfg.multipart_threshold, s3::kMaxSinglePut);
  ASSERT_EQ(heads.size(), 1u) << "one PUT, no multipart";
  EXPECT_EQ(heads[0].rfind("PUT /wire/plain.bin ", 0), 0u) << heads[0];
  EXPECT_EQ(count(heads, "x-amz-content-sha256: UNSIGNED-PAYLOAD"), 1) << heads[0];

  setenv("TESSERA_S3_SIGN_PAYLOAD", "1", 1);
  heads = upload("signed.bin");
  ASSERT_EQ(heads.size(), 1u);
  EXPECT_EQ(count(heads, "x-amz-content-sha256: " + s3::Sha256Hex(data.data(), data.size())), 1) << heads[0];

  setenv("TESSERA_S3_MULTIPART_THRESHOLD", "5MiB", 1);
  setenv("TESSERA_S3_SIGN_PAYLOAD", "0", 1);
  heads = upload("parts.bin");
  EXPECT_EQ(count(heads, "?partNumber="), 2) << "6 MiB in 5 MiB parts";
  EXPECT_EQ(count(heads, "x-amz-content-sha256: UNSIGNED-PAYLOAD"), static_cast<int>(heads.size()));
  ASSERT_TRUE(s3::Client(cfg).GetToFile("parts.bin", d / "back", data.size()).ok());
  EXPECT_TRUE(Slurp(d / "back") == data);
  unsetenv("TESSERA_S3_SIGN_PAYLOAD");
}

TEST_F(S3Test, GivesUpAfterRetriesNamingTheObject) {
  MakeClient("giveup");
  test::FaultProxy proxy(server_->port(), [](int, const std::string&) { return test::FaultProxy::k503; });
  setenv("TESSERA_S3_ENDPOINT", proxy.endpoint().c_str(), 1);
  auto cfg = s3::Config::Load("giveup");
  cfg->backoff_ms = 1;
  cfg->retries = 2;
  s3::Client c(*cfg);
  Status s = c.Put("ckpt/step-0000000001/rank-00000-of-00001.safetensors", "x", 1);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(proxy.requests(), 3);
  EXPECT_NE(s.message().find("s3://giveup/ckpt/step-0000000001/rank-00000-of-00001.safetensors"), std::string::npos)
      << s.message();
  EXPECT_NE(s.message().find("503"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("3 attempts"), std::string::npos) << s.message();
}

// moto checks every request's SigV4 signature, as S3 does: one signed with a wrong secret key is refused
// with 403 SignatureDoesNotMatch, one with an access key the server does not know with 403
// InvalidAccessKeyId. The client reports S3's status, code and message naming the object, and does not
// retry (a 403 is not transient); nothing is stored. The other half of the proof is every other test here:
// moto recomputes each signature with botocore and accepts what our signer sends.
TEST_F(S3Test, BadSignatureIsRefusedWith403) {
  auto good = MakeClient("sigcheck");
  ASSERT_TRUE(good.Put("there", "abc", 3).ok());
  test::FaultProxy proxy(server_->port(), [](int, const std::string&) { return test::FaultProxy::kPass; });
  setenv("TESSERA_S3_ENDPOINT", proxy.endpoint().c_str(), 1);
  auto cfg = s3::Config::Load("sigcheck");
  ASSERT_TRUE(cfg.ok()) << cfg.status().ToString();
  cfg->backoff_ms = 1;
  cfg->secret_key = "wrong" + server_->secret_key().substr(5);
  s3::Client bad(*cfg);
  const std::string key = "ckpt/step-0000000001/rank-00000-of-00001.safetensors";
  Status s = bad.Put(key, "x", 1);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), Code::kRemoteError) << s.ToString();
  for (const std::string& part : {"S3 PUT s3://sigcheck/" + key + ": HTTP 403 SignatureDoesNotMatch",
                                  std::string("The request signature we calculated does not match")})
    EXPECT_NE(s.message().find(part), std::string::npos) << s.message();
  EXPECT_EQ(s.message().find("attempts"), std::string::npos) << "a 403 is not retried: " << s.message();
  EXPECT_EQ(proxy.requests(), 1);
  EXPECT_EQ(good.Head(key).status().code(), Code::kNotFound) << "the refused PUT stored nothing";

  // Reads are checked too (a HEAD's answer has no body, so no S3 code: the status and its reason).
  auto got = bad.Get("there");
  EXPECT_EQ(got.status().code(), Code::kRemoteError);
  EXPECT_NE(got.status().message().find("S3 GET s3://sigcheck/there: HTTP 403 SignatureDoesNotMatch"),
            std::string::npos)
      << got.status().message();
  auto head = bad.Head("there");
  EXPECT_EQ(head.status().code(), Code::kRemoteError);
  EXPECT_EQ(head.status().message(), "S3 HEAD s3://sigcheck/there: HTTP 403 Forbidden (no S3 error in the answer)");
  // A multipart upload is refused at its start (and nothing is left).
  TempDir d;
  RandomFile(d / "f", (6 << 20) + 1, 4);
  Status m = bad.PutFile("big.bin", d / "f");
  EXPECT_NE(m.message().find("S3 POST s3://sigcheck/big.bin: HTTP 403 SignatureDoesNotMatch"), std::string::npos)
      << m.message();
  EXPECT_EQ(good.Head("big.bin").status().code(), Code::kNotFound);

  // An access key the server does not know, with the right secret.
  cfg->access_key = "AKIAIOSFODNN7EXAMPLE";
  cfg->secret_key = server_->secret_key();
  Status u = s3::Client(*cfg).Put(key, "x", 1);
  EXPECT_NE(u.message().find("S3 PUT s3://sigcheck/" + key + ": HTTP 403 InvalidAccessKeyId"), std::string::npos)
      << u.message();

  // The right key through the same proxy (so with the same Host header) is accepted.
  cfg->access_key = server_->access_key();
  Status ok = s3::Client(*cfg).Put(key, "x", 1);
  EXPECT_TRUE(ok.ok()) << ok.ToString();
  EXPECT_EQ(*good.Get(key), "x");
}

void SaveSteps(const std::string& root, int world, std::vector<int64_t> steps, int64_t rows) {
  for (int64_t step : steps) {
    std::vector<std::unique_ptr<CheckpointWriter>> ws;
    std::vector<std::vector<float>> data(static_cast<size_t>(world));
    for (int r = 0; r < world; ++r) {
      auto w = CheckpointWriter::Open(root, r, world);
      ASSERT_TRUE(w.ok());
      auto [b, n] = EvenRows(rows, r, world);
      data[r] =
          test::Fill(static_cast<uint64_t>(step), static_cast<uint64_t>(b * 1024), static_cast<uint64_t>(n * 1024));
      ASSERT_TRUE(
          (*w)->Save(step, {{"w", DType::kFloat32, {n, 1024}, data[r].data(), Sharding::kRowSharded, b, rows}}).ok());
      ws.push_back(std::move(*w));
    }
    for (int r = world - 1; r >= 0; --r) ASSERT_TRUE(ws[r]->Wait().ok());
  }
}

void ExpectRestores(const std::string& root, int64_t step, int64_t rows) {
  std::vector<float> out(static_cast<size_t>(rows * 1024));
  Status s = Restore(root, step, {{"w", out.data(), out.size() * 4}});
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(out, test::Fill(static_cast<uint64_t>(step), 0, out.size())) << "step " << step;
}

TEST_F(S3Test, DemoteToWarmStageBackAndDetectCorruption) {
  MakeClient("tiers");
  TempDir hot;
  TierConfig t{hot.path(), "s3://tiers/job-1", ""};
  const int64_t rows = 3000;  // 12 MiB per step: multipart uploads
  SaveSteps(hot.path(), 2, {10, 20}, rows);
  ASSERT_TRUE(Demote(t, 10, Tier::kWarm, true).ok());
  EXPECT_EQ(*ListSteps(hot.path()), std::vector<int64_t>{20});
  auto all = ListAll(t);
  ASSERT_TRUE(all.ok()) << all.status().ToString();
  ASSERT_EQ(all->size(), 2u);
  EXPECT_EQ((*all)[0].tiers, std::vector<Tier>{Tier::kWarm});
  EXPECT_GT((*all)[0].bytes, uint64_t(rows * 1024 * 4));
  // Idempotent: demoting again is a verified no-op.
  ASSERT_TRUE(Demote(t, 10, Tier::kWarm, true).ok());
  ASSERT_TRUE(Stage(t, 10).ok());
  ExpectRestores(hot.path(), 10, rows);
  EXPECT_EQ((*ListAll(t))[0].tiers, (std::vector<Tier>{Tier::kHot, Tier::kWarm}));

  // A corrupted object in the warm tier is caught when staging, naming the object.
  ASSERT_TRUE(Remove(hot.path(), 10).ok());
  auto c = MakeClient("tiers");
  std::string key = "job-1/step-0000000010/rank-00001-of-00002.safetensors";
  auto obj = c.Get(key);
  ASSERT_TRUE(obj.ok());
  std::string bad = *obj;
  bad[bad.size() / 2] ^= 1;
  ASSERT_TRUE(c.Put(key, bad.data(), bad.size()).ok());
  Status s = Stage(t, 10);
  EXPECT_EQ(s.code(), Code::kCorrupt) << s.ToString();
  EXPECT_NE(s.message().find("rank-00001-of-00002.safetensors"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("step 10"), std::string::npos) << s.message();
  EXPECT_FALSE(std::filesystem::exists(hot / "step-0000000010"));
}

// The manifest object in the warm tier carries the hot manifest's digest, and a value changed in it is
// refused when staging, naming the object.
TEST_F(S3Test, WarmManifestCarriesItsDigest) {
  using json = nlohmann::json;
  auto c = MakeClient("digest");
  TempDir hot;
  TierConfig t{hot.path(), "s3://digest/job-2", ""};
  SaveSteps(hot.path(), 2, {30}, 8);
  const std::string manifest = Slurp(hot / "step-0000000030/manifest.json");
  ASSERT_TRUE(Demote(t, 30, Tier::kWarm, true).ok());
  const std::string key = "job-2/step-0000000030/manifest.json";
  auto obj = c.Get(key);
  ASSERT_TRUE(obj.ok()) << obj.status().ToString();
  EXPECT_EQ(*obj, manifest) << "the warm manifest is the hot one, digest included";
  json j = json::parse(*obj);
  j["tensors"][0]["pieces"][1]["row_offset"] = 3;
  std::string bad = j.dump(1) + "\n";
  ASSERT_TRUE(c.Put(key, bad.data(), bad.size()).ok());
  Status s = Stage(t, 30);
  EXPECT_EQ(s.code(), Code::kCorrupt) << s.ToString();
  EXPECT_NE(s.message().find("manifest.json"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("fails its checksum"), std::string::npos) << s.message();
  EXPECT_FALSE(std::filesystem::exists(hot / "step-0000000030/manifest.json"));
}

// Verifying a warm copy applies the hot tier's checks: with a manifest of the previous format (no digest),
// a piece's CRC32C changed in the manifest object is reported by VerifyCopy naming the object and tensor.
TEST_F(S3Test, WarmVerifyChecksEveryPiece) {
  using json = nlohmann::json;
  auto c = MakeClient("pieces");
  TempDir hot;
  TierConfig t{hot.path(), "s3://pieces/job-3", ""};
  SaveSteps(hot.path(), 2, {40}, 8);
  test::ToLegacyManifest(hot / "step-0000000040/manifest.json");
  ASSERT_TRUE(Demote(t, 40, Tier::kWarm, true).ok());
  const std::string key = "job-3/step-0000000040/manifest.json";
  auto obj = c.Get(key);
  ASSERT_TRUE(obj.ok()) << obj.status().ToString();
  json j = json::parse(*obj);
  j["tensors"][0]["pieces"][0]["crc32c"] = "00000000";
  std::string bad = j.dump(1) + "\n";
  ASSERT_TRUE(c.Put(key, bad.data(), bad.size()).ok());
  auto store = MakeWarmStore(t.warm);
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  auto m = (*store)->ReadManifest(40);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  Status v = (*store)->VerifyCopy(*m, {});
  EXPECT_EQ(v.code(), Code::kCorrupt) << v.ToString();
  EXPECT_NE(v.message().find("s3://pieces/job-3/step-0000000040/rank-00000-of-00002.safetensors holds tensor 'w'"),
            std::string::npos)
      << v.message();
}

}  // namespace
}  // namespace tessera::ckpt
