// common/dl: the one binder of vendor libraries loaded at run time (dlopen: no link dependency) and the one
// lookup of a row by name in a table of them. The device runtimes (comm/runtime: CUDA, ACL, MUSA, CoreX), the
// collective libraries (comm/ccl: NCCL, HCCL, MCCL, IXCCL), CANN's operator library (comm/runtime/aclnn) and UCX
// (comm/transport/ucx) each open their file and bind their calls into a struct of function pointers through a
// Library, so that every one of them says the same things when it fails: a file that does not load names the
// file, the loader's reason and the variable that points at another file; a missing symbol names the symbol,
// the file and that variable.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "tessera/status.hpp"

namespace tessera::dl {

// What a library is, for its messages.
struct Names {
  std::string what;     // "the cuda device runtime", "the nccl library", "UCX"
  std::string env_var;  // the variable that points at another file ("TESSERA_CUDA_LIBRARY"), "" for none
  // What a missing symbol means: "not a cuda runtime of this version"; "" says nothing more.
  std::string mismatch;
  // What to do when the file does not load; "" for "install it, or set <env_var> to its path".
  std::string install;
};

// The file a library's row loads: the value of `env_var` where it is set (and `env_var` is not empty), else
// `default_file` (a name the loader searches for, or a path).
std::string FileFrom(const char* env_var, const char* default_file);

// One library opened with dlopen (RTLD_NOW | RTLD_LOCAL). It stays mapped for the life of the process: vendor
// libraries register atexit handlers and threads that outlive their users, and a second Open of the same file
// is the same handle.
class Library {
 public:
  Library() = default;
  // Unsupported when the file does not load: "cannot load <what> '<file>': <the loader's reason> (<install>)".
  static Result<Library> Open(const std::string& file, Names names);

  void* handle() const { return handle_; }
  const std::string& file() const { return file_; }
  const Names& names() const { return names_; }

  // The address of `symbol`, or null when the file lacks it (for the calls a library may lack).
  void* Find(const std::string& symbol) const;
  // Unsupported: "'<file>' (<what>) has no symbol '<symbol>': <mismatch> (set <env_var> to a file that has it)".
  Status Missing(const std::string& symbol) const;
  // Binds `fn` (a function pointer) to `symbol`, or returns Missing(symbol).
  template <typename F>
  Status Bind(F& fn, const std::string& symbol) const {
    void* p = Find(symbol);
    if (p == nullptr) return Missing(symbol);
    fn = reinterpret_cast<F>(p);
    return Status::Ok();
  }
  // Binds `fn` to `symbol`, or to null when the file lacks it.
  template <typename F>
  void BindOptional(F& fn, const std::string& symbol) const {
    fn = reinterpret_cast<F>(Find(symbol));
  }

 private:
  void* handle_ = nullptr;
  std::string file_;
  Names names_;
};

// The row of `table` whose `name` is `name`, or null: the one lookup of the runtime and CCL tables by name.
template <typename Row, size_t N>
constexpr const Row* FindRow(const Row (&table)[N], std::string_view name) {
  for (const Row& r : table)
    if (name == std::string_view(r.name)) return &r;
  return nullptr;
}
// Whether `table` has a row named `name`: the form for static_asserts. GCC 12 with -fsanitize=undefined and -fPIC
// (the ASan+UBSan tree) does not take `FindRow(...) == nullptr` as a constant expression when the table is an
// inline variable (its address "may be null"), and the build fails there.
template <typename Row, size_t N>
constexpr bool HasRow(const Row (&table)[N], std::string_view name) {
  for (const Row& r : table)
    if (name == std::string_view(r.name)) return true;
  return false;
}
// "a, b, c": the names of a table's rows, in table order, for messages.
template <typename Row, size_t N>
std::string RowNames(const Row (&table)[N]) {
  std::string names;
  for (const Row& r : table) names += names.empty() ? std::string(r.name) : std::string(", ") + r.name;
  return names;
}

}  // namespace tessera::dl
