// `prefix-router engine`: the OpenAI-compatible engine emulator (see engine/engine_server.h).
// Runs until SIGTERM or SIGINT.
#include <spdlog/spdlog.h>

#include <csignal>
#include <iostream>
#include <memory>

#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>

#include "api/kv_event_decoder.h"
#include "cli/commands.h"
#include "engine/engine_server.h"
#include "engine_model/profiles.h"

namespace prefix_router::cli {
namespace {

struct EngineArgs {
  engine::EngineOptions options;
  std::string listen = "127.0.0.1:8001";
  std::string kv_events_encoding = "map";
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
  auto encoding = api::ParseKvEventEncoding(a.kv_events_encoding);
  if (!encoding.ok()) {
    std::cerr << "prefix-router engine: --kv-events-encoding: " << encoding.status().message() << "\n";
    return 2;
  }
  a.options.kv_events.encoding = *encoding;
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
  CLI::App* cmd =
      app.add_subcommand("engine",
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
  cmd->add_option("--inference-component", a->options.inference_components,
                  "A served inference component (repeatable; the managed service's names: up to 63 "
                  "letters, digits and '-'): listed in /v1/models and served like a model, its KV "
                  "blocks its own. A request with the X-Amzn-SageMaker-Inference-Component header is "
                  "served as that component whatever its `model`; a component not served is 404");
  cmd->add_option("--capacity-blocks", a->options.capacity_blocks,
                  "KV cache capacity in blocks (default: the profile's)");
  cmd->add_option("--block-size", a->options.block_size, "Tokens per KV block (default: the profile's)");
  cmd->add_option("--max-num-seqs", a->options.max_num_seqs, "Running sequences per step (default: the profile's)");
  cmd->add_option("--max-num-batched-tokens", a->options.max_num_batched_tokens,
                  "Token budget per step (default: the profile's)");
  cmd->add_option("--stream-interval", a->options.stream_interval,
                  "Generated tokens per streamed chunk after the first (sent at once)")
      ->check(CLI::Range(1u, 4096u))
      ->capture_default_str();
  cmd->add_flag("--enable-prompt-tokens-details", a->options.enable_prompt_tokens_details,
                "Report in responses the prompt tokens served from the prefix cache, as vLLM does "
                "with the same flag: usage.prompt_tokens_details.cached_tokens when above 0 (null "
                "otherwise, absent from a stream's usage chunk, as vLLM) and cached= in "
                "x-engine-timing. Off by default, as in vLLM: responses then carry no cached-token "
                "count and `bench` reports the hit rate as n/a. /metrics counts prefix cache hits "
                "either way");
  cmd->add_option("--kv-events-endpoint", a->options.kv_events.endpoint,
                  "Publish KV cache events as vLLM does (ZMQ PUB, 3 frames: topic, 8-byte "
                  "big-endian seq, msgpack batch), e.g. tcp://*:5557; binds when the address has "
                  "* or :: or is ipc/inproc, connects otherwise. Off when empty");
  cmd->add_option("--kv-events-topic", a->options.kv_events.topic,
                  "Topic frame of every KV event message (vLLM's default: empty)");
  cmd->add_option("--kv-events-replay-endpoint", a->options.kv_events.replay_endpoint,
                  "ROUTER socket that replays buffered KV event batches from a start seq, e.g. "
                  "tcp://*:5558. Off when empty");
  cmd->add_option("--kv-events-buffer-steps", a->options.kv_events.buffer_steps, "KV event batches kept for replay")
      ->capture_default_str();
  cmd->add_option("--kv-events-encoding", a->kv_events_encoding,
                  "map (vLLM 0.26: events as maps with a type key) or array (vLLM <= 0.23: "
                  "positional)")
      ->capture_default_str();
  cmd->callback([a, exit_code] { *exit_code = RunEngine(*a); });
}

}  // namespace prefix_router::cli
