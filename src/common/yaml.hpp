// common/yaml: checks on a parsed YAML document that yaml-cpp 0.7 does not make itself. A mapping that names a
// key twice (`cards: 8`, then `cards: 4`) loads with both entries and a lookup sees only one of them, so the
// other value is silently lost; FindDuplicateKey finds the second occurrence. Header-only: any module that
// reads YAML can call it (sched's loaders do, for every file they read).
#pragma once

#include <yaml-cpp/yaml.h>

#include <optional>
#include <string>
#include <unordered_map>

#include "tessera/status.hpp"

namespace tessera::yaml {

struct DuplicateKey {
  std::string field;   // "nodes[0].cards": keys joined by '.', list items as [i]
  int line = 0;        // 1-based line of the second occurrence
  int first_line = 0;  // 1-based line of the first
};

// The first key named twice in one mapping anywhere under `node` (document order), or nullopt. `field` is the
// path of `node` itself ("" for the root).
inline std::optional<DuplicateKey> FindDuplicateKey(const YAML::Node& node, const std::string& field = "",
                                                    int depth = 0) {
  if (depth > 64) return std::nullopt;  // deeper than any Tessera file; also stops on alias cycles
  auto join = [&](const std::string& key) { return field.empty() ? key : field + "." + key; };
  if (node.IsMap()) {
    std::unordered_map<std::string, int> seen;  // key -> 1-based line
    for (auto it = node.begin(); it != node.end(); ++it) {
      if (!it->first.IsScalar()) continue;
      const std::string key = it->first.Scalar();
      const int line = it->first.Mark().line + 1;
      auto [first, inserted] = seen.emplace(key, line);
      if (!inserted) return DuplicateKey{join(key), line, first->second};
      if (auto d = FindDuplicateKey(it->second, join(key), depth + 1)) return d;
    }
  } else if (node.IsSequence()) {
    for (size_t i = 0; i < node.size(); ++i)
      if (auto d = FindDuplicateKey(node[i], field + "[" + std::to_string(i) + "]", depth + 1)) return d;
  }
  return std::nullopt;
}

// InvalidArgument "SOURCE:LINE: FIELD: is given twice (first on line N)" for the first duplicate key, else OK.
inline Status CheckNoDuplicateKeys(const YAML::Node& root, const std::string& source) {
  auto d = FindDuplicateKey(root);
  if (!d) return Status::Ok();
  return InvalidArgument(source + ":" + std::to_string(d->line) + ": " + d->field + ": is given twice (first on line " +
                         std::to_string(d->first_line) + "); give each field once");
}

}  // namespace tessera::yaml
