// cli/exit_code: the exit status of every `tessera` subcommand (docs/architecture.md, "Errors and exit codes").
//   0  success
//   1  failure: the operation ran and failed, or its answer is "no" (I/O or system error, a peer or rank
//      failed, a timeout, corrupt data, verification failed, a plan that does not fit, not compliant)
//   2  usage or bad input: an unknown command or flag, a bad value, a malformed file
//   3  not found: a named thing does not exist (a checkpoint root or step, a job, a file)
//   4  unsupported: this build or machine lacks the feature (no daemon, no solver, no S3)
// `tessera run` passes on the status of the first rank that failed (docs/launcher.md, "Exit status").
#pragma once

#include <CLI/CLI.hpp>
#include <cstdio>
#include <string>
#include <vector>

#include "common/text.hpp"
#include "tessera/status.hpp"

namespace tessera::cli {

enum Exit : int { kExitOk = 0, kExitFailure = 1, kExitUsage = 2, kExitNotFound = 3, kExitUnsupported = 4 };

// The exit status for an error Status (kExitOk for an OK one).
inline int ExitCodeOf(const Status& s) {
  switch (s.code()) {
    case Code::kOk:
      return kExitOk;
    case Code::kInvalidArgument:
      return kExitUsage;
    case Code::kNotFound:
      return kExitNotFound;
    case Code::kUnsupported:
      return kExitUnsupported;
    default:
      return kExitFailure;
  }
}

// "tessera CMD: message" on stderr; returns the exit status for `s`.
inline int Fail(const char* cmd, const Status& s) {
  std::fprintf(stderr, "tessera %s: %s\n", cmd, s.message().c_str());
  return ExitCodeOf(s);
}

// A daemon command (`tessera daemon|submit|queue|status|cancel|logs|fleet`) in a build without the job daemon:
// says what the build lacks and how to get it; returns kExitUnsupported.
inline int NoDaemon(const char* cmd) {
  std::fprintf(
      stderr,
      "tessera %s: this build has no job daemon (it needs libsqlite3-dev, libcpp-httplib-dev and libssl-dev at "
      "configure time; run scripts/install-deps.sh and reconfigure)\n",
      cmd);
  return kExitUnsupported;
}

// The long flags and subcommand names of `app` ("--island", "compliance"), for "did you mean".
inline std::vector<std::string> NamesOf(const CLI::App& app) {
  std::vector<std::string> names;
  for (const CLI::Option* o : app.get_options())
    for (const auto& l : o->get_lnames()) names.push_back("--" + l);
  for (const CLI::App* s : app.get_subcommands([](const CLI::App*) { return true; })) names.push_back(s->get_name());
  return names;
}

// After a CLI11 parse error: --help and --version exit 0 (printed by CLI11). Anything else is a usage error (2),
// printed as "tessera CMD: what; did you mean '--island'? (tessera CMD --help lists the flags)".
inline int ParseExit(const CLI::App& app, const CLI::ParseError& e) {
  if (e.get_exit_code() == 0) return app.exit(e) == 0 ? kExitOk : kExitUsage;
  std::string name = app.get_name().empty() ? "tessera" : app.get_name();
  std::string hint;
  if (dynamic_cast<const CLI::ExtrasError*>(&e) != nullptr) {
    std::string what = e.what(), word;
    for (size_t at = what.find(": "); at != std::string::npos && hint.empty();) {
      size_t end = what.find_first_of(" ,", at + 2);
      word = what.substr(at + 2, end == std::string::npos ? std::string::npos : end - at - 2);
      hint = DidYouMean(word, NamesOf(app));
      at = end == std::string::npos ? end : end - 1;
    }
  }
  std::fprintf(stderr, "%s: %s%s (`%s --help` lists what it takes)\n", name.c_str(), e.what(), hint.c_str(),
               name.c_str());
  return kExitUsage;
}

}  // namespace tessera::cli
