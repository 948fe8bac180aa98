// sched/inputs_internal: the errors of the checks that involve two files (a node's type and the catalog, a
// running allocation and the fleet, ...), shared by CheckInputs() and the planner so that both say the same
// thing. Each names the file, line and field of the entry at fault, e.g.
//   fleet.yaml:12: nodes[3].type: type 'moore-s4000' is not in the catalog catalog.yaml
#pragma once

#include <cstdint>
#include <string>

#include "sched/sched.hpp"

namespace tessera::sched::internal {

// "file:line: field", "file: field" without a line, or "field" without a file.
std::string Where(const std::string& source, int line, const std::string& field);

Status UnknownNodeType(const Fleet& fleet, const Node& node, const Catalog& catalog);
Status NoWeightClassThroughput(const Policy& policy, const AcceleratorType& type, const Catalog& catalog);
Status UnknownBoundsType(const Job& job, const std::string& type, const TypeBounds& bounds, const Catalog& catalog);
Status UnknownRunningNode(const RunningJob& job, const NodeCards& alloc, const Fleet& fleet);
Status OverAllocated(const RunningJob& job, const NodeCards& alloc, int64_t used, int64_t capacity);

}  // namespace tessera::sched::internal
