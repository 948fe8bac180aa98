// daemon/tenant_reads: the registry of reads still waiting, and the test hook (see tenant_reads.hpp).
#include "daemon/tenant_reads.hpp"

#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>

#include <set>

namespace tessera::daemon {
namespace {
std::mutex g_mu;
std::multiset<std::string> g_stalled;
std::function<void(const std::string&)> g_hook;
}  // namespace

namespace tenant_reads {
bool Stalled(const std::string& dir) {
  std::lock_guard<std::mutex> lk(g_mu);
  return g_stalled.count(dir) > 0;
}
void MarkStalled(const std::string& dir) {
  std::lock_guard<std::mutex> lk(g_mu);
  g_stalled.insert(dir);
}
void Unstall(const std::string& dir) {
  std::lock_guard<std::mutex> lk(g_mu);
  auto it = g_stalled.find(dir);
  if (it != g_stalled.end()) g_stalled.erase(it);
}
void RunHook(const std::string& dir) {
  std::function<void(const std::string&)> h;
  {
    std::lock_guard<std::mutex> lk(g_mu);
    h = g_hook;
  }
  if (h) h(dir);
}
}  // namespace tenant_reads

Result<Fd> OpenJobDir(const std::string& area, const std::string& dir) {
  // The area is the daemon's own directory: its path is resolved as given (stored job paths are resolved ones).
  char buf[PATH_MAX];
  for (const std::string& a : {area, std::string(::realpath(area.c_str(), buf) ? buf : area.c_str())}) {
    if (dir.size() <= a.size() + 1 || dir.compare(0, a.size(), a) != 0 || dir[a.size()] != '/') continue;
    TSR_ASSIGN_OR_RETURN(Fd at, OpenDir(a));
    std::string rel = dir.substr(a.size() + 1);
    while (!rel.empty() && rel.back() == '/') rel.pop_back();
    return OpenBeneath(at.get(), rel, O_RDONLY | O_DIRECTORY, dir);
  }
  return InvalidArgument("the job's directory " + dir + " is not beneath its tenant's area " + area);
}

namespace testing {
void SetTenantReadHook(std::function<void(const std::string& dir)> hook) {
  std::lock_guard<std::mutex> lk(g_mu);
  g_hook = std::move(hook);
}
}  // namespace testing

}  // namespace tessera::daemon
