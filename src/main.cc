// prefix-router: a prefix-aware gateway for LLM inference fleets. This file only wires the
// subcommands together; each lives in cli/.
#include <CLI/CLI.hpp>

#include <iostream>

#include "cli/commands.h"
#include "cli/version.h"

namespace prefix_router::cli {
namespace {
std::string command_line;
}  // namespace
const std::string& CommandLine() { return command_line; }
}  // namespace prefix_router::cli

int main(int argc, char** argv) {
  for (int i = 0; i < argc; ++i) {
    std::string arg = i == 0 ? std::string("prefix-router") : std::string(argv[i]);
    if (arg.find_first_of(" \t\"'$") != std::string::npos) arg = "'" + arg + "'";
    prefix_router::cli::command_line += (i ? " " : "") + arg;
  }
  CLI::App app{"prefix-router " PREFIX_ROUTER_VERSION
               ": routes LLM requests to the instance most likely to hold their prompt prefix in KV "
               "cache, without letting any instance overload.",
               "prefix-router"};
  app.set_version_flag("--version", "prefix-router " PREFIX_ROUTER_VERSION);
  app.require_subcommand(1);
  app.footer("Run 'prefix-router COMMAND --help' for the options of a command.");

  int exit_code = 0;
  prefix_router::cli::AddServeCommand(app, &exit_code);
  prefix_router::cli::AddEngineCommand(app, &exit_code);
  prefix_router::cli::AddRouteCommand(app, &exit_code);
  prefix_router::cli::AddSimulateCommand(app, &exit_code);
  prefix_router::cli::AddDemoCommand(app, &exit_code);
  prefix_router::cli::AddBenchCommand(app, &exit_code);
  prefix_router::cli::AddReportCommand(app, &exit_code);

  // Every usage error (unknown flag, bad value, missing argument) exits 2, as the commands do
  // for invalid values they check themselves; CLI11's own codes (104, 109, ...) differ per error
  // and are not documented. Help and --version exit 0.
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);
    return code == 0 ? 0 : 2;
  }
  return exit_code;
}
