// sched/planner_internal: test hooks of the planner (not part of the public API).
#pragma once

#include <cstdint>

namespace tessera::sched::internal {

// When on, every integer program is decided by the planner's exact integer search alone (GLPK's answer, an
// optimum or "infeasible", is ignored), so tests can compare that search with brute force on many instances.
void SetForceExactSearch(bool on);
// How many integer programs the exact search has decided in this process (forced or because GLPK's solution
// missed a constraint in integer arithmetic).
int64_t ExactSearchCount();

}  // namespace tessera::sched::internal
