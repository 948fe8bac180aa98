// tests/comm/schedule_test: the hierarchical algorithm's arithmetic (comm/schedule) checked by its
// properties on many worlds — every split of 1..9 ranks into 1..4 islands, with ranks dealt to islands in
// blocks (as `tessera run` does) and round-robin (as tsrCommInitRank allows) — and many buffer sizes:
// shards and segments tile the buffer exactly, every element has exactly one owner per island and one
// rank that reduces it, header peer sets are symmetric and contain everyone a rank exchanges data with,
// and the reduce-scatter's blocks and the bridge chunks are what a brute-force count says.
#include "comm/schedule.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

namespace tessera::comm {
namespace {

// Every composition of `world` into `k` positive island sizes.
void Compositions(int world, int k, std::vector<int>& cur, std::vector<std::vector<int>>& out) {
  if (k == 0) {
    if (world == 0) out.push_back(cur);
    return;
  }
  for (int s = 1; s <= world - (k - 1); ++s) {
    cur.push_back(s);
    Compositions(world - s, k - 1, cur, out);
    cur.pop_back();
  }
}

// Island sizes -> ranks: in blocks (island 0 = ranks 0..s0-1, ...) or dealt round-robin over the
// islands that still need ranks (island ranks interleave).
IslandRanks Deal(const std::vector<int>& sizes, bool interleaved) {
  IslandRanks islands(sizes.size());
  int rank = 0;
  if (!interleaved) {
    for (size_t i = 0; i < sizes.size(); ++i)
      for (int j = 0; j < sizes[i]; ++j) islands[i].push_back(rank++);
    return islands;
  }
  bool more = true;
  while (more) {
    more = false;
    for (size_t i = 0; i < sizes.size(); ++i)
      if (static_cast<int>(islands[i].size()) < sizes[i]) {
        islands[i].push_back(rank++);
        more = true;
      }
  }
  return islands;
}

struct World {
  IslandRanks islands;
  int size = 0;
  std::string name;
};

std::vector<World> Worlds() {
  std::vector<World> out;
  for (int w = 1; w <= 9; ++w)
    for (int k = 1; k <= std::min(w, 4); ++k) {
      std::vector<int> cur;
      std::vector<std::vector<int>> comps;
      Compositions(w, k, cur, comps);
      for (const auto& sizes : comps)
        for (bool inter : {false, true}) {
          if (inter && k == 1) continue;
          World world{Deal(sizes, inter), w, ""};
          for (int s : sizes) world.name += std::to_string(s) + "+";
          world.name.pop_back();
          world.name += inter ? " (interleaved)" : "";
          out.push_back(std::move(world));
        }
    }
  return out;
}

const std::vector<size_t> kTotals = {0, 1, 2, 3, 5, 7, 8, 13, 16, 31, 64, 97, 100, 1000};

int IslandOf(const IslandRanks& islands, int rank) {
  for (size_t J = 0; J < islands.size(); ++J)
    if (std::find(islands[J].begin(), islands[J].end(), rank) != islands[J].end()) return static_cast<int>(J);
  return -1;
}

// The member of an island of n whose shard holds element x, by search.
size_t ShardHolder(size_t n, size_t x, size_t total) {
  size_t holders = 0, holder = n;
  for (size_t m = 0; m < n; ++m) {
    const Range s = Shard(n, m, total);
    if (s.lo <= x && x < s.hi) {
      ++holders;
      holder = m;
    }
  }
  EXPECT_EQ(holders, 1u) << "element " << x << " of " << total << " in an island of " << n;
  return holder;
}

TEST(Schedule, ShardsTileTheBufferAndDifferByAtMostOne) {
  for (size_t n = 1; n <= 9; ++n)
    for (size_t total : kTotals) {
      size_t at = 0, lo = total, hi = 0;
      for (size_t m = 0; m < n; ++m) {
        const Range s = Shard(n, m, total);
        EXPECT_EQ(s.lo, at) << "member " << m << " of " << n << ", total " << total;
        EXPECT_LE(s.lo, s.hi);
        at = s.hi;
        lo = std::min(lo, s.len());
        hi = std::max(hi, s.len());
      }
      EXPECT_EQ(at, total) << n << " members, total " << total;
      EXPECT_LE(hi - lo, 1u) << n << " members, total " << total;
    }
}

TEST(Schedule, CutsAreExactlyTheShardBoundaries) {
  for (const World& w : Worlds())
    for (size_t total : kTotals) {
      const auto cuts = Cuts(w.islands, total);
      std::set<size_t> expect;
      for (const auto& isl : w.islands)
        for (size_t m = 0; m < isl.size(); ++m) {
          expect.insert(Shard(isl.size(), m, total).lo);
          expect.insert(Shard(isl.size(), m, total).hi);
        }
      EXPECT_EQ(cuts, std::vector<size_t>(expect.begin(), expect.end())) << w.name << ", total " << total;
      ASSERT_FALSE(cuts.empty());
      EXPECT_EQ(cuts.front(), 0u);
      EXPECT_EQ(cuts.back(), total);
    }
}

TEST(Schedule, SegmentsTileTheBufferAndEachLiesInOneShardPerIsland) {
  for (const World& w : Worlds())
    for (size_t total : kTotals) {
      const auto segs = Segments(w.islands, total);
      const std::string where = w.name + ", total " + std::to_string(total);
      size_t at = 0;
      for (const auto& sg : segs) {
        EXPECT_EQ(sg.r.lo, at) << where;
        EXPECT_GT(sg.r.len(), 0u) << where;
        at = sg.r.hi;
        ASSERT_EQ(sg.owner.size(), w.islands.size()) << where;
        for (size_t J = 0; J < w.islands.size(); ++J) {
          const auto& isl = w.islands[J];
          const auto it = std::find(isl.begin(), isl.end(), sg.owner[J]);
          ASSERT_NE(it, isl.end()) << where << ": owner " << sg.owner[J] << " is not in island " << J;
          const Range shard = Shard(isl.size(), static_cast<size_t>(it - isl.begin()), total);
          EXPECT_EQ(sg.r.Intersect(shard), sg.r) << where << ": segment not inside its owner's shard";
        }
      }
      EXPECT_EQ(at, total) << where;
      if (total == 0) {
        EXPECT_TRUE(segs.empty()) << where;
      }
    }
}

TEST(Schedule, EveryElementHasOneOwnerPerIslandAndOneReducer) {
  for (const World& w : Worlds())
    for (size_t total : kTotals) {
      if (total > 100) continue;  // element by element
      const auto segs = Segments(w.islands, total);
      const int k = static_cast<int>(w.islands.size());
      const std::string where = w.name + ", total " + std::to_string(total);
      for (size_t x = 0; x < total; ++x) {
        int in_segments = 0, reducers = 0;
        for (const auto& sg : segs) {
          if (x < sg.r.lo || x >= sg.r.hi) continue;
          ++in_segments;
          for (int J = 0; J < k; ++J) {
            const auto& isl = w.islands[J];
            EXPECT_EQ(sg.owner[J], isl[ShardHolder(isl.size(), x, total)]) << where << ", element " << x;
          }
          // The parts tile the segment: exactly one part (one owner) reduces x.
          for (int q = 0; q < k; ++q) {
            const Range p = Part(sg.r, q, k);
            if (p.lo <= x && x < p.hi) ++reducers;
          }
        }
        EXPECT_EQ(in_segments, 1) << where << ", element " << x;
        EXPECT_EQ(reducers, 1) << where << ", element " << x;
      }
    }
}

TEST(Schedule, PartsTileEverySegment) {
  for (int k = 1; k <= 4; ++k)
    for (size_t lo : {size_t{0}, size_t{5}})
      for (size_t len : kTotals) {
        const Range seg{lo, lo + len};
        size_t at = seg.lo;
        for (int q = 0; q < k; ++q) {
          const Range p = Part(seg, q, k);
          EXPECT_EQ(p.lo, at);
          EXPECT_LE(p.lo, p.hi);
          at = p.hi;
        }
        EXPECT_EQ(at, seg.hi) << k << " parts of [" << seg.lo << ", " << seg.hi << ")";
      }
}

TEST(Schedule, WeightedPartsTileEverySegmentInProportion) {
  // Every weight vector of 0..2 per island (not all 0): the parts tile the segment in island order, an island of
  // weight 0 gets none, and equal weights give Part(seg, q, k).
  for (int k = 1; k <= 4; ++k) {
    int combos = 1;
    for (int i = 0; i < k; ++i) combos *= 3;
    for (int c = 1; c < combos; ++c) {
      std::vector<int> weights;
      for (int i = 0, x = c; i < k; ++i, x /= 3) weights.push_back(x % 3);
      const bool equal = std::all_of(weights.begin(), weights.end(), [&](int v) { return v == weights[0]; });
      for (size_t len : kTotals) {
        const Range seg{5, 5 + len};
        size_t at = seg.lo;
        for (int q = 0; q < k; ++q) {
          const Range p = Part(seg, q, weights);
          EXPECT_EQ(p.lo, at);
          EXPECT_LE(p.lo, p.hi);
          if (weights[q] == 0) {
            EXPECT_EQ(p.len(), 0u);
          }
          if (equal) {
            EXPECT_EQ(p, Part(seg, q, k));
          }
          at = p.hi;
        }
        EXPECT_EQ(at, seg.hi) << "weighted parts of [" << seg.lo << ", " << seg.hi << ")";
      }
    }
  }
}

TEST(Schedule, BlocksOfMatchesABruteForceCount) {
  for (size_t block : {size_t{1}, size_t{2}, size_t{3}, size_t{7}})
    for (size_t nblocks = 1; nblocks <= 6; ++nblocks) {
      const size_t total = block * nblocks;
      for (size_t lo = 0; lo < total; ++lo)
        for (size_t hi = lo + 1; hi <= total; ++hi) {
          const Range blocks = BlocksOf({lo, hi}, block, nblocks);
          std::vector<size_t> got, want;
          for (size_t b = blocks.lo; b < blocks.hi; ++b) got.push_back(b);
          for (size_t b = 0; b < nblocks; ++b)
            if (Range{lo, hi}.Intersect({block * b, block * (b + 1)}).len() > 0) want.push_back(b);
          EXPECT_EQ(got, want) << "[" << lo << ", " << hi << ") in blocks of " << block;
        }
    }
}

TEST(Schedule, ContributionsOfAnAllGatherTileTheBufferAndABroadcastHasOneContributor) {
  for (int world = 1; world <= 9; ++world)
    for (size_t count : {size_t{0}, size_t{1}, size_t{3}, size_t{10}}) {
      const size_t total = count * static_cast<size_t>(world);
      size_t at = 0;
      for (int r = 0; r < world; ++r) {
        const Range c = Contribution(true, r, 0, count, total);
        EXPECT_EQ(c.lo, at);
        EXPECT_EQ(c.len(), count);
        at = c.hi;
      }
      EXPECT_EQ(at, total);
      for (int root = 0; root < world; ++root)
        for (int r = 0; r < world; ++r) {
          const Range c = Contribution(false, r, root, count, count);
          EXPECT_EQ(c, (r == root ? Range{0, count} : Range{0, 0})) << "rank " << r << ", root " << root;
        }
    }
}

// Whom `rank` moves data with in the schedule of a collective over `total` elements (`count` per rank for
// a reduce-scatter): its island's members, the co-owners of the segments it owns, and for a reduce-scatter
// the ranks its parts go to and come from. Written from the algorithm's description, not from HeaderPeers.
std::set<int> DataPeers(const World& w, const std::vector<Segment>& segs, int rank, bool rs, size_t count,
                        const std::vector<int>& weights) {
  std::set<int> out;
  const int me = IslandOf(w.islands, rank);
  const int k = static_cast<int>(w.islands.size());
  if (segs.empty()) return out;
  for (int r : w.islands[me]) out.insert(r);
  for (const auto& sg : segs)
    if (sg.owner[me] == rank) out.insert(sg.owner.begin(), sg.owner.end());
  if (rs)
    for (const auto& sg : segs)
      for (int q = 0; q < k; ++q)
        for (size_t x = Part(sg.r, q, weights).lo; x < Part(sg.r, q, weights).hi; ++x) {
          const int block_owner = static_cast<int>(x / count);
          if (sg.owner[q] == rank) out.insert(block_owner);
          if (block_owner == rank) out.insert(sg.owner[q]);
        }
  out.erase(rank);
  return out;
}

TEST(Schedule, HeaderPeersAreSymmetricAndCoverEveryDataPeer) {
  for (const World& w : Worlds())
    for (bool rs : {false, true})
      for (size_t count : {size_t{0}, size_t{1}, size_t{2}, size_t{5}, size_t{11}})
        for (bool weighted : {false, true}) {  // equal parts, or the first island folding none (FoldWeights)
          if (weighted && w.islands.size() < 2) continue;
          std::vector<int> weights(w.islands.size(), 1);
          if (weighted) weights[0] = 0;
          const size_t total = rs ? count * static_cast<size_t>(w.size) : count;
          const auto segs = Segments(w.islands, total);
          const std::string where = w.name + (rs ? ", reduce-scatter of " : ", allreduce of ") + std::to_string(count) +
                                    " per rank" + (weighted ? ", island 0 folding none" : "");
          std::vector<std::vector<int>> peers(w.size);
          for (int r = 0; r < w.size; ++r) {
            peers[r] = HeaderPeers(w.islands, segs, r, rs, count, weighted ? weights : std::vector<int>{});
            EXPECT_TRUE(std::is_sorted(peers[r].begin(), peers[r].end())) << where;
            EXPECT_EQ(std::adjacent_find(peers[r].begin(), peers[r].end()), peers[r].end()) << where;
            EXPECT_EQ(std::count(peers[r].begin(), peers[r].end(), r), 0)
                << where << ": rank " << r << " is its own peer";
            const std::set<int> have(peers[r].begin(), peers[r].end());
            for (int p : DataPeers(w, segs, r, rs, count, weights))
              EXPECT_TRUE(have.count(p)) << where << ": rank " << r << " moves data with " << p << " unannounced";
            // Its island, and (for its leader) every island's leader, even when there is nothing to move.
            const int me = IslandOf(w.islands, r);
            for (int m : w.islands[me])
              if (m != r) {
                EXPECT_TRUE(have.count(m)) << where;
              }
            if (w.islands[me].front() == r)
              for (const auto& isl : w.islands)
                if (isl.front() != r) {
                  EXPECT_TRUE(have.count(isl.front())) << where;
                }
          }
          for (int r = 0; r < w.size; ++r)
            for (int p : peers[r]) {
              ASSERT_GE(p, 0);
              ASSERT_LT(p, w.size);
              EXPECT_EQ(std::count(peers[p].begin(), peers[p].end(), r), 1)
                  << where << ": " << r << " expects a header from " << p << " but not the reverse";
            }
        }
}

TEST(Schedule, AHandWorkedWorldOfTwoAndThree) {
  // Islands {0,1} and {2,3,4} over 6 elements: shards [0,3) [3,6) and [0,2) [2,4) [4,6).
  const IslandRanks islands = {{0, 1}, {2, 3, 4}};
  EXPECT_EQ(Cuts(islands, 6), (std::vector<size_t>{0, 2, 3, 4, 6}));
  const auto segs = Segments(islands, 6);
  ASSERT_EQ(segs.size(), 4u);
  const std::vector<Range> ranges = {{0, 2}, {2, 3}, {3, 4}, {4, 6}};
  const std::vector<std::vector<int>> owners = {{0, 2}, {0, 3}, {1, 3}, {1, 4}};
  for (size_t i = 0; i < segs.size(); ++i) {
    EXPECT_EQ(segs[i].r, ranges[i]) << "segment " << i;
    EXPECT_EQ(segs[i].owner, owners[i]) << "segment " << i;
  }
  // Rank 0 leads island 0 and owns segments 0 and 1 (with ranks 2 and 3).
  EXPECT_EQ(HeaderPeers(islands, segs, 0, false, 6), (std::vector<int>{1, 2, 3}));
  // Rank 4 owns only segment 3 (with rank 1); it is not a leader.
  EXPECT_EQ(HeaderPeers(islands, segs, 4, false, 6), (std::vector<int>{1, 2, 3}));
}

TEST(Schedule, ChunksTileTheCountInPiecesOfAtMostPer) {
  for (size_t count : kTotals)
    for (size_t per : {size_t{0}, size_t{1}, size_t{3}, size_t{8}, size_t{1000}, size_t{5000}}) {
      const auto chunks = Chunks(count, per);
      ASSERT_FALSE(chunks.empty());
      size_t at = 0;
      for (size_t i = 0; i < chunks.size(); ++i) {
        EXPECT_EQ(chunks[i].lo, at);
        if (per > 0 && count > per) {
          EXPECT_GT(chunks[i].len(), 0u);
          EXPECT_LE(chunks[i].len(), per);
          if (i + 1 < chunks.size()) {
            EXPECT_EQ(chunks[i].len(), per);
          }
        }
        at = chunks[i].hi;
      }
      EXPECT_EQ(at, count) << count << " in pieces of " << per;
      if (per == 0 || count <= per) {
        EXPECT_EQ(chunks.size(), 1u);
      }
    }
}

}  // namespace
// TESSERA_DEVICE_CHUNK=auto: calls up to 16 MiB keep 4 MiB chunks, larger ones are cut into about four chunks of at
// most 64 MiB; every chunk is a multiple of 64 bytes, for every element size.
TEST(Schedule, AutoChunkIsAQuarterOfTheCallBetween4And64MiB) {
  constexpr size_t MiB = size_t{1} << 20;
  EXPECT_EQ(AutoChunk(1, 4) * 4, 4 * MiB);
  EXPECT_EQ(AutoChunk(16 * MiB / 4, 4) * 4, 4 * MiB);
  EXPECT_EQ(AutoChunk(64 * MiB / 4, 4) * 4, 16 * MiB);
  EXPECT_EQ(AutoChunk(64 * MiB / 2, 2) * 2, 16 * MiB);
  EXPECT_EQ(AutoChunk(256 * MiB / 4, 4) * 4, 64 * MiB);
  EXPECT_EQ(AutoChunk(1024 * MiB / 4, 4) * 4, 64 * MiB);
  for (size_t esz : {size_t{1}, size_t{2}, size_t{4}, size_t{8}})
    for (size_t count : {size_t{1}, size_t{12345}, 17 * MiB / esz + 3, 100 * MiB / esz + 7, 999 * MiB / esz}) {
      const size_t per = AutoChunk(count, esz);
      EXPECT_EQ(per * esz % 64, 0u) << count << " x " << esz;
      EXPECT_GE(per * esz, 4 * MiB);
      EXPECT_LE(per * esz, 64 * MiB);
      if (count * esz > 16 * MiB) {
        EXPECT_GE(Chunks(count, per).size(), 4u) << count << " x " << esz;
        EXPECT_LE(Chunks(count, per).size(), count * esz > 256 * MiB ? (count * esz + 64 * MiB - 1) / (64 * MiB) : 4u);
      }
    }
}

}  // namespace tessera::comm
