// Workloads: seeded generators of LLM requests, and a trace reader, shared by `simulate` (which
// feeds them to the fleet model) and `bench` (which sends them over HTTP), so both see the same
// traffic for the same seed.
//
// A workload is a stream of sessions. A session is a sequence of requests (turns) that depend on
// each other: turn k+1 is built only after turn k's reply is known, because a multi-turn client
// resends the reply it received as part of the history. Single-request workloads (long-context,
// rag, trace, mooncake) yield sessions of one turn.
//
// How load is driven is the caller's business (see loadgen/ and sim/):
//   closed loop: C users; each takes the next session and runs its turns back to back (waiting
//                `think_s` after each reply), then takes the next session;
//   open loop:   sessions start at Poisson times (or at the trace's arrival times); a session's
//                later turns follow its previous reply by `think_s`.
//
// Thread-safety: a Workload and its Sessions belong to one thread at a time. Everything is
// deterministic given the seed passed to MakeWorkload.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "api/request.h"
#include "core/status.h"

namespace prefix_router::workload {

struct Message {
  std::string role;     // "system", "user", "assistant", "tool"
  std::string content;  // text
};

// One request as a client would send it.
struct Request {
  api::ApiKind api = api::ApiKind::kChatCompletions;
  std::string model;              // the OpenAI `model`; "" = the caller's default model
  std::vector<Message> messages;  // kChatCompletions
  std::string prompt;             // kCompletions (and kNative when `body` is empty)
  std::string body;               // kNative: the raw body as recorded (trace); sent unchanged
  std::string routing_group;      // prompt_cache_key (OpenAI) / X-Amzn-SageMaker-Prefix-Aware-Id
  uint32_t max_tokens = 128;      // output tokens requested (the emulator generates exactly this)
  // For analysis only (never sent): what shared context this request carries, e.g.
  // "doc-17" or "tenant-2/tools"; "" when none.
  std::string label;
};

class Session {
 public:
  virtual ~Session() = default;
  // The next turn, built from the previous turn's reply text ("" before the first turn or when
  // the previous turn failed), or nullopt when the session is over.
  virtual std::optional<Request> Next(std::string_view previous_reply) = 0;
  // Seconds a user waits after a reply before sending the next turn.
  virtual double think_s() const { return 0; }
};

struct SessionStart {
  std::unique_ptr<Session> session;  // null when the workload is exhausted (finite traces)
  // Set by trace replays (trace, mooncake): when this session's first request was recorded, in
  // seconds from the trace's start. Unset for generated workloads (the caller draws Poisson
  // arrivals).
  std::optional<double> arrival_s;
};

class Workload {
 public:
  virtual ~Workload() = default;
  virtual std::string_view name() const = 0;
  // The next session. Generated workloads never run out.
  virtual SessionStart NextSession() = 0;
  // Mean requests per session (to turn a request rate into a session rate for open loops).
  virtual double mean_turns() const = 0;
  // Every parameter's effective value (defaults included), for results and reports.
  virtual std::map<std::string, std::string> Parameters() const = 0;
};

// Parameters as name=value strings (from `--param name=value` flags); names are per workload
// and documented in docs/workloads.md. Unknown names and bad values are InvalidArgument naming
// them.
using ParamMap = std::map<std::string, std::string, std::less<>>;

// Names MakeWorkload accepts: long-context, sharegpt-like, agentic, rag, noisy-native, trace,
// mooncake.
std::vector<std::string_view> WorkloadNames();

// `trace` and `mooncake` need the parameter `file` (a JSONL path: docs/trace-format.md, and
// docs/workloads.md for Mooncake's format); reading it is the only I/O in this library and
// happens here, once.
Result<std::unique_ptr<Workload>> MakeWorkload(std::string_view name, const ParamMap& params, uint64_t seed);

// The JSON body of `r` for its API: OpenAI chat {"model", "messages", "max_tokens", "stream",
// ["stream_options": {"include_usage": true}] when streaming, ["prompt_cache_key"] when
// `routing_group` is set} or completions (the same with "prompt"); native: `body` unchanged
// when set, else the chat shape (or the completions shape when there are no messages) without
// "prompt_cache_key" (the group travels in the X-Amzn-SageMaker-Prefix-Aware-Id header).
// `default_model` fills an empty `model`. Always valid JSON: control characters are escaped
// and malformed UTF-8 bytes become U+FFFD.
std::string RenderBody(const Request& r, bool stream, std::string_view default_model);

// The HTTP path for `r`'s API: /v1/chat/completions, /v1/completions or /invocations.
std::string_view PathFor(api::ApiKind api);

}  // namespace prefix_router::workload
