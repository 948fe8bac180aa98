// common/vendor: the device-family table and the one parser of device strings ("host", PREFIX:N).
#include "common/vendor.hpp"

#include <gtest/gtest.h>

#include <cstdlib>
#include <iterator>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "common/shell.hpp"

namespace tessera {
namespace {

TEST(DeviceFamilies, EveryRowIsCompleteAndUnique) {
  std::set<std::string> prefixes, vars;
  for (const DeviceFamily& f : kDeviceFamilies) {
    for (const char* field : {f.prefix, f.label, f.visible_env, f.runtime})
      EXPECT_TRUE(field != nullptr && *field != '\0') << f.prefix;
    // torch_type and ccl may be "" (none), as the emulated device's are; never null.
    EXPECT_TRUE(f.torch_type != nullptr && f.ccl != nullptr) << f.prefix;
    EXPECT_EQ(*f.torch_type == '\0', std::string(f.prefix) == "emu") << f.prefix;
    EXPECT_NE(std::string(f.prefix), "host");  // "host" means no device
    EXPECT_TRUE(prefixes.insert(f.prefix).second) << "prefix twice: " << f.prefix;
    // One variable per family, but for a runtime that reads CUDA's own (corex: CoreX's CUDA-API runtime, ASSUMED):
    // a node has one vendor's cards, and each rank gets its own family's variable.
    if (std::string(f.prefix) != "corex") {
      EXPECT_TRUE(vars.insert(f.visible_env).second) << "visible-devices variable twice: " << f.visible_env;
    }
    EXPECT_EQ(FindDeviceFamily(f.prefix), &f);
  }
  EXPECT_EQ(FindDeviceFamily("hots"), nullptr);
  // Vendor names (a catalog type's vendor, an island's name) find their family through the same table.
  EXPECT_STREQ(FindFamilyOfVendor("nvidia")->prefix, "cuda");
  EXPECT_STREQ(FindFamilyOfVendor("huawei")->prefix, "npu");
  EXPECT_STREQ(FindFamilyOfVendor("ascend")->prefix, "npu");
  EXPECT_STREQ(FindFamilyOfVendor("moore-threads")->prefix, "musa");
  EXPECT_STREQ(FindFamilyOfVendor("musa")->prefix, "musa");  // a prefix is its own vendor name
  EXPECT_STREQ(FindFamilyOfVendor("iluvatar")->prefix, "corex");
  EXPECT_STREQ(FindDeviceFamily("corex")->torch_type, "cuda");  // CoreX's torch build is CUDA's
  EXPECT_STREQ(FindDeviceFamily("corex")->runtime, "corex");
  EXPECT_EQ(FindFamilyOfVendor("moore-"), nullptr);
  EXPECT_EQ(FindFamilyOfVendor(""), nullptr);
  EXPECT_EQ(FindFamilyOfVendor("intel"), nullptr);
  EXPECT_EQ(FindDeviceFamily(""), nullptr);
}

// The Python package's copy of the table (python/tessera/_families.py) is written from vendor.hpp by
// scripts/gen-families-py.py whenever the package is built, so it has no hand-kept values to drift. What could still
// go wrong is the generator reading the header wrongly (a row it misparses, a field it drops): its rows, as it prints
// them, must be this compiled table's, field for field.
TEST(DeviceFamilies, ThePythonCopyIsGeneratedFromThisTable) {
  const char* dir = std::getenv("TESSERA_SOURCE_DIR");
  const std::string script = std::string(dir ? dir : TESSERA_TEST_SOURCE_DIR) + "/scripts/gen-families-py.py";
  if (testing_shell::Shell("python3 -c pass").status != 0) GTEST_SKIP() << "no python3 to run " << script;
  const testing_shell::Proc p = testing_shell::Shell("python3 " + script + " --rows");
  ASSERT_EQ(p.status, 0) << p.out;
  std::istringstream lines(p.out);
  std::string line;
  size_t i = 0;
  for (; std::getline(lines, line); ++i) {
    ASSERT_LT(i, std::size(kDeviceFamilies)) << "a row the table lacks: " << line;
    const DeviceFamily& f = kDeviceFamilies[i];
    std::vector<std::string> got;
    std::string field;
    std::istringstream cols(line + "\t");
    while (std::getline(cols, field, '\t')) got.push_back(field);
    const std::vector<std::string> want = {f.prefix, f.label,           f.visible_env, f.torch_type, f.runtime,
                                           f.ccl,    f.mps ? "1" : "0", f.vendors,     f.slurm_gres};
    EXPECT_EQ(got, want) << "row " << i << " as the generator reads it: " << line;
  }
  EXPECT_EQ(i, std::size(kDeviceFamilies)) << p.out;
}

TEST(DeviceName, ParsesHostAndPrefixIndex) {
  auto h = ParseDeviceName("host", "TESSERA_DEVICE");
  ASSERT_TRUE(h.ok());
  EXPECT_TRUE(h->host());
  EXPECT_EQ(h->ToString(), "host");
  auto c = ParseDeviceName("cuda:12", "TESSERA_DEVICE");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  ASSERT_FALSE(c->host());
  EXPECT_STREQ(c->family->prefix, "cuda");
  EXPECT_EQ(c->index, 12);
  EXPECT_EQ(c->ToString(), "cuda:12");
  EXPECT_EQ(DeviceWords(), "host, cuda, npu, musa, corex or emu");
  auto n = ParseDeviceName("npu:3", "TESSERA_DEVICE");
  ASSERT_TRUE(n.ok()) << n.status().ToString();
  EXPECT_STREQ(n->family->visible_env, "ASCEND_RT_VISIBLE_DEVICES");
  EXPECT_STREQ(n->family->ccl, "hccl");
  EXPECT_EQ(n->ToString(), "npu:3");
  auto m = ParseDeviceName("musa:0", "TESSERA_DEVICE");
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_STREQ(m->family->visible_env, "MUSA_VISIBLE_DEVICES");
  EXPECT_STREQ(m->family->runtime, "musa");
}

TEST(DeviceName, BadStringsNameTheVariableAndValue) {
  for (const char* bad : {"", "cuda", "cuda:", "cuda:x", "cuda:-1", "cuda:1a", "gpu:0", "HOST", "cuda:1234567", "npu",
                          "npu:a", "NPU:0", "musa:-2"}) {
    auto r = ParseDeviceName(bad, "TESSERA_DEVICE");
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
    EXPECT_NE(r.status().message().find(std::string("TESSERA_DEVICE='") + bad + "'"), std::string::npos)
        << r.status().message();
    EXPECT_NE(r.status().message().find("host or cuda:N or npu:N or musa:N"), std::string::npos)
        << r.status().message();
  }
}

}  // namespace
}  // namespace tessera
