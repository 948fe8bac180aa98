// launch/slurm: `tessera run` inside a Slurm job step (srun, one launcher per task): the node layout
// (SLURM_PROCID of SLURM_NTASKS), the local ranks (SLURM_LOCALID, SLURM_NODEID, SLURM_TASKS_PER_NODE), and
// the store's host and port from the step's node list and the job id — for a heterogeneous job, the het job's
// id and component 0's first host (SLURM_HET_JOB_*, SLURM_JOB_NODELIST_HET_GROUP_0). Slurm's compressed host
// lists ("node[01-03]") and task counts ("2(x3),1") are expanded here. docs/launcher.md, "Inside Slurm".
#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>

#include "common/env.hpp"
#include "common/text.hpp"
#include "launch/launcher.hpp"

namespace tessera::launch {

namespace {

bool AllDigits(const std::string& s) {
  return !s.empty() && s.size() <= 9 && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

}  // namespace

Result<std::vector<std::string>> ExpandHostList(const std::string& list) {
  std::vector<std::string> out;
  const auto bad = [&](const std::string& why) {
    return InvalidArgument(fmt::format("Slurm node list '{}': {}", list, why));
  };
  if (list.empty()) return bad("empty");
  for (const std::string& item : SplitOutsideBrackets(list, ',')) {
    if (item.empty()) return bad("an empty name");
    // Expand the first [...] group, then the rest of the item recursively (a name may have several).
    const size_t open = item.find('[');
    if (open == std::string::npos) {
      if (item.find(']') != std::string::npos) return bad(fmt::format("']' without '[' in '{}'", item));
      out.push_back(item);
      continue;
    }
    const size_t close = item.find(']', open);
    if (close == std::string::npos) return bad(fmt::format("'[' without ']' in '{}'", item));
    const std::string head = item.substr(0, open), body = item.substr(open + 1, close - open - 1);
    TSR_ASSIGN_OR_RETURN(auto tails, close + 1 < item.size()
                                         ? ExpandHostList(item.substr(close + 1))
                                         : Result<std::vector<std::string>>(std::vector<std::string>{""}));
    size_t start = 0;
    for (;;) {
      const size_t comma = std::min(body.find(',', start), body.size());
      const std::string range = body.substr(start, comma - start);
      const size_t dash = range.find('-');
      const std::string a = range.substr(0, dash), b = dash == std::string::npos ? a : range.substr(dash + 1);
      if (!AllDigits(a) || !AllDigits(b)) return bad(fmt::format("'{}' in '{}' is not N or N-M", range, item));
      const int from = std::stoi(a), to = std::stoi(b);
      if (to < from) return bad(fmt::format("the range '{}' in '{}' runs backwards", range, item));
      if (to - from > 65536) return bad(fmt::format("the range '{}' in '{}' is too long", range, item));
      for (int n = from; n <= to; ++n)
        for (const auto& t : tails) out.push_back(fmt::format("{}{:0{}}{}", head, n, a.size(), t));
      if (comma >= body.size()) break;
      start = comma + 1;
    }
  }
  return out;
}

Result<std::vector<int>> ExpandTasksPerNode(const std::string& text) {
  std::vector<int> out;
  for (const std::string& item : SplitOutsideBrackets(text, ',')) {
    const size_t paren = item.find("(x");
    const std::string n = item.substr(0, paren);
    std::string times = "1";
    if (paren != std::string::npos) {
      if (item.back() != ')')
        return InvalidArgument(fmt::format("SLURM_TASKS_PER_NODE='{}': '{}' is not N or N(xM)", text, item));
      times = item.substr(paren + 2, item.size() - paren - 3);
    }
    if (!AllDigits(n) || !AllDigits(times) || std::stoi(times) > 65536)
      return InvalidArgument(fmt::format("SLURM_TASKS_PER_NODE='{}': '{}' is not N or N(xM)", text, item));
    for (int k = 0; k < std::stoi(times); ++k) out.push_back(std::stoi(n));
  }
  return out;
}

Result<std::optional<SlurmTask>> SlurmFromEnv(const std::map<std::string, std::string>& env) {
  auto get = [&](const char* name) -> std::optional<std::string> {
    auto it = env.find(name);
    if (it == env.end() || it->second.empty()) return std::nullopt;
    return it->second;
  };
  auto number = [&](const char* name, int64_t lo, int64_t hi) -> Result<int> {
    const std::string v = *get(name);
    if (!AllDigits(v) || std::stoll(v) < lo || std::stoll(v) > hi)
      return InvalidArgument(fmt::format("{}='{}' is not an integer in [{}, {}]", name, v, lo, hi));
    return std::stoi(v);
  };
  if (!get("SLURM_PROCID") || !get("SLURM_NTASKS")) return std::optional<SlurmTask>();
  SlurmTask t;
  TSR_ASSIGN_OR_RETURN(t.ntasks, number("SLURM_NTASKS", 1, 1 << 20));
  TSR_ASSIGN_OR_RETURN(t.procid, number("SLURM_PROCID", 0, t.ntasks - 1));
  if (get("SLURM_LOCALID")) {
    TSR_ASSIGN_OR_RETURN(t.localid, number("SLURM_LOCALID", 0, t.procid));
  }
  t.node_tasks = t.localid + 1;
  if (get("SLURM_TASKS_PER_NODE") && get("SLURM_NODEID")) {
    TSR_ASSIGN_OR_RETURN(auto per_node, ExpandTasksPerNode(*get("SLURM_TASKS_PER_NODE")));
    TSR_ASSIGN_OR_RETURN(int node, number("SLURM_NODEID", 0, 1 << 20));
    if (node >= static_cast<int>(per_node.size()))
      return InvalidArgument(fmt::format("SLURM_NODEID={} but SLURM_TASKS_PER_NODE='{}' lists {} node(s)", node,
                                         *get("SLURM_TASKS_PER_NODE"), per_node.size()));
    t.node_tasks = std::max(per_node[node], t.localid + 1);
  }
  // A heterogeneous job: one world over its components (srun ... : ...), the store on component 0's first node.
  std::optional<std::string> nodes;
  // A step over several components (srun --het-group=0,1, Slurm 22.05) sets no SLURM_HET_JOB_ID in the tasks:
  // SLURM_JOB_NODELIST_HET_GROUP_0 says so, the component is found from SLURM_PROCID and the per-group task
  // counts, and SLURM_STEP_NODELIST is the sorted union of the groups' nodes, whose first need not be task 0's.
  if (get("SLURM_HET_JOB_ID") || get("SLURM_JOB_NODELIST_HET_GROUP_0")) {
    const char* comp = get("SLURM_HET_JOB_COMPONENT") ? "SLURM_HET_JOB_COMPONENT" : "SLURM_HET_JOB_OFFSET";
    if (get(comp)) {
      TSR_ASSIGN_OR_RETURN(t.het_component, number(comp, 0, 1 << 20));
    } else if (get("SLURM_NTASKS_HET_GROUP_0")) {
      int first = 0;
      for (int g = 0; g < 1 << 10; ++g) {
        const std::string var = fmt::format("SLURM_NTASKS_HET_GROUP_{}", g);
        if (!get(var.c_str())) break;
        TSR_ASSIGN_OR_RETURN(int n, number(var.c_str(), 0, 1 << 20));
        if (t.procid < first + n) {
          t.het_component = g;
          break;
        }
        first += n;
      }
    }
    nodes = get("SLURM_JOB_NODELIST_HET_GROUP_0");
  }
  const char* list_var = nullptr;
  for (const char* v : {"SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST"}) {
    if (!nodes && get(v)) {
      nodes = get(v);
      list_var = v;
    }
  }
  if (!nodes)
    return InvalidArgument(
        "SLURM_PROCID and SLURM_NTASKS are set but no node list (SLURM_STEP_NODELIST, SLURM_JOB_NODELIST): "
        "cannot tell which host serves the store; pass --store HOST:PORT");
  auto hosts = ExpandHostList(*nodes);
  if (!hosts.ok()) return hosts.status().WithContext(list_var != nullptr ? list_var : "SLURM_JOB_NODELIST_HET_GROUP_0");
  t.store_host = hosts->front();
  t.job_id = get("SLURM_HET_JOB_ID").value_or(get("SLURM_JOB_ID").value_or(""));
  if (!AllDigits(t.job_id))
    return InvalidArgument(
        fmt::format("SLURM_JOB_ID='{}' is not a job number (the store's port comes from it)", t.job_id));
  t.store_port = 20000 + 2 * static_cast<int>(std::stoll(t.job_id) % 20000);
  t.text = fmt::format("Slurm job {} task {} of {}{}", t.job_id, t.procid, t.ntasks,
                       t.het_component >= 0 ? fmt::format(" (heterogeneous component {})", t.het_component) : "");
  return std::optional<SlurmTask>(std::move(t));
}

}  // namespace tessera::launch
