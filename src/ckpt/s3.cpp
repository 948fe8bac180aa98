// ckpt/s3: S3 requests over libcurl with our SigV4, retries with backoff, multipart upload in parallel.
#include "ckpt/s3.hpp"

#include <curl/curl.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <memory>
#include <mutex>
#include <random>
#include <thread>

#include "ckpt/format.hpp"
#include "ckpt/sigv4.hpp"
#include "common/env.hpp"
#include "common/log.hpp"
#include "common/parallel.hpp"

namespace tessera::ckpt::s3 {

namespace {

// The host of an endpoint URL: "http://127.0.0.1:4568/" -> "127.0.0.1", "http://[::1]:9000" -> "::1".
std::string EndpointHost(const std::string& endpoint) {
  std::string h = endpoint;
  if (auto p = h.find("://"); p != std::string::npos) h = h.substr(p + 3);
  h = h.substr(0, h.find('/'));
  if (auto at = h.rfind('@'); at != std::string::npos) h = h.substr(at + 1);
  if (!h.empty() && h[0] == '[') return h.substr(1, h.find(']') - 1);
  return h.substr(0, h.find(':'));
}

}  // namespace

bool IsLoopbackEndpoint(const std::string& endpoint) {
  std::string h = EndpointHost(endpoint);
  for (auto& c : h) c = static_cast<char>(tolower(static_cast<unsigned char>(c)));
  auto ends_with = [&](const std::string& suffix) {
    return h.size() >= suffix.size() && h.compare(h.size() - suffix.size(), suffix.size(), suffix) == 0;
  };
  if (h == "localhost" || ends_with(".localhost") || h == "::1") return true;  // *.localhost: RFC 6761
  unsigned a, b, c, d;
  char tail;
  return std::sscanf(h.c_str(), "%u.%u.%u.%u%c", &a, &b, &c, &d, &tail) == 4 && a == 127 && b < 256 && c < 256 &&
         d < 256;
}

std::string Config::Describe() const {
  std::string upload = multipart_threshold >= kMaxSinglePut
                           ? "one PUT per object up to 5 GiB"
                           : fmt::format("one PUT up to {} MiB", multipart_threshold >> 20);
  return fmt::format("{} ({}); {}, then multipart: {} MiB parts x {}",
                     sign_payload ? "signed payload" : "UNSIGNED-PAYLOAD", payload_rule, upload, part_size >> 20,
                     concurrency);
}

Result<Config> Config::Load(const std::string& bucket) {
  Config c;
  auto file = env::Get("TESSERA_S3_CONFIG");
  std::map<std::string, std::string> kv;
  if (file) {
    auto read = env::ReadFlatMap(*file);  // a flat YAML map, read without yaml-cpp (libtessera does not link it)
    if (!read.ok()) return InvalidArgument(fmt::format("TESSERA_S3_CONFIG={}: {}", *file, read.status().message()));
    kv = std::move(*read);
  }
  // A setting from the environment, else from the file. `what` names where it came from, for errors.
  struct Setting {
    std::string value, what;
  };
  auto pick = [&](const char* envname, const char* key) -> std::optional<Setting> {
    if (auto v = env::Get(envname)) return Setting{*v, envname};
    auto it = kv.find(key);
    if (it != kv.end() && !it->second.empty()) return Setting{it->second, fmt::format("{} in {}", key, *file)};
    return std::nullopt;
  };
  if (auto v = pick("TESSERA_S3_ENDPOINT", "endpoint")) c.endpoint = v->value;
  if (auto v = pick("TESSERA_S3_REGION", "region")) c.region = v->value;
  if (auto v = pick("TESSERA_S3_BUCKET", "bucket")) c.bucket = v->value;
  if (!bucket.empty()) c.bucket = bucket;
  if (auto v = pick("AWS_ACCESS_KEY_ID", "access_key_id")) c.access_key = v->value;
  if (auto v = pick("AWS_SECRET_ACCESS_KEY", "secret_access_key")) c.secret_key = v->value;
  if (auto v = pick("AWS_SESSION_TOKEN", "session_token")) c.session_token = v->value;
  if (auto v = pick("TESSERA_S3_ADDRESSING", "addressing")) {
    if (v->value != "path" && v->value != "virtual")
      return InvalidArgument(fmt::format("{}='{}': use 'path' or 'virtual'", v->what, v->value));
    c.virtual_host = v->value == "virtual";
  }
  if (c.endpoint.empty()) c.endpoint = fmt::format("https://s3.{}.amazonaws.com", c.region);
  // Defaults that depend on where the endpoint is (measurements: bench/results/log/2026-11-29-s3-upload-vs-curl.md).
  // Payload: TLS (https) protects the body in transit, and a loopback connection never leaves the
  // machine, so both send UNSIGNED-PAYLOAD (botocore does the same over https) and skip a SHA-256 pass
  // over every byte before the first byte can be sent; plain http to another host signs the body.
  // Upload: over loopback one connection is not the limit and nothing is lost on the way, so multipart
  // buys nothing and costs servers that concatenate parts on completion a second pass: one PUT up to
  // S3's 5 GiB single-PUT limit. Remote endpoints use parallel parts above 64 MiB.
  bool loopback = IsLoopbackEndpoint(c.endpoint), https = c.endpoint.rfind("https://", 0) == 0;
  c.sign_payload = !https && !loopback;
  c.payload_rule = https      ? "default over https"
                   : loopback ? "default on a loopback endpoint"
                              : "default over plain http";
  c.multipart_threshold = loopback ? kMaxSinglePut : kRemoteMultipartThreshold;
  if (auto v = pick("TESSERA_S3_SIGN_PAYLOAD", "sign_payload")) {
    TSR_ASSIGN_OR_RETURN(c.sign_payload, env::ParseBool(v->what, v->value));
    c.payload_rule = "set by " + v->what;
  }
  if (auto v = pick("TESSERA_S3_PART_SIZE", "part_size")) {
    TSR_ASSIGN_OR_RETURN(c.part_size, env::ParseBytes(v->what, v->value));
    if (c.part_size < (uint64_t{5} << 20) || c.part_size > kMaxSinglePut)
      return InvalidArgument(fmt::format("{}='{}' is outside S3's part sizes (5 MiB to 5 GiB)", v->what, v->value));
  }
  if (auto v = pick("TESSERA_S3_MULTIPART_THRESHOLD", "multipart_threshold")) {
    TSR_ASSIGN_OR_RETURN(c.multipart_threshold, env::ParseBytes(v->what, v->value));
    if (c.multipart_threshold > kMaxSinglePut)
      return InvalidArgument(fmt::format("{}='{}' is above S3's 5 GiB limit for one PUT", v->what, v->value));
  }
  if (auto v = pick("TESSERA_S3_CONCURRENCY", "concurrency")) {
    TSR_ASSIGN_OR_RETURN(auto n, env::ParseInt(v->what, v->value, 1, 256));
    c.concurrency = static_cast<int>(n);
  }
  if (auto v = pick("TESSERA_S3_RETRIES", "retries")) {
    TSR_ASSIGN_OR_RETURN(auto n, env::ParseInt(v->what, v->value, 0, 100));
    c.retries = static_cast<int>(n);
  }
  if (c.bucket.empty()) return InvalidArgument("S3: no bucket (use s3://BUCKET/prefix or set TESSERA_S3_BUCKET)");
  if (c.access_key.empty() || c.secret_key.empty())
    return InvalidArgument("S3: no credentials (set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or the config file)");
  return c;
}

namespace {

struct CurlGlobal {
  CurlGlobal() { curl_global_init(CURL_GLOBAL_DEFAULT); }
};

struct Handle {
  CURL* h = nullptr;
  Handle() {
    static CurlGlobal g;
    h = curl_easy_init();
  }
  ~Handle() {
    if (h) curl_easy_cleanup(h);
  }
};
CURL* ThreadHandle() {
  thread_local Handle handle;
  curl_easy_reset(handle.h);
  return handle.h;
}

struct IoState {
  const char* body = nullptr;
  size_t n = 0, pos = 0;
  std::string* out = nullptr;
  char* sink = nullptr;
  size_t sink_cap = 0, sink_len = 0;
  bool overflow = false;
  std::map<std::string, std::string>* headers = nullptr;
};

size_t ReadCb(char* buf, size_t size, size_t nitems, void* ud) {
  auto* s = static_cast<IoState*>(ud);
  size_t k = std::min(size * nitems, s->n - s->pos);
  std::memcpy(buf, s->body + s->pos, k);
  s->pos += k;
  return k;
}
int SeekCb(void* ud, curl_off_t off, int origin) {
  auto* s = static_cast<IoState*>(ud);
  if (origin != SEEK_SET || off < 0 || static_cast<size_t>(off) > s->n) return CURL_SEEKFUNC_FAIL;
  s->pos = static_cast<size_t>(off);
  return CURL_SEEKFUNC_OK;
}
size_t WriteCb(char* buf, size_t size, size_t nmemb, void* ud) {
  auto* s = static_cast<IoState*>(ud);
  size_t k = size * nmemb;
  if (s->sink) {
    if (s->sink_len + k > s->sink_cap) {
      s->overflow = true;
      return 0;
    }
    std::memcpy(s->sink + s->sink_len, buf, k);
    s->sink_len += k;
  } else {
    s->out->append(buf, k);
  }
  return k;
}
size_t HeaderCb(char* buf, size_t size, size_t nitems, void* ud) {
  auto* s = static_cast<IoState*>(ud);
  std::string line(buf, size * nitems);
  auto colon = line.find(':');
  if (colon != std::string::npos) {
    std::string k = line.substr(0, colon);
    for (auto& c : k) c = static_cast<char>(tolower(static_cast<unsigned char>(c)));
    std::string v = line.substr(colon + 1);
    while (!v.empty() && (v.front() == ' ')) v.erase(v.begin());
    while (!v.empty() && (v.back() == '\r' || v.back() == '\n' || v.back() == ' ')) v.pop_back();
    (*s->headers)[k] = v;
  }
  return size * nitems;
}

std::string XmlField(const std::string& xml, const std::string& tag, size_t from = 0, size_t* at = nullptr) {
  std::string open = "<" + tag + ">", close = "</" + tag + ">";
  size_t b = xml.find(open, from);
  if (b == std::string::npos) return "";
  size_t e = xml.find(close, b);
  if (e == std::string::npos) return "";
  if (at) *at = e + close.size();
  return xml.substr(b + open.size(), e - b - open.size());
}

// "HTTP 403 SignatureDoesNotMatch: message" from S3's error body; where the answer has no error code (a HEAD's
// answer has no body, a proxy's may be empty) the status's reason and the request's query instead, so that
// the message still says what was refused: "HTTP 403 Forbidden (no S3 error in the answer; query uploadId=7)".
std::string HttpFailure(long code, const std::string& body, const std::string& query, bool with_message) {
  const std::string err = XmlField(body, "Code");
  if (!err.empty()) {
    const std::string msg = with_message ? XmlField(body, "Message") : "";
    return fmt::format("HTTP {} {}{}{}", code, err, msg.empty() ? "" : ": ", msg);
  }
  static const std::pair<long, const char*> kReasons[] = {
      {400, "Bad Request"},       {401, "Unauthorized"},          {403, "Forbidden"},
      {404, "Not Found"},         {405, "Method Not Allowed"},    {409, "Conflict"},
      {411, "Length Required"},   {412, "Precondition Failed"},   {416, "Range Not Satisfiable"},
      {429, "Too Many Requests"}, {500, "Internal Server Error"}, {501, "Not Implemented"},
      {502, "Bad Gateway"},       {503, "Service Unavailable"},   {504, "Gateway Timeout"}};
  const char* reason = "";
  for (const auto& [c, r] : kReasons)
    if (c == code) reason = r;
  return fmt::format("HTTP {}{}{} (no S3 error in the answer{})", code, *reason ? " " : "", reason,
                     query.empty() ? "" : "; query " + query);
}

std::string AmzDate() {
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y%m%dT%H%M%SZ", &tm);
  return buf;
}

bool Retryable(CURLcode c) {
  return c != CURLE_URL_MALFORMAT && c != CURLE_UNSUPPORTED_PROTOCOL && c != CURLE_WRITE_ERROR &&
         c != CURLE_OUT_OF_MEMORY && c != CURLE_ABORTED_BY_CALLBACK;
}

}  // namespace

Client::Client(Config c) : cfg_(std::move(c)) {
  std::string ep = cfg_.endpoint;
  auto p = ep.find("://");
  scheme_ = p == std::string::npos ? "https" : ep.substr(0, p);
  host_ = p == std::string::npos ? ep : ep.substr(p + 3);
  while (!host_.empty() && host_.back() == '/') host_.pop_back();
}

std::string Client::Url(const std::string& key) const {
  if (cfg_.virtual_host) return scheme_ + "://" + cfg_.bucket + "." + host_ + "/" + UriEncode(key, false);
  return scheme_ + "://" + host_ + "/" + cfg_.bucket + (key.empty() ? "" : "/" + UriEncode(key, false));
}

Result<Client::Response> Client::Request(const std::string& method, const std::string& key,
                                         const std::vector<std::pair<std::string, std::string>>& query,
                                         const void* body, size_t n, const std::string& range, char* sink,
                                         size_t sink_cap) {
  std::string what = fmt::format("S3 {} {}", method, Name(key));
  std::string path = cfg_.virtual_host ? "/" + UriEncode(key, false)
                                       : "/" + cfg_.bucket + (key.empty() ? "" : "/" + UriEncode(key, false));
  std::string host = cfg_.virtual_host ? cfg_.bucket + "." + host_ : host_;
  std::string qs = CanonicalQuery(query);
  std::string url = scheme_ + "://" + host + path + (qs.empty() ? "" : "?" + qs);
  std::string payload_hash = cfg_.sign_payload ? Sha256Hex(body ? body : "", n) : "UNSIGNED-PAYLOAD";
  thread_local std::mt19937 rng(std::random_device{}());
  Status last;
  for (int attempt = 0; attempt <= cfg_.retries; ++attempt) {
    if (attempt > 0) {
      int64_t ms = int64_t{cfg_.backoff_ms} << std::min(attempt - 1, 10);
      ms = ms / 2 + std::uniform_int_distribution<int64_t>(0, ms / 2)(rng);
      TSR_LOG_WARN("{} — retry {}/{} in {} ms", last.message(), attempt, cfg_.retries, ms);
      std::this_thread::sleep_for(std::chrono::milliseconds(ms));
    }
    SignInput si;
    si.method = method;
    si.path = path;
    si.query = query;
    si.headers["host"] = host;
    si.headers["x-amz-content-sha256"] = payload_hash;
    si.headers["x-amz-date"] = AmzDate();
    if (!range.empty()) si.headers["range"] = range;
    if (!cfg_.session_token.empty()) si.headers["x-amz-security-token"] = cfg_.session_token;
    si.payload_hash = payload_hash;
    si.amz_date = si.headers["x-amz-date"];
    si.region = cfg_.region;
    si.access_key = cfg_.access_key;
    si.secret_key = cfg_.secret_key;
    SignOutput so = Sign(si);

    CURL* h = ThreadHandle();
    curl_slist* hl = nullptr;
    for (const auto& [k, v] : si.headers)
      if (k != "host") hl = curl_slist_append(hl, (k + ": " + v).c_str());
    hl = curl_slist_append(hl, ("Authorization: " + so.authorization).c_str());
    hl = curl_slist_append(hl, "Expect:");
    if (method == "POST") hl = curl_slist_append(hl, "Content-Type: application/xml");
    Response resp;
    IoState io;
    io.body = static_cast<const char*>(body);
    io.n = n;
    io.out = &resp.body;
    io.sink = sink;
    io.sink_cap = sink_cap;
    io.headers = &resp.headers;
    curl_easy_setopt(h, CURLOPT_URL, url.c_str());
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, hl);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, 10000L);
    curl_easy_setopt(h, CURLOPT_LOW_SPEED_LIMIT, 1024L);  // a stalled transfer counts as dropped
    curl_easy_setopt(h, CURLOPT_LOW_SPEED_TIME, 60L);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, WriteCb);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &io);
    curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, HeaderCb);
    curl_easy_setopt(h, CURLOPT_HEADERDATA, &io);
    if (method == "HEAD") {
      curl_easy_setopt(h, CURLOPT_NOBODY, 1L);
    } else if (method == "PUT" || method == "POST") {
      curl_easy_setopt(h, CURLOPT_UPLOAD, 1L);
      curl_easy_setopt(h, CURLOPT_READFUNCTION, ReadCb);
      curl_easy_setopt(h, CURLOPT_READDATA, &io);
      curl_easy_setopt(h, CURLOPT_SEEKFUNCTION, SeekCb);
      curl_easy_setopt(h, CURLOPT_SEEKDATA, &io);
      curl_easy_setopt(h, CURLOPT_INFILESIZE_LARGE, static_cast<curl_off_t>(n));
      curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, method.c_str());
    } else {
      curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, method.c_str());
    }
    CURLcode rc = curl_easy_perform(h);
    curl_slist_free_all(hl);
    if (rc != CURLE_OK) {
      if (io.overflow)
        return InternalError(fmt::format("{}: the answer is larger than the {}-byte buffer", what, sink_cap));
      last = RemoteError(fmt::format("{}: {}", what, curl_easy_strerror(rc)));
      if (!Retryable(rc)) return last;
      continue;
    }
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &resp.code);
    // CompleteMultipartUpload may fail with 200 and an <Error> body.
    bool error_body = method == "POST" && resp.body.find("<Error>") != std::string::npos;
    if (resp.code >= 500 || resp.code == 429 || (error_body && XmlField(resp.body, "Code") == "InternalError")) {
      last = RemoteError(fmt::format("{}: {}", what, HttpFailure(resp.code, resp.body, qs, false)));
      continue;
    }
    if (resp.code == 404 && method != "HEAD")
      return NotFound(fmt::format("{}: {}", what, HttpFailure(resp.code, resp.body, qs, false)));
    if (resp.code >= 300 || error_body) {
      if (resp.code == 404) return NotFound(fmt::format("{}: HTTP 404", what));
      return RemoteError(fmt::format("{}: {}", what, HttpFailure(resp.code, resp.body, qs, true)));
    }
    if (sink) resp.body.assign(std::to_string(io.sink_len));  // the length written into the sink
    return resp;
  }
  return last.WithContext(fmt::format("after {} attempts", cfg_.retries + 1));
}

