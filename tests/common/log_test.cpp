// Tessera logs to its own named logger and leaves the host program's spdlog set-up alone: default logger,
// its level, and the registry (a host's own logger named "tessera" included).
#include "common/log.hpp"

#include <gtest/gtest.h>
#include <spdlog/sinks/ostream_sink.h>

#include <sstream>

namespace tessera {
namespace {

TEST(Log, OwnLoggerNeverReplacesTheHostsDefault) {
  // The host program's set-up, made before Tessera logs anything (log::Logger() is built on first use).
  std::ostringstream host_out;
  auto host = std::make_shared<spdlog::logger>("host", std::make_shared<spdlog::sinks::ostream_sink_mt>(host_out));
  spdlog::set_default_logger(host);
  spdlog::set_level(spdlog::level::err);
  auto host_tessera =
      std::make_shared<spdlog::logger>("tessera", std::make_shared<spdlog::sinks::ostream_sink_mt>(host_out));
  spdlog::register_logger(host_tessera);  // a name clash with ours must not throw or take it over

  log::Init();
  std::ostringstream ours;
  log::Logger().sinks().push_back(std::make_shared<spdlog::sinks::ostream_sink_mt>(ours));
  TSR_LOG_WARN("from tessera {}", 42);
  TSR_LOG_ERROR("an error from tessera");

  EXPECT_EQ(spdlog::default_logger().get(), host.get());
  EXPECT_EQ(spdlog::default_logger()->level(), spdlog::level::err);
  EXPECT_EQ(spdlog::get("tessera").get(), host_tessera.get());
  EXPECT_NE(&log::Logger(), host_tessera.get());
  EXPECT_EQ(log::Logger().name(), "tessera");
  EXPECT_EQ(log::Logger().level(), spdlog::level::warn);  // TESSERA_LOG unset: warn, not the host's level
  EXPECT_NE(ours.str().find("from tessera 42"), std::string::npos) << ours.str();
  EXPECT_NE(ours.str().find("an error from tessera"), std::string::npos) << ours.str();
  EXPECT_EQ(host_out.str(), "") << "Tessera wrote to the host's loggers";

  spdlog::info("the host's own message");  // the host's logger still works as the host set it
  spdlog::error("the host's own error");
  EXPECT_EQ(host_out.str().find("the host's own message"), std::string::npos);
  EXPECT_NE(host_out.str().find("the host's own error"), std::string::npos);
  EXPECT_EQ(ours.str().find("the host's own"), std::string::npos);
  spdlog::drop("tessera");
}

}  // namespace
}  // namespace tessera
