// common/file: ReadFile, WriteFileAtomic, FsyncDir, PwriteAll/PreadAll and their fault-injection hook.
#include "common/file.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <mutex>

namespace tessera {

const char* FileKind(mode_t m) {
  if (S_ISREG(m)) return "a regular file";
  if (S_ISFIFO(m)) return "a FIFO";
  if (S_ISDIR(m)) return "a directory";
  if (S_ISLNK(m)) return "a symbolic link";
  if (S_ISSOCK(m)) return "a socket";
  if (S_ISCHR(m)) return "a character device";
  if (S_ISBLK(m)) return "a block device";
  return "not a plain file";
}

Result<std::string> ReadAndClose(int fd, const std::string& path) {
  std::string out;
  struct stat st {};
  if (::fstat(fd, &st) == 0 && st.st_size > 0) out.reserve(static_cast<size_t>(st.st_size));
  char buf[65536];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n > 0) {
      out.append(buf, static_cast<size_t>(n));
      continue;
    }
    if (n == 0) break;
    if (errno == EINTR) continue;
    const int e = errno;
    ::close(fd);
    return ErrnoError("read " + path, e);
  }
  ::close(fd);
  return out;
}

Result<int> OpenRegularFile(const std::string& path, bool follow_links) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | (follow_links ? 0 : O_NOFOLLOW));
  if (fd < 0) {
    const int e = errno;
    if (e == ENOENT || e == ENOTDIR) return NotFound(fmt::format("{} does not exist", path));
    struct stat st {};
    if (e == ELOOP && ::lstat(path.c_str(), &st) == 0 && S_ISLNK(st.st_mode))
      return Corrupt(fmt::format("{} is a symbolic link, not a regular file (links are not followed here)", path));
    return ErrnoError("open " + path, e);
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int e = errno;
    ::close(fd);
    return ErrnoError("stat " + path, e);
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return Corrupt(fmt::format("{} is {}, not a regular file", path, FileKind(st.st_mode)));
  }
  const int flags = ::fcntl(fd, F_GETFL);
  if (flags < 0 || ::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) != 0) {
    const int e = errno;
    ::close(fd);
    return ErrnoError("fcntl " + path, e);
  }
  return fd;
}

Result<std::string> ReadRegularFile(const std::string& path) {
  TSR_ASSIGN_OR_RETURN(int fd, OpenRegularFile(path));
  return ReadAndClose(fd, path);
}

Result<std::string> ReadFile(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT || errno == ENOTDIR) return NotFound(fmt::format("{} does not exist", path));
    return ErrnoError("open " + path, errno);
  }
  return ReadAndClose(fd, path);
}

std::string DirName(const std::string& path) {
  const auto slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

Status FsyncDir(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return ErrnoError("open directory " + dir, errno);
  const int rc = ::fsync(fd);
  const int e = errno;
  ::close(fd);
  if (rc != 0) return ErrnoError("fsync directory " + dir, e);
  return Status::Ok();
}

Status WriteFileAtomicWith(const std::string& path, const AtomicWrite& how,
                           const std::function<Status(int fd, const std::string& tmp)>& write) {
  // Unique per process and call, so that two writers of one path (threads, the daemon and a job's shim) never
  // write into each other's temporary file; in the same directory, so that the rename cannot cross filesystems.
  static std::atomic<uint64_t> seq{0};
  const std::string tmp = fmt::format("{}.tmp.{}.{}", path, ::getpid(), seq.fetch_add(1));
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_TRUNC | O_CLOEXEC, how.mode);
  if (fd < 0) return ErrnoError("create " + tmp, errno);
  Status s = write(fd, tmp);
  if (s.ok() && how.fsync && ::fsync(fd) != 0) s = ErrnoError("fsync " + tmp, errno);
  if (::close(fd) != 0 && s.ok()) s = ErrnoError("close " + tmp, errno);
  if (s.ok() && how.replace && ::rename(tmp.c_str(), path.c_str()) != 0)
    s = ErrnoError("rename " + tmp + " to " + path, errno);
  if (s.ok() && !how.replace) {
    int r = ::renameat2(AT_FDCWD, tmp.c_str(), AT_FDCWD, path.c_str(), RENAME_NOREPLACE);
    if (r != 0 && errno == EINVAL) {  // a filesystem without RENAME_NOREPLACE: link() is exclusive too
      r = ::link(tmp.c_str(), path.c_str());
      if (r == 0) ::unlink(tmp.c_str());
    }
    if (r != 0)
      s = errno == EEXIST ? InvalidArgument(fmt::format("{} already exists (another writer committed it first)", path))
                          : ErrnoError("rename " + tmp + " to " + path, errno);
  }
  if (!s.ok()) {
    ::unlink(tmp.c_str());
    return s;
  }
  if (how.fsync && how.fsync_dir) return FsyncDir(DirName(path));
  return Status::Ok();
}

Status WriteFileAtomic(const std::string& path, std::string_view data, const AtomicWrite& how) {
  return WriteFileAtomicWith(
      path, how, [&](int fd, const std::string& tmp) { return PwriteAll(fd, data.data(), data.size(), 0, tmp); });
}

Status PwriteAll(int fd, const void* data, size_t n, uint64_t offset, const std::string& path) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    const size_t chunk = std::min<size_t>(n, size_t{1} << 30);
    const int injected = fault::RunWriteHook(path, offset, chunk);
    if (injected != 0) return ErrnoError(fmt::format("write {} at offset {}", path, offset), injected);
    const ssize_t w = ::pwrite(fd, p, chunk, static_cast<off_t>(offset));
    if (w < 0) {
      if (errno == EINTR) continue;
      return ErrnoError(fmt::format("write {} at offset {}", path, offset), errno);
    }
    p += w;
    n -= static_cast<size_t>(w);
    offset += static_cast<uint64_t>(w);
  }
  return Status::Ok();
}

Status PreadAll(int fd, void* data, size_t n, uint64_t offset, const std::string& path) {
  char* p = static_cast<char*>(data);
  while (n > 0) {
    const ssize_t r = ::pread(fd, p, std::min<size_t>(n, size_t{1} << 30), static_cast<off_t>(offset));
    if (r < 0) {
      if (errno == EINTR) continue;
      return ErrnoError(fmt::format("read {} at offset {}", path, offset), errno);
    }
    if (r == 0) return Corrupt(fmt::format("{} is truncated: end of file at offset {}", path, offset));
    p += r;
    n -= static_cast<size_t>(r);
    offset += static_cast<uint64_t>(r);
  }
  return Status::Ok();
}

namespace fault {
namespace {
std::mutex g_hook_mu;
std::function<int(const std::string&, uint64_t, size_t)> g_write_hook;
std::atomic<bool> g_have_hook{false};
}  // namespace

void SetWriteHook(std::function<int(const std::string& path, uint64_t offset, size_t n)> hook) {
  std::lock_guard lk(g_hook_mu);
  g_have_hook = static_cast<bool>(hook);
  g_write_hook = std::move(hook);
}

int RunWriteHook(const std::string& path, uint64_t offset, size_t n) {
  if (!g_have_hook.load()) return 0;
  std::function<int(const std::string&, uint64_t, size_t)> h;
  {
    std::lock_guard lk(g_hook_mu);
    h = g_write_hook;
  }
  return h ? h(path, offset, n) : 0;
}
}  // namespace fault

}  // namespace tessera
