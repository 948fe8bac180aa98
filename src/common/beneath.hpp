// common/beneath: paths beneath a directory that another party controls (a job's checkpoint root, a restore
// target that other users can write), resolved without a window between check and use. Each call resolves
// from a directory descriptor the caller holds, follows no symbolic link at any component and never leaves
// that directory: openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS) where the kernel has it (Linux 5.6+; checked
// at run time), else a walk of openat(O_NOFOLLOW) one component at a time, each from the descriptor of the one
// before. A component swapped for a link after any earlier check is refused, never followed.
#pragma once

#include <sys/types.h>

#include <string>

#include "tessera/status.hpp"

namespace tessera {

// A file descriptor closed on destruction.
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  Fd(Fd&& o) noexcept : fd_(o.release()) {}
  Fd& operator=(Fd&& o) noexcept;
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd();
  int get() const { return fd_; }
  int release() {
    const int f = fd_;
    fd_ = -1;
    return f;
  }

 private:
  int fd_ = -1;
};

// Opens the directory `path` as given (the root: links in it are the operator's and are followed).
// NotFound naming it when it is missing; SystemError otherwise.
Result<Fd> OpenDir(const std::string& path);

// Opens `rel` (plain components separated by '/': no "..", ".", empty or absolute part) beneath `dirfd` with
// open(2)'s `flags` (O_CLOEXEC and O_NOFOLLOW are added) and `mode`. `what` names the path in errors, which are:
// NotFound "WHAT does not exist"; Corrupt "WHAT is or passes through a symbolic link (links are not followed
// beneath this directory)" for a link at any depth, or "... passes through something that is not a directory";
// InvalidArgument for a `rel` that could leave the directory; SystemError naming WHAT otherwise.
Result<Fd> OpenBeneath(int dirfd, const std::string& rel, int flags, const std::string& what, mode_t mode = 0);
// OpenBeneath for reading a regular file: never blocks on a FIFO or device there (O_NONBLOCK, cleared after),
// Corrupt "WHAT is a FIFO, not a regular file" (a directory, a socket, ...) otherwise.
Result<Fd> OpenRegularFileBeneath(int dirfd, const std::string& rel, const std::string& what);
// Creates the directory `name` in `dirfd` (mode before the umask) when absent, then opens it as OpenBeneath does:
// a link or a file already there under that name is refused (Corrupt), never followed.
Result<Fd> MakeDirBeneath(int dirfd, const std::string& name, const std::string& what, mode_t mode = 0755);
// Removes the entry `name` of `dirfd` and, when it is a directory, everything beneath it, following no link: a
// link is removed itself, never its target. A missing entry is Ok. Errors name WHAT.
Status RemoveTreeAt(int dirfd, const std::string& name, const std::string& what);

// "/proc/self/fd/N": a path that names the file or directory open as `fd`, whatever is renamed or swapped in its
// place later (for interfaces that take a path).
std::string FdPath(int fd);

namespace testing {
// Whether OpenBeneath may use openat2 (true by default; it still falls back when the kernel lacks it). Tests
// set false to run the openat(O_NOFOLLOW) walk on a kernel that has openat2.
void SetUseOpenat2(bool use);
// Whether this kernel answers openat2 (ENOSYS or a seccomp refusal: false).
bool KernelHasOpenat2();
}  // namespace testing

}  // namespace tessera
