// common/dl: the binder every library loaded at run time goes through (its messages name the file, the loader's
// reason, the symbol and the variable that points at another file) and the lookup of a row by name.
#include "common/dl.hpp"

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

namespace tessera::dl {
namespace {

int Zero() { return 0; }

const Names kMath = {.what = "the math library", .env_var = "TESSERA_UCX_LIBRARY", .mismatch = "not libm"};

TEST(Dl, MissingFileNamesItTheReasonAndTheVariable) {
  auto lib = Library::Open("/nonexistent/dir/libnot-there.so", kMath);
  ASSERT_FALSE(lib.ok());
  EXPECT_EQ(lib.status().code(), Code::kUnsupported);
  const std::string& m = lib.status().message();
  EXPECT_EQ(m.rfind("cannot load the math library '/nonexistent/dir/libnot-there.so': ", 0), 0u) << m;
  EXPECT_NE(m.find("No such file"), std::string::npos) << m;  // the loader's reason
  const std::string advice = "(install it, or set TESSERA_UCX_LIBRARY to its path)";
  ASSERT_GE(m.size(), advice.size());
  EXPECT_EQ(m.substr(m.size() - advice.size()), advice) << m;
  Names own = kMath;
  own.install = "install it beside the other one";
  auto beside = Library::Open("libtessera-not-there.so", own);
  ASSERT_FALSE(beside.ok());
  EXPECT_NE(beside.status().message().find("(install it beside the other one)"), std::string::npos)
      << beside.status().message();
}

TEST(Dl, BindsSymbolsAndNamesAMissingOne) {
  auto lib = Library::Open("libm.so.6", kMath);
  ASSERT_TRUE(lib.ok()) << lib.status().message();
  EXPECT_EQ(lib->file(), "libm.so.6");
  double (*cosine)(double) = nullptr;
  ASSERT_TRUE(lib->Bind(cosine, "cos").ok());
  EXPECT_EQ(cosine(0.0), 1.0);
  int (*none)() = &Zero;  // a failed Bind leaves it as it was
  const Status s = lib->Bind(none, "tsrNoSuchCall");
  EXPECT_EQ(s.code(), Code::kUnsupported);
  EXPECT_EQ(none, &Zero);
  EXPECT_EQ(s.message(),
            "'libm.so.6' (the math library) has no symbol 'tsrNoSuchCall': not libm (set TESSERA_UCX_LIBRARY to a "
            "file that has it)");
  lib->BindOptional(none, "tsrNoSuchCall");  // an optional call: null, no error
  EXPECT_EQ(none, nullptr);
  lib->BindOptional(cosine, "cos");
  EXPECT_NE(cosine, nullptr);
}

TEST(Dl, FileFromTheVariableElseTheDefault) {
  unsetenv("TESSERA_UCX_LIBRARY");
  EXPECT_EQ(FileFrom("TESSERA_UCX_LIBRARY", "libdefault.so"), "libdefault.so");
  EXPECT_EQ(FileFrom("", "libdefault.so"), "libdefault.so");
  setenv("TESSERA_UCX_LIBRARY", "/opt/x/libucp.so.0", 1);
  EXPECT_EQ(FileFrom("TESSERA_UCX_LIBRARY", "libdefault.so"), "/opt/x/libucp.so.0");
  setenv("TESSERA_UCX_LIBRARY", "", 1);  // empty counts as unset
  EXPECT_EQ(FileFrom("TESSERA_UCX_LIBRARY", "libdefault.so"), "libdefault.so");
  unsetenv("TESSERA_UCX_LIBRARY");
}

struct Row {
  const char* name;
  int value;
};
constexpr Row kRows[] = {{"first", 1}, {"second", 2}, {"third", 3}};
static_assert(FindRow(kRows, "second")->value == 2, "FindRow is usable in constant expressions");
static_assert(FindRow(kRows, "fourth") == nullptr);
// An inline table, as the runtime and CCL tables are: HasRow stays a constant expression under -fsanitize=undefined.
inline constexpr Row kInlineRows[] = {{"first", 1}, {"second", 2}};
static_assert(HasRow(kInlineRows, "second") && !HasRow(kInlineRows, "fourth"));

TEST(Dl, FindsARowByNameAndListsTheNames) {
  ASSERT_NE(FindRow(kRows, "third"), nullptr);
  EXPECT_EQ(FindRow(kRows, "third"), &kRows[2]);
  EXPECT_EQ(FindRow(kRows, "thir"), nullptr);  // whole names only
  EXPECT_EQ(FindRow(kRows, ""), nullptr);
  EXPECT_EQ(RowNames(kRows), "first, second, third");
}

}  // namespace
}  // namespace tessera::dl
