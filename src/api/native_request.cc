#include "api/native_request.h"

#include <string>

namespace prefix_router::api {

Status ValidateRoutingGroupHeader(std::string_view group) {
  if (group.empty() || group.size() > kMaxRoutingGroupLength) {
    return Status::InvalidArgument(std::string(kRoutingGroupHeader) + ": must be 1 to " +
                                   std::to_string(kMaxRoutingGroupLength) + " printable ASCII characters, got " +
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

Status ValidateInferenceComponentName(std::string_view name) {
  auto invalid = [&](std::string_view why) {
    return Status::InvalidArgument("inference component '" + std::string(name) + "': " + std::string(why));
  };
  if (name.empty()) return Status::InvalidArgument("inference component: the name must not be empty");
  if (name.size() > kMaxInferenceComponentNameLength) {
    return invalid("longer than " + std::to_string(kMaxInferenceComponentNameLength) + " characters");
  }
  auto alnum = [](char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9'); };
  for (char c : name) {
    if (!alnum(c) && c != '-') return invalid("only letters, digits and '-' are allowed");
  }
  if (!alnum(name.front()) || !alnum(name.back())) return invalid("must start and end with a letter or digit");
  return Status::Ok();
}

Result<ParsedRequest> ParseNative(std::string_view body, uint32_t prefix_length,
                                  std::optional<std::string_view> group_header,
                                  std::optional<std::string_view> component_header, const KeyNormaliser* normaliser,
                                  std::string* keyed) {
  ParsedRequest p;
  p.api = ApiKind::kNative;
  if (group_header) {
    if (Status s = ValidateRoutingGroupHeader(*group_header); !s.ok()) return s;
    p.routing_group = *group_header;
  }
  if (component_header) p.served_name = *component_header;
  std::string_view input = body;
  if (normaliser && normaliser->options().enabled()) {
    // One buffer per thread: the canonical prefix is at most prefix_length bytes.
    thread_local std::string canonical;
    if (normaliser->CanonicalNativePrefix(body, prefix_length, canonical)) input = canonical;
  }
  p.key = NativePrefixKey(input, prefix_length, p.routing_group);
  p.prefix_units = input.size() < prefix_length ? input.size() : prefix_length;
  if (keyed) keyed->assign(input.substr(0, p.prefix_units));
  return p;
}

}  // namespace prefix_router::api
