// ckpt/tiers: the hot store, tier configuration, listing across tiers, Stage (warm/cold → hot) and
// Demote (hot → warm/cold): copy → verify → mark ready → delete source, idempotent and crash-safe
// (a step is always committed in at least one tier: the source is uncommitted only after the copy is).
#include "ckpt/tiers.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <map>
#include <set>

#include "ckpt/internal.hpp"
#include "common/env.hpp"
#include "common/log.hpp"

namespace tessera::ckpt {

const char* TierName(Tier t) {
  switch (t) {
    case Tier::kHot:
      return "hot";
    case Tier::kWarm:
      return "warm";
    case Tier::kCold:
      return "cold";
  }
  return "?";
}

TierConfig TierConfig::FromEnv(TierConfig base) {
  TierConfig t;
  t.hot = env::Get("TESSERA_CKPT_ROOT").value_or("");
  t.warm = env::Get("TESSERA_CKPT_WARM").value_or("");
  t.cold = env::Get("TESSERA_CKPT_COLD").value_or("");
  if (!base.hot.empty()) t.hot = base.hot;
  if (!base.warm.empty()) t.warm = base.warm;
  if (!base.cold.empty()) t.cold = base.cold;
  return t;
}

namespace {

// Copies the file `name` of the directory `from_dir` into `to_dir` (created exclusively, no link followed) with a
// progress callback, then fsyncs it. `from` and `to` name them in errors.
Status CopyFile(int from_dir, int to_dir, const std::string& name, const std::string& from, const std::string& to,
                const Progress& progress, uint64_t* done, uint64_t total) {
  TSR_ASSIGN_OR_RETURN(Fd in, OpenRegularFileBeneath(from_dir, name, from));
  TSR_ASSIGN_OR_RETURN(int created, CreateFileExclusiveAt(to_dir, name, to));
  Fd out(created);
  constexpr size_t kChunk = size_t{8} << 20;
  std::unique_ptr<char[]> buf(new char[kChunk]);
  uint64_t off = 0;
  for (;;) {
    ssize_t r = ::pread(in.get(), buf.get(), kChunk, static_cast<off_t>(off));
    if (r < 0) {
      if (errno == EINTR) continue;
      return ErrnoError("read " + from, errno);
    }
    if (r == 0) break;
    TSR_RETURN_IF_ERROR(PwriteAll(out.get(), buf.get(), static_cast<size_t>(r), off, to));
    off += static_cast<uint64_t>(r);
    *done += static_cast<uint64_t>(r);
    if (progress) progress(*done, total);
  }
  if (::fsync(out.get()) != 0) return ErrnoError("fsync " + to, errno);
  return Status::Ok();
}

// Opens (creating it and the root when absent) the step directory `dir` of a root for writing into it.
Result<Fd> MakeStepDir(const std::string& root, int64_t step) {
  TSR_RETURN_IF_ERROR(MakeDirs(root));
  TSR_ASSIGN_OR_RETURN(Fd r, OpenDir(root));
  const std::string dir = JoinPath(root, StepDirName(step));
  auto d = MakeDirBeneath(r.get(), StepDirName(step), dir);
  if (!d.ok() && d.status().code() == Code::kCorrupt)
    return Corrupt(fmt::format("{} (checkpoint commands never follow a link out of their root)", d.status().message()));
  return d;
}

class HotStore final : public TierStore {
 public:
  explicit HotStore(std::string root) : root_(std::move(root)) {}
  Tier tier() const override { return Tier::kHot; }
  std::string Describe() const override { return "hot " + root_; }
  Result<std::vector<int64_t>> List() override { return ListSteps(root_); }
  Result<Manifest> ReadManifest(int64_t step) override { return LoadManifest(root_, step); }
  std::string Dir(int64_t step) const { return JoinPath(root_, StepDirName(step)); }
  // Every file is written beneath the step directory's descriptor, opened once: a step directory that is (or
  // becomes, while the copy runs) a link is never written through.
  Status Put(const Manifest& m, const std::string& src_dir, const Progress& progress) override {
    const std::string dir = Dir(m.step);
    TSR_ASSIGN_OR_RETURN(Fd out, MakeStepDir(root_, m.step));
    TSR_ASSIGN_OR_RETURN(Fd in, OpenStepDir(src_dir));
    CrashPoint("hot-put:opened");
    uint64_t done = 0, total = m.TotalBytes();
    for (const auto& f : m.files) {
      Status s = CopyFile(in.get(), out.get(), f.name, JoinPath(src_dir, f.name), JoinPath(dir, f.name), progress,
                          &done, total);
      if (!s.ok()) return s.WithContext(fmt::format("checkpoint step {}: copying {} into {}", m.step, f.name, dir));
    }
    if (::fsync(out.get()) != 0) return ErrnoError("fsync directory " + dir, errno);
    return Status::Ok();
  }
  Status VerifyCopy(const Manifest& m, const Progress& progress) override {
    return VerifyDir(m, Dir(m.step), VerifyOptions{true}, progress);
  }
  Status Commit(const Manifest& m) override {
    TSR_ASSIGN_OR_RETURN(Fd d, OpenStepDir(Dir(m.step)));
    CrashPoint("hot-commit:opened");
    Status s = WriteFileAtomic(JoinPath(FdPath(d.get()), kManifestName), ManifestToJson(m));
    return s.ok() ? s : s.WithContext(fmt::format("checkpoint step {}: committing {}", m.step, Dir(m.step)));
  }
  Status Fetch(const Manifest& m, const std::string& dst_dir, const Progress& progress) override {
    TSR_ASSIGN_OR_RETURN(Fd in, OpenStepDir(Dir(m.step)));
    TSR_ASSIGN_OR_RETURN(Fd out, OpenDir(dst_dir));
    uint64_t done = 0, total = m.TotalBytes();
    for (const auto& f : m.files)
      TSR_RETURN_IF_ERROR(CopyFile(in.get(), out.get(), f.name, JoinPath(Dir(m.step), f.name),
                                   JoinPath(dst_dir, f.name), progress, &done, total));
    return Status::Ok();
  }
  Status Delete(int64_t step) override { return Remove(root_, step); }

