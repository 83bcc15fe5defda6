// The default limit on open client connections (limits.max_connections: auto), derived from the
// process's descriptor limit, and raising that limit at start.
//
// Why: with no limit, a flood of client connections takes every descriptor; accept then fails,
// and so do the gateway's own health checks and upstream connects, which used to eject every
// healthy instance for want of a local resource. HAProxy derives its default maxconn from the
// descriptor limit the same way, and nginx stops accepting at worker_connections.
//
// The rule: every client connection may need one upstream connection at the same time (pooled
// idle upstream connections never outnumber the requests that made them), so the limit is half
// of what is left after a reserve for everything else:
//   reserve = kFixedReserve (standard streams, listeners, epoll and eventfds of the I/O threads,
//             log files, the ZeroMQ context, DNS, a few admin connections) +
//             http::Server::kMaxLingeringRejections (the connections refused politely beyond
//             the limit, each open for up to a second)
//             + kPerInstanceReserve per configured instance (a health check, an engine metrics
//             scrape, a /v1/models poll, a /tokenize call and KV event sockets may all be open
//             at once)
//   limit   = (soft RLIMIT_NOFILE - reserve) / 2, at least 1.
// With this machine's 20,000 descriptors and 3 instances: (20,000 - 152) / 2 = 9,924 connections.
#pragma once

#include <cstddef>
#include <cstdint>

namespace prefix_router::gateway {

inline constexpr uint64_t kFixedReserve = 64;
inline constexpr uint64_t kPerInstanceReserve = 8;

struct ConnectionLimitPlan {
  uint32_t limit = 1;
  uint64_t descriptors = 0;  // the soft descriptor limit it was derived from
  uint64_t reserve = 0;
  bool starved = false;  // the descriptor limit leaves less than 2 for clients after the reserve
};

// Pure: the plan for `descriptors` (the soft RLIMIT_NOFILE) and `instances` configured.
ConnectionLimitPlan AutoMaxConnections(uint64_t descriptors, size_t instances);

struct DescriptorLimit {
  uint64_t soft = 0;
  uint64_t hard = 0;
  uint64_t was = 0;  // the soft limit before RaiseDescriptorLimit (equal to soft if unchanged)
};

// The process's current RLIMIT_NOFILE (RLIM_INFINITY reads as 1,048,576).
DescriptorLimit CurrentDescriptorLimit();

// Raises the soft RLIMIT_NOFILE to the hard limit (as Go's runtime and nginx's
// worker_rlimit_nofile do; the default soft limit of 1,024 is meant for select()-based
// programs). Returns the limits after the attempt.
DescriptorLimit RaiseDescriptorLimit();

}  // namespace prefix_router::gateway
