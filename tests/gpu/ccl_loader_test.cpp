// tests/gpu/ccl_loader_test: the CCL loader without a GPU — an NCCL-shaped library under another prefix
// loads from one table row and runs; a missing library or symbol is a clear Unsupported error naming it;
// an unknown TESSERA_CCL is rejected naming the known ones.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <vector>

#include "comm/ccl/ccl.hpp"
#include "comm/store/store.hpp"

namespace tessera::comm {
namespace {

std::string FakePath() { return std::string(TESSERA_FAKE_CCL); }

TEST(CclLoader, AnotherPrefixIsOneTableRow) {
  std::string path = FakePath();
  CclRow row{"fake", path.c_str(), "fake"};
  auto lib = CclLibrary::Load(row);
  ASSERT_TRUE(lib.ok()) << lib.status().message();
  EXPECT_EQ((*lib)->version(), 4242);
  auto server = StoreServer::Start("127.0.0.1", 0, "tok");
  ASSERT_TRUE(server.ok()) << server.status().message();
  auto store = StoreClient::Connect("127.0.0.1:" + std::to_string((*server)->port()), "tok", std::chrono::seconds(5));
  ASSERT_TRUE(store.ok()) << store.status().message();
  auto comm = CclComm::Create(*lib, store->get(), "ccl/test/id", 1, 0, std::chrono::seconds(5));
  ASSERT_TRUE(comm.ok()) << comm.status().message();
  std::vector<float> in = {1, 2, 3}, out(3, 0);
  ASSERT_TRUE(
      (*lib)
          ->Check((*lib)->AllReduce(in.data(), out.data(), 3, DType::kFloat32, RedOp::kSum, (*comm)->handle(), nullptr),
                  "AllReduce")
          .ok());
  EXPECT_EQ(out, in);
  EXPECT_TRUE((*comm)->AsyncError().ok());
  // Errors carry the library's own string and the call.
  Status s = (*lib)->Check((*lib)->Send(in.data(), 3, DType::kFloat32, 0, (*comm)->handle(), nullptr), "Send");
  EXPECT_EQ(s.code(), Code::kSystemError);
  EXPECT_NE(s.message().find("invalid usage"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("fakeSend"), std::string::npos) << s.message();
  comm->reset();
  void* h = dlopen(path.c_str(), RTLD_NOW | RTLD_NOLOAD);
  ASSERT_NE(h, nullptr);
  auto live = reinterpret_cast<int (*)()>(dlsym(h, "fakeLiveComms"));
  EXPECT_EQ(live(), 0) << "the communicator was not destroyed";
}

TEST(CclLoader, MissingSymbolIsNamed) {
  std::string path = FakePath();
  auto lib = CclLibrary::Load({"fake", path.c_str(), "nope"});
  ASSERT_FALSE(lib.ok());
  EXPECT_EQ(lib.status().code(), Code::kUnsupported);
  EXPECT_NE(lib.status().message().find("nopeGetVersion"), std::string::npos) << lib.status().message();
}

TEST(CclLoader, MissingLibraryIsNamed) {
  auto lib = CclLibrary::Load({"nccl", "libtessera-no-such-ccl.so.9", "nccl"});
  ASSERT_FALSE(lib.ok());
  EXPECT_EQ(lib.status().code(), Code::kUnsupported);
  EXPECT_NE(lib.status().message().find("libtessera-no-such-ccl.so.9"), std::string::npos) << lib.status().message();
}

TEST(CclLoader, EnvironmentPicksARowOrAFullOverride) {
  setenv("TESSERA_CCL", "mystery", 1);
  auto bad = CclLibrary::LoadFromEnv();
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), Code::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("known: nccl"), std::string::npos) << bad.status().message();
  std::string path = FakePath();
  setenv("TESSERA_CCL_LIB", path.c_str(), 1);
  setenv("TESSERA_CCL_PREFIX", "fake", 1);
  auto ok = CclLibrary::LoadFromEnv();
  EXPECT_TRUE(ok.ok()) << ok.status().message();
  unsetenv("TESSERA_CCL");
  unsetenv("TESSERA_CCL_LIB");
  unsetenv("TESSERA_CCL_PREFIX");
}

}  // namespace
}  // namespace tessera::comm
