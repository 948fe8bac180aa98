// tests/daemon/billing_test: which rows of an ended attempt the daemon adds to the billing ledger, on a real ledger
// file — every island once: two islands of one card type in one attempt are both billed, also when the daemon
// stopped between their two rows; a pass after the last row adds nothing; and an earlier attempt of the job that
// started in the same second does not hide a later one.
#include "daemon/billing.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "daemon/daemon.hpp"

namespace tessera::daemon {
namespace {

namespace fs = std::filesystem;

constexpr char kJob[] = "train#7";
constexpr int64_t kStart = 1764000000;

class BillingTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("tessera-billing-" + std::to_string(::getpid()) + "-" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    auto l = sched::Ledger::Open((dir_ / "ledger.db").string());
    ASSERT_TRUE(l.ok()) << l.status().ToString();
    ledger_ = std::move(l).value();
    auto c = sched::ParseCatalog(kDefaultCatalogYaml, "the embedded catalog");
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    catalog_ = *c;
    ASSERT_FALSE(catalog_.types.empty());
    type_ = catalog_.types[0].name;
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::vector<sched::UsageRecord> Rows() {
    sched::BillFilter f;
    f.job = kJob;
    auto r = ledger_->Query(f);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? *r : std::vector<sched::UsageRecord>{};
  }
  void Record(const IslandUsage& i, int64_t start, int64_t end) {
    auto r = ledger_->Record(catalog_, kJob, "alice", i.type, i.cards, start, end);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
  }
  // One billing pass of an attempt, as the scheduler makes it: the rows the ledger does not hold yet.
  void Bill(const std::vector<IslandUsage>& islands, int64_t start, int64_t end) {
    for (const auto& i : UnbilledIslands(islands, Rows(), start, end)) Record(i, start, end);
  }
  int64_t Cards() {
    int64_t n = 0;
    for (const auto& r : Rows()) n += r.cards;
    return n;
  }

  fs::path dir_;
  std::unique_ptr<sched::Ledger> ledger_;
  sched::Catalog catalog_;
  std::string type_;
};

TEST_F(BillingTest, TwoIslandsOfOneTypeInOneAttemptAreBothBilled) {
  const std::vector<IslandUsage> islands = {{type_, 2}, {type_, 2}};
  EXPECT_EQ(UnbilledIslands(islands, {}, kStart, kStart + 60).size(), 2u);
  Bill(islands, kStart, kStart + 60);
  EXPECT_EQ(Rows().size(), 2u);
  EXPECT_EQ(Cards(), 4);
  Bill(islands, kStart, kStart + 60);  // a pass after the last row adds nothing
  EXPECT_EQ(Rows().size(), 2u);
}

TEST_F(BillingTest, AStopBetweenTwoRowsOfOneTypeBillsTheSecondAtRestart) {
  const std::vector<IslandUsage> islands = {{type_, 2}, {type_, 2}};
  Record(islands[0], kStart, kStart + 60);  // the daemon stopped after the attempt's first row
  auto left = UnbilledIslands(islands, Rows(), kStart, kStart + 60);
  ASSERT_EQ(left.size(), 1u);
  EXPECT_EQ(left[0].type, type_);
  EXPECT_EQ(left[0].cards, 2);
  Bill(islands, kStart, kStart + 60);  // the restart's pass
  EXPECT_EQ(Rows().size(), 2u);
  EXPECT_EQ(Cards(), 4);
}

TEST_F(BillingTest, AnEarlierAttemptThatStartedInTheSameSecondDoesNotHideALaterOne) {
  const std::vector<IslandUsage> islands = {{type_, 2}};
  Bill(islands, kStart, kStart + 1);   // attempt 1: ended within its first second
  Bill(islands, kStart, kStart + 90);  // attempt 2: started in the same second
  const auto rows = Rows();
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_TRUE(rows[0].end == kStart + 90 || rows[1].end == kStart + 90);
}

}  // namespace
}  // namespace tessera::daemon
