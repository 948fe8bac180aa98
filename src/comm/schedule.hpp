// comm/schedule: the arithmetic of the hierarchical algorithm (docs/architecture.md, "How a collective flows", step 4),
// as pure functions of sizes and ranks — no I/O, no communicator — so that every rank computes the same schedule and
// tests can check its properties for any world:
//   - Shard: member i of an island of n owns [C·i/n, C·(i+1)/n) of a buffer of C elements;
//   - Cuts / Segments: the islands' shard boundaries cut [0, C) into segments, each with one owner per
//     island (the member whose shard holds it);
//   - Part: owner q of a segment reduces part q of it (one part per island; equal parts, or in proportion to the
//     islands' weights);
//   - BlocksOf: the output blocks of a reduce-scatter that a part touches;
//   - Contribution: the elements a rank contributes to an allgather or broadcast;
//   - HeaderPeers: whom a rank exchanges its 64-byte header with before a collective;
//   - Chunks: consecutive pieces of at most `per` elements.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace tessera::comm {

// A half-open range of element indices.
struct Range {
  size_t lo = 0, hi = 0;
  size_t len() const { return hi - lo; }
  Range Intersect(Range o) const {
    Range r{std::max(lo, o.lo), std::min(hi, o.hi)};
    if (r.hi < r.lo) r.hi = r.lo;
    return r;
  }
  bool operator==(const Range&) const = default;
};

// The ranks of each island, in island order; each island's ranks sorted. What the schedule is computed from.
using IslandRanks = std::vector<std::vector<int>>;

// Member `member`'s shard of `total` elements in an island of `members` ranks.
inline Range Shard(size_t members, size_t member, size_t total) {
  return Range{total * member / members, total * (member + 1) / members};
}

// Every island's shard boundaries over [0, total), sorted and without duplicates ({0} when total is 0).
std::vector<size_t> Cuts(const IslandRanks& islands, size_t total);

// A piece of [0, total) between two consecutive cuts, and its owner (a rank) in each island.
struct Segment {
  Range r;
  std::vector<int> owner;  // by island
};
// The segments of [0, total), in order: they tile it (none when total is 0).
std::vector<Segment> Segments(const IslandRanks& islands, size_t total);

// Part q of `parts` of a segment: the piece that its owner in island q reduces.
inline Range Part(Range seg, int q, int parts) {
  const size_t k = static_cast<size_t>(parts), i = static_cast<size_t>(q);
  return Range{seg.lo + seg.len() * i / k, seg.lo + seg.len() * (i + 1) / k};
}

// Part q of a segment whose islands fold shares in proportion to `weights` (one per island, their sum positive): the
// pieces in island order, island q's of weights[q] / (sum of the weights) of the segment. With equal weights, the
// same ranges as Part(seg, q, k).
inline Range Part(Range seg, int q, const std::vector<int>& weights) {
  size_t before = 0, total = 0;
  for (size_t i = 0; i < weights.size(); ++i) {
    total += static_cast<size_t>(weights[i]);
    if (i < static_cast<size_t>(q)) before += static_cast<size_t>(weights[i]);
  }
  const size_t upto = before + static_cast<size_t>(weights[static_cast<size_t>(q)]);
  return Range{seg.lo + seg.len() * before / total, seg.lo + seg.len() * upto / total};
}
// The output blocks (block b = [block·b, block·(b+1)), b < nblocks) that a non-empty `part` intersects,
// as a range of block indices. `block` must be positive.
inline Range BlocksOf(Range part, size_t block, size_t nblocks) {
  return Range{part.lo / block, std::min(nblocks, (part.hi + block - 1) / block)};
}

// The elements of the gathered buffer (`total` elements) that `rank` contributes: an allgather's rank r
// its block of `count`, a broadcast's root all of it, everyone else nothing.
inline Range Contribution(bool allgather, int rank, int root, size_t count, size_t total) {
  if (allgather) return {count * static_cast<size_t>(rank), count * (static_cast<size_t>(rank) + 1)};
  return rank == root ? Range{0, total} : Range{0, 0};
}

// The peers `rank` exchanges headers with before a collective over `segs`: its island, the other island
// leaders (when it leads its own: islands whose schedules differ because of a mismatch still meet someone
// who notices), the other owners of each segment it owns, and for a reduce-scatter of `count` elements
// per rank the ranks its parts are routed to and from. Sorted, without `rank` itself.
// `weights`: the islands' shares of each segment's folds (Part), empty for equal shares.
std::vector<int> HeaderPeers(const IslandRanks& islands, const std::vector<Segment>& segs, int rank,
                             bool reduce_scatter, size_t count, const std::vector<int>& weights = {});

// [0, count) in consecutive pieces of `per` elements (the last one shorter); one piece when per is 0 or
// not less than count.
std::vector<Range> Chunks(size_t count, size_t per);

// The chunk, in elements, of a staged hybrid allreduce of `count` elements of `esz` bytes when TESSERA_DEVICE_CHUNK is
// `auto`: about a quarter of the call, and at least kAutoChunkMin and at most kAutoChunkMax bytes, a multiple of 64
// bytes (a staged rank's copies stay asynchronous). Each chunk is a whole collective on every rank, with a fixed cost
// (a few hundred µs where a device-bridge rank takes part), while the first chunk's copies down and the last one's
// copies up do not overlap the bridge: fewer, larger chunks for large calls, 4 MiB ones below 16 MiB.
inline constexpr size_t kAutoChunkParts = 4, kAutoChunkMin = size_t{4} << 20, kAutoChunkMax = size_t{64} << 20;
inline size_t AutoChunk(size_t count, size_t esz) {
  const size_t quarter = (count * esz + kAutoChunkParts - 1) / kAutoChunkParts;
  const size_t bytes = (std::clamp(quarter, kAutoChunkMin, kAutoChunkMax) + 63) / 64 * 64;
  return bytes / esz;
}

}  // namespace tessera::comm
