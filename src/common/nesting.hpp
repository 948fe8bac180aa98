// common/nesting: a bound on how deeply a JSON or YAML text that another party wrote may nest, checked before
// it is parsed. nlohmann::json parses any depth, but dumps, compares and copies a value recursively: a request
// body or a checkpoint manifest of 100,000 nested arrays overflows the stack of whatever quotes it back in an
// error. Every parser of text a tenant controls (the daemon's API bodies, job files, manifests, safetensors
// headers) checks it first; no file Tessera writes nests deeper than 8.
#pragma once

#include <fmt/format.h>

#include <cstddef>
#include <string>
#include <string_view>

#include "tessera/status.hpp"

namespace tessera {

constexpr int kMaxNesting = 64;

enum class Syntax { kJson, kYaml };

// The byte offset at which `text` opens its (max_depth+1)-th nested '[' or '{' outside quoted strings, or npos
// when it never nests that deep. JSON strings are "..." with backslash escapes; YAML adds '...' (quote doubled)
// and '#' comments, and a quote starts a quoted scalar only where a scalar can start (so that the apostrophe
// of a plain scalar like `don't` is not taken for one).
inline size_t NestingExceeds(std::string_view text, Syntax syntax, int max_depth = kMaxNesting) {
  const bool yaml = syntax == Syntax::kYaml;
  int depth = 0;
  char prev = '\n';  // the last byte outside a string that is not a space
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '"' || (yaml && c == '\'')) {
      bool starts = !yaml || prev == '\n' || prev == '[' || prev == '{' || prev == ',' || prev == ':' || prev == '-' ||
                    prev == '?';
      if (starts) {
        for (++i; i < text.size(); ++i) {
          if (c == '"' && text[i] == '\\') {
            ++i;
          } else if (text[i] == c) {
            if (c == '\'' && i + 1 < text.size() && text[i + 1] == '\'') {
              ++i;
              continue;
            }
            break;
          }
        }
        prev = c;
        continue;
      }
    }
    if (yaml && c == '#' && (i == 0 || text[i - 1] == ' ' || text[i - 1] == '\t' || text[i - 1] == '\n')) {
      while (i < text.size() && text[i] != '\n') ++i;
      prev = '\n';
      continue;
    }
    if (c == '[' || c == '{') {
      if (++depth > max_depth) return i;
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
    if (c != ' ' && c != '\t' && c != '\r') prev = c;
  }
  return std::string_view::npos;
}

// InvalidArgument "WHAT: nests deeper than 64 levels of [ and { (at byte N)" when NestingExceeds, else OK.
inline Status CheckNesting(std::string_view text, Syntax syntax, const std::string& what, int max_depth = kMaxNesting) {
  size_t at = NestingExceeds(text, syntax, max_depth);
  if (at == std::string_view::npos) return Status::Ok();
  return InvalidArgument(fmt::format("{}: nests deeper than {} levels of [ and {{ (at byte {}); no valid input does",
                                     what, max_depth, at));
}

}  // namespace tessera
