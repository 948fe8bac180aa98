// common/beneath: race-free resolution beneath a directory descriptor (see beneath.hpp).
#include "common/beneath.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <vector>

#include "common/file.hpp"

#if __has_include(<linux/openat2.h>)
#include <linux/openat2.h>
#define TESSERA_HAVE_OPENAT2_H 1
#endif

namespace tessera {

Fd& Fd::operator=(Fd&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = o.release();
  }
  return *this;
}
Fd::~Fd() {
  if (fd_ >= 0) ::close(fd_);
}

namespace {

std::atomic<bool> g_use_openat2{true};
// -1: not tried yet; 0: the kernel refused it (ENOSYS); 1: it answers.
std::atomic<int> g_kernel_openat2{-1};

Status LinkError(const std::string& what) {
  return Corrupt(
      fmt::format("{} is or passes through a symbolic link (links are not followed beneath this directory)", what));
}

// The components of `rel`, or InvalidArgument when one could leave the directory.
Result<std::vector<std::string>> Components(const std::string& rel, const std::string& what) {
  std::vector<std::string> out;
  size_t at = 0;
  for (;;) {
    const size_t slash = rel.find('/', at);
    out.push_back(rel.substr(at, slash == std::string::npos ? std::string::npos : slash - at));
    if (out.back().empty() || out.back() == "." || out.back() == "..")
      return InvalidArgument(fmt::format("{}: '{}' is not a relative path of plain names", what, rel));
    if (slash == std::string::npos) break;
    at = slash + 1;
  }
  return out;
}

// Why openat of `name` in `dirfd` failed with `e` (ELOOP or ENOTDIR: a link or a non-directory there).
Status ComponentError(int dirfd, const std::string& name, int e, const std::string& what) {
  if (e == ENOENT) return NotFound(fmt::format("{} does not exist", what));
  struct stat st {};
  if ((e == ELOOP || e == ENOTDIR) && ::fstatat(dirfd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0) {
    if (S_ISLNK(st.st_mode)) return LinkError(what);
    return Corrupt(fmt::format("{} passes through {} where a directory was expected", what, FileKind(st.st_mode)));
  }
  return ErrnoError("open " + what, e);
}

#ifdef TESSERA_HAVE_OPENAT2_H
// openat2's answer: the descriptor, or -1 with errno; -2 when the kernel does not have it.
int TryOpenat2(int dirfd, const std::string& rel, int flags, mode_t mode) {
  if (!g_use_openat2.load() || g_kernel_openat2.load() == 0) return -2;
  open_how how{};
  how.flags = static_cast<uint64_t>(flags);
  how.mode = (flags & (O_CREAT | O_TMPFILE)) ? mode : 0;
  how.resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS;
  for (;;) {
    const long fd = ::syscall(SYS_openat2, dirfd, rel.c_str(), &how, sizeof how);
    if (fd >= 0) {
      g_kernel_openat2.store(1);
      return static_cast<int>(fd);
    }
    if (errno == EINTR || errno == EAGAIN) continue;
    if (errno == ENOSYS) {
      g_kernel_openat2.store(0);
      return -2;
    }
    return -1;
  }
}
#endif

}  // namespace

std::string FdPath(int fd) { return fmt::format("/proc/self/fd/{}", fd); }

Result<Fd> OpenDir(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return NotFound(fmt::format("{} does not exist", path));
    return ErrnoError("open directory " + path, errno);
  }
  return Fd(fd);
}

