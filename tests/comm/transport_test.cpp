// tests/comm/transport_test: the transport rows' bookkeeping (comm/transport/transport.hpp) — the order from
// TESSERA_TRANSPORTS and its older form TESSERA_BRIDGE (bad names, repeats and both at once refused, naming the
// value); a rank's row entries survive the store whatever bytes their blobs hold; and a pair takes the first row
// of the order viable on both sides with equal domains, the same from either end, or an error saying for each
// row why it does not join them.
#include "comm/transport/transport.hpp"

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <vector>

namespace tessera::comm {
namespace {

class TransportOrderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    unsetenv("TESSERA_TRANSPORTS");
    unsetenv("TESSERA_BRIDGE");
  }
  void TearDown() override { SetUp(); }
  std::vector<std::unique_ptr<Transport>> rows = MakeTransports();
};

TEST_F(TransportOrderTest, AutoIsEveryRowInRegistryOrderForBothKindsOfLink) {
  auto o = TransportOrderFromEnv(rows);
  ASSERT_TRUE(o.ok()) << o.status().ToString();
  ASSERT_GE(o->island.size(), 2u);
  EXPECT_EQ(o->island.front(), "shm");
  EXPECT_EQ(o->island.back(), "tcp");
  EXPECT_EQ(o->bridge, o->island);
}

TEST_F(TransportOrderTest, TransportsSetsBothOrdersAndBridgeOnlyTheBridges) {
  setenv("TESSERA_TRANSPORTS", "tcp", 1);
  auto o = TransportOrderFromEnv(rows);
  ASSERT_TRUE(o.ok()) << o.status().ToString();
  EXPECT_EQ(o->island, std::vector<std::string>{"tcp"});
  EXPECT_EQ(o->bridge, std::vector<std::string>{"tcp"});
  EXPECT_EQ(o->Encode(), "tcp/tcp");
  unsetenv("TESSERA_TRANSPORTS");
  setenv("TESSERA_BRIDGE", "tcp", 1);
  o = TransportOrderFromEnv(rows);
  ASSERT_TRUE(o.ok()) << o.status().ToString();
  EXPECT_EQ(o->island.front(), "shm");
  EXPECT_EQ(o->bridge, std::vector<std::string>{"tcp"});
}

TEST_F(TransportOrderTest, BadOrdersAreRefusedNamingTheValue) {
  struct Case {
    const char* transports;
    const char* bridge;
    const char* expect;
  } cases[] = {
      {"shm,udp", nullptr, "'udp' is not a transport"},
      {"tcp,tcp", nullptr, "names 'tcp' twice"},
      {"", nullptr, nullptr},  // empty: unset, auto
      {"tcp", "shm", "are both set"},
      {nullptr, "udp", "TESSERA_BRIDGE='udp'"},
  };
  for (const auto& c : cases) {
    SetUp();
    if (c.transports) setenv("TESSERA_TRANSPORTS", c.transports, 1);
    if (c.bridge) setenv("TESSERA_BRIDGE", c.bridge, 1);
    auto o = TransportOrderFromEnv(rows);
    if (c.expect == nullptr) {
      EXPECT_TRUE(o.ok()) << o.status().ToString();
      continue;
    }
    ASSERT_FALSE(o.ok()) << c.transports;
    EXPECT_NE(o.status().message().find(c.expect), std::string::npos) << o.status().message();
  }
}

TEST(TransportRecords, EntriesSurviveTheStoreWhateverBytesTheyHold) {
  const std::vector<std::string> names = {"shm", "tcp", "x"};
  std::vector<RowRecord> rows(3);
  rows[0] = {true, "host|a/b:c", std::string("\0,|=!:\xff", 7), ""};
  rows[1] = {false, "", "", "no library, see X=1,2"};
  rows[2] = {true, "", "", ""};
  const std::string text = EncodeRowRecords(names, rows);
  EXPECT_EQ(text.find('|'), std::string::npos) << "a record field separator leaked into " << text;
  auto back = DecodeRowRecords(names, text);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  for (size_t i = 0; i < rows.size(); ++i) {
    EXPECT_EQ((*back)[i].viable, rows[i].viable) << i;
    EXPECT_EQ((*back)[i].domain, rows[i].domain) << i;
    EXPECT_EQ((*back)[i].blob, rows[i].blob) << i;
    EXPECT_EQ((*back)[i].why_not, rows[i].why_not) << i;
  }
  auto other_build = DecodeRowRecords({"shm", "tcp"}, text);
  ASSERT_FALSE(other_build.ok());
  EXPECT_NE(other_build.status().message().find("another build"), std::string::npos);
  EXPECT_FALSE(DecodeRowRecords(names, "shm=zz:00,tcp!,x=:").ok());
}

TEST(TransportChoice, FirstRowViableOnBothWithEqualDomainsFromEitherEnd) {
  const std::vector<std::string> names = {"shm", "ucx", "tcp"};
  auto rec = [](bool viable, const char* domain) { return RowRecord{viable, domain, "blob", viable ? "" : "absent"}; };
  const std::vector<RowRecord> a = {rec(true, "hostA"), rec(true, "fabric"), rec(true, "ip")};
  const std::vector<RowRecord> b_same_host = {rec(true, "hostA"), rec(false, ""), rec(true, "ip")};
  const std::vector<RowRecord> b_other_host = {rec(true, "hostB"), rec(true, "fabric"), rec(true, "ip")};
  const std::vector<RowRecord> b_no_ucx = {rec(true, "hostB"), rec(false, ""), rec(true, "ip")};
  const std::vector<std::string> order = {"shm", "ucx", "tcp"};
  EXPECT_EQ(*ChooseRow(names, order, a, b_same_host, "A", "B"), 0);
  EXPECT_EQ(*ChooseRow(names, order, a, b_other_host, "A", "B"), 1);
  EXPECT_EQ(*ChooseRow(names, order, b_other_host, a, "B", "A"), 1);
  EXPECT_EQ(*ChooseRow(names, order, a, b_no_ucx, "A", "B"), 2);
  EXPECT_EQ(*ChooseRow(names, order, b_no_ucx, a, "B", "A"), 2);
  EXPECT_EQ(*ChooseRow(names, {"tcp", "shm"}, a, b_same_host, "A", "B"), 2);
  auto none = ChooseRow(names, {"shm", "ucx"}, a, b_no_ucx, "rank 0", "rank 1");
  ASSERT_FALSE(none.ok());
  const std::string m = none.status().message();
  EXPECT_NE(m.find("no transport joins rank 0 and rank 1"), std::string::npos) << m;
  EXPECT_NE(m.find("shm: they are in different domains"), std::string::npos) << m;
  EXPECT_NE(m.find("ucx: not viable on rank 1 (absent)"), std::string::npos) << m;
}

}  // namespace
}  // namespace tessera::comm
