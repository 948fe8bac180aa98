// daemon/security: what keeps tenants and jobs away from the daemon's secrets and from each other —
//   * tenants: the --tenants file (names, SHA-256 of each token, optional job user), token hashing and a
//     constant-time comparison; only hashes are kept by the daemon;
//   * names: job and tenant names that are safe in table rows, ledger keys and directory names;
//   * job paths: a job's checkpoint and working directories resolved ('..' and symlinks) and confined to
//     its tenant's area, and created there without following symlinks;
//   * job identity: how jobs run without the daemon's rights (an unprivileged user when the daemon is root,
//     a bubblewrap sandbox hiding the state otherwise, or explicitly nothing).
// docs/daemon.md "Security model" describes the whole.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

#include "tessera/status.hpp"

namespace tessera::daemon {

// Lower-case hex SHA-256 of `token`.
std::string TokenHash(const std::string& token);
// Compares two strings in time that depends only on their lengths.
bool ConstantTimeEqual(const std::string& a, const std::string& b);

struct Tenant {
  std::string name;
  std::string token_sha256;  // hex
  bool admin = false;
  std::string user;  // identity for this tenant's jobs ("" = the daemon's --job-user)
};

// The tenants file (YAML, mode 0600 or stricter):
//   tenants:
//     - {name: alice, token_sha256: 64 hex digits}      # printf %s TOKEN | sha256sum
//     - {name: bob, token_sha256: ..., user: tessera-bob}
// `source` names the file in errors. Names are checked with CheckTenantName; "admin" is reserved.
Result<std::vector<Tenant>> ParseTenants(const std::string& yaml, const std::string& source);
// Reads and parses `path`, refusing a file that its group or others may read or write.
Result<std::vector<Tenant>> LoadTenantsFile(const std::string& path);

// A tenant name is also a directory name: 1-64 of [A-Za-z0-9_.-], not starting with '.' or '-'.
Status CheckTenantName(const std::string& name, const std::string& where);
// Refuses, in `value` (`field` names it): more than max_bytes bytes; control characters (bytes < 0x20 and 0x7f,
// NUL included, and the C1 controls U+0080-U+009F); and the invisible format characters that reorder or hide
// text where the value is shown (bidi overrides and isolates U+202A-U+202E, U+2066-U+2069, U+061C, marks
// U+200E-U+200F, zero-width U+200B-U+200D, U+2060-U+2064, U+FEFF, U+00AD): `x\u202egnp.exe` renders as
// "xexe.png" in the queue, the bill and the console.
Status CheckNoControlChars(const std::string& field, const std::string& value, size_t max_bytes = 256);

// Resolves `path` (a relative one against `base`): '..' and the symlinks of its existing part are resolved.
// The result must be `area` itself or inside it, else InvalidArgument naming `field` and both paths.
// `area` must exist. Returns the resolved absolute path.
Result<std::string> ConfinePath(const std::string& field, const std::string& path, const std::string& base,
                                const std::string& area);
// Creates the directories of `path` below `area` (both resolved, `path` inside `area`), never following a
// symlink; directories it creates get `mode` and, when uid >= 0, that owner. Existing ones are left as they are.
Status MakeDirsInside(const std::string& area, const std::string& path, int mode, int64_t uid, int64_t gid);

// How job processes are kept from the daemon's rights.
struct JobIdentity {
  enum class Mode { kNone, kUser, kSandbox };
  Mode mode = Mode::kNone;
  std::string user;  // kUser: the default job user's name
  int64_t uid = -1, gid = -1;
  std::string bwrap;  // kSandbox: path of bwrap
  std::string Describe() const;
};
// The user's uid and gid (getpwnam); refuses uid 0 and the daemon's own uid.
Status LookupJobUser(const std::string& user, int64_t* uid, int64_t* gid);
// Chooses the mode: `insecure` -> kNone; root -> kUser as `job_user` (default "nobody"); otherwise kSandbox
// when bubblewrap runs here; otherwise an error saying what to do.
Result<JobIdentity> ChooseJobIdentity(const std::string& job_user, bool insecure);

// The first directory on the way to `path` (`path` itself included) that uid/gid cannot search, or "" when
// it can reach `path` (a part that does not exist yet ends the walk: the daemon creates it, 0755). Checked in
// a child process that takes that identity, so ACLs and group rights count as they will for the job.
Result<std::string> FirstUnreachable(const std::string& path, int64_t uid, int64_t gid);

// The work directory (`--work-dir`): `flag` when given, else STATE-work. On the root path (kUser) the job user
// must reach it: when STATE-work is out of its reach and the state directory is the default one (neither
// --state-dir nor TESSERA_HOME), `fallback` (the daemon's default, /var/lib/tessera/work); otherwise an
// InvalidArgument naming the user, the directory that blocks it and --work-dir.
Result<std::string> ChooseWorkDir(const std::string& flag, const std::string& state_dir, bool state_is_default,
                                  const std::string& fallback, const JobIdentity& id);

}  // namespace tessera::daemon
