// sched/fixed: exact parsing and formatting of the planner's fixed-point quantities — money (micro-units),
// throughput (milli-units), shares (ppm) — and of UTC civil dates and times. No floating point anywhere.
#include <fmt/format.h>

#include <cctype>
#include <chrono>
#include <cstdint>
#include <limits>
#include <string>

#include "sched/sched.hpp"

namespace tessera::sched {
namespace {

// Parses an unsigned decimal "123", "1.5", "0.25" into value * 10^scale_digits; false when malformed,
// too many decimals or out of range.
bool ParseDecimal(const std::string& text, int scale_digits, int64_t* out, std::string* why) {
  if (text.empty()) {
    *why = "is empty";
    return false;
  }
  size_t i = 0;
  __int128 intpart = 0;
  int int_digits = 0;
  while (i < text.size() && std::isdigit(static_cast<unsigned char>(text[i]))) {
    intpart = intpart * 10 + (text[i] - '0');
    if (intpart > std::numeric_limits<int64_t>::max()) {
      *why = "is too large";
      return false;
    }
    ++i;
    ++int_digits;
  }
  __int128 frac = 0;
  int frac_digits = 0;
  if (i < text.size() && text[i] == '.') {
    ++i;
    while (i < text.size() && std::isdigit(static_cast<unsigned char>(text[i]))) {
      if (frac_digits == scale_digits) {
        if (text[i] != '0') {
          *why = fmt::format("has more than {} decimals", scale_digits);
          return false;
        }
      } else {
        frac = frac * 10 + (text[i] - '0');
        ++frac_digits;
      }
      ++i;
    }
    if (frac_digits == 0 && int_digits == 0) {
      *why = "is not a number";
      return false;
    }
  }
  if (i != text.size() || int_digits + frac_digits == 0) {
    *why = "is not a non-negative decimal number";
    return false;
  }
  for (int k = frac_digits; k < scale_digits; ++k) frac *= 10;
  __int128 scale = 1;
  for (int k = 0; k < scale_digits; ++k) scale *= 10;
  __int128 v = intpart * scale + frac;
  if (v > std::numeric_limits<int64_t>::max()) {
    *why = "is too large";
    return false;
  }
  *out = static_cast<int64_t>(v);
  return true;
}

std::string FormatScaled(int64_t v, int64_t scale, int scale_digits, int decimals) {
  if (decimals < 0) decimals = 0;
  if (decimals > scale_digits) decimals = scale_digits;
  bool neg = v < 0;
  __int128 a = neg ? -static_cast<__int128>(v) : static_cast<__int128>(v);
  __int128 div = 1;
  for (int k = decimals; k < scale_digits; ++k) div *= 10;
  a = (a + div / 2) / div;  // half away from zero
  __int128 unit = scale / div;
  auto whole = static_cast<int64_t>(a / unit);
  auto frac = static_cast<int64_t>(a % unit);
  std::string s = neg && a != 0 ? "-" : "";
  s += std::to_string(whole);
  if (decimals > 0) s += fmt::format(".{:0{}d}", frac, decimals);
  return s;
}

// Howard Hinnant's days_from_civil / civil_from_days.
int64_t DaysFromCivil(int64_t y, unsigned m, unsigned d) {
  y -= m <= 2;
  const int64_t era = (y >= 0 ? y : y - 399) / 400;
  const unsigned yoe = static_cast<unsigned>(y - era * 400);
  const unsigned doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
  const unsigned doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  return era * 146097 + static_cast<int64_t>(doe) - 719468;
}

void CivilFromDays(int64_t z, int64_t* y, unsigned* m, unsigned* d) {
  z += 719468;
  const int64_t era = (z >= 0 ? z : z - 146096) / 146097;
  const unsigned doe = static_cast<unsigned>(z - era * 146097);
  const unsigned yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
  const int64_t yy = static_cast<int64_t>(yoe) + era * 400;
  const unsigned doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
  const unsigned mp = (5 * doy + 2) / 153;
  *d = doy - (153 * mp + 2) / 5 + 1;
  *m = mp < 10 ? mp + 3 : mp - 9;
  *y = yy + (*m <= 2);
}

bool Digits(const std::string& s, size_t pos, size_t n, int* out) {
  if (pos + n > s.size()) return false;
  int v = 0;
  for (size_t i = pos; i < pos + n; ++i) {
    if (!std::isdigit(static_cast<unsigned char>(s[i]))) return false;
    v = v * 10 + (s[i] - '0');
  }
  *out = v;
  return true;
}

bool ParseDay(const std::string& s, int64_t* day) {
  int y, m, d;
  if (s.size() < 10 || !Digits(s, 0, 4, &y) || s[4] != '-' || !Digits(s, 5, 2, &m) || s[7] != '-' ||
      !Digits(s, 8, 2, &d))
    return false;
  if (m < 1 || m > 12 || d < 1) return false;
  static const int kDays[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
  bool leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
  int dim = kDays[m - 1] + (m == 2 && leap ? 1 : 0);
  if (d > dim) return false;
  *day = DaysFromCivil(y, static_cast<unsigned>(m), static_cast<unsigned>(d));
  return true;
}

}  // namespace

Result<Money> ParseMoney(const std::string& what, const std::string& text) {
  int64_t v = 0;
  std::string why;
  if (!ParseDecimal(text, 6, &v, &why)) return InvalidArgument(fmt::format("{}: '{}' {}", what, text, why));
  return v;
}

std::string FormatMoney(Money m, int decimals) { return FormatScaled(m, kMoneyScale, 6, decimals); }

Result<Throughput> ParseThroughput(const std::string& what, const std::string& text) {
  int64_t v = 0;
  std::string why;
  if (!ParseDecimal(text, 3, &v, &why)) return InvalidArgument(fmt::format("{}: '{}' {}", what, text, why));
  return v;
}

std::string FormatThroughput(Throughput t) {
  std::string s = FormatScaled(t, kThroughputScale, 3, 3);
  // trim trailing zeros: "0.300" -> "0.3", "2.000" -> "2"
  while (!s.empty() && s.back() == '0') s.pop_back();
  if (!s.empty() && s.back() == '.') s.pop_back();
  return s;
}

Result<Ppm> ParseShare(const std::string& what, const std::string& text) {
  int64_t v = 0;
  std::string why;
  bool percent = !text.empty() && text.back() == '%';
  std::string num = percent ? text.substr(0, text.size() - 1) : text;
  while (!num.empty() && num.back() == ' ') num.pop_back();
  if (!ParseDecimal(num, percent ? 4 : 6, &v, &why))
    return InvalidArgument(fmt::format("{}: '{}' {} (use e.g. 0.6 or 60%)", what, text, why));
  if (v > kPpmScale) return InvalidArgument(fmt::format("{}: '{}' is above 100%", what, text));
  return v;
}

std::string FormatShare(Ppm share) { return FormatScaled(share, 10'000, 4, 1) + "%"; }

Result<int64_t> ParseDate(const std::string& what, const std::string& text) {
  int64_t day = 0;
  if (text.size() != 10 || !ParseDay(text, &day))
    return InvalidArgument(fmt::format("{}: '{}' is not a date (use YYYY-MM-DD)", what, text));
  return day;
}

std::string FormatDate(int64_t day) {
  int64_t y;
  unsigned m, d;
  CivilFromDays(day, &y, &m, &d);
  return fmt::format("{:04d}-{:02d}-{:02d}", y, m, d);
}

int64_t Today() {
  auto now = std::chrono::system_clock::now();
  auto secs = std::chrono::duration_cast<std::chrono::seconds>(now.time_since_epoch()).count();
  return secs >= 0 ? secs / 86400 : (secs - 86399) / 86400;
}

Result<int64_t> ParseTime(const std::string& what, const std::string& text) {
  if (!text.empty() && text.find_first_not_of("0123456789") == std::string::npos) {
    if (text.size() > 15) return InvalidArgument(fmt::format("{}: '{}' is too large", what, text));
    return static_cast<int64_t>(std::stoll(text));
  }
  int64_t day = 0;
  if (!ParseDay(text, &day))
    return InvalidArgument(
        fmt::format("{}: '{}' is not a time (use YYYY-MM-DD, YYYY-MM-DDTHH:MM:SSZ or Unix seconds)", what, text));
  int64_t t = day * 86400;
  if (text.size() == 10) return t;
  int hh, mm, ss = 0;
  bool ok = text.size() >= 16 && (text[10] == 'T' || text[10] == ' ') && Digits(text, 11, 2, &hh) && text[13] == ':' &&
            Digits(text, 14, 2, &mm);
  size_t pos = 16;
  if (ok && text.size() >= 19 && text[16] == ':') {
    ok = Digits(text, 17, 2, &ss);
    pos = 19;
  }
  if (ok && pos < text.size()) ok = text.substr(pos) == "Z" || text.substr(pos) == "+00:00";
  if (!ok || hh > 23 || mm > 59 || ss > 59)
    return InvalidArgument(
        fmt::format("{}: '{}' is not a time (use YYYY-MM-DD, YYYY-MM-DDTHH:MM:SSZ or Unix seconds; UTC)", what, text));
  return t + hh * 3600 + mm * 60 + ss;
}

std::string FormatTime(int64_t t) {
  int64_t day = t >= 0 ? t / 86400 : (t - 86399) / 86400;
  int64_t s = t - day * 86400;
  return fmt::format("{}T{:02d}:{:02d}:{:02d}Z", FormatDate(day), s / 3600, s / 60 % 60, s % 60);
}

Money RateSeconds(Money price_per_card_hour, int64_t cards, int64_t seconds) {
  __int128 num = static_cast<__int128>(price_per_card_hour) * cards * seconds;
  bool neg = num < 0;
  if (neg) num = -num;
  __int128 q = (num + 1800) / 3600;
  return static_cast<Money>(neg ? -q : q);
}

const char* ShareUnitName(ShareUnit u) { return u == ShareUnit::kCards ? "cards" : "throughput"; }

const char* BindingName(Binding b) {
  switch (b) {
    case Binding::kCompatibility:
      return "compatibility";
    case Binding::kBounds:
      return "bounds";
    case Binding::kCapacity:
      return "capacity";
    case Binding::kFloor:
      return "floor";
    case Binding::kCombination:
      return "combination";
  }
  return "unknown";
}

Result<GroupBy> ParseGroupBy(const std::string& text) {
  if (text == "type") return GroupBy::kType;
  if (text == "day") return GroupBy::kDay;
  if (text == "job") return GroupBy::kJob;
  if (text == "tenant") return GroupBy::kTenant;
  if (text == "attempt") return GroupBy::kAttempt;
  return InvalidArgument(fmt::format("--by '{}' is not one of type, day, job, tenant, attempt", text));
}

}  // namespace tessera::sched
