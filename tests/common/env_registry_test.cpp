// The TESSERA_* registry (common/env_vars.inc) against the documentation and the code: docs/env.md, generated from
// the declarations (scripts/gen-env-doc.py), has one row per declared variable with its default and doc (a row of a
// variable documented on another page links there); a variable documented on another page is named there; every
// "TESSERA_..." name in src/ is declared; every declared default parses and is the documented one (on a page other
// than docs/env.md, its table's default cell too); no env:: lookup in src/ passes a default of its own, and no member
// initialiser in src/ repeats a declared default as a literal (env_defaults_test.cpp checks that the structs'
// defaults are the declared ones). ctest env_doc_current checks that docs/env.md is byte for byte the generator's.
#include <gtest/gtest.h>

#include <cctype>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
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

constexpr const char* kPage = "docs/env.md";

// Rows of docs/env.md's tables: name → (default, meaning).
std::map<std::string, Row> PageRows() {
  std::map<std::string, Row> rows;
  std::istringstream in(Read(SourceDir() / kPage));
  std::string line;
  const std::regex name("^`(TESSERA_[A-Z0-9_]+)`$");
  while (std::getline(in, line)) {
    if (line.rfind("| `TESSERA_", 0) != 0) continue;
    std::vector<std::string> cells;
    std::stringstream ss(line.substr(1));
    std::string cell;
    while (std::getline(ss, cell, '|')) cells.push_back(Trim(cell));
    std::smatch m;
    if (cells.size() < 3 || !std::regex_match(cells[0], m, name)) continue;
    rows[m[1]] = Row{cells[1], cells[2]};
  }
  return rows;
}

TEST(EnvRegistry, GeneratedPageAndDeclarationsAgree) {
  auto rows = PageRows();
  ASSERT_GT(rows.size(), 30u) << kPage << "'s variable tables were not found (scripts/gen-env-doc.py writes them)";
  std::set<std::string> declared;
  for (const auto& v : env::Variables()) {
    EXPECT_TRUE(declared.insert(v.name).second) << v.name << " is declared twice in common/env_vars.inc";
    EXPECT_EQ(std::string(v.name).rfind("TESSERA_", 0), 0u) << v.name;
    EXPECT_NE(std::string(v.documented_in), "README.md")
        << v.name << ": the README has no variable tables; declare it as documented in " << kPage
        << " (or its own page) and run scripts/gen-env-doc.py";
    auto it = rows.find(v.name);
    if (it == rows.end()) {
      ADD_FAILURE() << v.name << " is declared (common/env_vars.inc) but no row of " << kPage
                    << " names it: run scripts/gen-env-doc.py";
      continue;
    }
    EXPECT_EQ(it->second.default_text, v.default_text)
        << v.name << ": " << kPage << "'s default differs from the declaration: run scripts/gen-env-doc.py";
    const std::string page = fs::path(v.documented_in).filename().string();
    const std::string doc =
        std::string(v.documented_in) == kPage ? std::string(v.doc) : "described in [" + page + "](" + page + ")";
    EXPECT_EQ(it->second.doc, doc) << v.name << ": " << kPage
                                   << "'s meaning differs from the declaration: run scripts/gen-env-doc.py";
  }
  for (const auto& [name, row] : rows) {
    EXPECT_TRUE(env::FindVariable(name) != nullptr)
        << name << " is in " << kPage << " but not declared in common/env_vars.inc: run scripts/gen-env-doc.py";
  }
}

TEST(EnvRegistry, VariablesDocumentedElsewhereAreNamedOnTheirPage) {
  for (const auto& v : env::Variables()) {
    if (std::string(v.documented_in) == kPage) continue;
    fs::path page = SourceDir() / v.documented_in;
    ASSERT_TRUE(fs::exists(page)) << v.name << ": " << page << " does not exist";
    EXPECT_NE(Read(page).find(std::string("`") + v.name + "`"), std::string::npos)
        << v.name << " is declared as documented in " << v.documented_in << ", which does not name it";
  }
}