Status Client::CreateBucket() {
  auto r = Request("PUT", "", {}, nullptr, 0);
  if (!r.ok() && r.status().message().find("BucketAlreadyOwnedByYou") == std::string::npos &&
      r.status().message().find("BucketAlreadyExists") == std::string::npos)
    return r.status();
  return Status::Ok();
}

Status Client::Put(const std::string& key, const void* data, size_t n) {
  return Request("PUT", key, {}, data, n).status();
}

Result<std::string> Client::Get(const std::string& key) {
  TSR_ASSIGN_OR_RETURN(auto r, Request("GET", key, {}, nullptr, 0));
  return std::move(r.body);
}

Result<ObjectInfo> Client::Head(const std::string& key) {
  TSR_ASSIGN_OR_RETURN(auto r, Request("HEAD", key, {}, nullptr, 0));
  if (r.code == 404) return NotFound(fmt::format("{} does not exist", Name(key)));
  ObjectInfo info{key, 0};
  auto it = r.headers.find("content-length");
  if (it != r.headers.end()) info.size = std::stoull(it->second);
  return info;
}

Status Client::Delete(const std::string& key) {
  auto r = Request("DELETE", key, {}, nullptr, 0);
  if (!r.ok() && r.status().code() != Code::kNotFound) return r.status();
  return Status::Ok();
}

