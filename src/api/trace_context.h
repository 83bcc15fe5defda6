// Request correlation: the x-request-id header and W3C Trace Context (traceparent, tracestate).
//
// The gateway gives every request an id: the client's own x-request-id when it is acceptable
// (1..128 printable ASCII characters, as nginx's and Envoy's ids are), otherwise a fresh UUIDv4.
// The id goes to the instance with the request and back to the client on every response, so a
// client's, the gateway's and the engine's logs can be joined on it.
//
// traceparent (https://www.w3.org/TR/trace-context/) is relayed unchanged when it is valid and
// dropped, together with tracestate, when it is not: the recommendation says a receiver that
// cannot parse traceparent must not use tracestate, and forwarding a malformed header would
// only move the problem to the engine. The gateway starts no span of its own, so it does not
// replace the parent id; it logs the trace id beside its routing decision.
//
// Values only; no I/O, no clock. Thread-safety: pure functions.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace prefix_router::api {

inline constexpr std::string_view kRequestIdHeader = "x-request-id";
inline constexpr std::string_view kTraceparentHeader = "traceparent";
inline constexpr std::string_view kTracestateHeader = "tracestate";
inline constexpr size_t kMaxRequestIdBytes = 128;

// 1..kMaxRequestIdBytes characters, each printable ASCII (0x20..0x7E).
bool IsValidRequestId(std::string_view id);

// A UUIDv4 (RFC 9562 section 5.4) in its 36-character lower-case form, from 128 random bits
// (six of which become the version and variant).
inline constexpr size_t kRequestIdLength = 36;
std::string FormatRequestId(uint64_t high, uint64_t low);
// The same written into `out` (no allocation); returns a view of it.
std::string_view FormatRequestId(uint64_t high, uint64_t low, std::array<char, kRequestIdLength>& out);

// The 32-hex-digit trace id of a valid traceparent, or nullopt. Valid: version, trace id,
// parent id and flags as lower-case hex fields "vv-<32>-<16>-ff"; version ff is invalid;
// all-zero trace or parent ids are invalid; version 00 has exactly those 55 characters, a
// later version may carry more after a '-' (the recommendation's forward compatibility).
std::optional<std::string_view> TraceIdOf(std::string_view traceparent);

}  // namespace prefix_router::api
