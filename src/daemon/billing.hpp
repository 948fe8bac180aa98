// daemon/billing: which usage rows an ended attempt still adds to the billing ledger (Daemon::BillPending in
// billing.cpp). Pure, for the scheduler and its tests.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "sched/sched.hpp"

namespace tessera::daemon {

// One island of an attempt's allocation: a card type and its number of cards.
struct IslandUsage {
  std::string type;
  int64_t cards = 0;
};

// The islands of attempt `attempt` billed over [start, end) (the ledger's whole seconds) whose rows `billed` — the
// job's rows already in the ledger — does not hold yet: one row per island. The ledger is append-only, and a
// daemon that stopped between two rows of one attempt adds the others at its restart, so a row already there is
// not added again. A ledger row is an island's when it is this attempt's (or has no attempt number: a row billed
// before the ledger had the column) and its type, cards, start and end are the island's; it stands for one island
// only: two islands of one type in one attempt are two rows, and another attempt of the job with the same whole
// seconds does not hide this one.
std::vector<IslandUsage> UnbilledIslands(const std::vector<IslandUsage>& islands,
                                         const std::vector<sched::UsageRecord>& billed, int64_t attempt, int64_t start,
                                         int64_t end);

}  // namespace tessera::daemon
