// daemon/jobspec: parsing and validation of job files and fleet files for the daemon. The planner's
// fields go to tessera::sched's parsers; the daemon's own keys are read here and blanked out of the text
// first, so the planner's errors keep their line numbers.
#include "daemon/jobspec.hpp"

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <optional>
#include <set>
#include <sstream>

#include "common/env.hpp"
#include "common/nesting.hpp"
#include "common/text.hpp"
#include "common/yaml.hpp"
#include "daemon/security.hpp"

namespace tessera::daemon {

namespace {

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> lines;
  std::string cur;
  std::istringstream in(text);
  while (std::getline(in, cur)) lines.push_back(cur);
  return lines;
}

std::string Join(const std::vector<std::string>& lines) {
  std::string out;
  for (const auto& l : lines) out += l + "\n";
  return out;
}

std::string Where(const std::string& source, const YAML::Node& node) {
  auto m = node.Mark();
  if (m.line < 0) return source;
  return fmt::format("{}:{}", source, m.line + 1);
}

std::string Resolve(const std::string& base, const std::string& path) {
  if (path.empty() || path[0] == '/' || base.empty()) return path;
  return base + "/" + path;
}

bool IsTopLevelContinuation(const std::string& line) {
  return line.empty() || line[0] == ' ' || line[0] == '\t' || line[0] == '#' || line[0] == '-' ||
         line.find_first_not_of(" \t\r") == std::string::npos;
}

// `remix: never|policy|cost` or `remix: {mode: ..., min_gain: 15%, min_interval: 10m}`.
Status ParseRemix(const std::string& source, const YAML::Node& r, RemixSpec* out) {
  auto mode = [&](const YAML::Node& m, const std::string& key) -> Status {
    std::string v = m.IsScalar() ? m.as<std::string>() : "";
    if (v == "never")
      out->mode = RemixMode::kNever;
    else if (v == "policy")
      out->mode = RemixMode::kPolicy;
    else if (v == "cost")
      out->mode = RemixMode::kCost;
    else
      return InvalidArgument(
          fmt::format("{}: {}: '{}' is not one of never, policy, cost", Where(source, m), key, v.empty() ? "?" : v));
    return Status::Ok();
  };
  if (r.IsScalar()) return mode(r, "remix");
  if (!r.IsMap())
    return InvalidArgument(fmt::format(
        "{}: remix: must be never, policy or cost, or a mapping like {{mode: cost, min_gain: 15%}}", Where(source, r)));
  for (const auto& kv : r) {
    auto key = kv.first.as<std::string>();
    if (key != "mode" && key != "min_gain" && key != "min_interval" && key != "restart")
      return InvalidArgument(fmt::format("{}: remix.{}: unknown key (use mode, min_gain, min_interval, restart)",
                                         Where(source, kv.first), key));
  }
  if (auto m = r["mode"]) TSR_RETURN_IF_ERROR(mode(m, "remix.mode"));
  if (auto g = r["min_gain"]) {
    auto v =
        sched::ParseShare(fmt::format("{}: remix.min_gain", Where(source, g)), g.IsScalar() ? g.as<std::string>() : "");
    if (!v.ok()) return v.status();
    out->min_gain = *v;
  }
  if (auto i = r["min_interval"]) {
    auto v = env::ParseDuration(fmt::format("{}: remix.min_interval", Where(source, i)),
                                i.IsScalar() ? i.as<std::string>() : "");
    if (!v.ok()) return v.status();
    out->min_interval_ms = v->count();
  }
  if (auto i = r["restart"]) {
    auto v =
        env::ParseDuration(fmt::format("{}: remix.restart", Where(source, i)), i.IsScalar() ? i.as<std::string>() : "");
    if (!v.ok()) return v.status();
    out->restart_ms = v->count();
  }
  return Status::Ok();
}

}  // namespace

const char* RemixModeName(RemixMode m) {
  switch (m) {
    case RemixMode::kNever:
      return "never";
    case RemixMode::kCost:
      return "cost";
    case RemixMode::kPolicy:
      break;
  }
  return "policy";
}

