// cli/ckpt: `tessera ckpt ls|show|verify|restore|import|tier|rm|cost|bench` — inspect, verify, stage back,
// import safetensors as a step, tier, delete, price and benchmark checkpoints. Tiers come from
// --root/--warm/--cold or TESSERA_CKPT_ROOT, TESSERA_CKPT_WARM, TESSERA_CKPT_COLD. Tables go to stdout;
// progress bars to stderr, only on a TTY.
#include "tessera/ckpt.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <mutex>

#include "ckpt/bench.hpp"
#include "ckpt/cost.hpp"
#include "ckpt/crc32c.hpp"
#include "ckpt/format.hpp"
#include "ckpt/import.hpp"
#include "ckpt/internal.hpp"
#include "ckpt/tiers.hpp"
#include "cli/command.hpp"
#include "cli/exit_code.hpp"
#include "common/dtype.hpp"

namespace tessera::cli {
namespace {

using namespace tessera::ckpt;

std::string HumanBytes(uint64_t b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  double v = static_cast<double>(b);
  int u = 0;
  while (v >= 1024 && u < 5) {
    v /= 1024;
    ++u;
  }
  return u == 0 ? fmt::format("{} B", b) : fmt::format("{:.1f} {}", v, units[u]);
}

std::string HumanAge(int64_t seconds) {
  if (seconds < 0) return "-";
  if (seconds < 120) return fmt::format("{}s", seconds);
  if (seconds < 7200) return fmt::format("{}m", seconds / 60);
  if (seconds < 172800) return fmt::format("{}h", seconds / 3600);
  return fmt::format("{}d", seconds / 86400);
}

// A one-line progress bar on stderr, redrawn at most 10 times a second, only when stderr is a TTY.
class ProgressBar {
 public:
  explicit ProgressBar(std::string label) : label_(std::move(label)), tty_(::isatty(2)) {}
  ~ProgressBar() { Finish(); }
  Progress Callback() {
    if (!tty_) return {};
    return [this](uint64_t done, uint64_t total) { Update(done, total); };
  }
  SaveProgress SaveCallback() {
    if (!tty_) return {};
    return [this](int64_t, uint64_t done, uint64_t total) { Update(done, total); };
  }
  void Finish() {
    if (tty_ && drawn_) std::fprintf(stderr, "\r\033[K");
    drawn_ = false;
  }

