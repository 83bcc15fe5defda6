#include "gateway/prompt_tokens.h"

#include "engine/engine_request.h"

namespace prefix_router::gateway {

bool WantsPromptTokens(const RoutingOptions& options) {
  return UsesKvEvents(options.strategy);
}

Result<std::vector<uint32_t>> EnginePromptTokens(api::ApiKind api, std::string_view body) {
  std::string_view path;
  switch (api) {
    case api::ApiKind::kChatCompletions: path = "/v1/chat/completions"; break;
    case api::ApiKind::kCompletions: path = "/v1/completions"; break;
    case api::ApiKind::kNative: path = "/invocations"; break;
    default:
      return Status::InvalidArgument("no prompt tokens for this API");
  }
  Result<engine::EngineHttpRequest> r = engine::ParseEngineRequest(path, body);
  if (!r.ok()) return r.status();
  return engine::PromptTokens(*r);
}

}  // namespace prefix_router::gateway
