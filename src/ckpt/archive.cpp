// ckpt/archive: the cold tier — one large sequential archive per step, `step-XXXXXXXXXX.tsa`, holding each
// shard file as one zstd frame back to back, and `step-XXXXXXXXXX.index.json` (the manifest plus each
// member's offset and compressed size), written last: the index is the "ready" mark. Reading is an explicit
// restore step (Stage), as with a tape library: members are decompressed in order, whole.
#include <dirent.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zstd.h>

#include <map>
#include <mutex>
#include <nlohmann/json.hpp>

#include "ckpt/crc32c.hpp"
#include "ckpt/internal.hpp"
#include "ckpt/tiers.hpp"
#include "common/env.hpp"
#include "common/nesting.hpp"

namespace tessera::ckpt {
namespace {

using json = nlohmann::json;

struct Member {
  std::string name;
  uint64_t offset = 0, compressed = 0, bytes = 0;
};

class ColdStore final : public TierStore {
 public:
  explicit ColdStore(std::string dir, int level) : dir_(std::move(dir)), level_(level) {}
  Tier tier() const override { return Tier::kCold; }
  std::string Describe() const override { return "cold " + dir_; }
  std::string Archive(int64_t step) const { return JoinPath(dir_, StepDirName(step) + ".tsa"); }
  std::string Index(int64_t step) const { return JoinPath(dir_, StepDirName(step) + ".index.json"); }

  Result<std::vector<int64_t>> List() override {
    std::vector<int64_t> steps;
    DIR* d = ::opendir(dir_.c_str());
    if (d == nullptr) {
      if (errno == ENOENT) return steps;
      return ErrnoError("open cold tier " + dir_, errno);
    }
    const std::string suffix = ".index.json";
    while (dirent* e = ::readdir(d)) {
      std::string n = e->d_name;
      int64_t step;
      if (n.size() > suffix.size() && n.compare(n.size() - suffix.size(), suffix.size(), suffix) == 0 &&
          ParseStepDirName(n.substr(0, n.size() - suffix.size()), &step))
        steps.push_back(step);
    }
    ::closedir(d);
    std::sort(steps.begin(), steps.end());
    return steps;
  }

  Result<std::pair<Manifest, std::vector<Member>>> ReadIndex(int64_t step) {
    auto text = ReadRegularFile(Index(step));
    if (!text.ok()) {
      if (text.status().code() == Code::kNotFound)
        return NotFound(fmt::format("checkpoint step {} is not committed in {}", step, Describe()));
      return text.status();
    }
    if (size_t at = NestingExceeds(*text, Syntax::kJson); at != std::string::npos)
      return Corrupt(fmt::format("checkpoint step {}: index {} nests deeper than {} levels (at byte {})", step,
                                 Index(step), kMaxNesting, at));
    try {
      json j = json::parse(*text);
      TSR_ASSIGN_OR_RETURN(Manifest m, ManifestForStep(j.at("manifest").dump(), Index(step), step));
      std::vector<Member> members;
      for (const auto& jm : j.at("members"))
        members.push_back({jm.at("name").get<std::string>(), jm.at("offset").get<uint64_t>(),
                           jm.at("compressed").get<uint64_t>(), jm.at("bytes").get<uint64_t>()});
      return std::pair{std::move(m), std::move(members)};
    } catch (const std::exception& e) {
      return Corrupt(fmt::format("checkpoint step {}: index {} does not parse: {}", step, Index(step), e.what()));
    }
  }
  Result<Manifest> ReadManifest(int64_t step) override {
    TSR_ASSIGN_OR_RETURN(auto idx, ReadIndex(step));
    return std::move(idx.first);
  }

