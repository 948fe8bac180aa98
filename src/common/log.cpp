// common/log: Tessera's named logger (see log.hpp), set up from TESSERA_LOG.
#include "common/log.hpp"

#include <spdlog/sinks/stdout_color_sinks.h>

#include <memory>

#include "common/env.hpp"

namespace tessera::log {
namespace {

// Built on first use, by whichever thread logs first; never registered with spdlog (a host's
// spdlog::get("tessera") and spdlog::set_level do not see or change it), never the default logger.
std::shared_ptr<spdlog::logger> Make() {
  auto logger = std::make_shared<spdlog::logger>("tessera", std::make_shared<spdlog::sinks::stderr_color_sink_mt>());
  logger->set_pattern("tessera %^%l%$: %v");
  const std::string fallback = *env::DeclaredDefault("TESSERA_LOG");  // declared in common/env_vars.inc
  logger->set_level(spdlog::level::from_str(fallback));
  auto level = env::Choice("TESSERA_LOG", {"trace", "debug", "info", "warn", "error", "off"});
  if (!level.ok()) {
    logger->warn("{}; using {}", level.status().message(), fallback);
    return logger;
  }
  logger->set_level(spdlog::level::from_str(*level));
  return logger;
}

}  // namespace

spdlog::logger& Logger() {
  // Thread-safe; never destroyed, so threads that log while the process exits (a writer's background
  // persist, a store's accept thread) still find it.
  static const auto* logger = new std::shared_ptr<spdlog::logger>(Make());
  return **logger;
}

void Init() { Logger(); }

}  // namespace tessera::log
