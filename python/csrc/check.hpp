// python/csrc/check.hpp — TSR_CHECK: TORCH_CHECK with its message built here by concatenation, for every
// check in tessera._C. Why: in tessera._C as built on a GPU machine (torch 2.11, Ubuntu's gcc 13), every
// TORCH_CHECK that formatted an integer (c10::str streams each argument through std::ostream) died with
// SIGSEGV inside num_put, in _C.so's own instantiation of std::ostream::_M_insert<long>; messages of
// strings alone went through. So no argument is streamed: integers go through std::to_string, dtypes,
// layouts and devices through their own names, and TORCH_CHECK gets one finished std::string.
#pragma once

#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include <string>
#include <type_traits>

namespace tessera_torch {

inline void AppendPiece(std::string& s, const char* p) { s += p != nullptr ? p : "(null)"; }
inline void AppendPiece(std::string& s, const std::string& p) { s += p; }
inline void AppendPiece(std::string& s, c10::ScalarType t) { s += c10::toString(t); }
inline void AppendPiece(std::string& s, c10::Layout l) {
  s += l == c10::kStrided ? "Strided" : (l == c10::kSparse ? "Sparse" : "a non-strided layout");
}
inline void AppendPiece(std::string& s, const c10::Device& d) { s += d.str(); }
inline void AppendPiece(std::string& s, bool b) { s += b ? "true" : "false"; }
template <typename T>
std::enable_if_t<std::is_integral_v<T> && !std::is_same_v<T, bool>> AppendPiece(std::string& s, T v) {
  s += std::to_string(+v);
}

template <typename... A>
std::string Msg(const A&... pieces) {
  std::string s;
  (AppendPiece(s, pieces), ...);
  return s;
}

}  // namespace tessera_torch

#define TSR_CHECK(cond, ...)                                            \
  do {                                                                  \
    if (!(cond)) TORCH_CHECK(false, ::tessera_torch::Msg(__VA_ARGS__)); \
  } while (0)
