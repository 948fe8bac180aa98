// comm/schedule: the hierarchical algorithm's cuts, segments, owners and peer sets; see schedule.hpp.
#include "comm/schedule.hpp"

#include <set>

namespace tessera::comm {

std::vector<size_t> Cuts(const IslandRanks& islands, size_t total) {
  std::vector<size_t> cuts;
  for (const auto& isl : islands)
    for (size_t j = 0; j < isl.size(); ++j) {
      cuts.push_back(Shard(isl.size(), j, total).lo);
      cuts.push_back(Shard(isl.size(), j, total).hi);
    }
  std::sort(cuts.begin(), cuts.end());
  cuts.erase(std::unique(cuts.begin(), cuts.end()), cuts.end());
  return cuts;
}

std::vector<Segment> Segments(const IslandRanks& islands, size_t total) {
  const std::vector<size_t> cuts = Cuts(islands, total);
  const int k = static_cast<int>(islands.size());
  std::vector<Segment> segs;
  for (size_t c = 0; c + 1 < cuts.size(); ++c) {
    Segment sg{{cuts[c], cuts[c + 1]}, std::vector<int>(k)};
    for (int J = 0; J < k; ++J) {
      const auto& isl = islands[J];
      size_t m = 0;
      while (Shard(isl.size(), m, total).hi <= sg.r.lo) ++m;
      sg.owner[J] = isl[m];
    }
    segs.push_back(std::move(sg));
  }
  return segs;
}

std::vector<int> HeaderPeers(const IslandRanks& islands, const std::vector<Segment>& segs, int rank,
                             bool reduce_scatter, size_t count, const std::vector<int>& weights) {
  const int k = static_cast<int>(islands.size());
  const std::vector<int> w = weights.empty() ? std::vector<int>(islands.size(), 1) : weights;
  int my_island = 0;
  for (int J = 0; J < k; ++J)
    if (std::find(islands[J].begin(), islands[J].end(), rank) != islands[J].end()) my_island = J;
  const auto& mine = islands[my_island];
  size_t world = 0;
  for (const auto& isl : islands) world += isl.size();
  std::set<int> peers(mine.begin(), mine.end());
  if (mine.front() == rank)
    for (const auto& isl : islands) peers.insert(isl.front());
  for (const auto& sg : segs)
    if (sg.owner[my_island] == rank) peers.insert(sg.owner.begin(), sg.owner.end());
  if (reduce_scatter)  // the routing step talks to block owners
    for (const auto& sg : segs)
      for (int q = 0; q < k; ++q) {
        const Range p = Part(sg.r, q, w);
        if (p.len() == 0) continue;
        const size_t r = static_cast<size_t>(rank);
        if (sg.owner[q] == rank) {
          const Range blocks = BlocksOf(p, count, world);
          for (size_t b = blocks.lo; b < blocks.hi; ++b) peers.insert(static_cast<int>(b));
        }
        if (p.Intersect({count * r, count * (r + 1)}).len() > 0) peers.insert(sg.owner[q]);
      }
  peers.erase(rank);
  return std::vector<int>(peers.begin(), peers.end());
}

std::vector<Range> Chunks(size_t count, size_t per) {
  if (per == 0 || count <= per) return {Range{0, count}};
  std::vector<Range> out;
  for (size_t lo = 0; lo < count; lo += per) out.push_back({lo, std::min(count, lo + per)});
  return out;
}

}  // namespace tessera::comm