  Status Put(const Manifest& m, const std::string& src_dir, const Progress& progress) override {
    TSR_RETURN_IF_ERROR(MakeDirs(dir_));
    std::string path = Archive(m.step);
    int out = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (out < 0) return ErrnoError(fmt::format("checkpoint step {}: create {}", m.step, path), errno);
    ZSTD_CCtx* cctx = ZSTD_createCCtx();
    ZSTD_CCtx_setParameter(cctx, ZSTD_c_compressionLevel, level_);
    ZSTD_CCtx_setParameter(cctx, ZSTD_c_nbWorkers, 2);  // ignored by single-threaded libzstd builds
    ZSTD_CCtx_setParameter(cctx, ZSTD_c_checksumFlag, 1);
    const size_t in_cap = ZSTD_CStreamInSize() * 16, out_cap = ZSTD_CStreamOutSize() * 16;
    std::unique_ptr<char[]> inbuf(new char[in_cap]), outbuf(new char[out_cap]);
    std::vector<Member> members;
    uint64_t pos = 0, done = 0;
    Status s;
    for (const auto& f : m.files) {
      std::string src = JoinPath(src_dir, f.name);
      auto opened = OpenRegularFile(src);
      if (!opened.ok()) {
        s = opened.status().WithContext(fmt::format("checkpoint step {}", m.step));
        break;
      }
      int in = *opened;
      Member mem{f.name, pos, 0, f.bytes};
      uint64_t off = 0;
      bool last = false;
      while (s.ok() && !last) {
        ssize_t r = ::pread(in, inbuf.get(), in_cap, static_cast<off_t>(off));
        if (r < 0) {
          s = ErrnoError("read " + src, errno);
          break;
        }
        off += static_cast<uint64_t>(r);
        last = r == 0;
        ZSTD_inBuffer ib{inbuf.get(), static_cast<size_t>(r), 0};
        for (;;) {
          ZSTD_outBuffer ob{outbuf.get(), out_cap, 0};
          size_t rem = ZSTD_compressStream2(cctx, &ob, &ib, last ? ZSTD_e_end : ZSTD_e_continue);
          if (ZSTD_isError(rem)) {
            s = Corrupt(fmt::format("zstd compression of {}: {}", src, ZSTD_getErrorName(rem)));
            break;
          }
          s = PwriteAll(out, outbuf.get(), ob.pos, pos, path);
          if (!s.ok()) break;
          pos += ob.pos;
          if (last ? rem == 0 : ib.pos == ib.size) break;
        }
        done += static_cast<uint64_t>(r);
        if (progress) progress(done, m.TotalBytes());
      }
      ::close(in);
      mem.compressed = pos - mem.offset;
      members.push_back(mem);
      if (!s.ok()) break;
    }
    ZSTD_freeCCtx(cctx);
    if (s.ok() && ::fsync(out) != 0) s = ErrnoError("fsync " + path, errno);
    ::close(out);
    if (s.ok()) s = FsyncDir(dir_);
    if (!s.ok()) return s.WithContext(fmt::format("checkpoint step {}: writing archive {}", m.step, path));
    std::lock_guard lk(mu_);
    pending_[m.step] = members;
    return Status::Ok();
  }

  // Decompresses one member, handing each block to `sink`; checks size and CRC32C against the manifest.
  Status ReadMember(const Manifest& m, const Member& mem, const ManifestFile& f,
                    const std::function<Status(const char*, size_t, uint64_t)>& sink, const Progress& progress,
                    uint64_t* done) {
    std::string path = Archive(m.step);
    auto opened = OpenRegularFile(path);
    if (!opened.ok()) return opened.status().WithContext(fmt::format("checkpoint step {}: archive", m.step));
    int in = *opened;
    ZSTD_DCtx* dctx = ZSTD_createDCtx();
    const size_t in_cap = ZSTD_DStreamInSize() * 16, out_cap = ZSTD_DStreamOutSize() * 16;
    std::unique_ptr<char[]> inbuf(new char[in_cap]), outbuf(new char[out_cap]);
    uint64_t off = mem.offset, end = mem.offset + mem.compressed, produced = 0;
    uint32_t crc = 0;
    Status s;
    size_t ret = 1;
    while (s.ok() && off < end) {
      size_t want = static_cast<size_t>(std::min<uint64_t>(in_cap, end - off));
      s = PreadAll(in, inbuf.get(), want, off, path);
      if (!s.ok()) break;
      off += want;
      ZSTD_inBuffer ib{inbuf.get(), want, 0};
      while (ib.pos < ib.size || ret != 0) {
        ZSTD_outBuffer ob{outbuf.get(), out_cap, 0};
        ret = ZSTD_decompressStream(dctx, &ob, &ib);
        if (ZSTD_isError(ret)) {
          s = Corrupt(fmt::format("checkpoint step {}: archive {} member {} does not decompress: {}", m.step, path,
                                  f.name, ZSTD_getErrorName(ret)));
          break;
        }
        if (ob.pos > 0) {
          crc = Crc32c(outbuf.get(), ob.pos, crc);
          s = sink(outbuf.get(), ob.pos, produced);
          if (!s.ok()) break;
          produced += ob.pos;
          *done += ob.pos;
          if (progress) progress(*done, m.TotalBytes());
        }
        if (ib.pos == ib.size && ob.pos < out_cap) break;
      }
    }
    ZSTD_freeDCtx(dctx);
    ::close(in);
    TSR_RETURN_IF_ERROR(s);
    if (produced != f.bytes || crc != f.crc)
      return Corrupt(fmt::format(
          "checkpoint step {}: archive {} member {} gives {} bytes with CRC32C {}; the manifest says {} bytes, {}",
          m.step, path, f.name, produced, CrcHex(crc), f.bytes, CrcHex(f.crc)));
    return Status::Ok();
  }

