// `prefix-router engine`: the OpenAI-compatible engine emulator (see engine/engine_server.h).
// Runs until SIGTERM or SIGINT.
#include <spdlog/spdlog.h>

#include <csignal>
#include <iostream>
#include <memory>

#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>

#include "cli/commands.h"
#include "engine/engine_server.h"
#include "engine_model/profiles.h"

namespace prefix_router::cli {
namespace {

struct EngineArgs {
  engine::EngineOptions options;
  std::string listen = "127.0.0.1:8001";
};

int RunEngine(EngineArgs& a) {
  const auto colon = a.listen.rfind(':');
  if (colon == std::string::npos) {
    std::cerr << "prefix-router engine: --listen: expected HOST:PORT\n";
    return 2;
  }
  a.options.host = a.listen.substr(0, colon);
  if (!a.options.host.empty() && a.options.host.front() == '[') {
    a.options.host = a.options.host.substr(1, a.options.host.size() - 2);
  }
  try {
    const int port = std::stoi(a.listen.substr(colon + 1));
    if (port < 0 || port > 65535) throw std::out_of_range("port");
    a.options.port = static_cast<uint16_t>(port);
  } catch (const std::exception&) {
    std::cerr << "prefix-router engine: --listen: the port must be 0..65535\n";
    return 2;
  }
  auto server = engine::EngineServer::Create(a.options);
  if (!server.ok()) {
    std::cerr << "prefix-router engine: " << server.status().message() << "\n";
    return 2;
  }
  if (Status s = (*server)->Start(); !s.ok()) {
    std::cerr << "prefix-router engine: " << s.message() << "\n";
    return 1;
  }
  boost::asio::io_context signals_ctx;
  boost::asio::signal_set signals(signals_ctx, SIGTERM, SIGINT);
  signals.async_wait([](const boost::system::error_code&, int) {});
  signals_ctx.run();
  (*server)->Stop();
  return 0;
}

}  // namespace

void AddEngineCommand(CLI::App& app, int* exit_code) {
  auto a = std::make_shared<EngineArgs>();
  std::string profiles = "Engine profile. Profiles:";
  for (auto name : engine_model::ProfileNames()) {
    auto p = engine_model::FindProfile(name);
    profiles += "\n  " + std::string(name) + ": " + (p.ok() ? p->description : std::string());
  }
  CLI::App* cmd = app.add_subcommand(
      "engine",
      "Run an OpenAI-compatible engine emulator: a vLLM stand-in with a block-level prefix KV "
      "cache (LRU eviction, pinning) and a continuous-batching timing model, for demos and tests "
      "without GPUs. Responses report modelled times in the x-engine-timing header.");
  cmd->add_option("--listen", a->listen, "HOST:PORT to listen on")->capture_default_str();
  cmd->add_option("--profile", a->options.profile, profiles)->capture_default_str();
  cmd->add_option("--time-scale", a->options.time_scale,
                  "Wall seconds per modelled second, in (0, 1000]: 1 = real time, 0.1 = ten times "
                  "faster")
      ->capture_default_str();
  cmd->add_option("--model", a->options.model, "Served base model name")->capture_default_str();
  cmd->add_option("--adapter", a->options.adapters, "A served LoRA adapter name (repeatable)");
  cmd->add_option("--capacity-blocks", a->options.capacity_blocks,
                  "KV cache capacity in blocks (default: the profile's)");
  cmd->add_option("--block-size", a->options.block_size, "Tokens per KV block (default: the profile's)");
  cmd->add_option("--max-num-seqs", a->options.max_num_seqs,
                  "Running sequences per step (default: the profile's)");
  cmd->add_option("--max-num-batched-tokens", a->options.max_num_batched_tokens,
                  "Token budget per step (default: the profile's)");
  cmd->add_option("--stream-interval", a->options.stream_interval,
                  "Generated tokens per streamed chunk after the first (sent at once)")
      ->check(CLI::Range(1u, 4096u))
      ->capture_default_str();
  cmd->callback([a, exit_code] { *exit_code = RunEngine(*a); });
}

}  // namespace prefix_router::cli
