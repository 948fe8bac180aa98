// launch/nodes: a `tessera run` job across several nodes (--nnodes N --node-rank K --store HOST:PORT,
// or from a Slurm step: slurm.cpp). The job's ranks are dealt to the nodes in order, in contiguous
// blocks whose sizes differ by at most one, each node numbering its own GPUs; the job token comes from
// TESSERA_TOKEN or a token file only its owner can read; a node's ranks advertise the local address of its
// route to the store for their TCP transport.
#include <arpa/inet.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>

#include "launch/internal.hpp"
#include "launch/launcher.hpp"

namespace tessera::launch {

std::pair<int, int> NodeBlock(int world, int nnodes, int node) {
  const auto lo = static_cast<int>(static_cast<int64_t>(world) * node / nnodes);
  const auto hi = static_cast<int>(static_cast<int64_t>(world) * (node + 1) / nnodes);
  return {lo, hi};
}

Result<std::vector<RankSpec>> PlanNodeRanks(const std::vector<IslandSpec>& islands, int nnodes, int node_rank,
                                            const DeviceCounts& visible, int local_offset) {
  int world = 0;
  for (const auto& i : islands) world += i.count;
  if (nnodes < 1) return InvalidArgument(fmt::format("--nnodes {} is not a positive integer", nnodes));
  if (node_rank < 0 || node_rank >= nnodes)
    return InvalidArgument(fmt::format("--node-rank {} is not in [0, {}) (--nnodes {})", node_rank, nnodes, nnodes));
  if (nnodes > world)
    return InvalidArgument(
        fmt::format("--nnodes {} is more than the job's {} ranks ({}): every node starts at least one rank", nnodes,
                    world, LayoutString(islands)));
  const auto [lo, hi] = NodeBlock(world, nnodes, node_rank);
  // Devices are assigned among this node's ranks only: its GPUs are its own.
  TSR_ASSIGN_OR_RETURN(auto all, PlanRanks(islands, 1 << 30));  // numbering and islands; devices below
  std::vector<RankSpec> mine;
  internal::DeviceDealer devices(visible);
  for (int r = lo; r < hi; ++r) {
    RankSpec spec = all[r];
    spec.node = node_rank;
    spec.local_rank = local_offset + (r - lo);
    if (islands[spec.island].family != nullptr) {
      TSR_ASSIGN_OR_RETURN(spec.device,
                           devices.Next(islands[spec.island], fmt::format(" for rank {} on node {}", r, node_rank)));
    }
    mine.push_back(std::move(spec));
  }
  return mine;
}

Result<std::string> ReadTokenFile(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) return ErrnoError(fmt::format("--token-file '{}'", path), errno);
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return InvalidArgument(fmt::format("--token-file '{}' is not a regular file", path));
  }
  if (st.st_uid != ::geteuid() || (st.st_mode & 077) != 0) {
    ::close(fd);
    return InvalidArgument(
        fmt::format("--token-file '{}' has mode {:04o} and owner uid {}: it must be yours and readable by no one else "
                    "(chmod 600 '{}')",
                    path, st.st_mode & 07777, st.st_uid, path));
  }
  std::string text(4096, '\0');
  const ssize_t n = ::read(fd, text.data(), text.size());
  ::close(fd);
  if (n < 0) return ErrnoError(fmt::format("--token-file '{}'", path), errno);
  text.resize(static_cast<size_t>(n));
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back()))) text.pop_back();
  if (text.empty() || text.size() > 256 || text.find_first_of("\n\r") != std::string::npos)
    return InvalidArgument(
        fmt::format("--token-file '{}' must hold one non-empty line of at most 256 characters", path));
  return text;
}

Result<std::string> RouteSourceAddress(const std::string& host) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* res = nullptr;
  const int gai = ::getaddrinfo(host.c_str(), "9", &hints, &res);
  if (gai != 0) return NotFound(fmt::format("cannot resolve the store host '{}': {}", host, ::gai_strerror(gai)));
  const int fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  sockaddr_in local{};
  socklen_t len = sizeof(local);
  const bool ok = fd >= 0 && ::connect(fd, res->ai_addr, res->ai_addrlen) == 0 &&
                  ::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) == 0;
  const int e = errno;
  ::freeaddrinfo(res);
  if (fd >= 0) ::close(fd);
  if (!ok) return ErrnoError(fmt::format("no route to the store host '{}'", host), e);
  char buf[INET_ADDRSTRLEN] = {};
  ::inet_ntop(AF_INET, &local.sin_addr, buf, sizeof(buf));
  return std::string(buf);
}

}  // namespace tessera::launch
