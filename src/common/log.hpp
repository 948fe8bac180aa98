// common/log: the process-wide logger (spdlog to stderr), its level set by TESSERA_LOG
// (trace|debug|info|warn|error|off; default warn). Ranks under `tessera run` get a "[rank N]" prefix
// from the launcher, so messages here carry no rank of their own.
#pragma once

#include <spdlog/spdlog.h>

namespace tessera::log {
// Idempotent; called by every entry point (CLI main, tsrCommInitFromEnv). Bad TESSERA_LOG values
// are reported once as a warning and ignored.
void Init();
}  // namespace tessera::log

#define TSR_LOG_TRACE(...) ::spdlog::trace(__VA_ARGS__)
#define TSR_LOG_DEBUG(...) ::spdlog::debug(__VA_ARGS__)
#define TSR_LOG_INFO(...) ::spdlog::info(__VA_ARGS__)
#define TSR_LOG_WARN(...) ::spdlog::warn(__VA_ARGS__)
#define TSR_LOG_ERROR(...) ::spdlog::error(__VA_ARGS__)