Result<std::vector<ObjectInfo>> Client::List(const std::string& prefix) {
  std::vector<ObjectInfo> out;
  std::string token;
  for (;;) {
    std::vector<std::pair<std::string, std::string>> q{{"list-type", "2"}, {"prefix", prefix}};
    if (!token.empty()) q.push_back({"continuation-token", token});
    TSR_ASSIGN_OR_RETURN(auto r, Request("GET", "", q, nullptr, 0));
    size_t at = 0;
    for (;;) {
      size_t next = 0;
      std::string c = XmlField(r.body, "Contents", at, &next);
      if (next == 0) break;
      ObjectInfo o;
      o.key = XmlField(c, "Key");
      // XML entities that can appear in our keys.
      for (size_t p; (p = o.key.find("&amp;")) != std::string::npos;) o.key.replace(p, 5, "&");
      std::string sz = XmlField(c, "Size");
      o.size = sz.empty() ? 0 : std::stoull(sz);
      out.push_back(o);
      at = next;
    }
    if (XmlField(r.body, "IsTruncated") != "true") break;
    token = XmlField(r.body, "NextContinuationToken");
    if (token.empty()) break;
  }
  return out;
}

Status Client::PutFile(const std::string& key, const std::string& path, const Progress& progress) {
  TSR_ASSIGN_OR_RETURN(int fd, OpenRegularFile(path));
  struct stat st {};
  fstat(fd, &st);
  uint64_t size = static_cast<uint64_t>(st.st_size);
  Status s;
  if (size <= cfg_.multipart_threshold) {
    // One PUT straight from the page cache (mmap), no copy into a buffer.
    void* map = size ? ::mmap(nullptr, size, PROT_READ, MAP_SHARED, fd, 0) : nullptr;
    if (size && map == MAP_FAILED) {
      s = ErrnoError("mmap " + path, errno);
    } else {
      if (size) ::madvise(map, size, MADV_SEQUENTIAL);
      s = Put(key, map, size);
      if (size) ::munmap(map, size);
    }
    if (s.ok() && progress) progress(size, size);
  } else {
    s = PutMultipart(key, fd, size, path, progress);
  }
  ::close(fd);
  return s;
}

