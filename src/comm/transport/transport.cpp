// comm/transport/transport: the registry of rows, the transport order, the rows' part of a rank's record and
// the pair's choice; see transport.hpp.
#include "comm/transport/transport.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <sstream>

#include "comm/transport/rows.hpp"
#include "comm/transport/ucx.hpp"
#include "common/env.hpp"

namespace tessera::comm {
namespace {

std::vector<std::string> Split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, sep)) out.push_back(item);
  if (!s.empty() && s.back() == sep) out.emplace_back();
  return out;
}

std::string Join(const std::vector<std::string>& v, const char* sep) {
  std::string out;
  for (const auto& s : v) out += (out.empty() ? "" : sep) + s;
  return out;
}

std::string Hex(const std::string& bytes) {
  static const char* digits = "0123456789abcdef";
  std::string out;
  out.reserve(2 * bytes.size());
  for (unsigned char c : bytes) {
    out += digits[c >> 4];
    out += digits[c & 15];
  }
  return out;
}

bool Unhex(const std::string& hex, std::string* out) {
  auto val = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  if (hex.size() % 2 != 0) return false;
  out->clear();
  for (size_t i = 0; i < hex.size(); i += 2) {
    const int hi = val(hex[i]), lo = val(hex[i + 1]);
    if (hi < 0 || lo < 0) return false;
    out->push_back(static_cast<char>(hi * 16 + lo));
  }
  return true;
}

}  // namespace

std::vector<std::unique_ptr<Transport>> MakeTransports() {
  std::vector<std::unique_ptr<Transport>> rows;
  rows.push_back(MakeShmTransport());
#if TESSERA_HAVE_UCX_HEADERS
  rows.push_back(MakeUcxTransport());  // before tcp: the default order takes it only where it offers RDMA
#endif
  rows.push_back(MakeTcpTransport());
  return rows;
}

std::string TransportOrder::Encode() const { return Join(island, ",") + "/" + Join(bridge, ","); }

Result<TransportOrder> TransportOrderFromEnv(const std::vector<std::unique_ptr<Transport>>& rows) {
  std::vector<std::string> names;
  for (const auto& r : rows) names.push_back(r->name());
  const std::string value = env::GetOrDefault("TESSERA_TRANSPORTS");
  TSR_ASSIGN_OR_RETURN(std::string bridge, env::Choice("TESSERA_BRIDGE", {"auto", "shm", "tcp"}));
  TransportOrder order;
  if (value == "auto") {
    order.island = names;  // registry order: shm, then the rest, tcp last
  } else {
    order.automatic = false;
    for (const std::string& n : Split(value, ',')) {
      if (std::find(names.begin(), names.end(), n) == names.end())
        return InvalidArgument(fmt::format("TESSERA_TRANSPORTS='{}': '{}' is not a transport (known: {}, or auto)",
                                           value, n, Join(names, ", ")));
      if (std::find(order.island.begin(), order.island.end(), n) != order.island.end())
        return InvalidArgument(fmt::format("TESSERA_TRANSPORTS='{}' names '{}' twice", value, n));
      order.island.push_back(n);
    }
    if (bridge != "auto")
      return InvalidArgument(
          fmt::format("TESSERA_TRANSPORTS='{}' and TESSERA_BRIDGE='{}' are both set: set one (TESSERA_BRIDGE=X is the "
                      "transport order of the links between islands alone)",
                      value, bridge));
  }
  order.bridge = bridge == "auto" ? order.island : std::vector<std::string>{bridge};
  return order;
}

std::string EncodeRowRecords(const std::vector<std::string>& names, const std::vector<RowRecord>& rows) {
  std::vector<std::string> parts;
  for (size_t i = 0; i < rows.size(); ++i) {
    const RowRecord& r = rows[i];
    parts.push_back(r.viable ? fmt::format("{}={}:{}", names[i], Hex(r.domain), Hex(r.blob))
                             : fmt::format("{}!{}", names[i], Hex(r.why_not)));
  }
  return Join(parts, ",");
}

Result<std::vector<RowRecord>> DecodeRowRecords(const std::vector<std::string>& names, const std::string& text) {
  auto bad = [&](const std::string& why) {
    return RemoteError(fmt::format("malformed transport entries '{}' ({})", text, why));
  };
  const std::vector<std::string> parts = Split(text, ',');
  if (parts.size() != names.size())
    return bad(fmt::format("{} entries for the {} transports of this build: {} — a rank of another build?",
                           parts.size(), names.size(), Join(names, ", ")));
  std::vector<RowRecord> rows(names.size());
  for (size_t i = 0; i < parts.size(); ++i) {
    const std::string& p = parts[i];
    const size_t sep = p.find_first_of("=!");
    if (sep == std::string::npos || p.substr(0, sep) != names[i]) return bad("expected '" + names[i] + "' here");
    RowRecord& r = rows[i];
    if (p[sep] == '!') {
      if (!Unhex(p.substr(sep + 1), &r.why_not)) return bad("not hex");
      continue;
    }
    const size_t colon = p.find(':', sep);
    if (colon == std::string::npos || !Unhex(p.substr(sep + 1, colon - sep - 1), &r.domain) ||
        !Unhex(p.substr(colon + 1), &r.blob))
      return bad("not domain:blob in hex");
    r.viable = true;
  }
  return rows;
}

Result<int> ChooseRow(const std::vector<std::string>& names, const std::vector<std::string>& order,
                      const std::vector<RowRecord>& a, const std::vector<RowRecord>& b, const std::string& a_name,
                      const std::string& b_name) {
  std::vector<std::string> why;
  for (const std::string& n : order) {
    const int i = static_cast<int>(std::find(names.begin(), names.end(), n) - names.begin());
    if (i == static_cast<int>(names.size())) continue;  // TransportOrderFromEnv checked the names
    if (!a[i].viable) {
      why.push_back(fmt::format("{}: not viable on {} ({})", n, a_name, a[i].why_not));
    } else if (!b[i].viable) {
      why.push_back(fmt::format("{}: not viable on {} ({})", n, b_name, b[i].why_not));
    } else if (a[i].domain != b[i].domain) {
      why.push_back(fmt::format("{}: they are in different domains ('{}' and '{}')", n, a[i].domain, b[i].domain));
    } else {
      return i;
    }
  }
  return InvalidArgument(
      fmt::format("no transport joins {} and {} (order {}): {}", a_name, b_name, Join(order, ","), Join(why, "; ")));
}

}  // namespace tessera::comm