// A page's table row `| `NAME` | meaning | default |` states the declared default (its last cell).
TEST(EnvRegistry, OtherPagesTablesStateTheDeclaredDefaults) {
  int rows = 0;
  for (const auto& v : env::Variables()) {
    if (std::string(v.documented_in) == kPage) continue;
    std::istringstream in(Read(SourceDir() / v.documented_in));
    const std::string start = std::string("| `") + v.name + "` |";
    std::string line;
    while (std::getline(in, line)) {
      if (line.rfind(start, 0) != 0) continue;
      ++rows;
      const size_t end = line.find_last_not_of(" |"), begin = line.rfind(" | ", end);
      ASSERT_NE(begin, std::string::npos) << line;
      EXPECT_EQ(line.substr(begin + 3, end + 1 - begin - 3), v.default_text)
          << v.name << ": the default in " << v.documented_in << "'s table differs from the declaration";
    }
  }
  EXPECT_GE(rows, 8);
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
// TESSERA_* name, pass one of their own. The forms without a fallback, and the Declared* accessors of member
// initialisers, need a declared default.
TEST(EnvRegistry, CodeTakesDefaultsFromTheDeclarations) {
  const std::regex call(
      R"(env::(Get|GetOrDefault|Int|Duration|Bytes|Choice|DeclaredDefault|DeclaredString|DeclaredInt|DeclaredBytes|DeclaredDuration)\()");
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

// A literal member initialiser's value: a number (`4096`, `16u << 20`, `uint64_t{16} << 20`), a duration in ms
// (a `milliseconds`/`seconds`/`minutes` member: `{60000}`, `= std::chrono::seconds(60)`, `60s`) or a string
// literal ("\"host\""); nullopt for anything else (a call, a name, an expression).
std::optional<std::string> LiteralValue(const std::string& type, std::string init) {
  std::smatch m;
  if (std::regex_match(init, m, std::regex(R"re("([^"\\]*)")re"))) return "\"" + m[1].str() + "\"";
  int64_t scale = 1;
  if (type.find("seconds") != std::string::npos) scale = type.find("milliseconds") != std::string::npos ? 1 : 1000;
  if (type.find("minutes") != std::string::npos) scale = 60000;
  if (std::regex_match(init, m, std::regex(R"((?:std::chrono::)?(milliseconds|seconds|minutes)[({](\d+)[)}])")))
    return std::to_string(std::stoll(m[2]) * (m[1] == "milliseconds" ? 1 : m[1] == "seconds" ? 1000 : 60000));
  if (std::regex_match(init, m, std::regex(R"((\d+)(ms|s|min))")))
    return std::to_string(std::stoll(m[1]) * (m[2] == "ms" ? 1 : m[2] == "s" ? 1000 : 60000));
  if (std::regex_match(init, m, std::regex(R"((?:\w+\{)?(\d+)[uUlL]*\}?(?:\s*<<\s*(\d+))?)"))) {
    uint64_t v = std::stoull(m[1]) << (m[2].matched ? std::stoi(m[2]) : 0);
    return std::to_string(scale == 1 ? v : v * scale);
  }
  return std::nullopt;
}

// A declared default as LiteralValue writes it: durations in ms, byte sizes and integers as numbers, strings
// quoted.
std::string DeclaredLiteral(const env::Variable& v) {
  const std::string value = v.value;
  switch (v.parser) {
    case env::Parser::kDuration:
      return std::to_string(env::ParseDuration(v.name, value).value().count());
    case env::Parser::kBytes:
      return std::to_string(env::ParseBytes(v.name, value).value());
    case env::Parser::kInt:
      return std::to_string(env::ParseInt(v.name, value, INT64_MIN, INT64_MAX).value());
    default:
      return "\"" + value + "\"";
  }
}

// A struct's default for a declared variable comes from the declaration (env::DeclaredInt(...) and the like in
// its member initialiser, or a FromEnv that reads it), never from a literal copy that can drift. Flags a literal
// member initialiser in src/ or include/ headers that equals a declared default: any duration, byte size or
// integer of 100 or more; a small integer or a string when the member's name contains the variable's last
// word (`retries` for TESSERA_S3_RETRIES) or its line names the variable. Zero (plain zero-initialisation) and
// named constants (kName) are not defaults. An exception would be listed in `allowed` with its reason.
TEST(EnvRegistry, NoMemberInitialiserRepeatsADeclaredDefault) {
  // file: member, each with why its literal is not a default (none today)
  const std::set<std::string> allowed{};
  const std::regex member(R"(^\s*((?:(?:static|inline|const|constexpr|mutable)\s+)*[A-Za-z_][\w:<>]*)\s+(\w+)\s*)"
                          R"((?:=\s*(.+?)|\{(.*)\})\s*;\s*(//.*)?$)");
  struct Declared {
    const env::Variable* var;
    std::string literal, word;
  };
  std::vector<Declared> declared;
  for (const auto& v : env::Variables()) {
    if (v.value == nullptr) continue;
    std::string name = v.name, word = name.substr(name.rfind('_') + 1);
    for (char& c : word) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    declared.push_back({&v, DeclaredLiteral(v), word});
  }
  int members = 0;
  std::set<std::string> seen;
  for (const char* dir : {"src", "include"}) {
    for (const auto& e : fs::recursive_directory_iterator(SourceDir() / dir)) {
      std::string ext = e.path().extension().string();
      if (!e.is_regular_file() || (ext != ".hpp" && ext != ".h" && ext != ".cuh")) continue;
      const std::string file = fs::relative(e.path(), SourceDir()).string();
      std::istringstream in(Read(e.path()));
      std::string line;
      for (int n = 1; std::getline(in, line); ++n) {
        std::smatch m;
        if (!std::regex_match(line, m, member)) continue;
        const std::string type = m[1], name = m[2], init = m[3].matched ? m[3].str() : m[4].str();
        if (type == "return" || type == "using" || (name.size() > 1 && name[0] == 'k' && std::isupper(name[1])))
          continue;
        const auto value = LiteralValue(type, Trim(init));
        if (!value || *value == "0") continue;
        ++members;
        for (const auto& d : declared) {
          if (d.literal != *value) continue;
          const bool big = (*value)[0] != '"' && std::stoull(*value) >= 100;
          const bool named = name.find(d.word) != std::string::npos || line.find(d.var->name) != std::string::npos;
          if (!big && !named) continue;
          seen.insert(file + ": " + name);
          EXPECT_TRUE(allowed.count(file + ": " + name) != 0)
              << file << ":" << n << ": member '" << name << "' is initialised to " << Trim(init) << ", the declared "
              << "default of " << d.var->name << " ('" << d.var->value << "'): take it from the declaration (env::"
              << "DeclaredInt/DeclaredBytes/DeclaredDuration/DeclaredString), or, if the two are unrelated, use a "
              << "named constant";
        }
      }
    }
  }
  EXPECT_GT(members, 20);
  for (const auto& a : allowed) EXPECT_TRUE(seen.count(a) != 0) << "'" << a << "' is fixed: drop it from `allowed`";
}

TEST(EnvRegistry, LookupFindsDeclarations) {
  const env::Variable* v = env::FindVariable("TESSERA_TIMEOUT");
  ASSERT_NE(v, nullptr);
  EXPECT_EQ(v->parser, env::Parser::kDuration);
  EXPECT_EQ(env::FindVariable("TESSERA_NO_SUCH_VARIABLE"), nullptr);
}

}  // namespace
}  // namespace tessera
