// common/env_vars: the registry of TESSERA_* variables, from common/env_vars.inc (see env_vars.hpp).
#include "common/env_vars.hpp"

namespace tessera::env {

const std::vector<Variable>& Variables() {
  static const std::vector<Variable> vars{
#define TSR_ENV_VAR(name, parser, value, default_text, where, doc) \
  {#name, Parser::parser, value, default_text, where, doc},
#include "common/env_vars.inc"
#undef TSR_ENV_VAR
  };
  return vars;
}

const Variable* FindVariable(std::string_view name) {
  for (const auto& v : Variables())
    if (name == v.name) return &v;
  return nullptr;
}

}  // namespace tessera::env
