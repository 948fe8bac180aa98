// ckpt/retention_file: RetentionPolicy::Load — the retention policy read from a YAML file. Apart from
// retention.cpp so that libtessera needs no yaml-cpp: it is in tessera_internal (the `tessera` binary);
// a framework that links libtessera fills RetentionPolicy itself.
#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include <filesystem>
#include <set>

#include "common/env.hpp"
#include "tessera/ckpt.hpp"

namespace tessera::ckpt {
namespace {

// "3600", "90s", "30m", "12h", "7d", "2w", "never" → seconds (-1 for never).
Result<int64_t> ParseAge(const std::string& what, const std::string& text) {
  if (text == "never" || text == "-1") return int64_t{-1};
  if (text.empty()) return InvalidArgument(fmt::format("{} is empty", what));
  int64_t mul = 1;
  std::string num = text;
  switch (text.back()) {
    case 's':
      mul = 1;
      break;
    case 'm':
      mul = 60;
      break;
    case 'h':
      mul = 3600;
      break;
    case 'd':
      mul = 86400;
      break;
    case 'w':
      mul = 7 * 86400;
      break;
    default:
      num.push_back('s');
  }
  num.pop_back();
  auto v = env::ParseInt(what, num, 0, int64_t{1} << 40);
  if (!v.ok())
    return InvalidArgument(
        fmt::format("{}='{}' is not an age (use e.g. 3600, 90s, 30m, 12h, 7d, 2w, never)", what, text));
  return *v * mul;
}

}  // namespace

Result<RetentionPolicy> RetentionPolicy::Load(const std::string& yaml_path) {
  RetentionPolicy p;
  std::error_code ec;
  if (!std::filesystem::exists(yaml_path, ec))
    return NotFound(fmt::format("retention policy {}: no such file", yaml_path));
  YAML::Node y;
  try {
    y = YAML::LoadFile(yaml_path);
  } catch (const std::exception& e) {
    return InvalidArgument(fmt::format("retention policy {}: {}", yaml_path, e.what()));
  }
  if (!y.IsMap()) return InvalidArgument(fmt::format("retention policy {}: expected a map of keys", yaml_path));
  static const std::set<std::string> known{"keep_hot", "demote_to_warm_after", "demote_to_cold_after", "expire_after",
                                           "keep_every"};
  try {
    for (const auto& it : y) {
      std::string key = it.first.as<std::string>();
      std::string val = it.second.as<std::string>();
      std::string what = fmt::format("{}: {}", yaml_path, key);
      if (!known.count(key))
        return InvalidArgument(
            fmt::format("retention policy {}: unknown key '{}' (known: keep_hot, demote_to_warm_after, "
                        "demote_to_cold_after, expire_after, keep_every)",
                        yaml_path, key));
      if (key == "keep_hot") {
        TSR_ASSIGN_OR_RETURN(auto v, env::ParseInt(what, val, 0, 1 << 30));
        p.keep_hot = static_cast<int>(v);
      } else if (key == "keep_every") {
        TSR_ASSIGN_OR_RETURN(p.keep_every, env::ParseInt(what, val, 0, int64_t{1} << 50));
      } else if (key == "demote_to_warm_after") {
        TSR_ASSIGN_OR_RETURN(p.demote_to_warm_after, ParseAge(what, val));
      } else if (key == "demote_to_cold_after") {
        TSR_ASSIGN_OR_RETURN(p.demote_to_cold_after, ParseAge(what, val));
      } else if (key == "expire_after") {
        TSR_ASSIGN_OR_RETURN(p.expire_after, ParseAge(what, val));
      }
    }
  } catch (const std::exception& e) {
    return InvalidArgument(fmt::format("retention policy {}: {}", yaml_path, e.what()));
  }
  return p;
}

}  // namespace tessera::ckpt