 private:
  void Update(uint64_t done, uint64_t total) {
    std::lock_guard lk(mu_);
    auto now = std::chrono::steady_clock::now();
    if (drawn_ && done < total && now - last_ < std::chrono::milliseconds(100)) return;
    last_ = now;
    drawn_ = true;
    double frac = total ? static_cast<double>(done) / static_cast<double>(total) : 1.0;
    int width = 30, fill = static_cast<int>(frac * width);
    double secs = std::chrono::duration<double>(now - start_).count();
    std::string bar(static_cast<size_t>(fill), '=');
    if (fill < width) bar += '>';
    bar.resize(static_cast<size_t>(width), ' ');
    std::fprintf(stderr, "\r%s [%s] %3.0f%% %s/%s %s/s\033[K", label_.c_str(), bar.c_str(), frac * 100,
                 HumanBytes(done).c_str(), HumanBytes(total).c_str(),
                 HumanBytes(secs > 0 ? static_cast<uint64_t>(static_cast<double>(done) / secs) : 0).c_str());
    std::fflush(stderr);
  }
  std::string label_;
  bool tty_;
  bool drawn_ = false;
  std::mutex mu_;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now(), last_;
};

int Fail(const Status& s) {
  std::fprintf(stderr, "tessera ckpt: %s\n", s.message().c_str());
  return tessera::cli::ExitCodeOf(s);
}

// Display width of UTF-8 text (code points; our cells hold no wide characters).
size_t Width(const std::string& s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

// Prints rows as an aligned table: the first row is the header.
void PrintTable(const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> w;
  for (const auto& r : rows)
    for (size_t i = 0; i < r.size(); ++i) {
      if (w.size() <= i) w.push_back(0);
      w[i] = std::max(w[i], Width(r[i]));
    }
  for (const auto& r : rows) {
    std::string line;
    for (size_t i = 0; i < r.size(); ++i)
      line += i + 1 < r.size() ? r[i] + std::string(w[i] - Width(r[i]) + 2, ' ') : r[i];
    std::printf("%s\n", line.c_str());
  }
}

std::string TierList(const std::vector<Tier>& ts) {
  std::string s;
  for (auto t : ts) s += (s.empty() ? "" : ",") + std::string(TierName(t));
  return s;
}

int CmdLs(const TierConfig& t, bool verify) {
  auto all = ListAll(t);
  if (!all.ok()) return Fail(all.status());
  int64_t now = static_cast<int64_t>(std::time(nullptr));
  std::vector<std::vector<std::string>> rows{{"STEP", "SIZE", "TIERS", "AGE", "STATE"}};
  // "latest" is the library's (what a resuming job and tsrCkptLatest take): the newest hot step whose data
  // passes its checksums. The steps it skipped on the way are bad whatever the cheaper check below says.
  auto lat = Latest(t.hot);
  const int64_t latest = lat.ok() ? lat->step : -1;
  std::vector<std::vector<std::string>> body;
  for (const auto& l : all.value()) {
    std::string state = "committed";
    if (std::find(l.tiers.begin(), l.tiers.end(), Tier::kHot) != l.tiers.end()) {
      Status s = Verify(t.hot, l.step, VerifyOptions{verify});
      if (s.ok() && l.step > latest) s = Verify(t.hot, l.step);  // skipped by Latest: say why
      state =
          s.ok() ? (verify ? "verified" : "ok") : (s.message().find("torn") != std::string::npos ? "TORN" : "CORRUPT");
      auto info = Describe(t.hot, l.step);
      if (s.ok() && info.ok() && !info->manifest_protected) state += " (unprotected manifest)";
    } else if (std::find(l.tiers.begin(), l.tiers.end(), Tier::kCold) != l.tiers.end() && l.tiers.size() == 1) {
      state = "archived (restore to read)";
    }
    // A manifest that does not read has no commit time: no age ("-"), not the age of the epoch.
    body.push_back({std::to_string(l.step), HumanBytes(l.bytes), TierList(l.tiers),
                    l.created_unix > 0 ? HumanAge(now - l.created_unix) : "-", state});
  }
  // Uncommitted step directories in hot (a save in progress or killed): shown, never "latest".
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(t.hot, ec)) {
    int64_t step;
    if (ParseStepDirName(e.path().filename().string(), &step) && !std::filesystem::exists(e.path() / kManifestName))
      body.push_back({std::to_string(step), "-", "hot", "-", "incomplete (no manifest)"});
  }
  std::sort(body.begin(), body.end(), [](auto& a, auto& b) { return std::stoll(a[0]) < std::stoll(b[0]); });
  for (auto& r : body) {
    if (r[0] == std::to_string(latest) && r[4] != "incomplete (no manifest)") r[4] += " (latest)";
    rows.push_back(r);
  }
  PrintTable(rows);
  return 0;
}

// What verify says of a copy that passes every check but whose manifest has no digest (format 1).
std::string UnprotectedNote() {
  return fmt::format("ok, unprotected manifest ({}: no manifest_crc32c; a consistent edit of it would go unseen)",
                     kLegacyFormatName);
}

Result<Manifest> FindManifest(const TierConfig& t, int64_t step) {
  TSR_ASSIGN_OR_RETURN(auto stores, OpenStores(t));
  for (auto& s : stores) {
    auto m = s->ReadManifest(step);
    if (m.ok() || m.status().code() != Code::kNotFound) return m;
  }
  return NotFound(fmt::format("checkpoint step {} is committed in no tier", step));
}

int CmdShow(const TierConfig& t, int64_t step) {
  auto m = FindManifest(t, step);
  if (!m.ok()) return Fail(m.status());
  std::printf("step %lld  world %d  size %s  created %s", static_cast<long long>(m->step), m->world,
              HumanBytes(m->TotalBytes()).c_str(), std::ctime(reinterpret_cast<const time_t*>(&m->created_unix)));
  std::printf("\nfiles:\n");
  std::vector<std::vector<std::string>> rows{{"RANK", "FILE", "SIZE", "CRC32C"}};
  for (const auto& f : m->files) rows.push_back({std::to_string(f.rank), f.name, HumanBytes(f.bytes), CrcHex(f.crc)});
  PrintTable(rows);
  std::printf("\ntensors:\n");
  rows = {{"NAME", "DTYPE", "SHAPE", "SHARDING", "PIECES (rank:rows)"}};
  for (const auto& tn : m->tensors) {
    std::string shape = "[";
    for (size_t i = 0; i < tn.shape.size(); ++i) shape += (i ? ", " : "") + std::to_string(tn.shape[i]);
    shape += "]";
    std::string pieces;
    for (const auto& p : tn.pieces)
      pieces += fmt::format("{}{}:{}-{}", pieces.empty() ? "" : " ", p.file, p.row_offset, p.row_offset + p.rows);
    rows.push_back(
        {tn.name, DTypeName(tn.dtype), shape, tn.sharding == Sharding::kRowSharded ? "row" : "replicated", pieces});
  }
  PrintTable(rows);
  return 0;
}

int CmdVerify(const TierConfig& t, std::vector<int64_t> steps) {
  auto stores = OpenStores(t);
  if (!stores.ok()) return Fail(stores.status());
  if (steps.empty()) {
    auto all = ListAll(t);
    if (!all.ok()) return Fail(all.status());
    for (const auto& l : all.value()) steps.push_back(l.step);
  }
  int bad = 0;
  std::vector<std::vector<std::string>> rows{{"STEP", "TIER", "RESULT"}};
  for (int64_t step : steps) {
    bool found = false;
    for (auto& s : stores.value()) {
      auto m = s->ReadManifest(step);
      if (!m.ok()) {
        if (m.status().code() == Code::kNotFound) continue;
        rows.push_back({std::to_string(step), TierName(s->tier()), m.status().message()});
        ++bad;
        found = true;
        continue;
      }
      found = true;
      ProgressBar bar(fmt::format("verify step {} ({})", step, TierName(s->tier())));
      Status v = s->VerifyCopy(*m, bar.Callback());
      bar.Finish();
      if (!v.ok()) ++bad;
      std::string result = !v.ok() ? v.message() : m->digest ? "ok" : UnprotectedNote();
      rows.push_back({std::to_string(step), TierName(s->tier()), result});
    }
    if (!found) {
      rows.push_back({std::to_string(step), "-", "not committed in any tier"});
      ++bad;
    }
  }
  PrintTable(rows);
  return bad ? 1 : 0;
}

int CmdRestore(const TierConfig& t, int64_t step, const std::string& to) {
  TierConfig dst = t;
  if (!to.empty()) dst.hot = to;
  ProgressBar bar(fmt::format("restore step {}", step));
  Status s;
  if (!to.empty() && ListSteps(t.hot).ok() && Describe(t.hot, step).ok()) {
    // Copy the hot step into another directory, verified.
    auto m = LoadManifest(t.hot, step);
    if (!m.ok()) return Fail(m.status());
    auto out = MakeHotStore(to);
    s = out->Put(*m, JoinPath(t.hot, StepDirName(step)), bar.Callback());
    if (s.ok()) s = out->VerifyCopy(*m, {});
    if (s.ok()) s = out->Commit(*m);
  } else {
    s = Stage(dst, step, bar.Callback());
    // Not in --to's tiers: when the hot copy exists but does not read, that is what to report.
    if (!to.empty() && s.code() == Code::kNotFound) {
      auto hot = LoadManifest(t.hot, step);
      if (!hot.ok() && hot.status().code() != Code::kNotFound) s = hot.status();
    }
  }
  bar.Finish();
  if (!s.ok()) return Fail(s);
  std::printf("step %lld is ready in %s\n", static_cast<long long>(step), JoinPath(dst.hot, StepDirName(step)).c_str());
  return 0;
}

int CmdImport(const TierConfig& t, int64_t step, const std::vector<std::string>& paths) {
  ProgressBar bar(fmt::format("save step {}", step));
  auto r = ImportSafetensors(t.hot, step, paths, bar.SaveCallback());
  bar.Finish();
  if (!r.ok()) return Fail(r.status());
  std::printf("step %lld committed in %s: %zu tensors, %s from %zu file%s\n", static_cast<long long>(step),
              r->dir.c_str(), r->tensors, HumanBytes(r->bytes).c_str(), r->files.size(),
              r->files.size() == 1 ? "" : "s");
  return 0;
}

int CmdRm(const TierConfig& t, int64_t step, const std::string& tier) {
  auto stores = OpenStores(t);
  if (!stores.ok()) return Fail(stores.status());
  int removed = 0;
  for (auto& s : stores.value()) {
    if (tier != "all" && tier != TierName(s->tier())) continue;
    // A copy whose manifest does not read (corrupt) is removed too; Delete refuses what is not the tier's own
    // (a step directory that is a link out of the root).
    auto m = s->ReadManifest(step);
    if (!m.ok() && m.status().code() == Code::kNotFound) continue;
    Status st = s->Delete(step);
    if (!st.ok()) return Fail(st);
    std::printf("removed step %lld from %s\n", static_cast<long long>(step), s->Describe().c_str());
    ++removed;
  }
  if (removed == 0) return Fail(NotFound(fmt::format("checkpoint step {} is not committed in tier '{}'", step, tier)));
  return 0;
}

int CmdTier(const TierConfig& t, const std::string& policy_file, bool dry_run, int64_t now) {
  auto p = RetentionPolicy::Load(policy_file);
  if (!p.ok()) return Fail(p.status());
  ProgressBar bar("tier");
  auto actions = ApplyRetention(t, *p, now, dry_run, bar.Callback());
  bar.Finish();
  if (!actions.ok()) return Fail(actions.status());
  std::vector<std::vector<std::string>> rows{{"STEP", "ACTION", "RESULT"}};
  int bad = 0;
  for (const auto& a : actions.value()) {
    rows.push_back(
        {std::to_string(a.step), a.action, dry_run ? "dry run" : (a.status.ok() ? "done" : a.status.message())});
    if (!a.status.ok()) ++bad;
  }
  if (actions->empty())
    std::printf("nothing to do\n");
  else
    PrintTable(rows);
  return bad ? 1 : 0;
}

}  // namespace

int RunCkpt(int argc, char** argv) {
  CLI::App app{"Inspect, verify, restore, tier and benchmark checkpoints (hot dir → warm S3 → cold archive)",
               "tessera ckpt"};
  TierConfig flags;
  app.add_option("--root", flags.hot, "hot tier directory (TESSERA_CKPT_ROOT)");
  app.add_option("--warm", flags.warm, "warm tier, s3://bucket/prefix (TESSERA_CKPT_WARM; S3 settings: docs/ckpt.md)");
  app.add_option("--cold", flags.cold, "cold tier archive directory (TESSERA_CKPT_COLD)");
  app.require_subcommand(1);

  bool verify_ls = false;
  auto* ls = app.add_subcommand("ls", "list checkpoints: step, size, tiers, age, state");
  ls->add_flag("--verify", verify_ls, "check CRC32C of hot steps (reads everything)");
  int64_t step = -1;
  auto* show = app.add_subcommand("show", "show one checkpoint's manifest: files, tensors, shards");
  show->add_option("step", step, "step")->required();
  std::vector<int64_t> vsteps;
  auto* verify = app.add_subcommand("verify", "verify checksums of steps in every tier holding them (default: all)");
  verify->add_option("steps", vsteps, "steps");
  std::string to;
  auto* restore = app.add_subcommand("restore", "stage a step from warm/cold back into hot (or --to DIR), verified");
  restore->add_option("step", step, "step")->required();
  restore->add_option("--to", to, "directory to restore into instead of the hot tier");
  std::vector<std::string> import_paths;
  auto* import = app.add_subcommand("import", "save safetensors files (e.g. a Hugging Face model) as a committed step");
  import->add_option("step", step, "step number to commit them as")->required();
  import->add_option("paths", import_paths, "safetensors files, or directories (all their *.safetensors)")->required();
  std::string tier = "all";
  auto* rm = app.add_subcommand("rm", "delete a step from a tier (default: every tier)");
  rm->add_option("step", step, "step")->required();
  rm->add_option("--tier", tier, "hot|warm|cold|all")->check(CLI::IsMember({"hot", "warm", "cold", "all"}));
  std::string policy;
  bool dry_run = false;
  int64_t now = 0;
  auto* tiercmd = app.add_subcommand("tier", "apply a retention policy (YAML): demote, expire");
  tiercmd->add_option("--policy", policy, "policy file (keep_hot, demote_to_warm_after, ...)")->required();
  tiercmd->add_flag("--dry-run", dry_run, "print what would happen");
  tiercmd->add_option("--now", now, "pretend it is this Unix time (testing, planning)");
  CostOptions cost_opt;
  auto* cost = app.add_subcommand("cost", "monthly storage cost of the current layout vs all-hot and all-warm");
  cost->add_option("--prices", cost_opt.prices_file, "prices YAML (per GiB-month, minimum durations)")->required();
  cost->add_option("--months", cost_opt.months, "horizon for minimum-duration charges (default 1)");
  BenchOptions bench_opt;
  auto* bench = app.add_subcommand("bench", "save/restore/snapshot/S3 throughput against dd, memcpy, raw read, curl");
  bench->add_option("--dir", bench_opt.dir, "directory on the disk to test (default: the hot root)");
  bench->add_option("--gib", bench_opt.gib, "GiB to write (default 2)");
  bench->add_option("--shards", bench_opt.shards, "shard files = writer ranks (default 4)");
  bench->add_option("--reps", bench_opt.reps, "repetitions; the median is reported (default 3)");
  bench->add_option("--s3", bench_opt.s3_uri, "also time S3 upload to this s3://bucket/prefix (needs curl)");
  bench->add_option("--json", bench_opt.json_out, "write the results as JSON here");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return tessera::cli::ParseExit(app, e);
  }
  TierConfig t = TierConfig::FromEnv(flags);
  if (t.hot.empty() && !bench->parsed())
    return Fail(InvalidArgument("no hot tier: pass --root DIR or set TESSERA_CKPT_ROOT"));
  // A hot root that does not exist is an error (3, not found), not an empty table; import creates it, restore
  // may stage into a fresh one, bench uses its own --dir.
  if (!import->parsed() && !restore->parsed() && !bench->parsed() && !std::filesystem::is_directory(t.hot)) {
    return Fail(NotFound(fmt::format("checkpoint root '{}' {} (--root / TESSERA_CKPT_ROOT)", t.hot,
                                     std::filesystem::exists(t.hot) ? "is not a directory" : "does not exist")));
  }
  if (ls->parsed()) return CmdLs(t, verify_ls);
  if (show->parsed()) return CmdShow(t, step);
  if (verify->parsed()) return CmdVerify(t, vsteps);
  if (restore->parsed()) return CmdRestore(t, step, to);
  if (import->parsed()) return CmdImport(t, step, import_paths);
  if (rm->parsed()) return CmdRm(t, step, tier);
  if (tiercmd->parsed()) return CmdTier(t, policy, dry_run, now);
  if (cost->parsed()) {
    auto r = CostReport(t, cost_opt);
    if (!r.ok()) return Fail(r.status());
    std::fputs(r->c_str(), stdout);
    return 0;
  }
  if (bench->parsed()) {
    if (bench_opt.dir.empty()) bench_opt.dir = t.hot;
    if (bench_opt.dir.empty()) return Fail(InvalidArgument("bench: pass --dir DIR (or --root)"));
    Status s = RunBench(bench_opt);
    return s.ok() ? 0 : Fail(s);
  }
  return 2;
}

}  // namespace tessera::cli

TESSERA_COMMAND(ckpt, "Inspect, verify, restore, tier and benchmark checkpoints", tessera::cli::RunCkpt);
