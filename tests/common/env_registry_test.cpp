// The TESSERA_* registry (common/env_vars.inc) against the documentation and the code: README.md's two
// variable tables list exactly the variables declared as documented there, with the same defaults and
// docs; a variable documented on another page is named there; every "TESSERA_..." name in src/ is declared.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>

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

TEST(EnvRegistry, LookupFindsDeclarations) {
  const env::Variable* v = env::FindVariable("TESSERA_TIMEOUT");
  ASSERT_NE(v, nullptr);
  EXPECT_EQ(v->parser, env::Parser::kDuration);
  EXPECT_EQ(env::FindVariable("TESSERA_NO_SUCH_VARIABLE"), nullptr);
}

}  // namespace
}  // namespace tessera
