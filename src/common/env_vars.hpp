// common/env_vars: the registry of TESSERA_* variables — each declared once in common/env_vars.inc with
// its name, parser, default (the value the code uses and its documented text), the page that documents it and a
// one-line doc (like NCCL's NCCL_PARAM). Values are read with the typed getters of common/env.hpp, whose forms
// without a fallback take the declared default; tests/common/env_registry_test.cpp checks the
// declarations against docs/env.md (generated from them) and against the names the code reads.
#pragma once

#include <string_view>
#include <vector>

namespace tessera::env {

// A declared variable (common/env_vars.inc).
enum class Parser { kString, kInt, kDuration, kBytes, kSwitch, kChoice, kList };
struct Variable {
  const char* name;
  Parser parser;
  const char* value;          // the default as the parser reads it ("60s"), nullptr when it is not a constant
  const char* default_text;   // as documented ("`60s`", "set by `tessera run`")
  const char* documented_in;  // "docs/env.md", "docs/ckpt.md", ...
  const char* doc;            // one line
};
// Every declared TESSERA_* variable, in declaration order.
const std::vector<Variable>& Variables();
// The declaration of `name`, or nullptr.
const Variable* FindVariable(std::string_view name);

}  // namespace tessera::env
