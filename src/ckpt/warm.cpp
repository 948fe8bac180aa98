// ckpt/warm: the warm tier on S3. Layout: <prefix>/step-XXXXXXXXXX/<shard files>, then
// <prefix>/step-XXXXXXXXXX/manifest.json uploaded last as the commit marker. Verification reads every
// object back with parallel ranged GETs and combines per-range CRC32Cs in order.
#include <fmt/format.h>

#include <mutex>

#include "ckpt/crc32c.hpp"
#include "ckpt/internal.hpp"
#include "ckpt/s3.hpp"
#include "ckpt/tiers.hpp"
#include "common/parallel.hpp"

namespace tessera::ckpt {
namespace {

class WarmStore final : public TierStore {
 public:
  WarmStore(s3::Client client, std::string prefix) : c_(std::move(client)), prefix_(std::move(prefix)) {}
  Tier tier() const override { return Tier::kWarm; }
  std::string Describe() const override { return "warm " + c_.Name(prefix_); }
  std::string Key(int64_t step, const std::string& name) const { return prefix_ + StepDirName(step) + "/" + name; }

  Result<std::vector<int64_t>> List() override {
    TSR_ASSIGN_OR_RETURN(auto objs, c_.List(prefix_ + "step-"));
    std::vector<int64_t> steps;
    for (const auto& o : objs) {
      std::string rest = o.key.substr(prefix_.size());
      auto slash = rest.find('/');
      int64_t step;
      if (slash != std::string::npos && rest.substr(slash + 1) == kManifestName &&
          ParseStepDirName(rest.substr(0, slash), &step))
        steps.push_back(step);
    }
    std::sort(steps.begin(), steps.end());
    return steps;
  }
  Result<Manifest> ReadManifest(int64_t step) override {
    auto text = c_.Get(Key(step, kManifestName));
    if (!text.ok()) {
      if (text.status().code() == Code::kNotFound)
        return NotFound(fmt::format("checkpoint step {} is not committed in {}", step, Describe()));
      return text.status();
    }
    return ManifestForStep(*text, fmt::format("checkpoint step {}: {}", step, c_.Name(Key(step, kManifestName))), step);
  }
  Status Put(const Manifest& m, const std::string& src_dir, const Progress& progress) override {
    uint64_t base = 0, total = m.TotalBytes();
    for (const auto& f : m.files) {
      Progress p = progress ? Progress([&](uint64_t d, uint64_t) { progress(base + d, total); }) : Progress();
      Status s = c_.PutFile(Key(m.step, f.name), JoinPath(src_dir, f.name), p);
      if (!s.ok()) return s.WithContext(fmt::format("checkpoint step {}: uploading file {}", m.step, f.name));
      base += f.bytes;
    }
    return Status::Ok();
  }
  // Bytes [off, off + len) of object `key` into `buf`.
  Status GetRange(const Manifest& m, const std::string& key, uint64_t off, size_t len, char* buf, uint64_t size) {
    auto r = c_.Request("GET", key, {}, nullptr, 0, fmt::format("bytes={}-{}", off, off + len - 1), buf, len);
    if (!r.ok()) return r.status();
    if (r->body != std::to_string(len))
      return Corrupt(fmt::format("checkpoint step {}: {} is shorter than {} bytes", m.step, c_.Name(key), size));
    return Status::Ok();
  }
  // Every object against the manifest as the hot tier checks a file (ShardCheck): its safetensors header,
  // its size, and the CRC32C of the object and of every piece in it; ranges are read in parallel.
  Status VerifyCopy(const Manifest& m, const Progress& progress) override {
    uint64_t done = 0;
    for (size_t fi = 0; fi < m.files.size(); ++fi) {
      const ManifestFile& f = m.files[fi];
      std::string key = Key(m.step, f.name);
      ShardCheck check(m, fi, c_.Name(key));
      if (f.bytes < 8) return Corrupt(check.Where("is shorter than a safetensors header"));
      std::string first(8, '\0');
      TSR_RETURN_IF_ERROR(GetRange(m, key, 0, 8, first.data(), f.bytes));
      TSR_ASSIGN_OR_RETURN(uint64_t hlen, check.HeaderLength(first.data()));
      first.resize(8 + hlen);
      if (hlen > 0) TSR_RETURN_IF_ERROR(GetRange(m, key, 8, hlen, first.data() + 8, f.bytes));
      TSR_RETURN_IF_ERROR(check.Header(first));
      uint64_t chunk = c_.config().part_size;
      uint64_t n = std::max<uint64_t>(1, (f.bytes + chunk - 1) / chunk);
      std::mutex mu;
      Status failed;
      ThreadBuffers bufs(c_.config().concurrency, chunk);
      ParallelFor(n, c_.config().concurrency, [&](uint64_t i, int t) {
        uint64_t off = i * chunk;
        size_t len = static_cast<size_t>(std::min<uint64_t>(chunk, f.bytes - off));
        if (len == 0) return true;
        char* buf = bufs.get(t);
        Status s = GetRange(m, key, off, len, buf, f.bytes);
        if (s.ok()) check.Add(off, buf, len);
        std::lock_guard lk(mu);
        if (!s.ok()) {
          if (failed.ok()) failed = s;
          return false;
        }
        done += len;
        if (progress) progress(done, m.TotalBytes());
        return true;
      });
      TSR_RETURN_IF_ERROR(failed);
      auto head = c_.Head(key);
      if (!head.ok()) return head.status();
      if (head->size != f.bytes)
        return Corrupt(check.Where(fmt::format("has {} bytes, the manifest says {}", head->size, f.bytes)));
      TSR_RETURN_IF_ERROR(check.Finish());
    }
    return Status::Ok();
  }
  Status Commit(const Manifest& m) override {
    std::string text = ManifestToJson(m);
    return c_.Put(Key(m.step, kManifestName), text.data(), text.size());
  }
  Status Fetch(const Manifest& m, const std::string& dst_dir, const Progress& progress) override {
    uint64_t base = 0, total = m.TotalBytes();
    for (const auto& f : m.files) {
      Progress p = progress ? Progress([&](uint64_t d, uint64_t) { progress(base + d, total); }) : Progress();
      TSR_RETURN_IF_ERROR(c_.GetToFile(Key(m.step, f.name), JoinPath(dst_dir, f.name), f.bytes, p));
      base += f.bytes;
    }
    return Status::Ok();
  }
  Status Delete(int64_t step) override {
    TSR_RETURN_IF_ERROR(c_.Delete(Key(step, kManifestName)));  // uncommit first
    TSR_ASSIGN_OR_RETURN(auto objs, c_.List(prefix_ + StepDirName(step) + "/"));
    for (const auto& o : objs) TSR_RETURN_IF_ERROR(c_.Delete(o.key));
    return Status::Ok();
  }

 private:
  s3::Client c_;
  std::string prefix_;  // "" or "dir/sub/"
};

}  // namespace

Result<std::unique_ptr<TierStore>> MakeWarmStore(const std::string& uri) {
  if (uri.rfind("s3://", 0) != 0)
    return InvalidArgument(fmt::format("warm tier '{}' is not an s3://bucket/prefix URI", uri));
  std::string rest = uri.substr(5);
  auto slash = rest.find('/');
  std::string bucket = rest.substr(0, slash);
  std::string prefix = slash == std::string::npos ? "" : rest.substr(slash + 1);
  if (!prefix.empty() && prefix.back() != '/') prefix.push_back('/');
  if (bucket.empty()) return InvalidArgument(fmt::format("warm tier '{}' has no bucket", uri));
  auto cfg = s3::Config::Load(bucket);
  if (!cfg.ok()) return cfg.status().WithContext("warm tier " + uri);
  return std::unique_ptr<TierStore>(new WarmStore(s3::Client(*cfg), prefix));
}

}  // namespace tessera::ckpt
