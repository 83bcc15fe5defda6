// `prefix-router serve`: the gateway. Configuration from --config FILE and/or flags (flags win);
// runs until SIGTERM or SIGINT, then stops accepting, lets in-flight requests finish for up to
// timeouts.drain seconds and exits 0. SIGHUP reloads the configuration (file and flags, as at
// start): instances, routing and pools change without dropping a request; an invalid file is
// logged and the running configuration stays. With an `admin` section, the admin listener
// (gateway/admin.h) runs beside the client listener. Logs go to stdout as text or JSON lines
// (gateway/log.h); --access-log adds a line per request.
#include <spdlog/spdlog.h>

#include <csignal>
#include <functional>
#include <iostream>
#include <memory>

#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>

#include "cli/commands.h"
#include "epp/ext_proc.h"
#include "gateway/admin.h"
#include "gateway/config_flags.h"
#include "gateway/connection_limit.h"
#include "gateway/gateway.h"
#include "gateway/log.h"
#include "gateway/operations.h"

namespace prefix_router::cli {
namespace {

int RunServe(const gateway::ConfigFlags& flags, bool check_only) {
  auto config = gateway::BuildConfig(flags);
  if (!config.ok()) {
    std::cerr << "prefix-router serve: invalid configuration: " << config.status().message() << "\n";
    return 2;
  }
  const std::vector<std::string> warnings = gateway::ConfigWarnings(*config);
  if (check_only) {
    for (const std::string& w : warnings) std::cerr << "prefix-router serve: warning: " << w << "\n";
    const gateway::GatewayConfig& c = *config;
    std::cout << "configuration OK: " << c.instances.size() << " instances, " << c.pools.size() << " pools, listen "
              << c.listen << ", default strategy " << StrategyName(c.routing.strategy) << ", admin "
              << (c.admin.enabled ? c.admin.listen : std::string("off")) << ", endpoint picker "
              << (c.epp.listen.empty() ? std::string("off") : c.epp.listen) << ", log "
              << gateway::LogFormatName(c.log.format) << (c.log.access_log ? " with access log" : "") << "\n";
    return 0;
  }
  gateway::ConfigureLogging(config->log.format);
  for (const std::string& w : warnings) gateway::LogEvent(spdlog::level::warn, w, std::span<const gateway::LogField>());
  // A gateway holds two descriptors per proxied request: the soft limit (often 1,024) is raised
  // to the hard one before the connection limit is derived from it.
  if (const gateway::DescriptorLimit fds = gateway::RaiseDescriptorLimit(); fds.soft != fds.was) {
    gateway::LogEvent(spdlog::level::info, "descriptor limit raised", {{"from", fds.was}, {"to", fds.soft}});
  }
  const gateway::AdminConfig admin_config = config->admin;
  const gateway::TimeoutsConfig timeouts = config->timeouts;
  const gateway::EppConfig epp_config = config->epp;
  auto gw = gateway::Gateway::Create(std::move(*config));
  if (!gw.ok()) {
    std::cerr << "prefix-router serve: " << gw.status().message() << "\n";
    return 2;
  }
  if (Status s = (*gw)->Start(); !s.ok()) {
    std::cerr << "prefix-router serve: " << s.message() << "\n";
    return 1;
  }
  // The endpoint picker (docs/epp.md): attached to the gateway, whose Stop shuts it down first.
  if (!epp_config.listen.empty()) {
    auto epp = epp::EppServer::Start(**gw, epp_config.listen_host, epp_config.listen_port);
    if (!epp.ok()) {
      std::cerr << "prefix-router serve: " << epp.status().message() << "\n";
      (*gw)->Stop();
      return 1;
    }
    (*gw)->Attach(std::move(*epp));
  }
  // A reload reads the same sources as the start: the file, then the flags on top.
  const gateway::ConfigLoader loader = [&flags] { return gateway::BuildConfig(flags); };
  std::unique_ptr<gateway::AdminServer> admin;
  if (admin_config.enabled) {
    admin = std::make_unique<gateway::AdminServer>(admin_config, timeouts, **gw, loader);
    if (Status s = admin->Start(); !s.ok()) {
      std::cerr << "prefix-router serve: " << s.message() << "\n";
      (*gw)->Stop();
      return 1;
    }
  }
  // Signals are taken on the main thread so that the drain can block here.
  boost::asio::io_context signals_ctx;
  boost::asio::signal_set signals(signals_ctx, SIGTERM, SIGINT, SIGHUP);
  int received = 0;
  std::function<void(const boost::system::error_code&, int)> on_signal = [&](const boost::system::error_code& ec,
                                                                             int sig) {
    if (ec) return;
    if (sig == SIGHUP) {
      (void)gateway::LoadAndReload(**gw, loader, "SIGHUP");  // logs its outcome
      signals.async_wait(on_signal);
      return;
    }
    received = sig;
  };
  signals.async_wait(on_signal);
  signals_ctx.run();
  spdlog::info("signal {} received: draining in-flight requests (up to {} s)", received,
               (*gw)->config().timeouts.drain);
  if (admin) admin->Stop();
  (*gw)->Stop();
  spdlog::info("stopped");
  return 0;
}

}  // namespace

void AddServeCommand(CLI::App& app, int* exit_code) {
  auto flags = std::make_shared<gateway::ConfigFlags>();
  CLI::App* cmd =
      app.add_subcommand("serve",
                         "Run the gateway: an OpenAI-compatible and native (/invocations) HTTP endpoint that routes "
                         "each request to an instance with the pool's strategy and streams the response back. "
                         "Configure with --config FILE (YAML) and/or the flags below; flags override the file.\n"
                         "SIGHUP reloads the configuration (the file, then the flags): instances, routing and pools "
                         "change at once without dropping requests; other fields need a restart and are named in "
                         "the log; an invalid file is refused and the running configuration stays.\n"
                         "Admin listener (off unless the file has an `admin` section): "
                         "`admin: {listen: 127.0.0.1:9090, token_file: PATH}` (or `token_env: VARIABLE`). Without a "
                         "token the listen address must be loopback; with one, every request needs "
                         "`Authorization: Bearer <token>`. Routes: GET/POST /admin/instances, "
                         "GET/DELETE /admin/instances/NAME, POST /admin/instances/NAME/drain and /undrain, "
                         "POST /admin/reload (see docs/admin.md).");
  gateway::AddConfigFlags(*cmd, *flags);
  // `--check-config FILE` is short for `--check-config --config FILE`.
  auto check_file = std::make_shared<std::string>();
  CLI::Option* check = cmd->add_option("--check-config", *check_file,
                                       "Validate the configuration (FILE, else --config FILE and the "
                                       "flags), print a one-line summary and exit: 0 when valid, 2 "
                                       "with the error naming the field otherwise")
                           ->expected(0, 1)
                           ->type_name("[FILE]");
  CLI::Option* reference =
      cmd->add_flag("--config-reference")
          ->description(
              "Print the reference of every configuration field (type, default, allowed values, flag, whether a "
              "reload applies it) as Markdown, as in docs/configuration.md, and exit");
  cmd->callback([flags, check, check_file, reference, exit_code] {
    if (reference->count() > 0) {
      std::cout << gateway::ConfigReferenceMarkdown();
      *exit_code = 0;
      return;
    }
    if (!check_file->empty()) {
      if (!flags->config_file.empty() && flags->config_file != *check_file) {
        std::cerr << "prefix-router serve: --check-config " << *check_file << " and --config " << flags->config_file
                  << " name different files\n";
        *exit_code = 2;
        return;
      }
      flags->config_file = *check_file;
    }
    *exit_code = RunServe(*flags, check->count() > 0);
  });
}

}  // namespace prefix_router::cli
