// common/env: typed access to TESSERA_* environment variables.
//
// Every parser returns a Status that names the variable and its value on bad input, e.g.
//   InvalidArgument: TESSERA_TIMEOUT='abc' is not a duration (use e.g. 30, 30s, 500ms, 2m)
// The full table of variables is docs/env.md, generated from common/env_vars.inc.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "tessera/status.hpp"

namespace tessera::env {

// The raw value, or nullopt when unset. An empty value counts as unset. A renamed variable is read under its old
// name (TSR_ENV_ALIAS in env_vars.inc) when the new one is unset.
std::optional<std::string> Get(const char* name);
// The variable that holds `name`'s value: `name`, or its old name (TSR_ENV_ALIAS in env_vars.inc) when only that is
// set; for messages that name what the user set.
const char* SetName(const char* name);
// A required string: NotFound-style InvalidArgument naming the variable when unset.
Result<std::string> Require(const char* name);
// An integer in [min, max]; `fallback` when unset.
Result<int64_t> Int(const char* name, int64_t fallback, int64_t min, int64_t max);
// A required integer in [min, max].
Result<int64_t> RequireInt(const char* name, int64_t min, int64_t max);
// A duration: "30" (seconds), "30s", "500ms", "2m", "1h"; `fallback` when unset. Must be > 0.
Result<std::chrono::milliseconds> Duration(const char* name, std::chrono::milliseconds fallback);
// A byte size: "4194304", "4M", "4MiB", "512K", "1G"; `fallback` when unset.
Result<uint64_t> Bytes(const char* name, uint64_t fallback);
// One of `choices` (comma-separated in the message); `fallback` when unset.
Result<std::string> Choice(const char* name, const std::string& fallback, std::initializer_list<const char*> choices);

// The same getters with the default declared for `name` in common/env_vars.inc (its `value`), so that a
// default lives in one place: used for every declared TESSERA_* variable with a constant default (the
// EnvRegistry tests fail on a call that passes its own). InternalError naming `name` when it has no declared
// default.
std::string GetOrDefault(const char* name);  // the raw value, else the declared default ("" without one)
Result<int64_t> Int(const char* name, int64_t min, int64_t max);
Result<std::chrono::milliseconds> Duration(const char* name);
Result<uint64_t> Bytes(const char* name);
Result<std::string> Choice(const char* name, std::initializer_list<const char*> choices);
// The declared default of `name` (common/env_vars.inc), or InternalError naming it.
Result<std::string> DeclaredDefault(const char* name);
// The same, read as its parser reads it, for a struct's member initialisers, so that the struct's default is
// the declaration's and not a second copy: `int max_connections = env::DeclaredInt("TESSERA_STORE_MAX_CONNS");`.
// A name without a declared default, or a default its parser refuses, is a bug in Tessera that the EnvRegistry
// tests catch; should one get past them, these print why (naming `name`) and abort.
std::string DeclaredString(const char* name);
int64_t DeclaredInt(const char* name);
uint64_t DeclaredBytes(const char* name);
std::chrono::milliseconds DeclaredDuration(const char* name);

// Parsers shared with CLI flags and config files; `what` names the source in the error.
Result<int64_t> ParseInt(const std::string& what, const std::string& text, int64_t min, int64_t max);
Result<std::chrono::milliseconds> ParseDuration(const std::string& what, const std::string& text);
Result<uint64_t> ParseBytes(const std::string& what, const std::string& text);
// A switch: 1|0, true|false, yes|no, on|off (lower case).
Result<bool> ParseBool(const std::string& what, const std::string& text);

// A settings file that is a flat YAML map (TESSERA_S3_CONFIG): `key: value` lines, `#` comments, values
// plain or quoted ('...', "..." with \" \\ \n \t), an optional `---` first line. Anything else (nesting,
// lists, flow style) is an error naming the file and line. Read without yaml-cpp, which libtessera does
// not link. An empty value is "".
Result<std::map<std::string, std::string>> ReadFlatMap(const std::string& path);

}  // namespace tessera::env
