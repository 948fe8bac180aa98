// daemon/jobspec: parsing and validation of job files and fleet files for the daemon. The planner's
// fields go to tessera::sched's parsers; the daemon's own keys are read here and blanked out of the text
// first, so the planner's errors keep their line numbers.
#include "daemon/jobspec.hpp"

#include "common/yaml.hpp"

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <set>
#include <sstream>

#include "common/env.hpp"
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

}  // namespace

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
  YAML::Node root;
  try {
    root = YAML::Load(yaml);
  } catch (const YAML::Exception& e) {
    return InvalidArgument(fmt::format("{}:{}: not valid YAML: {}", source, e.mark.line + 1, e.msg));
  }
  if (!root.IsMap()) return InvalidArgument(fmt::format("{}: a job file must be a YAML mapping", source));
  TSR_RETURN_IF_ERROR(yaml::CheckNoDuplicateKeys(root, source));

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
        if (key != "dir" && key != "every")
          return InvalidArgument(fmt::format("{}: checkpoint.{}: unknown key (use dir, every)",
                                             Where(source, kv.first), key));
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
        auto v = env::ParseInt(fmt::format("{}: checkpoint.every", Where(source, e)), e.as<std::string>(), 1,
                               1'000'000'000);
        if (!v.ok()) return v.status();
        run.ckpt_every = *v;
      }
    }

    if (auto g = root["grace"]) {
      auto v = env::ParseDuration(fmt::format("{}: grace", Where(source, g)), g.as<std::string>());
      if (!v.ok()) return v.status();
      run.grace_ms = v->count();
    }

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

  std::string rest = BlankTopLevelKeys(yaml, {"command", "workdir", "checkpoint", "grace", "env"});
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

Result<FleetSpec> ParseFleetSpec(const std::string& yaml, const std::string& source) {
  YAML::Node root;
  try {
    root = YAML::Load(yaml);
  } catch (const YAML::Exception& e) {
    return InvalidArgument(fmt::format("{}:{}: not valid YAML: {}", source, e.mark.line + 1, e.msg));
  }
  if (!root.IsMap()) return InvalidArgument(fmt::format("{}: a fleet file must be a YAML mapping", source));
  TSR_RETURN_IF_ERROR(yaml::CheckNoDuplicateKeys(root, source));
  bool all = false;
  std::set<std::string> per_node_true, per_node_false;
  auto lines = Lines(yaml);
  try {
    if (auto e = root["emulated"]) {
      if (!e.IsScalar() || (e.as<std::string>() != "true" && e.as<std::string>() != "false"))
        return InvalidArgument(fmt::format("{}: emulated: must be true or false", Where(source, e)));
      all = e.as<bool>();
    }
    if (auto nodes = root["nodes"]; nodes && nodes.IsSequence()) {
      for (const auto& n : nodes) {
        if (!n.IsMap()) continue;
        auto e = n["emulated"];
        if (!e) continue;
        if (!e.IsScalar() || (e.as<std::string>() != "true" && e.as<std::string>() != "false"))
          return InvalidArgument(fmt::format("{}: nodes[].emulated: must be true or false", Where(source, e)));
        std::string id = n["id"] && n["id"].IsScalar() ? n["id"].as<std::string>() : "";
        (e.as<bool>() ? per_node_true : per_node_false).insert(id);
        // Blank the `emulated: X` text on its line, keeping the line count.
        for (const auto& kv : n) {
          if (kv.first.as<std::string>() != "emulated") continue;
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
            return InvalidArgument(fmt::format("{}: nodes[].emulated: write it as 'emulated: true' on one line",
                                               Where(source, kv.first)));
          }
        }
      }
    }
  } catch (const YAML::Exception& e) {
    return InvalidArgument(fmt::format("{}:{}: {}", source, e.mark.line + 1, e.msg));
  }
  std::string rest = BlankTopLevelKeys(Join(lines), {"emulated"});
  auto fleet = sched::ParseFleet(rest, source);
  if (!fleet.ok()) return fleet.status();
  FleetSpec spec;
  spec.fleet = std::move(fleet).value();
  // A node entry with `count: N` expands to ids "<id>-0" ... "<id>-(N-1)".
  auto in = [](const std::set<std::string>& ids, const std::string& id) {
    if (ids.count(id)) return true;
    auto dash = id.rfind('-');
    return dash != std::string::npos && ids.count(id.substr(0, dash)) > 0;
  };
  for (const auto& n : spec.fleet.nodes) {
    bool emu = in(per_node_true, n.id) ? true : in(per_node_false, n.id) ? false : all;
    if (emu) spec.emulated.push_back(n.id);
  }
  return spec;
}

}  // namespace tessera::daemon