Status Client::PutMultipart(const std::string& key, int fd, uint64_t size, const std::string& path,
                            const Progress& progress) {
  TSR_ASSIGN_OR_RETURN(auto init, Request("POST", key, {{"uploads", ""}}, nullptr, 0));
  std::string upload_id = XmlField(init.body, "UploadId");
  if (upload_id.empty())
    return RemoteError(fmt::format("S3 multipart upload of {}: no UploadId in the answer", Name(key)));
  uint64_t nparts = (size + cfg_.part_size - 1) / cfg_.part_size;
  std::vector<std::string> etags(nparts);
  std::atomic<uint64_t> done{0};
  std::mutex mu;
  Status first;
  ThreadBuffers bufs(cfg_.concurrency, cfg_.part_size);
  ParallelFor(nparts, cfg_.concurrency, [&](uint64_t i, int t) {
    {
      std::lock_guard lk(mu);
      if (!first.ok()) return false;
    }
    char* buf = bufs.get(t);
    uint64_t off = i * cfg_.part_size;
    size_t n = static_cast<size_t>(std::min<uint64_t>(cfg_.part_size, size - off));
    Status s = PreadAll(fd, buf, n, off, path);
    Result<Response> r = s;
    if (s.ok()) r = Request("PUT", key, {{"partNumber", std::to_string(i + 1)}, {"uploadId", upload_id}}, buf, n);
    std::lock_guard lk(mu);
    if (!r.ok()) {
      if (first.ok()) first = r.status();
      return false;
    }
    etags[i] = r->headers["etag"];
    uint64_t d = done.fetch_add(n) + n;
    if (progress) progress(d, size);
    return true;
  });
  if (first.ok()) {
    std::string xml = "<CompleteMultipartUpload>";
    for (uint64_t i = 0; i < nparts; ++i)
      xml += fmt::format("<Part><PartNumber>{}</PartNumber><ETag>{}</ETag></Part>", i + 1, etags[i]);
    xml += "</CompleteMultipartUpload>";
    first = Request("POST", key, {{"uploadId", upload_id}}, xml.data(), xml.size()).status();
  }
  if (!first.ok()) {
    (void)Request("DELETE", key, {{"uploadId", upload_id}}, nullptr, 0);  // abort; best effort
    return first.WithContext(fmt::format("multipart upload of {} to {}", path, Name(key)));
  }
  return Status::Ok();
}

