// common/dl: see dl.hpp.
#include "common/dl.hpp"

#include <dlfcn.h>
#include <fmt/format.h>

#include <utility>

#include "common/env.hpp"

namespace tessera::dl {

std::string FileFrom(const char* env_var, const char* default_file) {
  if (env_var != nullptr && *env_var != 0)
    if (auto v = env::Get(env_var)) return *v;
  return default_file != nullptr ? default_file : "";
}

Result<Library> Library::Open(const std::string& file, Names names) {
  dlerror();
  void* h = dlopen(file.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (h == nullptr) {
    const char* e = dlerror();
    const std::string install = !names.install.empty() ? names.install
                                : names.env_var.empty()
                                    ? std::string("install it")
                                    : fmt::format("install it, or set {} to its path", names.env_var);
    return Unsupported(fmt::format("cannot load {} '{}': {} ({})", names.what, file, e ? e : "?", install));
  }
  Library lib;
  lib.handle_ = h;
  lib.file_ = file;
  lib.names_ = std::move(names);
  return lib;
}

void* Library::Find(const std::string& symbol) const {
  return handle_ != nullptr ? dlsym(handle_, symbol.c_str()) : nullptr;
}

Status Library::Missing(const std::string& symbol) const {
  std::string msg = fmt::format("'{}' ({}) has no symbol '{}'", file_, names_.what, symbol);
  if (!names_.mismatch.empty()) msg += ": " + names_.mismatch;
  if (!names_.env_var.empty()) msg += fmt::format(" (set {} to a file that has it)", names_.env_var);
  return Unsupported(msg);
}

}  // namespace tessera::dl
