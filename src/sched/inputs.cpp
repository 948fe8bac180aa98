// sched/inputs: YAML loaders for the catalog, fleet, policy, job and running-jobs files, and the
// cross-file checks. Every error names the file, the line and the field, e.g.
//   fleet.yaml:12: nodes[3].cards: 'x' is not a non-negative integer
// Unknown fields are errors too, so that a typo never silently drops a setting, and so is a key given twice.
#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <set>

#include "common/file.hpp"
#include "common/nesting.hpp"
#include "common/text.hpp"
#include "common/yaml.hpp"
#include "sched/inputs_internal.hpp"
#include "sched/perf_model.hpp"
#include "sched/sched.hpp"

namespace tessera::sched {
namespace {

class Reader {
 public:
  explicit Reader(std::string source) : source_(std::move(source)) {}

  Status Err(const YAML::Node& at, const std::string& field, const std::string& msg) const {
    return Err(at.Mark(), field, msg);
  }
  Status Err(const YAML::Mark& mark, const std::string& field, const std::string& msg) const {
    std::string where = source_;
    if (!mark.is_null() && mark.line >= 0) where += fmt::format(":{}", mark.line + 1);
    return InvalidArgument(fmt::format("{}: {}: {}", where, field.empty() ? "(top level)" : field, msg));
  }

  // Rejects keys not in `allowed`, naming the closest one.
  Status OnlyKeys(const YAML::Node& map, const std::string& field, std::initializer_list<const char*> allowed) const {
    return OnlyKeys(map, field, std::vector<std::string>(allowed.begin(), allowed.end()));
  }
  Status OnlyKeys(const YAML::Node& map, const std::string& field, const std::vector<std::string>& allowed) const {
    for (auto it = map.begin(); it != map.end(); ++it) {
      std::string k = it->first.Scalar();
      if (std::find(allowed.begin(), allowed.end(), k) != allowed.end()) continue;
      std::string list;
      for (const auto& a : allowed) list += (list.empty() ? "" : ", ") + a;
      return Err(it->first, Join(field, k),
                 fmt::format("unknown field{} (expected one of: {})", DidYouMean(k, allowed), list));
    }
    return Status::Ok();
  }

  Status Map(const YAML::Node& n, const std::string& field) const {
    if (!n.IsMap()) return Err(n, field, "expected a mapping (key: value)");
    return Status::Ok();
  }
  Status Seq(const YAML::Node& n, const std::string& field) const {
    if (!n.IsSequence()) return Err(n, field, "expected a list");
    return Status::Ok();
  }

  // A required or optional scalar child; `parent` gives the line when the child is missing.
  Result<std::optional<std::string>> Scalar(const YAML::Node& parent, const std::string& pfield, const char* key,
                                            bool required) const {
    YAML::Node n = parent[key];
    std::string field = Join(pfield, key);
    if (!n || n.IsNull()) {
      if (required) return Err(parent, field, "is required");
      return std::optional<std::string>();
    }
    if (!n.IsScalar()) return Err(n, field, "expected a single value");
    return std::optional<std::string>(n.Scalar());
  }
  Result<std::string> Str(const YAML::Node& parent, const std::string& pfield, const char* key) const {
    TSR_ASSIGN_OR_RETURN(auto v, Scalar(parent, pfield, key, true));
    if (v->empty()) return Err(parent[key], Join(pfield, key), "must not be empty");
    return *v;
  }
  Result<int64_t> Int(const YAML::Node& parent, const std::string& pfield, const char* key, bool required,
                      int64_t fallback, int64_t min, int64_t max) const {
    TSR_ASSIGN_OR_RETURN(auto v, Scalar(parent, pfield, key, required));
    if (!v) return fallback;
    const std::string& s = *v;
    bool digits = !s.empty() && s.find_first_not_of("0123456789") == std::string::npos;
    bool neg = s.size() > 1 && s[0] == '-' && s.find_first_not_of("0123456789", 1) == std::string::npos;
    if ((!digits && !neg) || s.size() > 18)
      return Err(parent[key], Join(pfield, key), fmt::format("'{}' is not an integer", s));
    int64_t x = std::stoll(s);
    if (x < min || x > max)
      return Err(parent[key], Join(pfield, key), fmt::format("'{}' is out of range [{}, {}]", s, min, max));
    return x;
  }
  Result<bool> Bool(const YAML::Node& parent, const std::string& pfield, const char* key) const {
    TSR_ASSIGN_OR_RETURN(auto v, Scalar(parent, pfield, key, true));
    if (*v == "true" || *v == "yes") return true;
    if (*v == "false" || *v == "no") return false;
    return Err(parent[key], Join(pfield, key), fmt::format("'{}' is not true or false", *v));
  }
  template <typename Parse>
  auto Fixed(const YAML::Node& parent, const std::string& pfield, const char* key, Parse parse) const
      -> decltype(parse(std::string(), std::string())) {
    TSR_ASSIGN_OR_RETURN(auto v, Scalar(parent, pfield, key, true));
    auto r = parse(std::string("x"), *v);
    if (!r.ok()) {
      // The parser's message starts with "x: "; re-anchor it on the file and line.
      std::string m = r.status().message();
      if (m.rfind("x: ", 0) == 0) m = m.substr(3);
      return Err(parent[key], Join(pfield, key), m);
    }
    return r;
  }

