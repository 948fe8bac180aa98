// common/file: the one set of whole-file helpers every module uses — ReadFile (the whole file, NotFound naming
// the path when it is missing), OpenRegularFile/ReadRegularFile (the same for a directory another party
// controls: only a regular file, never blocking on a FIFO, following no link), WriteFileAtomic (a temporary file in the
// same directory, written, fsync'd, renamed over the target, then the directory fsync'd: readers see the old content or
// the new, never a part, and a failed write leaves the old file as it was), FsyncDir, and PwriteAll/PreadAll (whole
// ranges, EINTR retried). Every write of PwriteAll (and so of WriteFileAtomic) passes the fault-injection hook that
// tests set with fault::SetWriteHook (a full disk at a chosen file and offset, a kill mid-write).
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include "tessera/status.hpp"

namespace tessera {

// The whole file. NotFound "PATH does not exist" when it (or a directory on its path) is missing; SystemError
// naming the path for any other failure. Reads to the end, so files whose size stat does not know (/proc,
// pipes) are read whole too.
Result<std::string> ReadFile(const std::string& path);

// For files in a directory another party controls (a job's checkpoint directory): opens `path` read-only only
// when it is a regular file. The open does not block (O_NONBLOCK, cleared afterwards), so a FIFO or a device
// under the expected name is refused at once instead of hanging the reader; with !follow_links a symbolic link
// as the last component is refused too (O_NOFOLLOW). NotFound as ReadFile; Corrupt "PATH is a FIFO, not a
// regular file" (or "a symbolic link", "a directory", ...) naming what is there. The caller closes the fd.
Result<int> OpenRegularFile(const std::string& path, bool follow_links = false);
// ReadFile through OpenRegularFile (no links followed).
Result<std::string> ReadRegularFile(const std::string& path);
// The rest of the open file `fd`, read to its end; `fd` is closed. Errors name `path`.
Result<std::string> ReadAndClose(int fd, const std::string& path);
// What a file of this mode is, for errors: "a FIFO", "a directory", "a symbolic link", ...
const char* FileKind(mode_t mode);

struct AtomicWrite {
  int mode = 0644;        // of the new file (before the umask)
  bool fsync = true;      // fsync the file before the rename; false: atomic, not durable (and no directory fsync)
  bool fsync_dir = true;  // with fsync: also fsync the directory after the rename (false: the caller does it
                          // once for several files)
  bool replace = true;    // false: exclusive — when `path` already exists (another writer got there first) the
                          // write fails, InvalidArgument "PATH already exists", and leaves it as it is
                          // (renameat2 RENAME_NOREPLACE; link, then unlink, where a filesystem lacks it)
};
// Replaces `path` with `data`: writes PATH.tmp.<pid>.<n> in the same directory, fsyncs it, renames it over
// `path` and fsyncs the directory (each step's error names the file and is returned). On any failure the
// temporary file is removed and `path` keeps its old content (or stays absent).
Status WriteFileAtomic(const std::string& path, std::string_view data, const AtomicWrite& how = {});
// The same for content that `write` produces itself (in parallel pwrites, say): it gets the temporary file's
// descriptor and name and returns its status; its failure is returned as it is, after the same clean-up.
Status WriteFileAtomicWith(const std::string& path, const AtomicWrite& how,
                           const std::function<Status(int fd, const std::string& tmp)>& write);
// fsync of a directory, so that a rename or a new entry in it is durable.
Status FsyncDir(const std::string& dir);
// The directory part of `path`: "." without a '/', "/" for a file in the root.
std::string DirName(const std::string& path);

// pwrite/pread of exactly `n` bytes at `offset` (EINTR retried); errors name `path` and the offset. A read
// that meets the end of the file first is Corrupt ("truncated").
Status PwriteAll(int fd, const void* data, size_t n, uint64_t offset, const std::string& path);
Status PreadAll(int fd, void* data, size_t n, uint64_t offset, const std::string& path);

namespace fault {
// Test hook: called before every write of PwriteAll (path, offset, bytes); a non-zero return is used as the
// write's errno (e.g. ENOSPC). nullptr removes it.
void SetWriteHook(std::function<int(const std::string& path, uint64_t offset, size_t n)> hook);
// The hook's answer for one write (0 without a hook).
int RunWriteHook(const std::string& path, uint64_t offset, size_t n);
}  // namespace fault

}  // namespace tessera
