// common/vendor: see vendor.hpp.
#include "common/vendor.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <iterator>

namespace tessera {

const DeviceFamily* FindDeviceFamily(std::string_view prefix) {
  for (const DeviceFamily& f : kDeviceFamilies)
    if (prefix == f.prefix) return &f;
  return nullptr;
}

const DeviceFamily* FindFamilyOfVendor(std::string_view vendor) {
  if (vendor.empty()) return nullptr;
  for (const DeviceFamily& f : kDeviceFamilies) {
    std::string_view names = f.vendors;
    while (!names.empty()) {
      const size_t sp = names.find(' ');
      if (names.substr(0, sp) == vendor) return &f;
      names = sp == std::string_view::npos ? std::string_view() : names.substr(sp + 1);
    }
  }
  return FindDeviceFamily(vendor);
}

std::string DeviceWords() {
  std::string out = "host";
  const size_t n = std::size(kDeviceFamilies);
  for (size_t i = 0; i < n; ++i) out += fmt::format("{}{}", i + 1 == n ? " or " : ", ", kDeviceFamilies[i].prefix);
  return out;
}

std::string DeviceName::ToString() const { return host() ? "host" : fmt::format("{}:{}", family->prefix, index); }

Result<DeviceName> ParseDeviceName(const std::string& text, const std::string& what) {
  if (text == "host") return DeviceName{};
  std::string forms = "host";
  for (const DeviceFamily& f : kDeviceFamilies) forms += fmt::format(" or {}:N", f.prefix);
  const size_t colon = text.find(':');
  const DeviceFamily* family = colon == std::string::npos ? nullptr : FindDeviceFamily(text.substr(0, colon));
  const std::string num = family == nullptr ? "" : text.substr(colon + 1);
  const bool digits = !num.empty() && num.size() <= 6 &&
                      std::all_of(num.begin(), num.end(), [](char c) { return c >= '0' && c <= '9'; });
  if (!digits) return InvalidArgument(fmt::format("{}='{}' is not a device (use {})", what, text, forms));
  return DeviceName{family, std::stoi(num)};
}

}  // namespace tessera
