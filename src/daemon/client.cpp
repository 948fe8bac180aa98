// daemon/client: HTTP client of the daemon API, with address and token discovery.
#include "daemon/client.hpp"

#include <fmt/format.h>
#include <httplib.h>
#include <limits.h>
#include <stdlib.h>

#include "common/env.hpp"
#include "daemon/daemon.hpp"
#include "daemon/util.hpp"

namespace tessera::daemon {

using json = nlohmann::json;

Result<std::unique_ptr<Client>> Client::Connect(const ClientOptions& o) {
  auto c = std::make_unique<Client>();
  std::string state = DefaultStateDir(o.state_dir);
  std::string addr = o.address;
  if (addr.empty()) addr = env::Get("TESSERA_DAEMON").value_or("");
  c->where_ = addr.empty() ? state + "/daemon.json" : "--daemon/TESSERA_DAEMON";
  if (addr.empty()) {
    auto info = ReadFile(state + "/daemon.json");
    if (!info.ok())
      return NotFound(
          fmt::format("no daemon address: {}/daemon.json is missing (start `tessera daemon "
                      "--state-dir {}`, or pass --daemon HOST:PORT)",
                      state, state));
    try {
      addr = json::parse(*info).at("address").get<std::string>();
    } catch (const std::exception& e) {
      return Corrupt(fmt::format("{}/daemon.json: {}", state, e.what()));
    }
  }
  auto colon = addr.rfind(':');
  if (colon == std::string::npos) return InvalidArgument(fmt::format("daemon address '{}' is not HOST:PORT", addr));
  c->host_ = addr.substr(0, colon);
  auto port = env::ParseInt("daemon address port", addr.substr(colon + 1), 1, 65535);
  if (!port.ok()) return port.status();
  c->port_ = static_cast<int>(*port);
  c->address_ = addr;
  c->token_ = o.token;
  if (c->token_.empty()) c->token_ = env::Get("TESSERA_DAEMON_TOKEN").value_or("");
  if (c->token_.empty()) {
    auto t = ReadFile(state + "/token");
    if (t.ok()) {
      c->token_ = *t;
      while (!c->token_.empty() && (c->token_.back() == '\n' || c->token_.back() == ' ')) c->token_.pop_back();
    }
  }
  return c;
}

Result<json> Client::Call(const std::string& method, const std::string& path, const json* body) {
  httplib::Client cli(host_, port_);
  cli.set_connection_timeout(5, 0);
  cli.set_read_timeout(60, 0);
  httplib::Headers h;
  if (!token_.empty()) h.emplace("Authorization", "Bearer " + token_);
  httplib::Result r = method == "GET"    ? cli.Get(path, h)
                      : method == "POST" ? cli.Post(path, h, body ? body->dump() : "{}", "application/json")
                                         : cli.Put(path, h, body ? body->dump() : "{}", "application/json");
  if (!r) return Unreachable(r.error());
  json j;
  try {
    j = r->body.empty() ? json::object() : json::parse(r->body);
  } catch (const std::exception&) {
    j = {{"error", r->body}};
  }
  if (r->status >= 400) {
    std::string msg = j.value("error", fmt::format("HTTP {}", r->status));
    if (r->status == 404) return NotFound(msg);
    if (r->status == 401 || r->status == 403) return InvalidArgument("refused: " + msg);
    return InvalidArgument(msg);
  }
  return j;
}

Result<json> Client::Get(const std::string& path) { return Call("GET", path, nullptr); }
Result<json> Client::Post(const std::string& path, const json& body) { return Call("POST", path, &body); }
Result<json> Client::Put(const std::string& path, const json& body) { return Call("PUT", path, &body); }

Result<std::string> Client::GetText(const std::string& path, size_t* size) {
  httplib::Client cli(host_, port_);
  cli.set_connection_timeout(5, 0);
  httplib::Headers h;
  if (!token_.empty()) h.emplace("Authorization", "Bearer " + token_);
  auto r = cli.Get(path, h);
  if (!r) return Unreachable(r.error());
  if (r->status >= 400) {
    std::string msg = r->body;
    try {
      msg = json::parse(r->body).value("error", r->body);
    } catch (const std::exception&) {
    }
    return r->status == 404 ? NotFound(msg) : InvalidArgument(msg);
  }
  if (size && r->has_header("X-Log-Size")) *size = std::stoull(r->get_header_value("X-Log-Size"));
  return r->body;
}

Status Client::Unreachable(httplib::Error e) const {
  std::string why = e == httplib::Error::Connection          ? "nothing answers there (connection refused)"
                    : e == httplib::Error::ConnectionTimeout ? "the connection timed out"
                                                             : "the request failed (" + httplib::to_string(e) + ")";
  return SystemError(fmt::format(
      "cannot reach the tessera daemon at {} (the address comes from {}): {}. Start it with `tessera daemon` (it "
      "writes STATE/daemon.json; STATE is --state-dir, $TESSERA_HOME or ~/.tessera), or point --daemon or "
      "TESSERA_DAEMON at a running one",
      address_, where_, why));
}

Result<json> ReadDocument(const std::string& path, std::string* base_dir) {
  auto text = ReadFile(path);
  if (!text.ok()) return text.status();  // NotFound (exit 3) for a file that does not exist
  char buf[PATH_MAX];
  std::string abs = ::realpath(path.c_str(), buf) ? buf : path;
  if (base_dir) *base_dir = abs.substr(0, abs.rfind('/'));
  return json{{"source", path}, {"yaml", *text}};
}

}  // namespace tessera::daemon
