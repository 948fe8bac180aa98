// common/text: small text helpers more than one module needs.
#pragma once

#include <string>
#include <vector>

namespace tessera {

// Splits `s` at `sep` where it is not inside (...) or [...] ("n[1-3],m" -> "n[1-3]", "m"; Slurm's
// "gpu:2(S:0-1),npu:1" -> "gpu:2(S:0-1)", "npu:1"). Always at least one piece.
inline std::vector<std::string> SplitOutsideBrackets(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::string cur;
  int depth = 0;
  for (char c : s) {
    if (c == '(' || c == '[') ++depth;
    if (c == ')' || c == ']') --depth;
    if (c == sep && depth == 0) {
      out.push_back(cur);
      cur.clear();
    } else {
      cur += c;
    }
  }
  out.push_back(cur);
  return out;
}

}  // namespace tessera