Result<Fd> OpenBeneath(int dirfd, const std::string& rel, int flags, const std::string& what, mode_t mode) {
  TSR_ASSIGN_OR_RETURN(auto parts, Components(rel, what));
  flags |= O_CLOEXEC | O_NOFOLLOW;
#ifdef TESSERA_HAVE_OPENAT2_H
  const int fd = TryOpenat2(dirfd, rel, flags, mode);
  if (fd >= 0) return Fd(fd);
  if (fd == -1) {
    const int e = errno;
    if (e == ENOENT) return NotFound(fmt::format("{} does not exist", what));
    if (e == ELOOP) return LinkError(what);
    if (e == EXDEV) return Corrupt(fmt::format("{} resolves outside its directory", what));
    if (e == ENOTDIR) {
      // Which component is not a directory: the walk below names it as precisely.
      Fd cur(::fcntl(dirfd, F_DUPFD_CLOEXEC, 0));
      for (size_t i = 0; cur.get() >= 0 && i + 1 < parts.size(); ++i) {
        const int next = ::openat(cur.get(), parts[i].c_str(), O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (next < 0) return ComponentError(cur.get(), parts[i], errno, what);
        cur = Fd(next);
      }
      if (cur.get() >= 0) return ComponentError(cur.get(), parts.back(), e, what);
    }
    return ErrnoError("open " + what, e);
  }
#endif
  // The walk: each component opened from the descriptor of the one before, never following a link.
  Fd cur(::fcntl(dirfd, F_DUPFD_CLOEXEC, 0));
  if (cur.get() < 0) return ErrnoError("open " + what, errno);
  for (size_t i = 0; i + 1 < parts.size(); ++i) {
    const int next = ::openat(cur.get(), parts[i].c_str(), O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (next < 0) return ComponentError(cur.get(), parts[i], errno, what);
    cur = Fd(next);
  }
  const int last = ::openat(cur.get(), parts.back().c_str(), flags, mode);
  if (last < 0) return ComponentError(cur.get(), parts.back(), errno, what);
  return Fd(last);
}

Result<Fd> OpenRegularFileBeneath(int dirfd, const std::string& rel, const std::string& what) {
  TSR_ASSIGN_OR_RETURN(Fd fd, OpenBeneath(dirfd, rel, O_RDONLY | O_NONBLOCK, what));
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return ErrnoError("stat " + what, errno);
  if (!S_ISREG(st.st_mode)) return Corrupt(fmt::format("{} is {}, not a regular file", what, FileKind(st.st_mode)));
  const int fl = ::fcntl(fd.get(), F_GETFL);
  if (fl < 0 || ::fcntl(fd.get(), F_SETFL, fl & ~O_NONBLOCK) != 0) return ErrnoError("fcntl " + what, errno);
  return fd;
}

Result<Fd> MakeDirBeneath(int dirfd, const std::string& name, const std::string& what, mode_t mode) {
  if (name.find('/') != std::string::npos || name.empty() || name == "." || name == "..")
    return InvalidArgument(fmt::format("{}: '{}' is not a plain name", what, name));
  if (::mkdirat(dirfd, name.c_str(), mode) != 0 && errno != EEXIST)
    return ErrnoError("create directory " + what, errno);
  return OpenBeneath(dirfd, name, O_RDONLY | O_DIRECTORY, what);
}

namespace {
Status RemoveTreeAtDepth(int dirfd, const std::string& name, const std::string& what, int depth) {
  const int fd = ::openat(dirfd, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    if (errno == ENOENT) return Status::Ok();
    if (errno != ENOTDIR && errno != ELOOP) return ErrnoError("open " + what, errno);
    // A link (removed itself, never its target) or another non-directory.
    if (::unlinkat(dirfd, name.c_str(), 0) != 0 && errno != ENOENT) return ErrnoError("remove " + what, errno);
    return Status::Ok();
  }
  if (depth > 256) {
    ::close(fd);
    return Corrupt(fmt::format("{} nests directories deeper than 256 levels; not removed", what));
  }
  DIR* d = ::fdopendir(fd);
  if (d == nullptr) {
    const int e = errno;
    ::close(fd);
    return ErrnoError("list " + what, e);
  }
  Status s;
  // Passes until one finds nothing left (entries removed during a pass may hide others from readdir).
  for (bool removed = true; removed && s.ok();) {
    removed = false;
    ::rewinddir(d);
    while (dirent* e = ::readdir(d)) {
      const std::string n = e->d_name;
      if (n == "." || n == "..") continue;
      s = RemoveTreeAtDepth(::dirfd(d), n, what + "/" + n, depth + 1);
      if (!s.ok()) break;
      removed = true;
    }
  }
  ::closedir(d);
  if (!s.ok()) return s;
  if (::unlinkat(dirfd, name.c_str(), AT_REMOVEDIR) != 0 && errno != ENOENT) return ErrnoError("remove " + what, errno);
  return Status::Ok();
}
}  // namespace

Status RemoveTreeAt(int dirfd, const std::string& name, const std::string& what) {
  if (name.find('/') != std::string::npos || name.empty() || name == "." || name == "..")
    return InvalidArgument(fmt::format("{}: '{}' is not a plain name", what, name));
  return RemoveTreeAtDepth(dirfd, name, what, 0);
}

namespace testing {
void SetUseOpenat2(bool use) { g_use_openat2.store(use); }
bool KernelHasOpenat2() {
#ifdef TESSERA_HAVE_OPENAT2_H
  const bool before = g_use_openat2.exchange(true);
  const int fd = TryOpenat2(AT_FDCWD, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC, 0);
  g_use_openat2.store(before);
  if (fd >= 0) ::close(fd);
  return fd != -2;
#else
  return false;
#endif
}
}  // namespace testing

}  // namespace tessera
