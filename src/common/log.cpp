// common/log: spdlog set-up from TESSERA_LOG.
#include "common/log.hpp"

#include <mutex>
#include <spdlog/sinks/stdout_color_sinks.h>

#include "common/env.hpp"

namespace tessera::log {

void Init() {
  static std::once_flag once;
  std::call_once(once, [] {
    auto logger = spdlog::stderr_color_mt("tessera");
    logger->set_pattern("tessera %^%l%$: %v");
    spdlog::set_default_logger(logger);
    spdlog::set_level(spdlog::level::warn);
    auto level = env::Choice("TESSERA_LOG", "warn", {"trace", "debug", "info", "warn", "error", "off"});
    if (!level.ok()) {
      spdlog::warn("{}; using warn", level.status().message());
      return;
    }
    spdlog::set_level(spdlog::level::from_str(*level));
  });
}

}  // namespace tessera::log
