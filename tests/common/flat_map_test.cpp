// env::ReadFlatMap: the flat YAML settings file (TESSERA_S3_CONFIG) read without yaml-cpp.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "common/env.hpp"

namespace tessera {
namespace {

std::string Write(const std::string& name, const std::string& text) {
  auto p = std::filesystem::temp_directory_path() / ("tsr_flat_" + std::to_string(getpid()) + "_" + name);
  std::ofstream(p) << text;
  return p.string();
}

TEST(FlatMap, ReadsPlainQuotedCommentedAndEmptyValues) {
  auto path = Write("ok.yaml",
                    "---\n# S3 settings\nendpoint: http://127.0.0.1:9000  # local\nregion: 'eu-west-1'\n"
                    "secret_access_key: \"a#b\\\"c\"\n\nsession_token:\npart_size: 8M\naddressing: ~\n");
  auto kv = env::ReadFlatMap(path);
  ASSERT_TRUE(kv.ok()) << kv.status().ToString();
  EXPECT_EQ(kv->at("endpoint"), "http://127.0.0.1:9000");
  EXPECT_EQ(kv->at("region"), "eu-west-1");
  EXPECT_EQ(kv->at("secret_access_key"), "a#b\"c");
  EXPECT_EQ(kv->at("session_token"), "");
  EXPECT_EQ(kv->at("part_size"), "8M");
  EXPECT_EQ(kv->at("addressing"), "");
  EXPECT_EQ(kv->size(), 6u);
  std::filesystem::remove(path);
}

TEST(FlatMap, RefusesWhatIsNotAFlatMapNamingFileAndLine) {
  for (const char* text : {"a: 1\nb:\n  c: 2\n", "a: 1\n- x\n", "a: [1, 2]\n", "a: 1\na: 2\n", "a: 'open\n"}) {
    auto path = Write("bad.yaml", text);
    auto kv = env::ReadFlatMap(path);
    EXPECT_FALSE(kv.ok()) << text;
    EXPECT_NE(kv.status().message().find(path + ":"), std::string::npos) << kv.status().message();
    std::filesystem::remove(path);
  }
  EXPECT_FALSE(env::ReadFlatMap("/nonexistent/s3.yaml").ok());
}

}  // namespace
}  // namespace tessera
