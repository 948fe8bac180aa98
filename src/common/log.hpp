// common/log: Tessera's own logger — an spdlog logger named "tessera" writing to stderr, its level set by
// TESSERA_LOG (trace|debug|info|warn|error|off; default warn). It is not registered with spdlog and never
// becomes the default logger, so a host program (a training framework that uses spdlog itself) keeps its
// own default logger, registry and levels. Ranks under `tessera run` get a "[rank N]" prefix from the
// launcher, so messages here carry no rank of their own.
#pragma once

#include <spdlog/spdlog.h>

namespace tessera::log {
// Idempotent; called by every entry point (CLI main, tsrCommInitFromEnv). Bad TESSERA_LOG values
// are reported once as a warning and ignored.
void Init();
// The logger itself (Init() on first use).
spdlog::logger& Logger();
}  // namespace tessera::log

#define TSR_LOG_TRACE(...) ::tessera::log::Logger().trace(__VA_ARGS__)
#define TSR_LOG_DEBUG(...) ::tessera::log::Logger().debug(__VA_ARGS__)
#define TSR_LOG_INFO(...) ::tessera::log::Logger().info(__VA_ARGS__)
#define TSR_LOG_WARN(...) ::tessera::log::Logger().warn(__VA_ARGS__)
#define TSR_LOG_ERROR(...) ::tessera::log::Logger().error(__VA_ARGS__)
