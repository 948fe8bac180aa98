// tests/comm/enum_probe: tessera.h's C API enums under clang's enum sanitizer. A C++ caller casts an int outside
// tsrDataType_t / tsrRedOp_t (99, -1) and the value is read as the C API reads it; with a fixed underlying type
// (int, tessera.h) that is defined, and -fsanitize=enum stays silent. Built and run by the test
// comm_c_api_enums_clang (tests/comm/CMakeLists.txt) with clang++, where it is installed: the library's trees are
// built with GCC, whose UBSan does not check enum loads. Exit 0: no report (a report stops it with exit 1).
#include <type_traits>

#include "tessera/tessera.h"

static_assert(std::is_same<std::underlying_type<tsrDataType_t>::type, int>::value, "any int is a tsrDataType_t");
static_assert(std::is_same<std::underlying_type<tsrRedOp_t>::type, int>::value, "any int is a tsrRedOp_t");

// Reads the values as the C API's argument checks do (comm/api_args.cpp): 1 when both are refused.
__attribute__((noinline)) int Refused(tsrDataType_t t, tsrRedOp_t op) {
  const int tv = static_cast<int>(t), ov = static_cast<int>(op);
  return (tv < 0 || tv > tsrFloat64) && (ov < 0 || ov > tsrAvg) ? 1 : 0;
}

int main(int argc, char**) {
  volatile int type = 98 + argc, op = -argc;  // 99 and -1, unknown to the compiler
  return Refused(static_cast<tsrDataType_t>(type), static_cast<tsrRedOp_t>(op)) == 1 ? 0 : 2;
}
