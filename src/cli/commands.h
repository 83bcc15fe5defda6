// Subcommands of the prefix-router binary. Each Add*Command registers its options and the code
// that runs it on the CLI11 app; the command's exit code is written to `*exit_code`.
#pragma once

#include <CLI/CLI.hpp>

#include <string>

namespace prefix_router::cli {

// `route`: explains the routing decision for one request body (key, preference order, pick).
void AddRouteCommand(CLI::App& app, int* exit_code);
// `serve`: the gateway.
void AddServeCommand(CLI::App& app, int* exit_code);
// `engine`: the engine emulator.
void AddEngineCommand(CLI::App& app, int* exit_code);
// `simulate`: the fleet simulator.
void AddSimulateCommand(CLI::App& app, int* exit_code);
// `bench`: the HTTP load generator.
void AddBenchCommand(CLI::App& app, int* exit_code);

// `report`: one table and HTML report from several results files.
void AddReportCommand(CLI::App& app, int* exit_code);

// `demo`: engines, gateway, workloads, table and report on one machine.
void AddDemoCommand(CLI::App& app, int* exit_code);

// The command line the binary was started with, for reports ("how to reproduce this").
const std::string& CommandLine();

}  // namespace prefix_router::cli
