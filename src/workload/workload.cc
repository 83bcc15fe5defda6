#include "workload/workload.h"

#include <array>
#include <cstdint>

#include "base/json_text.h"
#include "workload/generators.h"

namespace prefix_router::workload {
namespace {

constexpr std::array<std::string_view, 7> kNames = {"long-context", "sharegpt-like", "agentic", "rag",
                                                    "noisy-native", "trace",         "mooncake"};

void AppendMessages(std::string& out, const std::vector<Message>& messages) {
  out += "\"messages\":[";
  for (size_t i = 0; i < messages.size(); ++i) {
    if (i > 0) out += ',';
    out += "{\"role\":";
    base::AppendJsonString(out, messages[i].role);
    out += ",\"content\":";
    base::AppendJsonString(out, messages[i].content);
    out += '}';
  }
  out += ']';
}

// {"model", "messages" | "prompt", "max_tokens", "stream", ["stream_options"],
//  ["prompt_cache_key"]}.
std::string OpenAiBody(const Request& r, bool chat, bool stream, std::string_view default_model, bool with_group) {
  size_t size = 128 + r.prompt.size() + r.routing_group.size() + r.model.size();
  for (const Message& m : r.messages) size += m.content.size() + m.role.size() + 32;
  std::string out;
  out.reserve(size + size / 16);
  out += "{\"model\":";
  base::AppendJsonString(out, r.model.empty() ? default_model : std::string_view(r.model));
  out += ',';
  if (chat) {
    AppendMessages(out, r.messages);
  } else {
    out += "\"prompt\":";
    base::AppendJsonString(out, r.prompt);
  }
  out += ",\"max_tokens\":";
  out += std::to_string(r.max_tokens);
  out += stream ? ",\"stream\":true,\"stream_options\":{\"include_usage\":true}" : ",\"stream\":false";
  if (with_group && !r.routing_group.empty()) {
    out += ",\"prompt_cache_key\":";
    base::AppendJsonString(out, r.routing_group);
  }
  out += '}';
  return out;
}

}  // namespace

std::vector<std::string_view> WorkloadNames() { return {kNames.begin(), kNames.end()}; }

Result<std::unique_ptr<Workload>> MakeWorkload(std::string_view name, const ParamMap& params, uint64_t seed) {
  if (name == "long-context") return MakeLongContext(params, seed);
  if (name == "sharegpt-like") return MakeShareGptLike(params, seed);
  if (name == "agentic") return MakeAgentic(params, seed);
  if (name == "rag") return MakeRag(params, seed);
  if (name == "noisy-native") return MakeNoisyNative(params, seed);
  if (name == "trace") return MakeTrace(params, seed);
  if (name == "mooncake") return MakeMooncake(params, seed);
  std::string list;
  for (std::string_view n : kNames) {
    if (!list.empty()) list += ", ";
    list += n;
  }
  return Status::InvalidArgument("unknown workload '" + std::string(name) + "' (known: " + list + ")");
}

std::string RenderBody(const Request& r, bool stream, std::string_view default_model) {
  switch (r.api) {
    case api::ApiKind::kChatCompletions:
      return OpenAiBody(r, /*chat=*/true, stream, default_model, /*with_group=*/true);
    case api::ApiKind::kCompletions: return OpenAiBody(r, /*chat=*/false, stream, default_model, /*with_group=*/true);
    case api::ApiKind::kNative:
      // The routing group travels in the X-Amzn-SageMaker-Prefix-Aware-Id header.
      if (!r.body.empty()) return r.body;
      return OpenAiBody(r, /*chat=*/!r.messages.empty(), stream, default_model,
                        /*with_group=*/false);
    default:  // the workloads generate none of the other APIs
      break;
  }
  return {};
}

std::string_view PathFor(api::ApiKind api) {
  switch (api) {
    case api::ApiKind::kChatCompletions: return "/v1/chat/completions";
    case api::ApiKind::kCompletions: return "/v1/completions";
    case api::ApiKind::kNative: return "/invocations";
    default: break;
  }
  return "/v1/chat/completions";
}

}  // namespace prefix_router::workload
