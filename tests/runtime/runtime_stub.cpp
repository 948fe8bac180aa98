// tests/runtime/runtime_stub: a library with only the first symbols of each runtime row (aclInit,
// aclGetRecentErrMsg; musaGetErrorString, musaGetLastError; cudaGetErrorString), so that loading it as a row fails
// on the next symbol the loader binds (aclrtGetDeviceCount, musaGetDeviceCount, cudaGetLastError): the
// missing-symbol error of the loader.
#define STUB_EXPORT extern "C" __attribute__((visibility("default")))

STUB_EXPORT int aclInit(const char*) { return 0; }
STUB_EXPORT const char* aclGetRecentErrMsg() { return nullptr; }
STUB_EXPORT const char* musaGetErrorString(int) { return "stub"; }
STUB_EXPORT int musaGetLastError() { return 0; }
STUB_EXPORT const char* cudaGetErrorString(int) { return "stub"; }
