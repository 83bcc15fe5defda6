#include "workload/workload.h"

namespace prefix_router::workload {

std::string_view PathFor(api::ApiKind api) {
  switch (api) {
    case api::ApiKind::kChatCompletions:
      return "/v1/chat/completions";
    case api::ApiKind::kCompletions:
      return "/v1/completions";
    case api::ApiKind::kNative:
      return "/invocations";
  }
  return "/v1/chat/completions";
}

}  // namespace prefix_router::workload
