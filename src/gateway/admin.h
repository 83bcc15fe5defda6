// The admin listener: a second HTTP listener (the same http::Server) for operators, separate
// from client traffic so that it can stay on loopback or behind a token while the client
// listener faces the network.
//
// Two layers, in the Beast examples' manner:
//   AdminApi     a route table and pure handlers, request in, response out (no sockets), so
//                that every route is testable as a function; JSON in and out, errors with
//                OpenAI-style bodies. More routes (the status page) are one Route() call each.
//   AdminServer  the listener: authenticates each request (Authorization: Bearer <token>, or
//                Basic with the token as password, which is what a browser can send; compared
//                in constant time; 401 otherwise) when a token is configured, then answers it
//                with the AdminApi.
//
// Routes (docs/admin.md has examples):
//   GET    /admin/instances                 every instance with its state
//   POST   /admin/instances                 add {"name","url","weight","models"} (url required)
//   GET    /admin/instances/{name}          one instance
//   DELETE /admin/instances/{name}          remove; its in-flight requests finish
//   POST   /admin/instances/{name}/drain    no new requests; in-flight ones finish
//   POST   /admin/instances/{name}/undrain  takes new requests again
//   POST   /admin/reload                    re-read the configuration (as SIGHUP does)
//   GET    /status                          the live status page (HTML; docs/status.md)
//   GET    /status.json                     its numbers
// Errors: 400 bad input, 401 no or wrong token, 404 unknown instance or path, 405 wrong method,
// 409 a conflict with the current fleet (name taken, last instance, a pool left unserved).
//
// The token is never logged, echoed or included in an error; each admin action logs one info
// line saying what changed (Gateway's operations do), refusals one warning.
//
// Thread-safety: AdminApi routes are registered before the server starts and read-only after;
// handlers run on the admin listener's I/O thread and call the Gateway's thread-safe operations.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "gateway/config.h"
#include "gateway/operations.h"
#include "http/server.h"

namespace prefix_router::gateway {

class Gateway;

// Values of the {placeholders} of a route's pattern, percent-decoded.
using PathParams = std::map<std::string, std::string, std::less<>>;

class AdminApi {
 public:
  using RouteHandler = std::function<http::StringResponse(const http::Request& request, const PathParams& params)>;

  // `loader` re-reads the configuration for /admin/reload (may be empty: reload is then 409).
  AdminApi(Gateway& gateway, ConfigLoader loader);
  AdminApi(const AdminApi&) = delete;
  AdminApi& operator=(const AdminApi&) = delete;

  // Adds a route. `pattern` is a path whose segments are literal or "{name}" (one segment).
  // REQUIRES: called before the server starts.
  void Route(http::bhttp::verb method, std::string pattern, RouteHandler handler);

  // Answers one (already authenticated) request: the route's response, 404 when no pattern
  // matches the path, 405 (with Allow) when patterns match but not the method.
  http::StringResponse Handle(const http::Request& request) const;

 private:
  struct Entry {
    http::bhttp::verb method;
    std::vector<std::string> segments;
    RouteHandler handler;
  };
  void AddInstanceRoutes();
  void AddStatusRoutes();

  Gateway& gateway_;
  ConfigLoader loader_;
  std::vector<Entry> routes_;
};

class AdminServer final : public http::Handler {
 public:
  // REQUIRES: config.enabled and validated (listen_host/port and token filled).
  // `timeouts` are the client timeouts of the main configuration.
  AdminServer(const AdminConfig& config, const TimeoutsConfig& timeouts, Gateway& gateway, ConfigLoader loader);
  ~AdminServer() override;

  Status Start();
  uint16_t port() const { return server_->port(); }
  void Stop();
  AdminApi& api() { return api_; }

  http::net::awaitable<void> Handle(http::Exchange& exchange) override;

 private:
  Secret token_;
  std::string listen_host_;
  AdminApi api_;
  std::unique_ptr<http::Server> server_;
};

// The response for an error: status, an OpenAI-style JSON body (and the connection's usual
// headers). `code` is the machine-readable code ("" = null).
http::StringResponse AdminError(int status, std::string_view message, std::string_view code = {});

}  // namespace prefix_router::gateway
