// comm/c_api_group: tsrGroupStart/End of the C ABI — each thread's open group: its depth (c_api_state.hpp) and its
// queued sends and receives (tsrSend/tsrRecv inside a group queue here), run at the outermost tsrGroupEnd one
// communicator after another, each as one group of the communicator (Comm::Group) after its checks
// (api::CheckGroup).
#include <algorithm>
#include <exception>
#include <string>
#include <utility>
#include <vector>

#include "comm/c_api_state.hpp"

namespace tessera::comm::capi {
namespace {
// This thread's queued sends and receives, in the order of their calls.
thread_local std::vector<std::pair<tsrComm_t, P2POp>> g_group_ops;
}  // namespace

tsrResult_t QueueGroupOp(const char* what, tsrComm_t comm, bool is_send, const void* sendbuf, void* recvbuf,
                         size_t count, tsrDataType_t datatype, int peer, tsrStream_t stream) {
  if (comm == nullptr || comm->impl == nullptr) {
    g_init_error = std::string(what) + " in a group: NULL or destroyed communicator";
    return tsrInvalidArgument;
  }
  P2POp op;
  op.is_send = is_send;
  op.send = sendbuf;
  op.recv = recvbuf;
  op.count = count;
  op.type = datatype;
  op.peer = peer;
  op.stream = stream;
  g_group_ops.emplace_back(comm, op);
  return tsrSuccess;
}

void DropGroupOps(tsrComm_t comm) {
  std::erase_if(g_group_ops, [&](const auto& e) { return e.first == comm; });
}

}  // namespace tessera::comm::capi

extern "C" {

tsrResult_t tsrGroupStart(void) {
  ++tessera::comm::capi::g_group_depth;
  return tsrSuccess;
}

tsrResult_t tsrGroupEnd(void) {
  namespace capi = tessera::comm::capi;
  if (capi::g_group_depth == 0) {
    capi::g_init_error = "tsrGroupEnd without tsrGroupStart";
    return tsrInvalidArgument;
  }
  if (--capi::g_group_depth > 0) return tsrSuccess;
  auto ops = std::move(capi::g_group_ops);
  capi::g_group_ops.clear();
  tsrResult_t first = tsrSuccess;
  try {
    // One communicator after another, in the order of their first call in the group.
    std::vector<tsrComm_t> order;
    for (const auto& [c, op] : ops)
      if (std::find(order.begin(), order.end(), c) == order.end()) order.push_back(c);
    for (tsrComm_t c : order) {
      std::vector<tessera::comm::P2POp> mine;
      for (const auto& [cc, op] : ops)
        if (cc == c) mine.push_back(op);
      const tsrResult_t r = capi::Call("tsrGroupEnd", c, [&](tessera::comm::Comm&) {
        TSR_RETURN_IF_ERROR(tessera::comm::api::CheckGroup(mine, c->shape));
        return c->impl->Group(mine);
      });
      if (r != tsrSuccess && first == tsrSuccess) first = r;
    }
  } catch (const std::exception& e) {
    capi::g_init_error = std::string("internal error: ") + e.what();
    return tsrInternalError;
  }
  return first;
}

}  // extern "C"
