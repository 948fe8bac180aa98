// common/vendor: the device-family table and the one parser of device strings ("host", PREFIX:N).
#include "common/vendor.hpp"

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <string>

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

// The Python package keeps the torch side of the table (python/tessera/torch/_backend.py: the island name of each
// device kind, the families torch reaches through PrivateUse1, the device strings it accepts), since registering the
// backend must not need the extension. It must agree with this table: a family added here and not there fails.
TEST(DeviceFamilies, ThePythonPackageKnowsEveryTorchFamily) {
  const char* dir = std::getenv("TESSERA_SOURCE_DIR");
  std::ifstream in(std::string(dir ? dir : TESSERA_TEST_SOURCE_DIR) + "/python/tessera/torch/_backend.py");
  ASSERT_TRUE(in.good());
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string py = ss.str();
  std::smatch m;
  ASSERT_TRUE(std::regex_search(py, m, std::regex(R"(_VENDOR_OF_KIND = \{([^}]*)\})")));
  const std::string vendor_of_kind = m[1];
  ASSERT_TRUE(std::regex_search(py, m, std::regex(R"(_PRIVATEUSE1_FAMILIES = \(([^)]*)\))")));
  const std::string privateuse1 = m[1];
  ASSERT_TRUE(std::regex_search(py, m, std::regex(R"(re\.fullmatch\(r"\(([a-z|]*)\):)")));
  const std::string accepted = "|" + std::string(m[1]) + "|";
  for (const DeviceFamily& f : kDeviceFamilies) {
    if (*f.torch_type == 0) continue;  // no torch device type (emu)
    const std::string prefix = f.prefix, vendor = std::string(f.vendors).substr(0, std::string(f.vendors).find(' '));
    EXPECT_NE(vendor_of_kind.find("\"" + prefix + "\": \"" + vendor + "\""), std::string::npos)
        << prefix << " -> " << vendor << " missing from _VENDOR_OF_KIND: " << vendor_of_kind;
    EXPECT_NE(accepted.find("|" + prefix + "|"), std::string::npos) << prefix << " not accepted by _device()";
    if (std::string(f.torch_type) != "cuda") {  // torch's own device; the others come through PrivateUse1
      EXPECT_NE(privateuse1.find("\"" + prefix + "\""), std::string::npos) << prefix << " not in _PRIVATEUSE1_FAMILIES";
    }
  }
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