Status Client::GetToFile(const std::string& key, const std::string& path, uint64_t size, const Progress& progress) {
  TSR_ASSIGN_OR_RETURN(int fd, CreateFileExclusive(path));
  uint64_t chunk = cfg_.part_size;
  uint64_t nparts = std::max<uint64_t>(1, (size + chunk - 1) / chunk);
  std::atomic<uint64_t> done{0};
  std::mutex mu;
  Status first;
  ThreadBuffers bufs(cfg_.concurrency, chunk);
  ParallelFor(nparts, cfg_.concurrency, [&](uint64_t i, int t) {
    uint64_t off = i * chunk;
    size_t n = static_cast<size_t>(std::min<uint64_t>(chunk, size - off));
    Status s;
    if (n > 0) {
      char* buf = bufs.get(t);
      auto r = Request("GET", key, {}, nullptr, 0, fmt::format("bytes={}-{}", off, off + n - 1), buf, n);
      if (!r.ok())
        s = r.status();
      else if (r->body != std::to_string(n))
        s = Corrupt(fmt::format("S3 GET {}: range at {} gave {} bytes, expected {}", Name(key), off, r->body, n));
      if (s.ok()) s = PwriteAll(fd, buf, n, off, path);
    }
    std::lock_guard lk(mu);
    if (!s.ok()) {
      if (first.ok()) first = s;
      return false;
    }
    uint64_t d = done.fetch_add(n) + n;
    if (progress) progress(d, size);
    return true;
  });
  if (first.ok() && ::fsync(fd) != 0) first = ErrnoError("fsync " + path, errno);
  ::close(fd);
  return first;
}

}  // namespace tessera::ckpt::s3
