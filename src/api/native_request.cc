#include "api/native_request.h"

#include <string>

namespace prefix_router::api {

Status ValidateRoutingGroupHeader(std::string_view group) {
  if (group.empty() || group.size() > kMaxRoutingGroupLength) {
    return Status::InvalidArgument(std::string(kRoutingGroupHeader) + ": must be 1 to " +
                                   std::to_string(kMaxRoutingGroupLength) +
                                   " printable ASCII characters, got " +
                                   std::to_string(group.size()));
  }
  for (char c : group) {
    if (c < 0x20 || c > 0x7E) {
      return Status::InvalidArgument(std::string(kRoutingGroupHeader) +
                                     ": must contain printable ASCII characters only");
    }
  }
  return Status::Ok();
}

Result<ParsedRequest> ParseNative(std::string_view body, uint32_t prefix_length,
                                  std::optional<std::string_view> group_header,
                                  std::optional<std::string_view> component_header) {
  ParsedRequest p;
  p.api = ApiKind::kNative;
  if (group_header) {
    if (Status s = ValidateRoutingGroupHeader(*group_header); !s.ok()) return s;
    p.routing_group = *group_header;
  }
  if (component_header) p.served_name = *component_header;
  p.key = NativePrefixKey(body, prefix_length, p.routing_group);
  p.prefix_units = body.size() < prefix_length ? body.size() : prefix_length;
  return p;
}

}  // namespace prefix_router::api
