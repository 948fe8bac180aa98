// tests/gpu/fake_ccl: a stand-in collective library with NCCL's call shapes under the prefix "fake", for
// testing on machines without a GPU that the CCL loader is table-driven (one row per library, symbols
// resolved as prefix + name). Communicators of one rank only; collectives copy host memory.
#include <cstring>

extern "C" {
struct FakeId {
  char internal[128];
};
static int g_comms = 0;
int fakeGetVersion(int* v) {
  *v = 4242;
  return 0;
}
int fakeGetUniqueId(FakeId* id) {
  std::memset(id, 7, sizeof(*id));
  return 0;
}
int fakeCommInitRank(void** comm, int nranks, FakeId id, int rank) {
  if (nranks != 1 || rank != 0 || id.internal[0] != 7) return 4;  // ncclInvalidArgument
  *comm = &g_comms;
  ++g_comms;
  return 0;
}
int fakeCommDestroy(void*) {
  --g_comms;
  return 0;
}
int fakeCommAbort(void*) {
  --g_comms;
  return 0;
}
int fakeCommGetAsyncError(void*, int* e) {
  *e = 0;
  return 0;
}
static const int kSize[] = {1, 1, 4, 4, 8, 8, 2, 4, 8, 2};
int fakeAllReduce(const void* s, void* r, size_t n, int t, int, void*, void*) {
  std::memmove(r, s, n * kSize[t]);
  return 0;
}
int fakeReduceScatter(const void* s, void* r, size_t n, int t, int, void*, void*) {
  std::memmove(r, s, n * kSize[t]);
  return 0;
}
int fakeAllGather(const void* s, void* r, size_t n, int t, void*, void*) {
  std::memmove(r, s, n * kSize[t]);
  return 0;
}
int fakeBroadcast(const void* s, void* r, size_t n, int t, int, void*, void*) {
  std::memmove(r, s, n * kSize[t]);
  return 0;
}
int fakeSend(const void*, size_t, int, int, void*, void*) { return 5; }
int fakeRecv(void*, size_t, int, int, void*, void*) { return 5; }
int fakeGroupStart() { return 0; }
int fakeGroupEnd() { return 0; }
const char* fakeGetErrorString(int r) { return r == 4 ? "invalid argument" : r == 5 ? "invalid usage" : "other"; }
int fakeLiveComms() { return g_comms; }
}