  // A number (perf::ParseQuantity: "989", "0.4", "130B"), > 0 (or >= 0 with `zero_ok`); 0 when optional and absent.
  Result<double> Quantity(const YAML::Node& parent, const std::string& pfield, const char* key, bool required,
                          bool zero_ok) const {
    TSR_ASSIGN_OR_RETURN(auto v, Scalar(parent, pfield, key, required));
    if (!v) return 0.0;
    auto q = perf::ParseQuantity("x", *v);
    if (!q.ok() || (!zero_ok && *q == 0))
      return Err(parent[key], Join(pfield, key),
                 fmt::format("'{}' is not a {} number", *v, zero_ok ? "non-negative" : "positive"));
    return *q;
  }

  static std::string Join(const std::string& a, const std::string& b) { return a.empty() ? b : a + "." + b; }
  static std::string Index(const std::string& a, size_t i) { return fmt::format("{}[{}]", a, i); }
  const std::string& source() const { return source_; }

 private:
  std::string source_;
};

Result<YAML::Node> ParseYaml(const std::string& text, const std::string& source) {
  TSR_RETURN_IF_ERROR(CheckNesting(text, Syntax::kYaml, source));
  try {
    YAML::Node root = YAML::Load(text);
    if (!root || root.IsNull()) return InvalidArgument(fmt::format("{}: the file is empty", source));
    TSR_RETURN_IF_ERROR(yaml::CheckNoDuplicateKeys(root, source));
    return root;
  } catch (const YAML::Exception& e) {
    return InvalidArgument(fmt::format("{}:{}: not valid YAML: {}", source, e.mark.line + 1, e.msg));
  }
}

std::string Basename(const std::string& path) { return path; }

// The performance model's figures of one card type (catalog `types[i].model`).
Result<CardFigures> ReadCardFigures(const Reader& r, const YAML::Node& n, const std::string& f) {
  TSR_RETURN_IF_ERROR(r.Map(n, f));
  TSR_RETURN_IF_ERROR(r.OnlyKeys(n, f, {"tflops", "mfu", "fabric_gbs", "hbm_gbs", "cards_per_node"}));
  CardFigures c;
  TSR_ASSIGN_OR_RETURN(c.tflops, r.Quantity(n, f, "tflops", true, false));
  TSR_ASSIGN_OR_RETURN(c.mfu, r.Quantity(n, f, "mfu", true, false));
  if (c.mfu > 1) return r.Err(n["mfu"], f + ".mfu", fmt::format("'{}' is not in (0, 1]", n["mfu"].Scalar()));
  TSR_ASSIGN_OR_RETURN(c.fabric_gbs, r.Quantity(n, f, "fabric_gbs", true, false));
  TSR_ASSIGN_OR_RETURN(c.hbm_gbs, r.Quantity(n, f, "hbm_gbs", true, false));
  TSR_ASSIGN_OR_RETURN(c.cards_per_node, r.Int(n, f, "cards_per_node", false, 8, 1, 1 << 16));
  return c;
}

// The performance model's host and network figures (catalog `model`).
Result<HostFigures> ReadHostFigures(const Reader& r, const YAML::Node& n) {
  TSR_RETURN_IF_ERROR(r.Map(n, "model"));
  TSR_RETURN_IF_ERROR(r.OnlyKeys(n, "model", {"net_gbps", "pcie_gbs", "shm_gbs", "latency_us", "host_adam_gbs"}));
  HostFigures h;
  TSR_ASSIGN_OR_RETURN(h.net_gbps, r.Quantity(n, "model", "net_gbps", true, false));
  TSR_ASSIGN_OR_RETURN(h.pcie_gbs, r.Quantity(n, "model", "pcie_gbs", true, false));
  TSR_ASSIGN_OR_RETURN(h.shm_gbs, r.Quantity(n, "model", "shm_gbs", true, false));
  TSR_ASSIGN_OR_RETURN(h.latency_us, r.Quantity(n, "model", "latency_us", false, true));
  TSR_ASSIGN_OR_RETURN(h.host_adam_gbs, r.Quantity(n, "model", "host_adam_gbs", false, true));
  return h;
}

// Wraps a yaml-cpp exception thrown while walking a parsed tree (e.g. a bad conversion).
template <typename F>
auto Guard(const std::string& source, F f) -> decltype(f()) {
  try {
    return f();
  } catch (const YAML::Exception& e) {
    return InvalidArgument(fmt::format("{}:{}: {}", source, e.mark.line + 1, e.msg));
  }
}

}  // namespace

// ---- catalog ----------------------------------------------------------------------------------------

const AcceleratorType* Catalog::Find(const std::string& name) const {
  for (const auto& t : types)
    if (t.name == name) return &t;
  return nullptr;
}

Result<Catalog> ParseCatalog(const std::string& yaml, const std::string& source) {
  TSR_ASSIGN_OR_RETURN(YAML::Node root, ParseYaml(yaml, source));
  return Guard(source, [&]() -> Result<Catalog> {
    Reader r(source);
    TSR_RETURN_IF_ERROR(r.Map(root, ""));
    TSR_RETURN_IF_ERROR(r.OnlyKeys(root, "", {"currency", "price_version", "types", "model"}));
    Catalog c;
    c.source = source;
    TSR_ASSIGN_OR_RETURN(auto cur, r.Scalar(root, "", "currency", false));
    if (cur) c.currency = *cur;
    TSR_ASSIGN_OR_RETURN(c.price_version, r.Str(root, "", "price_version"));
    if (YAML::Node m = root["model"]) {
      TSR_ASSIGN_OR_RETURN(c.model, ReadHostFigures(r, m));
    }
    YAML::Node types = root["types"];
    if (!types) return r.Err(root, "types", "is required (a list of accelerator types)");
    TSR_RETURN_IF_ERROR(r.Seq(types, "types"));
    if (types.size() == 0) return r.Err(types, "types", "lists no accelerator type");
    std::set<std::string> names;
    for (size_t i = 0; i < types.size(); ++i) {
      YAML::Node n = types[i];
      std::string f = Reader::Index("types", i);
      TSR_RETURN_IF_ERROR(r.Map(n, f));
      TSR_RETURN_IF_ERROR(r.OnlyKeys(
          n, f,
          {"name", "vendor", "domestic", "price_per_card_hour", "memory_gib", "throughput", "slurm_gres", "model"}));
      AcceleratorType t;
      TSR_ASSIGN_OR_RETURN(t.name, r.Str(n, f, "name"));
      if (!names.insert(t.name).second)
        return r.Err(n["name"], f + ".name", fmt::format("'{}' is listed twice", t.name));
      TSR_ASSIGN_OR_RETURN(t.vendor, r.Str(n, f, "vendor"));
      TSR_ASSIGN_OR_RETURN(t.domestic, r.Bool(n, f, "domestic"));
      TSR_ASSIGN_OR_RETURN(t.price_per_card_hour, r.Fixed(n, f, "price_per_card_hour", ParseMoney));
      TSR_ASSIGN_OR_RETURN(t.memory_gib, r.Int(n, f, "memory_gib", false, 0, 0, 1 << 20));
      if (n["slurm_gres"]) {
        TSR_ASSIGN_OR_RETURN(t.slurm_gres, r.Str(n, f, "slurm_gres"));
      }
      if (YAML::Node m = n["model"]) {
        TSR_ASSIGN_OR_RETURN(t.model, ReadCardFigures(r, m, f + ".model"));
      }
      YAML::Node tp = n["throughput"];
      std::string tf = f + ".throughput";
      if (!tp) return r.Err(n, tf, "is required (per-card throughput per workload class, e.g. llm-train: 1.0)");
      TSR_RETURN_IF_ERROR(r.Map(tp, tf));
      for (auto it = tp.begin(); it != tp.end(); ++it) {
        std::string cls = it->first.Scalar();
        if (!it->second.IsScalar()) return r.Err(it->second, tf + "." + cls, "expected a number");
        auto v = ParseThroughput("x", it->second.Scalar());
        if (!v.ok()) return r.Err(it->second, tf + "." + cls, v.status().message().substr(3));
        if (*v == 0) return r.Err(it->second, tf + "." + cls, "must be > 0 (leave the class out instead)");
        t.throughput[cls] = *v;
      }
      c.types.push_back(std::move(t));
    }
    return c;
  });
}

Result<Catalog> LoadCatalog(const std::string& path) {
  TSR_ASSIGN_OR_RETURN(std::string text, ReadFile(path));
  return ParseCatalog(text, Basename(path));
}

// ---- fleet ------------------------------------------------------------------------------------------

const Node* Fleet::Find(const std::string& id) const {
  auto it = index.find(id);
  return it == index.end() ? nullptr : &nodes[it->second];
}

Status Fleet::Reindex() {
  index.clear();
  zones.clear();
  zone_of.assign(nodes.size(), 0);
  std::unordered_map<std::string, int> zix;
  for (size_t i = 0; i < nodes.size(); ++i) {
    if (!index.emplace(nodes[i].id, i).second)
      return InvalidArgument(fmt::format("{}: node id '{}' is listed twice", source, nodes[i].id));
    auto [it, inserted] = zix.emplace(nodes[i].zone, static_cast<int>(zones.size()));
    if (inserted) zones.push_back(nodes[i].zone);
    zone_of[i] = it->second;
  }
  return Status::Ok();
}

Result<Fleet> ParseFleet(const std::string& yaml, const std::string& source) {
  TSR_ASSIGN_OR_RETURN(YAML::Node root, ParseYaml(yaml, source));
  return Guard(source, [&]() -> Result<Fleet> {
    Reader r(source);
    TSR_RETURN_IF_ERROR(r.Map(root, ""));
    TSR_RETURN_IF_ERROR(r.OnlyKeys(root, "", {"nodes"}));
    YAML::Node nodes = root["nodes"];
    if (!nodes) return r.Err(root, "nodes", "is required (a list of nodes)");
    TSR_RETURN_IF_ERROR(r.Seq(nodes, "nodes"));
    Fleet fl;
    fl.source = source;
    for (size_t i = 0; i < nodes.size(); ++i) {
      YAML::Node n = nodes[i];
      std::string f = Reader::Index("nodes", i);
      TSR_RETURN_IF_ERROR(r.Map(n, f));
      TSR_RETURN_IF_ERROR(r.OnlyKeys(n, f, {"id", "zone", "type", "cards", "count"}));
      Node node;
      TSR_ASSIGN_OR_RETURN(node.id, r.Str(n, f, "id"));
      TSR_ASSIGN_OR_RETURN(node.zone, r.Str(n, f, "zone"));
      TSR_ASSIGN_OR_RETURN(node.type, r.Str(n, f, "type"));
      node.line = n["type"].Mark().line + 1;
      node.field = f;
      TSR_ASSIGN_OR_RETURN(node.cards, r.Int(n, f, "cards", true, 0, 0, 1 << 16));
      TSR_ASSIGN_OR_RETURN(int64_t count, r.Int(n, f, "count", false, 0, 1, 1 << 20));
      std::vector<Node> expanded;
      if (count == 0) {
        expanded.push_back(node);
      } else {
        int width = static_cast<int>(std::to_string(count - 1).size());
        for (int64_t k = 0; k < count; ++k) {
          Node e = node;
          e.id = fmt::format("{}-{:0{}d}", node.id, k, width);
          expanded.push_back(std::move(e));
        }
      }
      for (auto& e : expanded) {
        if (!fl.index.emplace(e.id, fl.nodes.size()).second)
          return r.Err(n["id"], f + ".id", fmt::format("node id '{}' is listed twice", e.id));
        fl.nodes.push_back(std::move(e));
      }
    }
    TSR_RETURN_IF_ERROR(fl.Reindex());
    return fl;
  });
}

Result<Fleet> LoadFleet(const std::string& path) {
  TSR_ASSIGN_OR_RETURN(std::string text, ReadFile(path));
  return ParseFleet(text, Basename(path));
}

// ---- policy -----------------------------------------------------------------------------------------

Ppm Policy::FloorAt(int64_t day) const {
  Ppm f = 0;
  for (const auto& c : calendar) {
    if (c.from_day <= day)
      f = c.floor;
    else
      break;
  }
  return f;
}

Result<Policy> ParsePolicy(const std::string& yaml, const std::string& source) {
  TSR_ASSIGN_OR_RETURN(YAML::Node root, ParseYaml(yaml, source));
  return Guard(source, [&]() -> Result<Policy> {
    Reader r(source);
    TSR_RETURN_IF_ERROR(r.Map(root, ""));
    TSR_RETURN_IF_ERROR(r.OnlyKeys(root, "", {"unit", "weight_class", "floor", "calendar"}));
    Policy p;
    p.source = source;
    TSR_ASSIGN_OR_RETURN(auto unit, r.Scalar(root, "", "unit", false));
    if (!unit || *unit == "cards") {
      p.unit = ShareUnit::kCards;
    } else if (*unit == "throughput") {
      p.unit = ShareUnit::kThroughput;
    } else {
      return r.Err(root["unit"], "unit", fmt::format("'{}' is not 'cards' or 'throughput'", *unit));
    }
    TSR_ASSIGN_OR_RETURN(auto wc, r.Scalar(root, "", "weight_class", false));
    if (p.unit == ShareUnit::kThroughput) {
      if (!wc)
        return r.Err(root, "weight_class",
                     "is required with unit: throughput (the workload class whose "
                     "throughput weighs each card)");
      p.weight_class = *wc;
      p.weight_class_line = root["weight_class"].Mark().line + 1;
    } else if (wc) {
      return r.Err(root["weight_class"], "weight_class", "only applies with unit: throughput");
    }
    bool has_floor = root["floor"].IsDefined(), has_cal = root["calendar"].IsDefined();
    if (has_floor == has_cal)
      return r.Err(root, "calendar", "give either 'floor' (one value, always in force) or 'calendar' (dates)");
    if (has_floor) {
      TSR_ASSIGN_OR_RETURN(Ppm f, r.Fixed(root, "", "floor", ParseShare));
      p.calendar.push_back({std::numeric_limits<int64_t>::min() / 2, f});
      return p;
    }
    YAML::Node cal = root["calendar"];
    TSR_RETURN_IF_ERROR(r.Seq(cal, "calendar"));
    if (cal.size() == 0) return r.Err(cal, "calendar", "lists no date");
    for (size_t i = 0; i < cal.size(); ++i) {
      YAML::Node n = cal[i];
      std::string f = Reader::Index("calendar", i);
      TSR_RETURN_IF_ERROR(r.Map(n, f));
      TSR_RETURN_IF_ERROR(r.OnlyKeys(n, f, {"from", "floor"}));
      FloorChange c;
      TSR_ASSIGN_OR_RETURN(c.from_day, r.Fixed(n, f, "from", ParseDate));
      TSR_ASSIGN_OR_RETURN(c.floor, r.Fixed(n, f, "floor", ParseShare));
      if (!p.calendar.empty() && c.from_day <= p.calendar.back().from_day)
        return r.Err(n["from"], f + ".from",
                     fmt::format("{} is not after the previous entry's {} (list dates in increasing order)",
                                 FormatDate(c.from_day), FormatDate(p.calendar.back().from_day)));
      p.calendar.push_back(c);
    }
    return p;
  });
}

Result<Policy> LoadPolicy(const std::string& path) {
  TSR_ASSIGN_OR_RETURN(std::string text, ReadFile(path));
  return ParsePolicy(text, Basename(path));
}

// ---- job --------------------------------------------------------------------------------------------

bool Job::Accepts(const AcceleratorType& t) const {
  for (const auto& c : compatible)
    if (c == t.vendor || c == t.name) return true;
  return false;
}

const std::vector<std::string>& JobKeys() {
  static const std::vector<std::string> keys = {"name",       "tenant",     "priority", "class", "cards",
                                                "throughput", "compatible", "bounds",   "model"};
  return keys;
}

Result<Job> ParseJob(const std::string& yaml, const std::string& source) {
  TSR_ASSIGN_OR_RETURN(YAML::Node root, ParseYaml(yaml, source));
  return Guard(source, [&]() -> Result<Job> {
    Reader r(source);
    TSR_RETURN_IF_ERROR(r.Map(root, ""));
    TSR_RETURN_IF_ERROR(r.OnlyKeys(root, "", JobKeys()));
    Job j;
    j.source = source;
    TSR_ASSIGN_OR_RETURN(j.name, r.Str(root, "", "name"));
    TSR_ASSIGN_OR_RETURN(j.tenant, r.Str(root, "", "tenant"));
    TSR_ASSIGN_OR_RETURN(j.priority, r.Int(root, "", "priority", false, 0, -1000000, 1000000));
    TSR_ASSIGN_OR_RETURN(j.workload_class, r.Str(root, "", "class"));
    bool has_cards = root["cards"].IsDefined(), has_tp = root["throughput"].IsDefined();
    if (has_cards == has_tp)
      return r.Err(root, "cards", "give either 'cards' (a card count) or 'throughput' (a target), not both");
    if (has_cards) {
      TSR_ASSIGN_OR_RETURN(j.cards, r.Int(root, "", "cards", true, 0, 1, 1 << 24));
    } else {
      TSR_ASSIGN_OR_RETURN(j.throughput_target, r.Fixed(root, "", "throughput", ParseThroughput));
      if (j.throughput_target <= 0) return r.Err(root["throughput"], "throughput", "must be > 0");
    }
    if (YAML::Node mn = root["model"]) {
      TSR_RETURN_IF_ERROR(r.Map(mn, "model"));
      TSR_RETURN_IF_ERROR(r.OnlyKeys(mn, "model", {"params", "class"}));
      JobModel jm;
      jm.line = mn.Mark().line + 1;
      TSR_ASSIGN_OR_RETURN(jm.params, r.Quantity(mn, "model", "params", true, false));
      TSR_ASSIGN_OR_RETURN(jm.model_class, r.Str(mn, "model", "class"));
      if (auto c = perf::FindModelClass(jm.model_class); !c.ok())
        return r.Err(mn["class"], "model.class", c.status().message());
      if (!has_cards)
        return r.Err(mn, "model",
                     "a job that names its model is placed by a card count: give 'cards', not 'throughput'");
      j.model = jm;
    }
    YAML::Node comp = root["compatible"];
    if (!comp) return r.Err(root, "compatible", "is required (vendors or types, e.g. [ascend, nvidia])");
    if (comp.IsScalar()) {
      std::string s = comp.Scalar();
      size_t pos = 0;
      while (pos <= s.size()) {
        size_t e = s.find(',', pos);
        if (e == std::string::npos) e = s.size();
        std::string item = s.substr(pos, e - pos);
        item.erase(0, item.find_first_not_of(' '));
        item.erase(item.find_last_not_of(' ') + 1);
        if (item.empty()) return r.Err(comp, "compatible", fmt::format("'{}' has an empty entry", s));
        j.compatible.push_back(item);
        pos = e + 1;
      }
    } else {
      TSR_RETURN_IF_ERROR(r.Seq(comp, "compatible"));
      for (size_t i = 0; i < comp.size(); ++i) {
        if (!comp[i].IsScalar() || comp[i].Scalar().empty())
          return r.Err(comp[i], Reader::Index("compatible", i), "expected a vendor or type name");
        j.compatible.push_back(comp[i].Scalar());
      }
    }
    if (j.compatible.empty()) return r.Err(comp, "compatible", "lists no vendor or type");
    if (YAML::Node b = root["bounds"]) {
      TSR_RETURN_IF_ERROR(r.Map(b, "bounds"));
      for (auto it = b.begin(); it != b.end(); ++it) {
        std::string type = it->first.Scalar();
        std::string f = "bounds." + type;
        TSR_RETURN_IF_ERROR(r.Map(it->second, f));
        TSR_RETURN_IF_ERROR(r.OnlyKeys(it->second, f, {"min", "max"}));
        TypeBounds tb;
        tb.line = it->first.Mark().line + 1;
        TSR_ASSIGN_OR_RETURN(tb.min, r.Int(it->second, f, "min", false, 0, 0, 1 << 24));
        TSR_ASSIGN_OR_RETURN(int64_t mx, r.Int(it->second, f, "max", false, -1, 0, 1 << 24));
        if (mx >= 0) {
          if (mx < tb.min) return r.Err(it->second["max"], f + ".max", fmt::format("{} is below min {}", mx, tb.min));
          tb.max = mx;
        }
        j.bounds[type] = tb;
      }
    }
    return j;
  });
}

Result<Job> LoadJob(const std::string& path) {
  TSR_ASSIGN_OR_RETURN(std::string text, ReadFile(path));
  return ParseJob(text, Basename(path));
}

// ---- running jobs -----------------------------------------------------------------------------------

Result<std::vector<RunningJob>> ParseRunning(const std::string& yaml, const std::string& source) {
  TSR_ASSIGN_OR_RETURN(YAML::Node root, ParseYaml(yaml, source));
  return Guard(source, [&]() -> Result<std::vector<RunningJob>> {
    Reader r(source);
    YAML::Node list = root;
    std::string lf = "running";
    if (root.IsMap()) {
      TSR_RETURN_IF_ERROR(r.OnlyKeys(root, "", {"running"}));
      list = root["running"];
      if (!list) return r.Err(root, "running", "is required (a list of running jobs)");
      if (list.IsNull()) return std::vector<RunningJob>{};
    }
    TSR_RETURN_IF_ERROR(r.Seq(list, lf));
    std::vector<RunningJob> out;
    std::set<std::string> names;
    for (size_t i = 0; i < list.size(); ++i) {
      YAML::Node n = list[i];
      std::string f = Reader::Index(lf, i);
      TSR_RETURN_IF_ERROR(r.Map(n, f));
      TSR_RETURN_IF_ERROR(r.OnlyKeys(n, f, {"name", "tenant", "allocations"}));
      RunningJob j;
      j.source = source;
      TSR_ASSIGN_OR_RETURN(j.name, r.Str(n, f, "name"));
      if (!names.insert(j.name).second)
        return r.Err(n["name"], f + ".name", fmt::format("job '{}' is listed twice", j.name));
      TSR_ASSIGN_OR_RETURN(auto tenant, r.Scalar(n, f, "tenant", false));
      if (tenant) j.tenant = *tenant;
      YAML::Node al = n["allocations"];
      if (!al) return r.Err(n, f + ".allocations", "is required (a list of {node, cards})");
      TSR_RETURN_IF_ERROR(r.Seq(al, f + ".allocations"));
      for (size_t k = 0; k < al.size(); ++k) {
        std::string af = Reader::Index(f + ".allocations", k);
        TSR_RETURN_IF_ERROR(r.Map(al[k], af));
        TSR_RETURN_IF_ERROR(r.OnlyKeys(al[k], af, {"node", "cards"}));
        NodeCards nc;
        TSR_ASSIGN_OR_RETURN(nc.node, r.Str(al[k], af, "node"));
        TSR_ASSIGN_OR_RETURN(nc.cards, r.Int(al[k], af, "cards", true, 0, 1, 1 << 16));
        nc.line = al[k]["node"].Mark().line + 1;
        nc.cards_line = al[k]["cards"].Mark().line + 1;
        nc.field = af;
        j.allocations.push_back(std::move(nc));
      }
      out.push_back(std::move(j));
    }
    return out;
  });
}

Result<std::vector<RunningJob>> LoadRunning(const std::string& path) {
  TSR_ASSIGN_OR_RETURN(std::string text, ReadFile(path));
  return ParseRunning(text, Basename(path));
}

// ---- cross-file checks ------------------------------------------------------------------------------

namespace internal {

std::string Where(const std::string& source, int line, const std::string& field) {
  std::string w = source;
  if (!w.empty() && line > 0) w += fmt::format(":{}", line);
  if (field.empty()) return w;
  return w.empty() ? field : w + ": " + field;
}

Status UnknownNodeType(const Fleet& fleet, const Node& node, const Catalog& catalog) {
  std::string field = node.field.empty() ? fmt::format("node '{}'", node.id) : node.field + ".type";
  return InvalidArgument(fmt::format("{}: type '{}' is not in the catalog {}{}", Where(fleet.source, node.line, field),
                                     node.type, catalog.source,
                                     node.field.empty() ? "" : fmt::format(" (node '{}')", node.id)));
}

Status NoWeightClassThroughput(const Policy& policy, const AcceleratorType& type, const Catalog& catalog) {
  return InvalidArgument(fmt::format("{}: '{}' has no throughput for type '{}' in {}",
                                     Where(policy.source, policy.weight_class_line, "weight_class"),
                                     policy.weight_class, type.name, catalog.source));
}

Status UnknownBoundsType(const Job& job, const std::string& type, const TypeBounds& bounds, const Catalog& catalog) {
  return InvalidArgument(fmt::format("{}: type '{}' is not in the catalog {}",
                                     Where(job.source, bounds.line, "bounds." + type), type, catalog.source));
}

Status UnknownRunningNode(const RunningJob& job, const NodeCards& alloc, const Fleet& fleet) {
  std::string field = alloc.field.empty() ? fmt::format("running job '{}'", job.name) : alloc.field + ".node";
  return InvalidArgument(fmt::format("{}: node '{}' is not in the fleet {}{}", Where(job.source, alloc.line, field),
                                     alloc.node, fleet.source,
                                     alloc.field.empty() ? "" : fmt::format(" (job '{}')", job.name)));
}

Status OverAllocated(const RunningJob& job, const NodeCards& alloc, int64_t used, int64_t capacity) {
  std::string field = alloc.field.empty() ? "" : alloc.field + ".cards";
  std::string where = Where(job.source, alloc.cards_line, field);
  return InvalidArgument(fmt::format("{}{}running jobs use {} cards on node '{}', which has {} (job '{}')", where,
                                     where.empty() ? "" : ": ", used, alloc.node, capacity, job.name));
}

}  // namespace internal

Status CheckInputs(const Catalog& catalog, const Fleet& fleet, const Policy& policy,
                   const std::vector<RunningJob>& running) {
  for (const Node& n : fleet.nodes)
    if (!catalog.Find(n.type)) return internal::UnknownNodeType(fleet, n, catalog);
  if (policy.unit == ShareUnit::kThroughput) {
    for (const auto& t : catalog.types)
      if (!t.throughput.count(policy.weight_class)) return internal::NoWeightClassThroughput(policy, t, catalog);
  }
  std::unordered_map<std::string, int64_t> used;
  for (const auto& j : running) {
    for (const auto& a : j.allocations) {
      const Node* n = fleet.Find(a.node);
      if (!n) return internal::UnknownRunningNode(j, a, fleet);
      int64_t& u = used[a.node];
      u += a.cards;
      if (u > n->cards) return internal::OverAllocated(j, a, u, n->cards);
    }
  }
  return Status::Ok();
}

}  // namespace tessera::sched
