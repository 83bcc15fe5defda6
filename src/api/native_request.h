// The native invoke API (POST /invocations): the prefix is the raw body's first bytes.
//
// Without a normaliser nothing in the body is parsed: whitespace, field order and formatting
// change the key, as the managed service documents. With one (a pool's key_normalisation), the
// key covers the first bytes of the body's canonical JSON instead (api/key_normalisation.h);
// a body that is not JSON keeps its raw bytes. The routing group comes from the X-Amzn-SageMaker-Prefix-Aware-Id
// header (1 to 64 printable ASCII characters, 0x20..0x7E); the pool from the
// X-Amzn-SageMaker-Inference-Component header.
#pragma once

#include <optional>
#include <string_view>

#include "api/key_normalisation.h"
#include "api/request.h"
#include "core/status.h"

namespace prefix_router::api {

inline constexpr std::string_view kRoutingGroupHeader = "X-Amzn-SageMaker-Prefix-Aware-Id";
inline constexpr std::string_view kInferenceComponentHeader = "X-Amzn-SageMaker-Inference-Component";

// OK when `group` is 1..64 printable ASCII characters; the error names the header.
Status ValidateRoutingGroupHeader(std::string_view group);

// OK when `name` is a valid inference component name as the managed service defines it
// (CreateInferenceComponent: at most 63 characters of [a-zA-Z0-9-], starting and ending with a
// letter or digit). The gateway routes any header value; the engine emulator and `bench` hold
// their names to this so that what they emulate could exist on the service.
inline constexpr size_t kMaxInferenceComponentNameLength = 63;
Status ValidateInferenceComponentName(std::string_view name);

// `group_header` and `component_header` are nullopt when the header is absent. `normaliser`
// null = raw bytes. `keyed`, when not null, receives the bytes that were keyed.
Result<ParsedRequest> ParseNative(std::string_view body, uint32_t prefix_length,
                                  std::optional<std::string_view> group_header,
                                  std::optional<std::string_view> component_header,
                                  const KeyNormaliser* normaliser = nullptr, std::string* keyed = nullptr);

}  // namespace prefix_router::api
