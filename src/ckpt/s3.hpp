// ckpt/s3: a small S3 client for the warm tier — SigV4 (ckpt/sigv4) over libcurl, path-style or
// virtual-host addressing, multipart uploads with parts in parallel, parallel ranged downloads, and
// retries with exponential backoff on 5xx/429 answers and dropped connections.
//
// Configuration (environment overrides the file named by TESSERA_S3_CONFIG, a YAML map of the same keys
// in lower case without the prefix): TESSERA_S3_ENDPOINT, TESSERA_S3_REGION, TESSERA_S3_BUCKET,
// TESSERA_S3_ADDRESSING (path|virtual), TESSERA_S3_PART_SIZE, TESSERA_S3_MULTIPART_THRESHOLD,
// TESSERA_S3_CONCURRENCY, TESSERA_S3_RETRIES,
// TESSERA_S3_SIGN_PAYLOAD (1|0), AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN.
// Defaults follow the endpoint (Config::Load): UNSIGNED-PAYLOAD over https and on loopback, signed over
// plain http to another host; on loopback one PUT up to 5 GiB, elsewhere multipart above 64 MiB.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "common/env.hpp"
#include "tessera/ckpt.hpp"
#include "tessera/status.hpp"

namespace tessera::ckpt::s3 {

inline constexpr uint64_t kMaxSinglePut = uint64_t{5} << 30;  // S3's limit for one PUT (and for one part)
// The multipart threshold of an endpoint that is not loopback (Config::Load; TESSERA_S3_MULTIPART_THRESHOLD's
// documented default, which a test compares with this).
inline constexpr uint64_t kRemoteMultipartThreshold = uint64_t{64} << 20;

// True when the endpoint's host is loopback: localhost, *.localhost, 127.0.0.0/8 or ::1.
bool IsLoopbackEndpoint(const std::string& endpoint);

struct Config {
  std::string endpoint;  // "http://127.0.0.1:4568", "https://s3.eu-central-1.amazonaws.com"
  // region, virtual_host, part_size, concurrency and retries default to the declared defaults of
  // TESSERA_S3_REGION, _ADDRESSING, _PART_SIZE, _CONCURRENCY and _RETRIES (common/env_vars.inc).
  std::string region = env::DeclaredString("TESSERA_S3_REGION");
  std::string bucket;
  std::string access_key, secret_key, session_token;
  bool virtual_host = env::DeclaredString("TESSERA_S3_ADDRESSING") == "virtual";  // bucket.host/key (not host/bucket)
  uint64_t part_size = env::DeclaredBytes("TESSERA_S3_PART_SIZE");  // multipart parts (and download ranges)
  uint64_t multipart_threshold = kRemoteMultipartThreshold;         // objects above this go up as multipart uploads
                                                                    // (Load: kMaxSinglePut on a loopback endpoint)
  int concurrency = static_cast<int>(env::DeclaredInt("TESSERA_S3_CONCURRENCY"));  // parts/ranges in flight
  int retries = static_cast<int>(env::DeclaredInt("TESSERA_S3_RETRIES"));          // extra attempts: 5xx/429, drops
  int backoff_ms = 100;      // first backoff; doubles each attempt (with jitter)
  bool sign_payload = true;  // SHA-256 of every body; false sends UNSIGNED-PAYLOAD
                             // (Load: unsigned over https, as botocore, and on a loopback
                             // endpoint; signed over plain http to another host)
  std::string payload_rule;  // why sign_payload has its value ("default over https", ...)
  // Fills from TESSERA_S3_CONFIG (YAML), then the environment; `bucket` wins over both when not empty.
  // Errors name the variable (or the file's key) and the bad value.
  static Result<Config> Load(const std::string& bucket = "");
  // One line for logs and benchmarks: payload mode and why, single PUT limit, parts.
  std::string Describe() const;
};

struct ObjectInfo {
  std::string key;
  uint64_t size = 0;
};

class Client {
 public:
  explicit Client(Config c);
  const Config& config() const { return cfg_; }
  std::string Url(const std::string& key) const;  // what a request for `key` goes to
  std::string Name(const std::string& key) const { return "s3://" + cfg_.bucket + "/" + key; }

  Status CreateBucket();  // ok when it already exists and is ours
  Status Put(const std::string& key, const void* data, size_t n);
  Status PutFile(const std::string& key, const std::string& path, const Progress& progress = {});
  Result<std::string> Get(const std::string& key);
  // Downloads `key` (of `size` bytes) to `path` with parallel ranged GETs.
  Status GetToFile(const std::string& key, const std::string& path, uint64_t size, const Progress& progress = {});
  Result<ObjectInfo> Head(const std::string& key);  // NotFound when absent
  Result<std::vector<ObjectInfo>> List(const std::string& prefix);
  Status Delete(const std::string& key);

  struct Response {
    long code = 0;
    std::string body;
    std::map<std::string, std::string> headers;  // lower-case names
  };
  // One signed request with retries. `body`/`n` is the payload; `range` is "bytes=a-b" or "".
  Result<Response> Request(const std::string& method, const std::string& key,
                           const std::vector<std::pair<std::string, std::string>>& query, const void* body, size_t n,
                           const std::string& range = "", char* sink = nullptr, size_t sink_cap = 0);

 private:
  Status PutMultipart(const std::string& key, int fd, uint64_t size, const std::string& path, const Progress& progress);
  Config cfg_;
  std::string scheme_, host_;  // from endpoint
};

}  // namespace tessera::ckpt::s3
