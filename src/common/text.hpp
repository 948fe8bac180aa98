// common/text: small text helpers more than one module needs.
#pragma once

#include <algorithm>
#include <string>
#include <vector>

namespace tessera {

// Splits `s` at every `sep`, as std::getline reads it: "a,b" -> "a", "b"; a trailing separator adds no empty piece,
// and "" gives none.
inline std::vector<std::string> SplitAt(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::string item;
  for (size_t at = 0; at < s.size();) {
    const size_t end = std::min(s.find(sep, at), s.size());
    out.push_back(s.substr(at, end - at));
    at = end + 1;
  }
  return out;
}

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

// The name of `known` closest to `word` (optimal string alignment distance: insertions, deletions,
// substitutions and swaps of neighbours, case-insensitive), or "" when none is within max(1, size/3) edits —
// "comand" -> "command", "allredcue" -> "allreduce", "xyz" -> "".
inline std::string Closest(const std::string& word, const std::vector<std::string>& known) {
  auto lower = [](char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c; };
  std::string best;
  size_t best_d = std::max<size_t>(1, word.size() / 3) + 1;
  for (const auto& k : known) {
    const size_t n = word.size(), m = k.size();
    std::vector<std::vector<size_t>> d(n + 1, std::vector<size_t>(m + 1));
    for (size_t i = 0; i <= n; ++i) d[i][0] = i;
    for (size_t j = 0; j <= m; ++j) d[0][j] = j;
    for (size_t i = 1; i <= n; ++i)
      for (size_t j = 1; j <= m; ++j) {
        size_t cost = lower(word[i - 1]) == lower(k[j - 1]) ? 0 : 1;
        d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
        if (i > 1 && j > 1 && lower(word[i - 1]) == lower(k[j - 2]) && lower(word[i - 2]) == lower(k[j - 1]))
          d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
      }
    if (d[n][m] < best_d) {
      best_d = d[n][m];
      best = k;
    }
  }
  return best;
}

// "; did you mean 'command'?" after a message about `word`, or "" when no name of `known` is close.
inline std::string DidYouMean(const std::string& word, const std::vector<std::string>& known) {
  std::string c = Closest(word, known);
  return c.empty() ? "" : "; did you mean '" + c + "'?";
}

}  // namespace tessera
