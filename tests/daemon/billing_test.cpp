// tests/daemon/billing_test: which rows of an ended attempt the daemon adds to the billing ledger, on a real ledger
// file — every island once: two islands of one card type in one attempt are both billed, also when the daemon
// stopped between their two rows; a pass after the last row adds nothing; an earlier attempt of the job that
// started in the same second does not hide a later one, nor does one with the very same whole seconds (two attempts
// that each lasted under a second); a row billed before the ledger had its attempt column is not billed again.
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
  void Record(const IslandUsage& i, int64_t start, int64_t end, int64_t attempt = 1) {
    auto r = ledger_->Record(catalog_, kJob, "alice", i.type, i.cards, start, end, attempt);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
  }
  // One billing pass of an attempt, as the scheduler makes it: the rows the ledger does not hold yet.
  void Bill(const std::vector<IslandUsage>& islands, int64_t start, int64_t end, int64_t attempt = 1) {
    for (const auto& i : UnbilledIslands(islands, Rows(), attempt, start, end)) Record(i, start, end, attempt);
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
  EXPECT_EQ(UnbilledIslands(islands, {}, 1, kStart, kStart + 60).size(), 2u);
  Bill(islands, kStart, kStart + 60);
  EXPECT_EQ(Rows().size(), 2u);
  EXPECT_EQ(Cards(), 4);
  Bill(islands, kStart, kStart + 60);  // a pass after the last row adds nothing
  EXPECT_EQ(Rows().size(), 2u);
}

TEST_F(BillingTest, AStopBetweenTwoRowsOfOneTypeBillsTheSecondAtRestart) {
  const std::vector<IslandUsage> islands = {{type_, 2}, {type_, 2}};
  Record(islands[0], kStart, kStart + 60);  // the daemon stopped after the attempt's first row
  auto left = UnbilledIslands(islands, Rows(), 1, kStart, kStart + 60);
  ASSERT_EQ(left.size(), 1u);
  EXPECT_EQ(left[0].type, type_);
  EXPECT_EQ(left[0].cards, 2);
  Bill(islands, kStart, kStart + 60);  // the restart's pass
  EXPECT_EQ(Rows().size(), 2u);
  EXPECT_EQ(Cards(), 4);
}

TEST_F(BillingTest, AnEarlierAttemptThatStartedInTheSameSecondDoesNotHideALaterOne) {
  const std::vector<IslandUsage> islands = {{type_, 2}};
  Bill(islands, kStart, kStart + 1, 1);   // attempt 1: ended within its first second
  Bill(islands, kStart, kStart + 90, 2);  // attempt 2: started in the same second
  const auto rows = Rows();
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_TRUE(rows[0].end == kStart + 90 || rows[1].end == kStart + 90);
}

TEST_F(BillingTest, TwoAttemptsWithTheSameWholeSecondsAreBothBilled) {
  // Attempt 1 failed within its first second, attempt 2 started and failed in that second too: both are billed
  // as [kStart, kStart + 1) on the same island, and only the attempt number tells their rows apart.
  const std::vector<IslandUsage> islands = {{type_, 2}};
  Bill(islands, kStart, kStart + 1, 1);
  Bill(islands, kStart, kStart + 1, 2);
  auto rows = Rows();
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].attempt + rows[1].attempt, 3);
  Bill(islands, kStart, kStart + 1, 2);  // a pass after the last row adds nothing
  EXPECT_EQ(Rows().size(), 2u);
}

TEST_F(BillingTest, ARowBilledBeforeTheAttemptColumnIsNotBilledAgain) {
  // A daemon upgraded between the two rows of one attempt: the first row has no attempt number.
  const std::vector<IslandUsage> islands = {{type_, 2}, {type_, 4}};
  Record(islands[0], kStart, kStart + 60, /*attempt=*/0);
  Bill(islands, kStart, kStart + 60, 3);
  auto rows = Rows();
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(Cards(), 6);
}

}  // namespace
}  // namespace tessera::daemon