std::string BlankTopLevelKeys(const std::string& yaml, const std::vector<std::string>& keys) {
  auto lines = Lines(yaml);
  for (size_t i = 0; i < lines.size(); ++i) {
    bool match = false;
    for (const auto& k : keys) {
      if (lines[i].rfind(k + ":", 0) == 0) match = true;
    }
    if (!match) continue;
    lines[i].clear();
    size_t j = i + 1;
    while (j < lines.size() && IsTopLevelContinuation(lines[j]) && lines[j].rfind("---", 0) != 0) {
      // A comment at column 0 directly before the next key still belongs to the document; keep it.
      if (!lines[j].empty() && lines[j][0] == '#') {
        ++j;
        continue;
      }
      lines[j].clear();
      ++j;
    }
    i = j - 1;
  }
  return Join(lines);
}

Result<JobSpec> ParseJobSpec(const std::string& yaml, const std::string& source, const std::string& base_dir,
                             const std::string& tenant, const std::vector<std::string>& compatible,
                             const std::string& area) {
  TSR_RETURN_IF_ERROR(CheckNesting(yaml, Syntax::kYaml, source));
  YAML::Node root;
  try {
    root = YAML::Load(yaml);
  } catch (const YAML::Exception& e) {
    return InvalidArgument(fmt::format("{}:{}: not valid YAML: {}", source, e.mark.line + 1, e.msg));
  }
  if (!root.IsMap()) return InvalidArgument(fmt::format("{}: a job file must be a YAML mapping", source));
  TSR_RETURN_IF_ERROR(yaml::CheckNoDuplicateKeys(root, source));

  // Every top-level key is the daemon's or the planner's: a typo ("comand:") is named with the closest key
  // before anything reports the key it hides as missing.
  std::vector<std::string> keys = {"command", "workdir", "checkpoint", "grace", "env", "remix"};
  keys.insert(keys.begin(), sched::JobKeys().begin(), sched::JobKeys().end());
  for (auto it = root.begin(); it != root.end(); ++it) {
    std::string k = it->first.Scalar();
    if (std::find(keys.begin(), keys.end(), k) != keys.end()) continue;
    std::string list;
    for (const auto& a : keys) list += (list.empty() ? "" : ", ") + a;
    return InvalidArgument(fmt::format("{}: {}: unknown field{} (a job file has: {})", Where(source, it->first), k,
                                       DidYouMean(k, keys), list));
  }

  JobSpec spec;
  RunSpec& run = spec.run;
  try {
    auto cmd = root["command"];
    if (!cmd) {
      return InvalidArgument(fmt::format(
          "{}: missing 'command' (the program each rank runs, e.g. command: [./train, --steps, \"300\"])", source));
    }
    if (cmd.IsScalar()) {
      std::istringstream ss(cmd.as<std::string>());
      std::string w;
      while (ss >> w) run.command.push_back(w);
    } else if (cmd.IsSequence()) {
      for (const auto& c : cmd) {
        if (!c.IsScalar())
          return InvalidArgument(fmt::format("{}: command: every item must be a string", Where(source, c)));
        run.command.push_back(c.as<std::string>());
      }
    }
    if (run.command.empty() || run.command[0].empty())
      return InvalidArgument(fmt::format("{}: command: must be a non-empty list of strings", Where(source, cmd)));
    if (run.command[0].find('/') != std::string::npos) run.command[0] = Resolve(base_dir, run.command[0]);

    run.workdir = area.empty() ? base_dir : "";
    if (auto w = root["workdir"]) {
      if (!w.IsScalar() || w.as<std::string>().empty())
        return InvalidArgument(fmt::format("{}: workdir: must be a directory path", Where(source, w)));
      if (area.empty()) {
        run.workdir = Resolve(base_dir, w.as<std::string>());
      } else {
        TSR_ASSIGN_OR_RETURN(
            run.workdir, ConfinePath(fmt::format("{}: workdir", Where(source, w)), w.as<std::string>(), area, area));
      }
    }

    if (auto c = root["checkpoint"]) {
      if (!c.IsMap())
        return InvalidArgument(
            fmt::format("{}: checkpoint: must be a mapping like {{dir: ckpt, every: 50}}", Where(source, c)));
      for (const auto& kv : c) {
        auto key = kv.first.as<std::string>();
        if (key != "dir" && key != "every" && key != "keep")
          return InvalidArgument(fmt::format("{}: checkpoint.{}: unknown key{} (use dir, every, keep)",
                                             Where(source, kv.first), key, DidYouMean(key, {"dir", "every", "keep"})));
      }
      if (auto d = c["dir"]) {
        if (!d.IsScalar() || d.as<std::string>().empty())
          return InvalidArgument(fmt::format("{}: checkpoint.dir: must be a directory path", Where(source, d)));
        if (area.empty()) {
          run.ckpt_dir = Resolve(base_dir, d.as<std::string>());
        } else {
          TSR_ASSIGN_OR_RETURN(run.ckpt_dir, ConfinePath(fmt::format("{}: checkpoint.dir", Where(source, d)),
                                                         d.as<std::string>(), area, area));
        }
      }
      if (auto e = c["every"]) {
        auto v =
            env::ParseInt(fmt::format("{}: checkpoint.every", Where(source, e)), e.as<std::string>(), 1, 1'000'000'000);
        if (!v.ok()) return v.status();
        run.ckpt_every = *v;
      }
      if (auto k = c["keep"]) {
        auto v = env::ParseInt(fmt::format("{}: checkpoint.keep (0: keep every step)", Where(source, k)),
                               k.as<std::string>(), 0, 1'000'000'000);
        if (!v.ok()) return v.status();
        run.ckpt_keep = *v;
      }
    }

    if (auto g = root["grace"]) {
      auto v = env::ParseDuration(fmt::format("{}: grace", Where(source, g)), g.as<std::string>());
      if (!v.ok()) return v.status();
      run.grace_ms = v->count();
    }

    if (auto r = root["remix"]) TSR_RETURN_IF_ERROR(ParseRemix(source, r, &run.remix));

    if (auto e = root["env"]) {
      if (!e.IsMap())
        return InvalidArgument(fmt::format("{}: env: must be a mapping of NAME: value", Where(source, e)));
      for (const auto& kv : e) {
        auto name = kv.first.as<std::string>();
        if (name.empty() || name.find('=') != std::string::npos)
          return InvalidArgument(fmt::format("{}: env: '{}' is not a variable name", Where(source, kv.first), name));
        if (!kv.second.IsScalar())
          return InvalidArgument(fmt::format("{}: env.{}: must be a string", Where(source, kv.second), name));
        run.env[name] = kv.second.as<std::string>();
      }
    }
  } catch (const YAML::Exception& e) {
    return InvalidArgument(fmt::format("{}:{}: {}", source, e.mark.line + 1, e.msg));
  }

  std::string rest = BlankTopLevelKeys(yaml, {"command", "workdir", "checkpoint", "grace", "env", "remix"});
  // The tenant comes from the bearer token; a file may name it only if it agrees.
  if (auto t = root["tenant"]) {
    if (t.IsScalar() && t.as<std::string>() != tenant && tenant != "admin")
      return InvalidArgument(fmt::format("{}: tenant: '{}' does not match the tenant of your token ('{}')",
                                         Where(source, t), t.as<std::string>(), tenant));
  } else {
    rest += fmt::format("tenant: \"{}\"\n", tenant);
  }
  if (!root["compatible"] && !compatible.empty()) {
    std::string list;
    for (const auto& c : compatible) list += (list.empty() ? "" : ", ") + c;
    rest += fmt::format("compatible: [{}]\n", list);
  }
  auto job = sched::ParseJob(rest, source);
  if (!job.ok()) {
    if (!root["compatible"] && compatible.empty())
      return InvalidArgument(job.status().message() + "; or pass --policy-compatible to tessera submit");
    return job.status();
  }
  spec.job = std::move(job).value();
  // Names are table rows, log lines and ledger keys: a newline splits them, a NUL truncates them.
  TSR_RETURN_IF_ERROR(CheckNoControlChars(fmt::format("{}: name", source), spec.job.name));
  if (!compatible.empty()) spec.job.compatible = compatible;
  if (spec.job.compatible.empty())
    return InvalidArgument(fmt::format(
        "{}: the job accepts no accelerator type: give 'compatible:' in the file or --policy-compatible", source));
  return spec;
}

bool FleetSpec::IsEmulated(const std::string& node) const {
  return std::find(emulated.begin(), emulated.end(), node) != emulated.end();
}

int FleetSpec::SmShare(const std::string& node) const {
  auto it = sm_share.find(node);
  return it == sm_share.end() ? 0 : it->second;
}

std::string EmulationKind(int sm_share) {
  return sm_share > 0 ? fmt::format("SM share {}% of a GPU", sm_share) : "host ranks";
}

namespace {

// The daemon's keys of one place (the top level or one node entry), with where they were written.
struct EmulationKeys {
  std::optional<bool> emulated;
  int sm_share = 0;   // 0: not given
  std::string where;  // "fleet.yaml:4" of the sm_share key
};

Result<bool> ReadEmulated(const YAML::Node& e, const std::string& what, const std::string& source) {
  if (!e.IsScalar() || (e.as<std::string>() != "true" && e.as<std::string>() != "false"))
    return InvalidArgument(fmt::format("{}: {}: must be true or false", Where(source, e), what));
  return e.as<bool>();
}

Result<int> ReadSmShare(const YAML::Node& e, const std::string& what, const std::string& source) {
  std::string text = e.IsScalar() ? e.as<std::string>() : "";
  bool digits = !text.empty() && text.size() <= 3 && text.find_first_not_of("0123456789") == std::string::npos;
  int v = digits ? std::stoi(text) : 0;
  if (!digits || v < 1 || v > 100)
    return InvalidArgument(fmt::format(
        "{}: {}: must be a whole percentage 1..100 of the GPU's SMs (e.g. {}: 35), not '{}'", Where(source, e), what,
        what.substr(what.rfind('.') + 1), e.IsScalar() ? text : std::string("a ") + (e.IsMap() ? "mapping" : "list")));
  return v;
}

// The keys `emulated` and `sm_share` of one mapping: the top level (prefix "") or a node entry
// ("nodes[]."). `cards` and `holder` word a conflict between them ("the cards" / "the file", "node 'a1'" /
// "the node").
Result<EmulationKeys> ReadEmulationKeys(const YAML::Node& m, const std::string& prefix, const std::string& cards,
                                        const std::string& holder, const std::string& source) {
  EmulationKeys k;
  if (auto e = m["emulated"]) {
    TSR_ASSIGN_OR_RETURN(k.emulated, ReadEmulated(e, prefix + "emulated", source));
  }
  if (auto e = m["sm_share"]) {
    TSR_ASSIGN_OR_RETURN(k.sm_share, ReadSmShare(e, prefix + "sm_share", source));
    k.where = Where(source, e);
    if (k.emulated == false)
      return InvalidArgument(fmt::format(
          "{}: {}sm_share: {} runs {} emulated on a share of the GPU, but {} also says 'emulated: false'; drop one "
          "of them",
          k.where, prefix, k.sm_share, cards, holder));
  }
  return k;
}

}  // namespace

Result<FleetSpec> ParseFleetSpec(const std::string& yaml, const std::string& source) {
  TSR_RETURN_IF_ERROR(CheckNesting(yaml, Syntax::kYaml, source));
  YAML::Node root;
  try {
    root = YAML::Load(yaml);
  } catch (const YAML::Exception& e) {
    return InvalidArgument(fmt::format("{}:{}: not valid YAML: {}", source, e.mark.line + 1, e.msg));
  }
  if (!root.IsMap()) return InvalidArgument(fmt::format("{}: a fleet file must be a YAML mapping", source));
  TSR_RETURN_IF_ERROR(yaml::CheckNoDuplicateKeys(root, source));
  EmulationKeys top;
  std::map<std::string, EmulationKeys> per_node;  // by the entry's id
  auto lines = Lines(yaml);
  try {
    TSR_ASSIGN_OR_RETURN(top, ReadEmulationKeys(root, "", "the cards", "the file", source));
    if (auto nodes = root["nodes"]; nodes && nodes.IsSequence()) {
      for (const auto& n : nodes) {
        if (!n.IsMap()) continue;
        if (!n["emulated"] && !n["sm_share"]) continue;
        std::string id = n["id"] && n["id"].IsScalar() ? n["id"].as<std::string>() : "";
        TSR_ASSIGN_OR_RETURN(per_node[id], ReadEmulationKeys(n, "nodes[].", "node '" + id + "'", "the node", source));
        // Blank the `emulated: X` and `sm_share: P` text on its line, keeping the line count.
        for (const auto& kv : n) {
          auto key = kv.first.as<std::string>();
          if (key != "emulated" && key != "sm_share") continue;
          auto km = kv.first.Mark();
          auto vm = kv.second.Mark();
          if (km.line >= 0 && static_cast<size_t>(km.line) < lines.size() && km.line == vm.line) {
            auto& l = lines[static_cast<size_t>(km.line)];
            size_t from = static_cast<size_t>(km.column);
            size_t to = l.find('#', from);
            if (to == std::string::npos) to = l.size();
            // Cut up to the end of the value (a trailing flow ',' or '}' stays).
            size_t vend = static_cast<size_t>(vm.column) + kv.second.as<std::string>().size();
            to = std::min(to, vend);
            if (to < l.size() && l[to] == ',') ++to;
            l.replace(from, to - from, std::string(to - from, ' '));
          } else {
            return InvalidArgument(fmt::format("{}: nodes[].{}: write it as '{}: {}' on one line",
                                               Where(source, kv.first), key, key, key == "emulated" ? "true" : "35"));
          }
        }
      }
    }
  } catch (const YAML::Exception& e) {
    return InvalidArgument(fmt::format("{}:{}: {}", source, e.mark.line + 1, e.msg));
  }
  std::string rest = BlankTopLevelKeys(Join(lines), {"emulated", "sm_share"});
  auto fleet = sched::ParseFleet(rest, source);
  if (!fleet.ok()) return fleet.status();
  FleetSpec spec;
  spec.fleet = std::move(fleet).value();
  // A node entry with `count: N` expands to ids "<id>-0" ... "<id>-(N-1)".
  auto entry = [&](const std::string& id) -> const EmulationKeys* {
    if (auto it = per_node.find(id); it != per_node.end()) return &it->second;
    auto dash = id.rfind('-');
    if (dash == std::string::npos) return nullptr;
    auto it = per_node.find(id.substr(0, dash));
    return it != per_node.end() ? &it->second : nullptr;
  };
  // The first emulated node of each (type, zone), to refuse a second one that runs another way.
  std::map<std::pair<std::string, std::string>, const sched::Node*> first;
  auto at = [&](const sched::Node& n) { return n.line > 0 ? fmt::format("{}:{}", source, n.line) : source; };
  for (const auto& n : spec.fleet.nodes) {
    const EmulationKeys* own = entry(n.id);
    int share = own && own->sm_share > 0 ? own->sm_share : 0;
    if (share == 0 && own && own->emulated == false) continue;  // a real node, also under a top-level sm_share
    if (share == 0) share = top.sm_share;
    bool emu = share > 0 || (own && own->emulated.has_value() ? *own->emulated : top.emulated.value_or(false));
    if (!emu) continue;
    spec.emulated.push_back(n.id);
    if (share > 0) spec.sm_share[n.id] = share;
    auto [it, fresh] = first.emplace(std::make_pair(n.type, n.zone), &n);
    if (fresh) continue;
    int other = spec.SmShare(it->second->id);
    if (other == share) continue;
    auto how = [](int p) { return p > 0 ? fmt::format("on an SM share of {}%", p) : std::string("as host ranks"); };
    return InvalidArgument(fmt::format(
        "{}: node '{}' (type {}, zone {}) is emulated {}, but node '{}' of the same type and zone ({}) is emulated "
        "{}: a job's cards of one type form one island, which has one share; give these nodes the same sm_share "
        "(or put them in different zones)",
        at(n), n.id, n.type, n.zone, how(share), it->second->id, at(*it->second), how(other)));
  }
  return spec;
}

}  // namespace tessera::daemon
