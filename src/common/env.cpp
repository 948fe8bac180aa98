// common/env: parsing of TESSERA_* variables with errors that name the variable and its value.
#include "common/env.hpp"

#include <fmt/format.h>

#include <cctype>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>

#include "common/env_vars.hpp"

namespace tessera::env {

namespace {
// The old name of `name` (TSR_ENV_ALIAS in env_vars.inc), or null.
const char* OldName(const char* name) {
  static constexpr struct {
    const char *name, *old;
  } kAliases[] = {
#define TSR_ENV_VAR(name, parser, value, default_text, where, doc)
#define TSR_ENV_ALIAS(name, old) {#name, #old},
#include "common/env_vars.inc"
#undef TSR_ENV_ALIAS
#undef TSR_ENV_VAR
  };
  for (const auto& a : kAliases)
    if (std::strcmp(a.name, name) == 0) return a.old;
  return nullptr;
}
const char* Value(const char* name) {
  const char* v = std::getenv(name);
  return v == nullptr || *v == '\0' ? nullptr : v;
}
}  // namespace

const char* SetName(const char* name) {
  if (Value(name) != nullptr) return name;
  const char* old = OldName(name);
  return old != nullptr && Value(old) != nullptr ? old : name;
}

std::optional<std::string> Get(const char* name) {
  const char* v = Value(SetName(name));
  if (v == nullptr) return std::nullopt;
  return std::string(v);
}

Result<std::string> Require(const char* name) {
  auto v = Get(name);
  if (!v) return InvalidArgument(fmt::format("{} is not set (start ranks with `tessera run`, or set it)", name));
  return *v;
}

Result<int64_t> ParseInt(const std::string& what, const std::string& text, int64_t min, int64_t max) {
  errno = 0;
  char* end = nullptr;
  long long v = std::strtoll(text.c_str(), &end, 10);
  if (text.empty() || end == text.c_str() || *end != '\0' || errno == ERANGE)
    return InvalidArgument(fmt::format("{}='{}' is not an integer", what, text));
  if (v < min || v > max) return InvalidArgument(fmt::format("{}='{}' is out of range [{}, {}]", what, text, min, max));
  return static_cast<int64_t>(v);
}

Result<int64_t> Int(const char* name, int64_t fallback, int64_t min, int64_t max) {
  auto v = Get(name);
  if (!v) return fallback;
  return ParseInt(SetName(name), *v, min, max);
}

Result<int64_t> RequireInt(const char* name, int64_t min, int64_t max) {
  TSR_ASSIGN_OR_RETURN(std::string v, Require(name));
  return ParseInt(name, v, min, max);
}

namespace {
// Splits "500ms" into 500 and "ms"; false if there is no leading number.
bool SplitNumber(const std::string& text, double* number, std::string* unit) {
  size_t i = 0;
  while (i < text.size() && (std::isdigit(static_cast<unsigned char>(text[i])) || text[i] == '.')) ++i;
  if (i == 0) return false;
  std::string digits = text.substr(0, i);
  char* end = nullptr;
  *number = std::strtod(digits.c_str(), &end);
  if (*end != '\0') return false;
  *unit = text.substr(i);
  return true;
}
}  // namespace

Result<std::chrono::milliseconds> ParseDuration(const std::string& what, const std::string& text) {
  double n = 0;
  std::string unit;
  auto bad = [&] {
    return InvalidArgument(
        fmt::format("{}='{}' is not a positive duration (use e.g. 30, 30s, 500ms, 2m, 1h)", what, text));
  };
  if (!SplitNumber(text, &n, &unit)) return bad();
  double ms = 0;
  if (unit.empty() || unit == "s")
    ms = n * 1e3;
  else if (unit == "ms")
    ms = n;
  else if (unit == "m" || unit == "min")
    ms = n * 60e3;
  else if (unit == "h")
    ms = n * 3600e3;
  else
    return bad();
  if (ms < 1 || ms > 365.0 * 86400e3) return bad();
  return std::chrono::milliseconds(static_cast<int64_t>(ms));
}

Result<std::chrono::milliseconds> Duration(const char* name, std::chrono::milliseconds fallback) {
  auto v = Get(name);
  if (!v) return fallback;
  return ParseDuration(SetName(name), *v);
}

Result<uint64_t> ParseBytes(const std::string& what, const std::string& text) {
  double n = 0;
  std::string unit;
  auto bad = [&] {
    return InvalidArgument(fmt::format("{}='{}' is not a byte size (use e.g. 4096, 512K, 4M, 1G)", what, text));
  };
  if (!SplitNumber(text, &n, &unit)) return bad();
  double mult = 1;
  if (unit.empty() || unit == "B")
    mult = 1;
  else if (unit == "K" || unit == "KiB" || unit == "k")
    mult = 1024.0;
  else if (unit == "M" || unit == "MiB")
    mult = 1024.0 * 1024;
  else if (unit == "G" || unit == "GiB")
    mult = 1024.0 * 1024 * 1024;
  else
    return bad();
  return static_cast<uint64_t>(n * mult);
}

Result<bool> ParseBool(const std::string& what, const std::string& text) {
  if (text == "1" || text == "true" || text == "yes" || text == "on") return true;
  if (text == "0" || text == "false" || text == "no" || text == "off") return false;
  return InvalidArgument(fmt::format("{}='{}' is not a switch (use 1 or 0, true or false)", what, text));
}

Result<uint64_t> Bytes(const char* name, uint64_t fallback) {
  auto v = Get(name);
  if (!v) return fallback;
  return ParseBytes(SetName(name), *v);
}

Result<std::string> Choice(const char* name, const std::string& fallback, std::initializer_list<const char*> choices) {
  auto v = Get(name);
  if (!v) return fallback;
  std::string list;
  for (const char* c : choices) {
    if (*v == c) return *v;
    list += list.empty() ? "" : "|";
    list += c;
  }
  return InvalidArgument(fmt::format("{}='{}' is not one of {}", SetName(name), *v, list));
}

Result<std::string> DeclaredDefault(const char* name) {
  const Variable* v = FindVariable(name);
  if (v == nullptr || v->value == nullptr)
    return InternalError(fmt::format("{} has no declared default (common/env_vars.inc)", name));
  return std::string(v->value);
}

namespace {
template <typename T>
T DeclaredOrAbort(const char* name, const Result<T>& r) {
  if (r.ok()) return *r;
  std::fprintf(stderr, "tessera: bug: the declared default of %s: %s\n", name, r.status().message().c_str());
  std::abort();
}
}  // namespace

std::string DeclaredString(const char* name) { return DeclaredOrAbort(name, DeclaredDefault(name)); }

int64_t DeclaredInt(const char* name) {
  auto d = DeclaredDefault(name);
  return DeclaredOrAbort(name, d.ok() ? ParseInt(name, *d, INT64_MIN, INT64_MAX) : Result<int64_t>(d.status()));
}

uint64_t DeclaredBytes(const char* name) {
  auto d = DeclaredDefault(name);
  return DeclaredOrAbort(name, d.ok() ? ParseBytes(name, *d) : Result<uint64_t>(d.status()));
}

std::chrono::milliseconds DeclaredDuration(const char* name) {
  auto d = DeclaredDefault(name);
  return DeclaredOrAbort(name, d.ok() ? ParseDuration(name, *d) : Result<std::chrono::milliseconds>(d.status()));
}

std::string GetOrDefault(const char* name) {
  if (auto v = Get(name)) return *v;
  auto d = DeclaredDefault(name);
  return d.ok() ? *d : std::string();
}

Result<int64_t> Int(const char* name, int64_t min, int64_t max) {
  TSR_ASSIGN_OR_RETURN(std::string fallback, DeclaredDefault(name));
  return ParseInt(name, Get(name).value_or(fallback), min, max);
}

Result<std::chrono::milliseconds> Duration(const char* name) {
  TSR_ASSIGN_OR_RETURN(std::string fallback, DeclaredDefault(name));
  return ParseDuration(name, Get(name).value_or(fallback));
}

Result<uint64_t> Bytes(const char* name) {
  TSR_ASSIGN_OR_RETURN(std::string fallback, DeclaredDefault(name));
  return ParseBytes(name, Get(name).value_or(fallback));
}

Result<std::string> Choice(const char* name, std::initializer_list<const char*> choices) {
  TSR_ASSIGN_OR_RETURN(std::string fallback, DeclaredDefault(name));
  return Choice(name, fallback, choices);
}

namespace {
std::string Trim(const std::string& s) {
  size_t b = s.find_first_not_of(" \t\r"), e = s.find_last_not_of(" \t\r");
  return b == std::string::npos ? "" : s.substr(b, e - b + 1);
}
}  // namespace

Result<std::map<std::string, std::string>> ReadFlatMap(const std::string& path) {
  std::ifstream in(path);
  if (!in) return ErrnoError(fmt::format("open {}", path), errno);
  std::map<std::string, std::string> kv;
  std::string raw;
  for (int line = 1; std::getline(in, raw); ++line) {
    auto bad = [&](const std::string& why) {
      return InvalidArgument(fmt::format("{}:{}: {} (expected `key: value` lines)", path, line, why));
    };
    std::string text = Trim(raw);
    if (text.empty() || text[0] == '#' || (line == 1 && text == "---")) continue;
    if (raw[0] == ' ' || raw[0] == '\t') return bad("nested values are not supported");
    size_t colon = text.find(": ");
    if (colon == std::string::npos && text.back() == ':') colon = text.size() - 1;
    if (colon == std::string::npos || colon == 0) return bad(fmt::format("'{}' is not `key: value`", text));
    std::string key = Trim(text.substr(0, colon)), value = Trim(text.substr(colon + 1));
    if (key.find_first_of("{}[]\"'&*!|>%@`") != std::string::npos) return bad(fmt::format("unsupported key '{}'", key));
    if (!value.empty() && (value[0] == '"' || value[0] == '\'')) {
      char q = value[0];
      std::string out;
      size_t i = 1;
      for (; i < value.size() && value[i] != q; ++i) {
        if (q == '"' && value[i] == '\\' && i + 1 < value.size()) {
          char c = value[++i];
          out += c == 'n' ? '\n' : c == 't' ? '\t' : c;
        } else {
          out += value[i];
        }
      }
      if (i == value.size()) return bad("unterminated quoted value");
      std::string rest = Trim(value.substr(i + 1));
      if (!rest.empty() && rest[0] != '#') return bad(fmt::format("text after the quoted value: '{}'", rest));
      value = out;
    } else {
      size_t hash = value.find(" #");
      if (hash != std::string::npos) value = Trim(value.substr(0, hash));
      if (value == "~" || value == "null") value.clear();
      if (!value.empty() && std::string("{[&*!|>%@`-").find(value[0]) != std::string::npos &&
          !(value[0] == '-' && value.size() > 1 && value[1] != ' '))
        return bad(fmt::format("unsupported value '{}' (a plain or quoted scalar)", value));
    }
    if (kv.count(key)) return bad(fmt::format("duplicate key '{}'", key));
    kv[key] = value;
  }
  return kv;
}

}  // namespace tessera::env
