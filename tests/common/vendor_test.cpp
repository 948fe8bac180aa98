// common/vendor: the device-family table and the one parser of device strings ("host", PREFIX:N).
#include "common/vendor.hpp"

#include <gtest/gtest.h>

#include <set>
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
    EXPECT_TRUE(vars.insert(f.visible_env).second) << "visible-devices variable twice: " << f.visible_env;
    EXPECT_EQ(FindDeviceFamily(f.prefix), &f);
  }
  EXPECT_EQ(FindDeviceFamily("hots"), nullptr);
  EXPECT_EQ(FindDeviceFamily(""), nullptr);
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
  EXPECT_EQ(DeviceWords(), "host, cuda, npu, musa or emu");
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
