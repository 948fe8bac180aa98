// tests/ckpt/sigv4_test: our SigV4 signer against AWS's published S3 examples (Signature Version 4
// "Examples" in the S3 API reference: GET object, PUT object, GET ?lifecycle, list objects) and against
// botocore (Debian's python3-botocore) on requests shaped like ours: multipart, odd keys, list tokens.
#include "ckpt/sigv4.hpp"

#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>

#include "ckpt/s3.hpp"
#include "ckpt/test_util.hpp"

namespace tessera::ckpt::s3 {
namespace {

const char* kAk = "AKIAIOSFODNN7EXAMPLE";
const char* kSk = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY";
const char* kEmpty = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

SignInput Example(const std::string& method, const std::string& path,
                  std::vector<std::pair<std::string, std::string>> query, std::string payload_hash) {
  SignInput in;
  in.method = method;
  in.path = path;
  in.query = std::move(query);
  in.headers["host"] = "examplebucket.s3.amazonaws.com";
  in.headers["x-amz-date"] = "20130524T000000Z";
  in.headers["x-amz-content-sha256"] = payload_hash;
  in.payload_hash = payload_hash;
  in.amz_date = "20130524T000000Z";
  in.region = "us-east-1";
  in.access_key = kAk;
  in.secret_key = kSk;
  return in;
}

TEST(SigV4, AwsExampleGetObject) {
  auto in = Example("GET", "/test.txt", {}, kEmpty);
  in.headers["range"] = "bytes=0-9";
  auto out = Sign(in);
  EXPECT_EQ(out.signed_headers, "host;range;x-amz-content-sha256;x-amz-date");
  EXPECT_EQ(out.signature, "f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41");
  EXPECT_EQ(out.authorization,
            "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request, "
            "SignedHeaders=host;range;x-amz-content-sha256;x-amz-date, "
            "Signature=f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41");
}

TEST(SigV4, AwsExamplePutObject) {
  std::string body = "Welcome to Amazon S3.";
  std::string h = Sha256Hex(body.data(), body.size());
  EXPECT_EQ(h, "44ce7dd67c959e0d3524ffac1771dfbba87d2b6b4b4e99e42034a8b803f8b072");
  auto in = Example("PUT", "/" + UriEncode("test$file.text", false), {}, h);
  in.headers["date"] = "Fri, 24 May 2013 00:00:00 GMT";
  in.headers["x-amz-storage-class"] = "REDUCED_REDUNDANCY";
  EXPECT_EQ(Sign(in).signature, "98ad721746da40c64f1a55b78f14c238d841ea1380cd77a1b5971af0ece108bd");
}

TEST(SigV4, AwsExampleGetLifecycleAndList) {
  EXPECT_EQ(Sign(Example("GET", "/", {{"lifecycle", ""}}, kEmpty)).signature,
            "fea454ca298b7da1c68078a5d1bdbfbbe0d65c699e0f91ac7a200a0136783543");
  EXPECT_EQ(Sign(Example("GET", "/", {{"max-keys", "2"}, {"prefix", "J"}}, kEmpty)).signature,
            "34b48302e7b5fa45bde8084f4b7868a86f0a534bc59db6670ed5711ef69dc6f7");
}

TEST(SigV4, EncodingAndCanonicalQuery) {
  EXPECT_EQ(UriEncode("a b/c+d=é~", false), "a%20b/c%2Bd%3D%C3%A9~");
  EXPECT_EQ(UriEncode("a/b", true), "a%2Fb");
  EXPECT_EQ(CanonicalQuery({{"uploadId", "x/y"}, {"partNumber", "10"}, {"uploads", ""}}),
            "partNumber=10&uploadId=x%2Fy&uploads=");
}

// Runs tests/ckpt/sigv4_botocore.py over the cases and compares canonical requests and signatures.
TEST(SigV4, MatchesBotocore) {
  std::string src = test::SourceDir();
  if (std::system("/usr/bin/python3 -c 'import botocore' 2>/dev/null") != 0)
    GTEST_SKIP() << "/usr/bin/python3 has no botocore (apt-get install python3-botocore)";
  struct Case {
    std::string method, key;
    std::vector<std::pair<std::string, std::string>> query;
    std::string payload, range;
  };
  std::vector<Case> cases = {
      {"PUT",
       "ckpt/step-0000000042/rank-00000-of-00004.safetensors",
       {{"partNumber", "3"}, {"uploadId", "2~abc/DEF+g=="}},
       "UNSIGNED-PAYLOAD",
       ""},
      {"POST", "a b/c+d=e&f~g(1).bin", {{"uploads", ""}}, Sha256Hex("", 0), ""},
      {"GET",
       "",
       {{"list-type", "2"}, {"prefix", "ckpt/step-"}, {"continuation-token", "1/2+3=="}},
       Sha256Hex("", 0),
       ""},
      {"GET", "ünïcode/ключ", {}, Sha256Hex("", 0), "bytes=0-1048575"},
      {"DELETE", "x", {{"uploadId", "u"}}, Sha256Hex("xyz", 3), ""},
  };
  test::TempDir d;
  std::string in_path = d / "in.jsonl", out_path = d / "out.jsonl";
  std::vector<SignOutput> ours;
  {
    std::ofstream in(in_path);
    for (const auto& c : cases) {
      SignInput si;
      si.method = c.method;
      si.path = "/my-bucket" + (c.key.empty() ? std::string() : "/" + UriEncode(c.key, false));
      si.query = c.query;
      si.headers["host"] = "127.0.0.1:4568";
      si.headers["x-amz-date"] = "20260315T123456Z";
      si.headers["x-amz-content-sha256"] = c.payload;
      if (!c.range.empty()) si.headers["range"] = c.range;
      si.payload_hash = c.payload;
      si.amz_date = "20260315T123456Z";
      si.region = "eu-central-1";
      si.access_key = "AKIDEXAMPLE";
      si.secret_key = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY";
      ours.push_back(Sign(si));
      std::string qs = CanonicalQuery(c.query);
      nlohmann::json j{{"access_key", si.access_key},
                       {"secret_key", si.secret_key},
                       {"region", si.region},
                       {"method", c.method},
                       {"url", "http://127.0.0.1:4568" + si.path + (qs.empty() ? "" : "?" + qs)},
                       {"amz_date", si.amz_date}};
      j["headers"] = nlohmann::json::object();
      for (const auto& [k, v] : si.headers) j["headers"][k] = v;
      in << j.dump() << "\n";
    }
  }
  std::string cmd = "/usr/bin/python3 " + src + "/tests/ckpt/sigv4_botocore.py < " + in_path + " > " + out_path;
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  std::ifstream out(out_path);
  std::string line;
  size_t i = 0;
  for (; std::getline(out, line) && i < cases.size(); ++i) {
    auto j = nlohmann::json::parse(line);
    EXPECT_EQ(ours[i].canonical_request, j["canonical_request"].get<std::string>()) << "case " << i;
    EXPECT_EQ(ours[i].signature, j["signature"].get<std::string>())
        << "case " << i << " " << cases[i].method << " " << cases[i].key;
  }
  EXPECT_EQ(i, cases.size());
}

TEST(S3Config, FromEnvironmentAndErrors) {
  setenv("TESSERA_S3_ENDPOINT", "http://127.0.0.1:9", 1);
  setenv("TESSERA_S3_REGION", "eu-west-3", 1);
  setenv("AWS_ACCESS_KEY_ID", "ak", 1);
  setenv("AWS_SECRET_ACCESS_KEY", "sk", 1);
  setenv("TESSERA_S3_ADDRESSING", "virtual", 1);
  auto c = Config::Load("bkt");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->region, "eu-west-3");
  EXPECT_TRUE(c->virtual_host);
  EXPECT_EQ(Client(*c).Url("a b"), "http://bkt.127.0.0.1:9/a%20b");
  setenv("TESSERA_S3_ADDRESSING", "path", 1);
  EXPECT_EQ(Client(*Config::Load("bkt")).Url("k"), "http://127.0.0.1:9/bkt/k");
  setenv("TESSERA_S3_ADDRESSING", "sideways", 1);
  auto bad = Config::Load("bkt");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("sideways"), std::string::npos);
  unsetenv("TESSERA_S3_ADDRESSING");
  setenv("TESSERA_S3_PART_SIZE", "1M", 1);
  EXPECT_NE(Config::Load("bkt").status().message().find("5 MiB"), std::string::npos);
  unsetenv("TESSERA_S3_PART_SIZE");
  unsetenv("AWS_SECRET_ACCESS_KEY");
  EXPECT_NE(Config::Load("bkt").status().message().find("AWS_SECRET_ACCESS_KEY"), std::string::npos);
}

