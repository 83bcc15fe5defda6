// prefix-router: a prefix-aware gateway for LLM inference fleets. This file only wires the
// subcommands together; each lives in cli/.
#include <CLI/CLI.hpp>

#include <iostream>

#include "cli/commands.h"
#include "cli/version.h"

int main(int argc, char** argv) {
  CLI::App app{
      "prefix-router " PREFIX_ROUTER_VERSION
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

  CLI11_PARSE(app, argc, argv);
  return exit_code;
}
