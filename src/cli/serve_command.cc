// `prefix-router serve`: the gateway. Configuration from --config FILE and/or flags (flags win);
// runs until SIGTERM or SIGINT, then stops accepting, lets in-flight requests finish for up to
// timeouts.drain seconds and exits 0.
#include <spdlog/spdlog.h>

#include <csignal>
#include <iostream>
#include <memory>

#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>

#include "cli/commands.h"
#include "gateway/config_flags.h"
#include "gateway/gateway.h"

namespace prefix_router::cli {
namespace {

int RunServe(const gateway::ConfigFlags& flags, bool check_only) {
  auto config = gateway::BuildConfig(flags);
  if (!config.ok()) {
    std::cerr << "prefix-router serve: invalid configuration: " << config.status().message() << "\n";
    return 2;
  }
  if (check_only) {
    std::cout << "configuration OK: " << config->instances.size() << " instances, "
              << config->pools.size() << " pools\n";
    return 0;
  }
  auto gw = gateway::Gateway::Create(std::move(*config));
  if (!gw.ok()) {
    std::cerr << "prefix-router serve: " << gw.status().message() << "\n";
    return 2;
  }
  if (Status s = (*gw)->Start(); !s.ok()) {
    std::cerr << "prefix-router serve: " << s.message() << "\n";
    return 1;
  }
  // Signals are taken on the main thread so that the drain can block here.
  boost::asio::io_context signals_ctx;
  boost::asio::signal_set signals(signals_ctx, SIGTERM, SIGINT);
  int received = 0;
  signals.async_wait([&](const boost::system::error_code& ec, int sig) {
    if (!ec) received = sig;
  });
  signals_ctx.run();
  spdlog::info("signal {} received: draining in-flight requests (up to {} s)", received,
               (*gw)->config().timeouts.drain);
  (*gw)->Stop();
  spdlog::info("stopped");
  return 0;
}

}  // namespace

void AddServeCommand(CLI::App& app, int* exit_code) {
  auto flags = std::make_shared<gateway::ConfigFlags>();
  auto check = std::make_shared<bool>(false);
  CLI::App* cmd = app.add_subcommand(
      "serve",
      "Run the gateway: an OpenAI-compatible and native (/invocations) HTTP endpoint that routes "
      "each request to an instance with the pool's strategy and streams the response back. "
      "Configure with --config FILE (YAML) and/or the flags below; flags override the file.");
  gateway::AddConfigFlags(*cmd, *flags);
  cmd->add_flag("--check-config", *check, "Validate the configuration, print a summary and exit");
  cmd->callback([flags, check, exit_code] { *exit_code = RunServe(*flags, *check); });
}

}  // namespace prefix_router::cli
