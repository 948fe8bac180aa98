// Tests of the fixed-point quantities: money, throughput, shares, dates, times and per-second rating.
#include <gtest/gtest.h>

#include "sched/sched.hpp"

using namespace tessera::sched;

TEST(SchedFixed, MoneyParsesExactly) {
  EXPECT_EQ(*ParseMoney("p", "2.4"), 2'400'000);
  EXPECT_EQ(*ParseMoney("p", "6.80"), 6'800'000);
  EXPECT_EQ(*ParseMoney("p", "12"), 12'000'000);
  EXPECT_EQ(*ParseMoney("p", "0.000001"), 1);
  EXPECT_EQ(*ParseMoney("p", ".5"), 500'000);
  EXPECT_EQ(*ParseMoney("p", "1.2500000"), 1'250'000);  // trailing zeros beyond 6 decimals are fine
  for (const char* bad : {"", "-1", "1.0000001", "abc", "1e3", "1.2.3", ".", "1,5"}) {
    auto r = ParseMoney("price", bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_NE(r.status().message().find("price"), std::string::npos);
  }
}

TEST(SchedFixed, MoneyFormatsWithRounding) {
  EXPECT_EQ(FormatMoney(4'416'000'000), "4416.00");
  EXPECT_EQ(FormatMoney(8'832'906'667), "8832.91");
  EXPECT_EQ(FormatMoney(5'000), "0.01");  // half away from zero
  EXPECT_EQ(FormatMoney(4'999), "0.00");
  EXPECT_EQ(FormatMoney(-5'000), "-0.01");
  EXPECT_EQ(FormatMoney(1'234'567, 6), "1.234567");
  EXPECT_EQ(FormatMoney(1'500'000, 0), "2");
}

TEST(SchedFixed, ThroughputAndShare) {
  EXPECT_EQ(*ParseThroughput("t", "0.3"), 300);
  EXPECT_EQ(FormatThroughput(300), "0.3");
  EXPECT_EQ(FormatThroughput(144'000), "144");
  EXPECT_FALSE(ParseThroughput("t", "0.0001").ok());
  EXPECT_EQ(*ParseShare("f", "60%"), 600'000);
  EXPECT_EQ(*ParseShare("f", "0.6"), 600'000);
  EXPECT_EQ(*ParseShare("f", "12.5%"), 125'000);
  EXPECT_FALSE(ParseShare("f", "101%").ok());
  EXPECT_FALSE(ParseShare("f", "1.5").ok());
  EXPECT_EQ(FormatShare(500'000), "50.0%");
  EXPECT_EQ(FormatShare(502'024), "50.2%");
}

TEST(SchedFixed, DatesAndTimes) {
  EXPECT_EQ(*ParseDate("d", "1970-01-01"), 0);
  EXPECT_EQ(*ParseDate("d", "2026-03-01"), 20513);
  EXPECT_EQ(FormatDate(20513), "2026-03-01");
  EXPECT_EQ(FormatDate(*ParseDate("d", "2024-02-29")), "2024-02-29");
  for (const char* bad : {"2025-02-29", "2026-13-01", "2026-1-1", "20260301", "yesterday"})
    EXPECT_FALSE(ParseDate("d", bad).ok()) << bad;
  EXPECT_EQ(*ParseTime("t", "2026-03-01T12:30:05Z"), 20513LL * 86400 + 12 * 3600 + 30 * 60 + 5);
  EXPECT_EQ(*ParseTime("t", "2026-03-01 12:30"), 20513LL * 86400 + 12 * 3600 + 30 * 60);
  EXPECT_EQ(*ParseTime("t", "1700000000"), 1700000000);
  EXPECT_EQ(FormatTime(20513LL * 86400 + 3661), "2026-03-01T01:01:01Z");
  EXPECT_FALSE(ParseTime("t", "2026-03-01T25:00:00Z").ok());
  EXPECT_FALSE(ParseTime("t", "2026-03-01T10:00:00+08:00").ok());
}

TEST(SchedFixed, PerSecondRating) {
  const Money p910b = 2'400'000, ph800 = 6'800'000;
  EXPECT_EQ(RateSeconds(p910b, 1, 3600), p910b);
  EXPECT_EQ(RateSeconds(p910b, 480, 3600) + RateSeconds(ph800, 480, 3600),
            4'416'000'000);  // the reference scenario's hour
  EXPECT_EQ(RateSeconds(ph800, 960, 3600), 6'528'000'000);
  EXPECT_EQ(RateSeconds(p910b, 1, 1), 667);   // 666.67 micro rounds half up
  EXPECT_EQ(RateSeconds(ph800, 1, 1), 1889);  // 1888.89
  EXPECT_EQ(RateSeconds(ph800, 3, 1), 5667);  // 5666.67
  EXPECT_EQ(RateSeconds(p910b, 0, 100), 0);
  // Large values do not overflow: 100k cards for a year at 6.8/h.
  EXPECT_EQ(RateSeconds(ph800, 100'000, 365LL * 86400), 6'800'000LL * 100'000 * 365 * 24);
}
