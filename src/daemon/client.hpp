// daemon/client: what `tessera submit|queue|status|cancel|logs|fleet` use to talk to the daemon.
// The address comes from --daemon, $TESSERA_DAEMON, or STATE/daemon.json; the token from --token,
// $TESSERA_DAEMON_TOKEN, or STATE/token (the admin token, readable only by the daemon's user).
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "tessera/status.hpp"

namespace httplib {
enum class Error;
}

namespace tessera::daemon {

struct ClientOptions {
  std::string state_dir;  // "" = default (TESSERA_HOME or ~/.tessera)
  std::string address;    // host:port
  std::string token;
};

class Client {
 public:
  static Result<std::unique_ptr<Client>> Connect(const ClientOptions& options);
  Result<nlohmann::json> Get(const std::string& path);
  Result<nlohmann::json> Post(const std::string& path, const nlohmann::json& body);
  Result<nlohmann::json> Put(const std::string& path, const nlohmann::json& body);
  // Plain-text GET (logs); `size` gets the X-Log-Size header when present.
  Result<std::string> GetText(const std::string& path, size_t* size = nullptr);
  const std::string& address() const { return address_; }

 private:
  Result<nlohmann::json> Call(const std::string& method, const std::string& path, const nlohmann::json* body);
  Status Unreachable(httplib::Error e) const;  // where the address came from and how to start the daemon
  std::string host_;
  int port_ = 0;
  std::string address_, token_, where_;
};

// Reads a YAML file for a request: {source: basename, yaml: text}; base_dir gets the file's absolute dir.
Result<nlohmann::json> ReadDocument(const std::string& path, std::string* base_dir = nullptr);

}  // namespace tessera::daemon
