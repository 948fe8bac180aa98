// python/csrc/split.cpp — subgroups by tsrCommSplit of a group's communicator: torch's split_group calls
// Backend::split on every rank of the parent; new_group calls SplitOff (python/tessera/torch/_backend.py) on its
// members and perform_nocolor_split on the other ranks (module.cpp's bindings). No unique id, store or rendezvous.
#include <tessera/tessera.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <vector>

#include "backend.hpp"
#include "check.hpp"

namespace tessera_torch {

c10::intrusive_ptr<c10d::Backend> Backend::split(const c10::intrusive_ptr<c10d::Store>& /*store*/,
                                                 const std::vector<int>& ranks,
                                                 const c10::intrusive_ptr<c10d::Backend::Options>& opts) {
  if (opts && !last_split_name_.empty() && opts->group_name == last_split_name_) return last_split_.lock();
  auto b = SplitFor(ranks, opts);
  last_split_name_ = opts ? opts->group_name : "";
  c10::intrusive_ptr<c10d::Backend> made = b;
  last_split_ = made;
  return made;
}

c10::intrusive_ptr<Backend> Backend::SplitFor(const std::vector<int>& ranks,
                                              const c10::intrusive_ptr<c10d::Backend::Options>& opts) {
  const auto it = std::find(ranks.begin(), ranks.end(), rank_);
  const bool member = it != ranks.end();
  auto b = SplitOff(member ? *std::min_element(ranks.begin(), ranks.end()) : TSR_SPLIT_NOCOLOR,
                    member ? static_cast<int>(it - ranks.begin()) : 0,
                    opts ? static_cast<int64_t>(opts->timeout.count()) : timeout_ms_);
  if (!b) return nullptr;
  TSR_CHECK(b->getSize() == static_cast<int>(ranks.size()), "tessera: split_group: this rank's split has ",
            ranks.size(), " ranks, but ", b->getSize(),
            " ranks joined it: the ranks passed different split_ranks (every rank must pass the same)");
  return b;
}

c10::intrusive_ptr<Backend> Backend::SplitOff(int color, int key, int64_t timeout_ms) {
  TSR_CHECK(ref_->Enter(), "tessera: split of a process group that was shut down (destroy_process_group)");
  struct Leave {
    CommRef* ref;
    ~Leave() { ref->Leave(); }
  } leave{ref_.get()};
  tsrConfig_t config = TSR_CONFIG_INITIALIZER;
  config.device = device_.c_str();
  config.timeout_ms = static_cast<int>(std::min<int64_t>(timeout_ms, INT32_MAX));
  tsrComm_t nc = nullptr;
  Check(tsrCommSplit(comm_, color, key, &nc, &config), "split");
  ++splits_;
  if (nc == nullptr) return {};
  int r = 0, n = 0;
  (void)tsrCommRank(nc, &r);
  (void)tsrCommSize(nc, &n);
  // A group split from a group of several islands may lie in one island; it keeps the HOST WAIT of several
  // (work.hpp), which is right in both cases.
  return c10::make_intrusive<Backend>(nc, r, n, device_, torch_device_, timeout_ms, hybrid_);
}

}  // namespace tessera_torch