  Result<std::vector<Member>> MembersFor(const Manifest& m) {
    {
      std::lock_guard lk(mu_);
      auto it = pending_.find(m.step);
      if (it != pending_.end()) return it->second;
    }
    TSR_ASSIGN_OR_RETURN(auto idx, ReadIndex(m.step));
    return idx.second;
  }

  // Every member against the manifest as the hot tier checks a file (ShardCheck): its safetensors header,
  // its size, and the CRC32C of the member and of every piece in it, from the decompressed stream.
  Status VerifyCopy(const Manifest& m, const Progress& progress) override {
    TSR_ASSIGN_OR_RETURN(auto members, MembersFor(m));
    if (members.size() != m.files.size())
      return Corrupt(fmt::format("checkpoint step {}: archive {} has {} members, expected {}", m.step, Archive(m.step),
                                 members.size(), m.files.size()));
    uint64_t done = 0;
    for (size_t i = 0; i < members.size(); ++i) {
      ShardCheck check(m, i, fmt::format("archive {} member {}", Archive(m.step), m.files[i].name));
      std::string first;  // the first bytes, until the safetensors header is complete
      uint64_t need = 8;
      bool header_done = false;
      auto sink = [&](const char* p, size_t n, uint64_t off) -> Status {
        check.Add(off, p, n);
        for (size_t k = 0; !header_done && k < n;) {
          size_t take = static_cast<size_t>(std::min<uint64_t>(n - k, need - first.size()));
          first.append(p + k, take);
          k += take;
          if (first.size() < need) break;
          if (need == 8) {
            TSR_ASSIGN_OR_RETURN(uint64_t hlen, check.HeaderLength(first.data()));
            need = 8 + hlen;
          }
          if (first.size() == need) {
            TSR_RETURN_IF_ERROR(check.Header(first));
            header_done = true;
          }
        }
        return Status::Ok();
      };
      TSR_RETURN_IF_ERROR(ReadMember(m, members[i], m.files[i], sink, progress, &done));
      TSR_RETURN_IF_ERROR(check.Finish());
    }
    return Status::Ok();
  }

  Status Commit(const Manifest& m) override {
    TSR_ASSIGN_OR_RETURN(auto members, MembersFor(m));
    json j;
    j["format"] = "tessera-archive/1";
    j["archive"] = StepDirName(m.step) + ".tsa";
    j["manifest"] = json::parse(ManifestToJson(m));
    j["members"] = json::array();
    for (const auto& mem : members)
      j["members"].push_back(
          {{"name", mem.name}, {"offset", mem.offset}, {"compressed", mem.compressed}, {"bytes", mem.bytes}});
    TSR_RETURN_IF_ERROR(WriteFileAtomic(Index(m.step), j.dump(1)));
    std::lock_guard lk(mu_);
    pending_.erase(m.step);
    return Status::Ok();
  }

  Status Fetch(const Manifest& m, const std::string& dst_dir, const Progress& progress) override {
    TSR_ASSIGN_OR_RETURN(auto members, MembersFor(m));
    uint64_t done = 0;
    for (size_t i = 0; i < members.size() && i < m.files.size(); ++i) {
      std::string out = JoinPath(dst_dir, m.files[i].name);
      TSR_ASSIGN_OR_RETURN(int fd, CreateFileExclusive(out));
      Status s = ReadMember(
          m, members[i], m.files[i],
          [&](const char* p, size_t n, uint64_t off) { return PwriteAll(fd, p, n, off, out); }, progress, &done);
      if (s.ok() && ::fsync(fd) != 0) s = ErrnoError("fsync " + out, errno);
      ::close(fd);
      TSR_RETURN_IF_ERROR(s);
    }
    return Status::Ok();
  }

  Status Delete(int64_t step) override {
    if (::unlink(Index(step).c_str()) != 0 && errno != ENOENT) return ErrnoError("remove " + Index(step), errno);
    TSR_RETURN_IF_ERROR(FsyncDir(dir_));
    if (::unlink(Archive(step).c_str()) != 0 && errno != ENOENT) return ErrnoError("remove " + Archive(step), errno);
    return Status::Ok();
  }

 private:
  std::string dir_;
  int level_;
  std::mutex mu_;
  std::map<int64_t, std::vector<Member>> pending_;  // written by Put, not yet committed
};

}  // namespace

Result<std::unique_ptr<TierStore>> MakeColdStore(const std::string& dir) {
  TSR_ASSIGN_OR_RETURN(int64_t level, env::Int("TESSERA_CKPT_ZSTD_LEVEL", -7, 19));
  return std::unique_ptr<TierStore>(new ColdStore(dir, static_cast<int>(level)));
}

}  // namespace tessera::ckpt