TEST(S3Config, LoopbackEndpoints) {
  for (const char* e : {"http://127.0.0.1:4568", "http://127.8.9.10", "http://localhost:9000/", "http://LOCALHOST",
                        "http://s3.localhost:4568", "http://[::1]:9000", "https://u@127.0.0.1"})
    EXPECT_TRUE(IsLoopbackEndpoint(e)) << e;
  for (const char* e :
       {"https://s3.eu-central-1.amazonaws.com", "http://10.0.0.5:9000", "http://127.example.com",
        "http://minio.internal:9000", "http://localhost.example.com", "http://128.0.0.1", "http://[::2]:80"})
    EXPECT_FALSE(IsLoopbackEndpoint(e)) << e;
}

// Which payload mode and upload shape Load picks, and why (Describe says it); the override and its errors.
TEST(S3Config, PayloadModeAndUploadDefaultsFollowTheEndpoint) {
  setenv("AWS_ACCESS_KEY_ID", "ak", 1);
  setenv("AWS_SECRET_ACCESS_KEY", "sk", 1);
  for (const char* v :
       {"TESSERA_S3_SIGN_PAYLOAD", "TESSERA_S3_MULTIPART_THRESHOLD", "TESSERA_S3_PART_SIZE", "TESSERA_S3_CONFIG"})
    unsetenv(v);
  struct Case {
    const char* endpoint;
    bool signed_payload;
    uint64_t threshold;
    const char* rule;
  };
  for (const Case& k : {Case{"https://s3.eu-central-1.amazonaws.com", false, 64u << 20, "https"},
                        Case{"http://127.0.0.1:4568", false, kMaxSinglePut, "loopback"},
                        Case{"http://localhost:9000", false, kMaxSinglePut, "loopback"},
                        Case{"http://minio.internal:9000", true, 64u << 20, "plain http"}}) {
    setenv("TESSERA_S3_ENDPOINT", k.endpoint, 1);
    auto c = Config::Load("bkt");
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    EXPECT_EQ(c->sign_payload, k.signed_payload) << k.endpoint;
    EXPECT_EQ(c->multipart_threshold, k.threshold) << k.endpoint;
    EXPECT_NE(c->payload_rule.find(k.rule), std::string::npos) << k.endpoint << ": " << c->payload_rule;
    EXPECT_NE(c->Describe().find(k.signed_payload ? "signed payload" : "UNSIGNED-PAYLOAD"), std::string::npos);
  }
  unsetenv("TESSERA_S3_ENDPOINT");  // the default endpoint is AWS over https
  EXPECT_FALSE(Config::Load("bkt")->sign_payload);

  setenv("TESSERA_S3_ENDPOINT", "http://127.0.0.1:4568", 1);
  setenv("TESSERA_S3_SIGN_PAYLOAD", "1", 1);
  auto c = Config::Load("bkt");
  ASSERT_TRUE(c.ok());
  EXPECT_TRUE(c->sign_payload);
  EXPECT_EQ(c->payload_rule, "set by TESSERA_S3_SIGN_PAYLOAD");
  setenv("TESSERA_S3_ENDPOINT", "https://s3.amazonaws.com", 1);
  setenv("TESSERA_S3_SIGN_PAYLOAD", "true", 1);
  EXPECT_TRUE(Config::Load("bkt")->sign_payload);
  setenv("TESSERA_S3_ENDPOINT", "http://minio.internal:9000", 1);
  setenv("TESSERA_S3_SIGN_PAYLOAD", "0", 1);
  EXPECT_FALSE(Config::Load("bkt")->sign_payload);

  setenv("TESSERA_S3_SIGN_PAYLOAD", "maybe", 1);
  auto bad = Config::Load("bkt");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("TESSERA_S3_SIGN_PAYLOAD='maybe'"), std::string::npos)
      << bad.status().message();
  unsetenv("TESSERA_S3_SIGN_PAYLOAD");

  setenv("TESSERA_S3_MULTIPART_THRESHOLD", "6GiB", 1);
  bad = Config::Load("bkt");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("TESSERA_S3_MULTIPART_THRESHOLD='6GiB'"), std::string::npos)
      << bad.status().message();
  EXPECT_NE(bad.status().message().find("5 GiB"), std::string::npos);
  setenv("TESSERA_S3_MULTIPART_THRESHOLD", "100MiB", 1);
  EXPECT_EQ(Config::Load("bkt")->multipart_threshold, uint64_t{100} << 20);
  unsetenv("TESSERA_S3_MULTIPART_THRESHOLD");

  // A bad value from the config file names the key and the file.
  test::TempDir d;
  std::ofstream(d / "s3.yaml") << "sign_payload: perhaps\n";
  setenv("TESSERA_S3_CONFIG", (d / "s3.yaml").c_str(), 1);
  bad = Config::Load("bkt");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("sign_payload in " + (d / "s3.yaml") + "='perhaps'"), std::string::npos)
      << bad.status().message();
  unsetenv("TESSERA_S3_CONFIG");
  unsetenv("TESSERA_S3_ENDPOINT");
}

}  // namespace
}  // namespace tessera::ckpt::s3
