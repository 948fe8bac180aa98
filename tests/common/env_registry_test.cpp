// The TESSERA_* registry (common/env_vars.inc) against the documentation and the code: README.md's two
// variable tables list exactly the variables declared as documented there, with the same defaults and
// docs; a variable documented on another page is named there; every "TESSERA_..." name in src/ is declared;
// every declared default parses and is the documented one; no env:: lookup in src/ passes a default of its own.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <vector>

#include "common/env.hpp"
#include "common/env_vars.hpp"

namespace tessera {
namespace {

namespace fs = std::filesystem;

fs::path SourceDir() {
  const char* d = std::getenv("TESSERA_SOURCE_DIR");  // set by ctest (tests/CMakeLists.txt)
  return d != nullptr ? fs::path(d) : fs::path(TESSERA_TEST_SOURCE_DIR);
}

std::string Read(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string Trim(const std::string& s) {
  size_t b = s.find_first_not_of(' '), e = s.find_last_not_of(' ');
  return b == std::string::npos ? "" : s.substr(b, e - b + 1);
}

struct Row {
  std::string default_text, doc;
};

// Rows of README.md's tables whose first cell names TESSERA_* variables: name → (default, meaning).
std::map<std::string, Row> ReadmeRows() {
  std::map<std::string, Row> rows;
  std::istringstream in(Read(SourceDir() / "README.md"));
  std::string line;
  const std::regex name("`(TESSERA_[A-Z0-9_]+)`");
  while (std::getline(in, line)) {
    if (line.rfind("| `TESSERA_", 0) != 0) continue;
    std::vector<std::string> cells;
    std::stringstream ss(line.substr(1));
    std::string cell;
    while (std::getline(ss, cell, '|')) cells.push_back(Trim(cell));
    if (cells.size() < 3) continue;
    for (std::sregex_iterator it(cells[0].begin(), cells[0].end(), name), end; it != end; ++it)
      rows[(*it)[1]] = Row{cells[1], cells[2]};
  }
  return rows;
}

TEST(EnvRegistry, ReadmeTablesAndDeclarationsAgree) {
  auto rows = ReadmeRows();
  ASSERT_GT(rows.size(), 30u) << "README.md's variable tables were not found";
  std::set<std::string> declared;
  for (const auto& v : env::Variables()) {
    EXPECT_TRUE(declared.insert(v.name).second) << v.name << " is declared twice in common/env_vars.inc";
    EXPECT_EQ(std::string(v.name).rfind("TESSERA_", 0), 0u) << v.name;
    if (std::string(v.documented_in) != "README.md") continue;
    auto it = rows.find(v.name);
    if (it == rows.end()) {
      ADD_FAILURE() << v.name << " is declared (common/env_vars.inc) as documented in README.md, but no row of "
                    << "README.md's variable tables names it";
      continue;
    }
    EXPECT_EQ(it->second.default_text, v.default_text) << v.name << ": README's default differs from the declaration";
    EXPECT_EQ(it->second.doc, v.doc) << v.name << ": README's meaning differs from the declaration";
  }
  for (const auto& [name, row] : rows) {
    const env::Variable* v = env::FindVariable(name);
    EXPECT_TRUE(v != nullptr) << name << " is in README.md's tables but not declared in common/env_vars.inc";
    if (v != nullptr) {
      EXPECT_EQ(std::string(v->documented_in), "README.md") << name;
    }
  }
}

TEST(EnvRegistry, VariablesDocumentedElsewhereAreNamedOnTheirPage) {
  for (const auto& v : env::Variables()) {
    if (std::string(v.documented_in) == "README.md") continue;
    fs::path page = SourceDir() / v.documented_in;
    ASSERT_TRUE(fs::exists(page)) << v.name << ": " << page << " does not exist";
    EXPECT_NE(Read(page).find(std::string("`") + v.name + "`"), std::string::npos)
        << v.name << " is declared as documented in " << v.documented_in << ", which does not name it";
  }
}

TEST(EnvRegistry, EveryVariableTheCodeNamesIsDeclared) {
  const std::regex literal("\"(TESSERA_[A-Z0-9_]+)\"");
  int files = 0;
  for (const auto& e : fs::recursive_directory_iterator(SourceDir() / "src")) {
    std::string ext = e.path().extension().string();
    if (!e.is_regular_file() || (ext != ".cpp" && ext != ".hpp" && ext != ".h")) continue;
    ++files;
    std::string text = Read(e.path());
    for (std::sregex_iterator it(text.begin(), text.end(), literal), end; it != end; ++it) {
      EXPECT_TRUE(env::FindVariable((*it)[1].str()) != nullptr)
          << (*it)[1] << " is read in " << fs::relative(e.path(), SourceDir()).string()
          << " but not declared in src/common/env_vars.inc (and its table)";
    }
  }
  EXPECT_GT(files, 50);
}

// The arguments of the call whose '(' is at text[open], split at top-level commas and trimmed; `end` gets the
// index after its ')'. String literals may hold commas and parentheses.
std::vector<std::string> CallArguments(const std::string& text, size_t open, size_t* end) {
  std::vector<std::string> args;
  std::string cur;
  int depth = 0;
  for (size_t i = open; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '"') {
      size_t j = i + 1;
      while (j < text.size() && text[j] != '"') j += text[j] == '\\' ? 2 : 1;
      cur += text.substr(i, j + 1 - i);
      i = j;
      continue;
    }
    if (c == '(' || c == '{' || c == '[') {
      if (depth++ == 0 && c == '(') continue;
    } else if (c == ')' || c == '}' || c == ']') {
      if (--depth == 0) {
        args.push_back(Trim(cur));
        *end = i + 1;
        return args;
      }
    } else if (c == ',' && depth == 1) {
      args.push_back(Trim(cur));
      cur.clear();
      continue;
    }
    if (c != '\n') cur += c;
  }
  *end = text.size();
  return args;
}

TEST(EnvRegistry, DeclaredDefaultsParseAndAreTheDocumentedOnes) {
  int with_value = 0;
  for (const auto& v : env::Variables()) {
    if (v.value == nullptr) continue;
    ++with_value;
    const std::string value = v.value, what = std::string(v.name) + " (declared default)";
    switch (v.parser) {
      case env::Parser::kInt:
        EXPECT_TRUE(env::ParseInt(what, value, INT64_MIN, INT64_MAX).ok()) << what << ": '" << value << "'";
        break;
      case env::Parser::kDuration:
        EXPECT_TRUE(env::ParseDuration(what, value).ok()) << what << ": '" << value << "'";
        break;
      case env::Parser::kBytes:
        EXPECT_TRUE(env::ParseBytes(what, value).ok()) << what << ": '" << value << "'";
        break;
      case env::Parser::kSwitch:
        EXPECT_TRUE(env::ParseBool(what, value).ok()) << what << ": '" << value << "'";
        break;
      default:
        EXPECT_FALSE(value.empty()) << what << " is empty: declare nullptr instead";
    }
    EXPECT_NE(std::string(v.default_text).find(value), std::string::npos)
        << v.name << ": the documented default '" << v.default_text << "' does not name the declared value '" << value
        << "'";
    auto d = env::DeclaredDefault(v.name);
    ASSERT_TRUE(d.ok()) << v.name;
    EXPECT_EQ(*d, value);
  }
  EXPECT_GE(with_value, 10);
}

// A default belongs to the declaration: env::Get("TESSERA_X").value_or(...) for a variable with a declared
// default, or the getters' fallback forms (Int with 4 arguments, Duration/Bytes with 2, Choice with 3) on a
// TESSERA_* name, pass one of their own. The forms without a fallback need a declared default.
TEST(EnvRegistry, CodeTakesDefaultsFromTheDeclarations) {
  const std::regex call(R"(env::(Get|GetOrDefault|Int|Duration|Bytes|Choice)\()");
  const std::map<std::string, size_t> fallback_arity{{"Int", 4}, {"Duration", 2}, {"Bytes", 2}, {"Choice", 3}};
  int calls = 0;
  for (const auto& e : fs::recursive_directory_iterator(SourceDir() / "src")) {
    std::string ext = e.path().extension().string();
    if (!e.is_regular_file() || (ext != ".cpp" && ext != ".hpp" && ext != ".h" && ext != ".cu")) continue;
    const std::string text = Read(e.path());
    const std::string file = fs::relative(e.path(), SourceDir()).string();
    for (std::sregex_iterator it(text.begin(), text.end(), call), end; it != end; ++it) {
      const std::string fn = (*it)[1];
      size_t after = 0;
      const auto args = CallArguments(text, static_cast<size_t>(it->position() + it->length() - 1), &after);
      if (args.empty() || args[0].rfind("\"TESSERA_", 0) != 0 || args[0].back() != '"') continue;
      const std::string name = args[0].substr(1, args[0].size() - 2);
      const env::Variable* v = env::FindVariable(name);
      if (v == nullptr) continue;  // EveryVariableTheCodeNamesIsDeclared reports it
      ++calls;
      const bool declared = v->value != nullptr;
      if (fn == "Get") {
        EXPECT_FALSE(declared && text.compare(after, 10, ".value_or(") == 0)
            << file << ": env::Get(\"" << name << "\").value_or(...) passes its own default; " << name << " declares '"
            << v->value << "' (use env::GetOrDefault)";
        continue;
      }
      auto fa = fallback_arity.find(fn);
      if (fa != fallback_arity.end() && args.size() == fa->second) {
        ADD_FAILURE() << file << ": env::" << fn << "(" << name << ", " << args[1] << ", ...) passes its own default"
                      << (declared ? "; " + name + " declares '" + v->value + "' (drop the fallback)"
                                   : std::string(" (declare its default in common/env_vars.inc, drop the fallback)"));
        continue;
      }
      EXPECT_TRUE(declared) << file << ": env::" << fn << "(\"" << name
                            << "\") takes the declared default, but common/env_vars.inc declares none";
    }
  }
  EXPECT_GT(calls, 20);
}

TEST(EnvRegistry, LookupFindsDeclarations) {
  const env::Variable* v = env::FindVariable("TESSERA_TIMEOUT");
  ASSERT_NE(v, nullptr);
  EXPECT_EQ(v->parser, env::Parser::kDuration);
  EXPECT_EQ(env::FindVariable("TESSERA_NO_SUCH_VARIABLE"), nullptr);
}

}  // namespace
}  // namespace tessera