 private:
  std::string root_;
};

}  // namespace

std::unique_ptr<TierStore> MakeHotStore(const std::string& root) { return std::make_unique<HotStore>(root); }

#ifndef TESSERA_HAVE_S3
Result<std::unique_ptr<TierStore>> MakeWarmStore(const std::string& uri) {
  return Unsupported(fmt::format("warm tier {}: this build has no S3 support (needs OpenSSL and libcurl)", uri));
}
#endif
#ifndef TESSERA_HAVE_ZSTD
Result<std::unique_ptr<TierStore>> MakeColdStore(const std::string& dir) {
  return Unsupported(fmt::format("cold tier {}: this build has no archive support (needs libzstd)", dir));
}
#endif

Result<std::vector<std::unique_ptr<TierStore>>> OpenStores(const TierConfig& t) {
  std::vector<std::unique_ptr<TierStore>> out;
  if (t.hot.empty()) return InvalidArgument("no hot tier: pass --root DIR or set TESSERA_CKPT_ROOT");
  out.push_back(MakeHotStore(t.hot));
  if (!t.warm.empty()) {
    TSR_ASSIGN_OR_RETURN(auto w, MakeWarmStore(t.warm));
    out.push_back(std::move(w));
  }
  if (!t.cold.empty()) {
    TSR_ASSIGN_OR_RETURN(auto c, MakeColdStore(t.cold));
    out.push_back(std::move(c));
  }
  return out;
}

Result<std::vector<StepLocation>> ListAll(const TierConfig& tiers) {
  TSR_ASSIGN_OR_RETURN(auto stores, OpenStores(tiers));
  std::map<int64_t, StepLocation> all;
  for (auto& s : stores) {
    TSR_ASSIGN_OR_RETURN(auto steps, s->List());
    for (int64_t step : steps) {
      auto& loc = all[step];
      loc.step = step;
      loc.tiers.push_back(s->tier());
      if (loc.bytes == 0) {
        auto m = s->ReadManifest(step);
        if (m.ok()) {
          loc.bytes = m->TotalBytes();
          loc.created_unix = m->created_unix;
        }
      }
    }
  }
  std::vector<StepLocation> out;
  for (auto& [k, v] : all) out.push_back(v);
  return out;
}

namespace {
TierStore* Find(std::vector<std::unique_ptr<TierStore>>& stores, Tier t) {
  for (auto& s : stores)
    if (s->tier() == t) return s.get();
  return nullptr;
}

// A staging directory under the hot root for copies between non-hot tiers; removed by the caller.
std::string StagingName(int64_t step) { return fmt::format(".staging-{}-{}", StepDirName(step), ::getpid()); }
std::string StagingDir(const std::string& hot, int64_t step) { return JoinPath(hot, StagingName(step)); }
// Deletes the step from every tier faster than `to` (after `to` holds a verified, committed copy).
Status DeleteAbove(std::vector<std::unique_ptr<TierStore>>& stores, int64_t step, Tier to) {
  for (auto& s : stores) {
    if (static_cast<int>(s->tier()) >= static_cast<int>(to)) break;
    auto m = s->ReadManifest(step);
    if (!m.ok() && m.status().code() == Code::kNotFound) {
      continue;
    }
    Status st = s->Delete(step);
    if (!st.ok())
      return st.WithContext(fmt::format("checkpoint step {}: deleting the copy in {}", step, s->Describe()));
  }
  return Status::Ok();
}
}  // namespace

Status Stage(const TierConfig& tiers, int64_t step, const Progress& progress) {
  TSR_ASSIGN_OR_RETURN(auto stores, OpenStores(tiers));
  TierStore* hot = stores[0].get();
  auto in_hot = hot->ReadManifest(step);
  if (in_hot.ok()) return Status::Ok();
  for (size_t i = 1; i < stores.size(); ++i) {
    auto m = stores[i]->ReadManifest(step);
    if (!m.ok()) {
      if (m.status().code() == Code::kNotFound) continue;
      return m.status();
    }
    // The staging directory and the step directory are handled beneath the root's descriptor (the root may be
    // a directory other users can write: `restore --to`); the fetch writes through the staging directory's own
    // descriptor (FdPath), so a staging directory swapped for a link meanwhile is never written through.
    const std::string staging = StagingDir(tiers.hot, step), sname = StagingName(step);
    const std::string dir = JoinPath(tiers.hot, StepDirName(step));
    TSR_RETURN_IF_ERROR(MakeDirs(tiers.hot));
    TSR_ASSIGN_OR_RETURN(Fd root, OpenDir(tiers.hot));
    TSR_RETURN_IF_ERROR(RemoveTreeAt(root.get(), sname, staging));
    TSR_ASSIGN_OR_RETURN(Fd sfd, MakeDirBeneath(root.get(), sname, staging, 0700));
    Status s = stores[i]->Fetch(*m, FdPath(sfd.get()), progress);
    if (s.ok()) s = VerifyDirAt(*m, sfd.get(), staging, VerifyOptions{true}, {});
    if (s.ok()) s = WriteFileAtomic(JoinPath(FdPath(sfd.get()), kManifestName), ManifestToJson(*m));
    if (s.ok()) s = RemoveTreeAt(root.get(), StepDirName(step), dir);  // an uncommitted leftover
    if (s.ok() && ::renameat(root.get(), sname.c_str(), root.get(), StepDirName(step).c_str()) != 0)
      s = ErrnoError("rename " + staging + " to " + dir, errno);
    if (s.ok() && ::fsync(root.get()) != 0) s = ErrnoError("fsync directory " + tiers.hot, errno);
    (void)RemoveTreeAt(root.get(), sname, staging);
    if (!s.ok()) return s.WithContext(fmt::format("staging checkpoint step {} from {}", step, stores[i]->Describe()));
    TSR_LOG_INFO("checkpoint step {} staged from {} into {}", step, stores[i]->Describe(), dir);
    return Status::Ok();
  }
  // A hot copy whose manifest does not read (corrupt, a FIFO, a link) and no other copy: say what is wrong
  // with it, not that the step is absent.
  if (in_hot.status().code() != Code::kNotFound) return in_hot.status();
  return NotFound(fmt::format("checkpoint step {} is committed in no tier", step));
}

Status Demote(const TierConfig& tiers, int64_t step, Tier to, bool delete_source, const Progress& progress) {
  TSR_ASSIGN_OR_RETURN(auto stores, OpenStores(tiers));
  TierStore* dst = Find(stores, to);
  if (dst == nullptr || to == Tier::kHot)
    return InvalidArgument(
        fmt::format("checkpoint step {}: cannot demote to {} (tier not configured)", step, TierName(to)));
  // The source: the fastest tier above `to` that holds the step.
  TierStore* src = nullptr;
  Manifest m;
  for (auto& s : stores) {
    if (static_cast<int>(s->tier()) >= static_cast<int>(to)) break;
    auto r = s->ReadManifest(step);
    if (r.ok()) {
      src = s.get();
      m = *r;
      break;
    }
    if (r.status().code() != Code::kNotFound) return r.status();
  }
  auto existing = dst->ReadManifest(step);
  if (existing.ok()) {
    // Already there (a rerun after a crash): verify, then finish the move.
    TSR_RETURN_IF_ERROR(dst->VerifyCopy(*existing, progress));
    if (delete_source) TSR_RETURN_IF_ERROR(DeleteAbove(stores, step, to));
    return Status::Ok();
  }
  if (src == nullptr)
    return NotFound(fmt::format("checkpoint step {}: no copy above the {} tier to demote", step, TierName(to)));
  std::string local;
  std::string staging;
  Fd hot_step;
  if (src->tier() == Tier::kHot) {
    // Verified, then copied through the same descriptor: a step directory swapped meanwhile is not read.
    const std::string dir = JoinPath(tiers.hot, StepDirName(step));
    TSR_ASSIGN_OR_RETURN(hot_step, OpenStepDir(dir));
    TSR_RETURN_IF_ERROR(VerifyDirAt(m, hot_step.get(), dir, VerifyOptions{true}, {}));  // never propagate corruption
    local = FdPath(hot_step.get());
  } else {
    staging = StagingDir(tiers.hot, step);
    TSR_RETURN_IF_ERROR(RemoveTree(staging));
    TSR_RETURN_IF_ERROR(MakeDirs(staging));
    Status s = src->Fetch(m, staging, progress);
    if (s.ok()) s = VerifyDir(m, staging, VerifyOptions{true}, {});
    if (!s.ok()) {
      (void)RemoveTree(staging);
      return s.WithContext(fmt::format("demoting checkpoint step {}: reading {}", step, src->Describe()));
    }
    local = staging;
  }
  Status s = dst->Put(m, local, progress);
  CrashPoint("demote:copied");
  if (s.ok()) s = dst->VerifyCopy(m, {});
  CrashPoint("demote:verified");
  if (s.ok()) s = dst->Commit(m);
  CrashPoint("demote:marked");
  if (!staging.empty()) (void)RemoveTree(staging);
  if (!s.ok()) return s.WithContext(fmt::format("demoting checkpoint step {} to {}", step, dst->Describe()));
  if (delete_source) {
    TSR_RETURN_IF_ERROR(DeleteAbove(stores, step, to));
    CrashPoint("demote:deleted");
  }
  TSR_LOG_INFO("checkpoint step {} moved from {} to {}", step, src->Describe(), dst->Describe());
  return Status::Ok();
}

}  // namespace tessera::ckpt
