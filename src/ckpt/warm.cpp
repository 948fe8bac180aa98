// ckpt/warm: the warm tier on S3. Layout: <prefix>/step-XXXXXXXXXX/<shard files>, then
// <prefix>/step-XXXXXXXXXX/manifest.json uploaded last as the commit marker. Verification reads every
// object back with parallel ranged GETs and combines per-range CRC32Cs in order.
#include <fmt/format.h>

#include <mutex>

#include "ckpt/crc32c.hpp"
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
  Status VerifyCopy(const Manifest& m, const Progress& progress) override {
    uint64_t done = 0;
    for (const auto& f : m.files) {
      std::string key = Key(m.step, f.name);
      uint64_t chunk = c_.config().part_size;
      uint64_t n = std::max<uint64_t>(1, (f.bytes + chunk - 1) / chunk);
      std::vector<uint32_t> crcs(n, 0);
      std::mutex mu;
      Status first;
      ThreadBuffers bufs(c_.config().concurrency, chunk);
      ParallelFor(n, c_.config().concurrency, [&](uint64_t i, int t) {
        uint64_t off = i * chunk;
        size_t len = static_cast<size_t>(std::min<uint64_t>(chunk, f.bytes - off));
        if (len == 0) return true;
        char* buf = bufs.get(t);
        auto r = c_.Request("GET", key, {}, nullptr, 0, fmt::format("bytes={}-{}", off, off + len - 1), buf, len);
        std::lock_guard lk(mu);
        if (!r.ok() || r->body != std::to_string(len)) {
          if (first.ok())
            first = r.ok() ? Corrupt(fmt::format("checkpoint step {}: {} is shorter than {} bytes", m.step,
                                                 c_.Name(key), f.bytes))
                           : r.status();
          return false;
        }
        crcs[i] = Crc32c(buf, len);
        done += len;
        if (progress) progress(done, m.TotalBytes());
        return true;
      });
      TSR_RETURN_IF_ERROR(first);
      auto head = c_.Head(key);
      if (!head.ok()) return head.status();
      if (head->size != f.bytes)
        return Corrupt(fmt::format("checkpoint step {}: {} has {} bytes, the manifest says {}", m.step, c_.Name(key),
                                   head->size, f.bytes));
      uint32_t crc = 0;
      for (uint64_t i = 0; i < n; ++i) {
        uint64_t len = std::min<uint64_t>(chunk, f.bytes - std::min(f.bytes, i * chunk));
        crc = i == 0 ? crcs[0] : Crc32cCombine(crc, crcs[i], len);
      }
      if (crc != f.crc)
        return Corrupt(fmt::format("checkpoint step {}: {} fails its checksum: CRC32C {}, the manifest says {}", m.step,
                                   c_.Name(key), CrcHex(crc), CrcHex(f.crc)));
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
