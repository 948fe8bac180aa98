// daemon/security: tenants file and token hashes, name checks, job path confinement, job identity.
#include "daemon/security.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <grp.h>
#include <limits.h>
#include <openssl/evp.h>
#include <pwd.h>
#include <spawn.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include <cerrno>
#include <cstring>
#include <set>
#include <vector>

#include "common/env.hpp"
#include "daemon/util.hpp"

extern char** environ;

namespace tessera::daemon {

std::string TokenHash(const std::string& token) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_Digest(token.data(), token.size(), md, &len, EVP_sha256(), nullptr);
  std::string out;
  for (unsigned int i = 0; i < len; ++i) out += fmt::format("{:02x}", md[i]);
  return out;
}

bool ConstantTimeEqual(const std::string& a, const std::string& b) {
  if (a.size() != b.size()) return false;
  volatile unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff = diff | static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

Status CheckTenantName(const std::string& name, const std::string& where) {
  bool ok = !name.empty() && name.size() <= 64 && name[0] != '.' && name[0] != '-';
  for (char c : name) ok = ok && (std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == '-');
  if (!ok)
    return InvalidArgument(
        fmt::format("{}: tenant name '{}' must be 1-64 of A-Z a-z 0-9 _ . - (not starting with . "
                    "or -): it names the tenant's directory",
                    where, name));
  return Status::Ok();
}

Status CheckNoControlChars(const std::string& field, const std::string& value, size_t max_bytes) {
  if (value.size() > max_bytes)
    return InvalidArgument(fmt::format("{}: is {} bytes long; at most {} are allowed", field, value.size(), max_bytes));
  for (size_t i = 0; i < value.size(); ++i) {
    unsigned char c = static_cast<unsigned char>(value[i]);
    if (c < 0x20 || c == 0x7f)
      return InvalidArgument(
          fmt::format("{}: contains the control character 0x{:02x} at byte {}; use printable "
                      "characters only",
                      field, c, i));
    // The code point of a 2- or 3-byte UTF-8 sequence starting here (others cannot be format characters).
    uint32_t cp = 0;
    if ((c & 0xE0) == 0xC0 && i + 1 < value.size()) {
      cp = ((c & 0x1Fu) << 6) | (static_cast<unsigned char>(value[i + 1]) & 0x3Fu);
    } else if ((c & 0xF0) == 0xE0 && i + 2 < value.size()) {
      cp = ((c & 0x0Fu) << 12) | ((static_cast<unsigned char>(value[i + 1]) & 0x3Fu) << 6) |
           (static_cast<unsigned char>(value[i + 2]) & 0x3Fu);
    }
    const bool c1 = cp >= 0x80 && cp <= 0x9F;
    const bool format = cp == 0xAD || cp == 0x61C || (cp >= 0x200B && cp <= 0x200F) || (cp >= 0x202A && cp <= 0x202E) ||
                        (cp >= 0x2060 && cp <= 0x2064) || (cp >= 0x2066 && cp <= 0x2069) || cp == 0xFEFF;
    if (c1 || format)
      return InvalidArgument(
          fmt::format("{}: contains the {} character U+{:04X} at byte {}; use printable characters only", field,
                      c1 ? "control" : "invisible format (it reorders or hides the text around it)", cp, i));
  }
  return Status::Ok();
}

Result<std::vector<Tenant>> ParseTenants(const std::string& yaml, const std::string& source) {
  YAML::Node root;
  try {
    root = YAML::Load(yaml);
  } catch (const YAML::Exception& e) {
    return InvalidArgument(fmt::format("{}:{}: not valid YAML: {}", source, e.mark.line + 1, e.msg));
  }
  std::vector<Tenant> out;
  if (root.IsNull()) return out;
  auto where = [&](const YAML::Node& n) {
    return n.Mark().line >= 0 ? fmt::format("{}:{}", source, n.Mark().line + 1) : source;
  };
  if (!root.IsMap() || !root["tenants"])
    return InvalidArgument(fmt::format("{}: expected 'tenants:' with a list of {{name, token_sha256}}", source));
  auto list = root["tenants"];
  if (list.IsNull()) return out;
  if (!list.IsSequence()) return InvalidArgument(fmt::format("{}: tenants: must be a list", where(list)));
  std::set<std::string> names, hashes;
  try {
    for (const auto& t : list) {
      if (!t.IsMap()) return InvalidArgument(fmt::format("{}: tenants[]: must be a mapping", where(t)));
      for (const auto& kv : t) {
        auto k = kv.first.as<std::string>();
        if (k == "token")
          return InvalidArgument(
              fmt::format("{}: tenants[].token: the file holds only hashes; write token_sha256: "
                          "$(printf %s TOKEN | sha256sum)",
                          where(kv.first)));
        if (k != "name" && k != "token_sha256" && k != "user")
          return InvalidArgument(
              fmt::format("{}: tenants[].{}: unknown key (use name, token_sha256, user)", where(kv.first), k));
      }
      Tenant x;
      if (!t["name"] || !t["name"].IsScalar())
        return InvalidArgument(fmt::format("{}: tenants[].name: missing", where(t)));
      x.name = t["name"].as<std::string>();
      TSR_RETURN_IF_ERROR(CheckTenantName(x.name, where(t["name"])));
      if (x.name == "admin")
        return InvalidArgument(
            fmt::format("{}: tenant name 'admin' is reserved for the token in STATE/token", where(t["name"])));
      if (!names.insert(x.name).second)
        return InvalidArgument(fmt::format("{}: tenant '{}' is listed twice", where(t["name"]), x.name));
      auto h = t["token_sha256"];
      if (!h || !h.IsScalar())
        return InvalidArgument(fmt::format("{}: tenants[].token_sha256: missing for tenant '{}'", where(t), x.name));
      x.token_sha256 = h.as<std::string>();
      bool hex = x.token_sha256.size() == 64;
      for (char& c : x.token_sha256) {
        c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
        hex = hex && std::isxdigit(static_cast<unsigned char>(c));
      }
      if (!hex)
        return InvalidArgument(
            fmt::format("{}: tenants[].token_sha256 of '{}': expected 64 hex digits (printf %s "
                        "TOKEN | sha256sum)",
                        where(h), x.name));
      if (!hashes.insert(x.token_sha256).second)
        return InvalidArgument(fmt::format("{}: tenant '{}' has the same token as another tenant", where(h), x.name));
      if (auto u = t["user"]) {
        if (!u.IsScalar() || u.as<std::string>().empty())
          return InvalidArgument(fmt::format("{}: tenants[].user of '{}': must be a user name", where(u), x.name));
        x.user = u.as<std::string>();
      }
      out.push_back(std::move(x));
    }
  } catch (const YAML::Exception& e) {
    return InvalidArgument(fmt::format("{}:{}: {}", source, e.mark.line + 1, e.msg));
  }
  return out;
}

Result<std::vector<Tenant>> LoadTenantsFile(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return ErrnoError("--tenants " + path, errno);
  if ((st.st_mode & 077) != 0)
    return InvalidArgument(fmt::format("--tenants {}: mode {:04o} lets other users read it; chmod 600 {}", path,
                                       st.st_mode & 07777, path));
  if (st.st_uid != ::geteuid())
    return InvalidArgument(
        fmt::format("--tenants {}: owned by uid {}, not by the daemon's uid {}", path, st.st_uid, ::geteuid()));
  TSR_ASSIGN_OR_RETURN(auto text, ReadFile(path));
  return ParseTenants(text, path);
}

namespace {

std::vector<std::string> Components(const std::string& path) {
  std::vector<std::string> out;
  std::string cur;
  for (char c : path + "/") {
    if (c == '/') {
      if (!cur.empty()) out.push_back(cur);
      cur.clear();
    } else {
      cur += c;
    }
  }
  return out;
}

Result<std::string> RealPath(const std::string& path) {
  char buf[PATH_MAX];
  if (!::realpath(path.c_str(), buf)) return ErrnoError("resolve " + path, errno);
  return std::string(buf);
}

}  // namespace

Result<std::string> ConfinePath(const std::string& field, const std::string& path, const std::string& base,
                                const std::string& area) {
  if (path.empty()) return InvalidArgument(fmt::format("{}: empty path", field));
  TSR_RETURN_IF_ERROR(CheckNoControlChars(field, path));
  TSR_ASSIGN_OR_RETURN(auto root, RealPath(area));
  std::string abs = path[0] == '/' ? path : base + "/" + path;
  // The longest prefix that exists is resolved by the kernel ('..' and symlinks); the rest is lexical.
  auto comps = Components(abs);
  std::vector<std::string> tail;
  std::string resolved;
  while (true) {
    std::string prefix = "/";
    for (size_t i = 0; i + tail.size() < comps.size(); ++i) prefix += (i ? "/" : "") + comps[i];
    char buf[PATH_MAX];
    if (::realpath(prefix.c_str(), buf)) {
      resolved = buf;
      break;
    }
    if (errno != ENOENT || tail.size() == comps.size())
      return InvalidArgument(fmt::format("{}: cannot resolve '{}': {}", field, path, std::strerror(errno)));
    tail.insert(tail.begin(), comps[comps.size() - tail.size() - 1]);
  }
  for (const auto& c : tail) {
    if (c == ".") continue;
    if (c == "..") {
      auto slash = resolved.rfind('/');
      resolved = slash == 0 || slash == std::string::npos ? "/" : resolved.substr(0, slash);
    } else {
      resolved += (resolved == "/" ? "" : "/") + c;
    }
  }
  if (root != "/" && resolved != root && resolved.rfind(root + "/", 0) != 0)
    return InvalidArgument(
        fmt::format("{}: '{}' resolves to {}, outside the tenant's area {}; use a path inside it "
                    "(relative paths are taken from there)",
                    field, path, resolved, root));
  return resolved;
}

Status MakeDirsInside(const std::string& area, const std::string& path, int mode, int64_t uid, int64_t gid) {
  if (path != area && path.rfind(area + "/", 0) != 0)
    return InternalError(fmt::format("{} is not inside {}", path, area));
  int fd = ::open(area.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return ErrnoError("open " + area, errno);
  std::string cur = area;
  for (const auto& c : Components(path.substr(area.size()))) {
    cur += "/" + c;
    if (::mkdirat(fd, c.c_str(), static_cast<mode_t>(mode)) == 0) {
      if (uid >= 0 &&
          ::fchownat(fd, c.c_str(), static_cast<uid_t>(uid), static_cast<gid_t>(gid), AT_SYMLINK_NOFOLLOW) != 0) {
        int e = errno;
        ::close(fd);
        return ErrnoError("chown " + cur, e);
      }
    } else if (errno != EEXIST) {
      int e = errno;
      ::close(fd);
      return ErrnoError("mkdir " + cur, e);
    }
    int next = ::openat(fd, c.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    int e = errno;
    ::close(fd);
    if (next < 0)
      return InvalidArgument(fmt::format("{}: {} (job directories may not be symlinks)", cur, std::strerror(e)));
    fd = next;
  }
  ::close(fd);
  return Status::Ok();
}

std::string JobIdentity::Describe() const {
  switch (mode) {
    case Mode::kUser:
      return fmt::format("as user {} (uid {}, gid {})", user, uid, gid);
    case Mode::kSandbox:
      return fmt::format("in a bubblewrap sandbox ({}) that hides the state directory", bwrap);
    case Mode::kNone:
      break;
  }
  return "WITHOUT ISOLATION, with the daemon's rights (--insecure-no-job-isolation)";
}

Status LookupJobUser(const std::string& user, int64_t* uid, int64_t* gid) {
  struct passwd pw {};
  struct passwd* res = nullptr;
  std::vector<char> buf(16384);
  int rc = ::getpwnam_r(user.c_str(), &pw, buf.data(), buf.size(), &res);
  if (rc != 0 || !res)
    return InvalidArgument(
        fmt::format("job user '{}' does not exist (create it, e.g. useradd --system {}, or pass "
                    "--job-user with an existing one)",
                    user, user));
  if (pw.pw_uid == 0 || pw.pw_uid == ::geteuid())
    return InvalidArgument(
        fmt::format("job user '{}' is uid {}, the daemon's own: jobs would have the daemon's "
                    "rights; choose an unprivileged user",
                    user, pw.pw_uid));
  if (pw.pw_gid == 0)
    return InvalidArgument(
        fmt::format("job user '{}' has group 0 (root) as its primary group; choose a user "
                    "without it",
                    user));
  *uid = pw.pw_uid;
  *gid = pw.pw_gid;
  return Status::Ok();
}

namespace {

std::string FindInPath(const std::string& prog) {
  std::string path = env::Get("PATH").value_or("/usr/bin:/bin");
  size_t from = 0;
  while (from <= path.size()) {
    size_t to = path.find(':', from);
    if (to == std::string::npos) to = path.size();
    std::string p = (to > from ? path.substr(from, to - from) : ".") + "/" + prog;
    if (::access(p.c_str(), X_OK) == 0) return p;
    from = to + 1;
  }
  return "";
}

// Runs argv with no input and no output; its exit status, or -1.
int RunQuiet(const std::vector<std::string>& args) {
  std::vector<char*> argv;
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
  pid_t pid = 0;
  int rc = ::posix_spawn(&pid, args[0].c_str(), &fa, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0) return -1;
  int st = 0;
  while (::waitpid(pid, &st, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

}  // namespace

Result<JobIdentity> ChooseJobIdentity(const std::string& job_user, bool insecure) {
  JobIdentity id;
  if (insecure) return id;
  if (::geteuid() == 0) {
    id.mode = JobIdentity::Mode::kUser;
    id.user = job_user.empty() ? "nobody" : job_user;
    TSR_RETURN_IF_ERROR(LookupJobUser(id.user, &id.uid, &id.gid));
    return id;
  }
  if (!job_user.empty())
    return InvalidArgument(
        fmt::format("--job-user {}: switching users needs a daemon running as root (this one runs "
                    "as uid {}); as an ordinary user jobs run in a bubblewrap sandbox",
                    job_user, ::geteuid()));
  std::string bwrap = FindInPath("bwrap");
  const char* what =
      "jobs would run with the daemon's rights and could read its token and database. Run the daemon as root "
      "(jobs then run as --job-user, default nobody), or install bubblewrap (scripts/install-deps.sh installs "
      "it), or accept the risk with --insecure-no-job-isolation";
  if (bwrap.empty()) return Unsupported(fmt::format("bwrap (bubblewrap) is not in PATH: {}", what));
  int rc =
      RunQuiet({bwrap, "--bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--unshare-pid", "--", "/bin/true"});
  if (rc != 0)
    return Unsupported(
        fmt::format("{} cannot create a sandbox here (exit {}; are user namespaces disabled?): {}", bwrap, rc, what));
  id.mode = JobIdentity::Mode::kSandbox;
  id.bwrap = bwrap;
  return id;
}

Result<std::string> FirstUnreachable(const std::string& path, int64_t uid, int64_t gid) {
  // Every prefix is built here: the child only calls async-signal-safe functions.
  std::vector<std::string> prefixes;
  std::string abs = path;
  if (abs.empty() || abs[0] != '/') {
    char cwd[PATH_MAX];
    if (!::getcwd(cwd, sizeof cwd)) return ErrnoError("getcwd", errno);
    abs = std::string(cwd) + "/" + abs;
  }
  for (size_t i = 1; i <= abs.size(); ++i)
    if (i == abs.size() || abs[i] == '/') prefixes.push_back(abs.substr(0, i));
  prefixes.insert(prefixes.begin(), "/");
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return ErrnoError("pipe", errno);
  pid_t pid = ::fork();
  if (pid < 0) {
    int e = errno;
    ::close(fds[0]);
    ::close(fds[1]);
    return ErrnoError("fork", e);
  }
  if (pid == 0) {
    ::close(fds[0]);
    if (::setgroups(0, nullptr) != 0 || ::setgid(static_cast<gid_t>(gid)) != 0 ||
        ::setuid(static_cast<uid_t>(uid)) != 0)
      _exit(2);
    for (const auto& p : prefixes) {
      if (::access(p.c_str(), X_OK) == 0) continue;
      if (errno == ENOENT) break;
      ssize_t w = ::write(fds[1], p.data(), p.size());
      (void)w;
      _exit(1);
    }
    _exit(0);
  }
  ::close(fds[1]);
  std::string blocked;
  char buf[512];
  ssize_t n;
  while ((n = ::read(fds[0], buf, sizeof buf)) > 0 || (n < 0 && errno == EINTR))
    if (n > 0) blocked.append(buf, static_cast<size_t>(n));
  ::close(fds[0]);
  int st = 0;
  while (::waitpid(pid, &st, 0) < 0 && errno == EINTR) {
  }
  if (!WIFEXITED(st) || WEXITSTATUS(st) == 2)
    return SystemError(fmt::format("cannot take uid {} / gid {} to check what it reaches", uid, gid));
  return blocked;
}

Result<std::string> ChooseWorkDir(const std::string& flag, const std::string& state_dir, bool state_is_default,
                                  const std::string& fallback, const JobIdentity& id) {
  std::string dir = flag.empty() ? state_dir + "-work" : flag;
  if (id.mode != JobIdentity::Mode::kUser) return dir;
  TSR_ASSIGN_OR_RETURN(auto blocked, FirstUnreachable(dir, id.uid, id.gid));
  if (blocked.empty()) return dir;
  if (flag.empty() && state_is_default && !fallback.empty()) {
    TSR_ASSIGN_OR_RETURN(auto fb, FirstUnreachable(fallback, id.uid, id.gid));
    if (fb.empty()) return fallback;
  }
  struct stat st {};
  std::string mode = ::stat(blocked.c_str(), &st) == 0 ? fmt::format(" (mode {:04o})", st.st_mode & 07777) : "";
  return InvalidArgument(fmt::format(
      "jobs run as user {} (uid {}), who cannot reach the work directory {}: {}{} blocks it. Pass --work-dir DIR "
      "with a directory {} can reach (e.g. --work-dir /var/lib/tessera/work), or let it through (chmod o+x {})",
      id.user, id.uid, dir, blocked, mode, id.user, blocked));
}

}  // namespace tessera::daemon
