#include "gateway/admin.h"

#include <spdlog/spdlog.h>

#include <boost/json.hpp>

#include <limits>
#include <utility>

#include "api/error.h"
#include "gateway/gateway.h"
#include "gateway/status.h"

namespace prefix_router::gateway {
namespace {

namespace bhttp = http::bhttp;
namespace json = boost::json;

constexpr uint64_t kMaxAdminBodyBytes = 1u << 20;

http::StringResponse JsonResponse(int status, const json::value& body) {
  http::StringResponse res{static_cast<bhttp::status>(status), 11};
  res.set(bhttp::field::content_type, "application/json");
  res.body() = json::serialize(body);
  res.prepare_payload();
  return res;
}

int HttpStatusOf(const Status& s) {
  switch (s.code()) {
    case StatusCode::kInvalidArgument: return 400;
    case StatusCode::kNotFound: return 404;
    case StatusCode::kFailedPrecondition: return 409;
    default: return 500;
  }
}

std::string_view CodeOf(const Status& s) {
  switch (s.code()) {
    case StatusCode::kInvalidArgument: return "invalid_value";
    case StatusCode::kNotFound: return "instance_not_found";
    case StatusCode::kFailedPrecondition: return "conflict";
    default: return "internal_error";
  }
}

std::string_view Target(const http::Request& req) { return std::string_view(req.target().data(), req.target().size()); }

// For logs: the path without the query (which nothing reads, and which could carry anything).
std::string_view PathOf(const http::Request& req) {
  std::string_view t = Target(req);
  return t.substr(0, t.find('?'));
}

http::StringResponse Refused(const http::Request& req, int status, const std::string& message, std::string_view code) {
  spdlog::warn("admin: {} {} refused ({}): {}", std::string_view(req.method_string()), PathOf(req), status, message);
  return AdminError(status, message, code);
}

http::StringResponse RefusedStatus(const http::Request& req, const Status& s) {
  return Refused(req, HttpStatusOf(s), s.message(), CodeOf(s));
}

json::object InstanceJson(const InstanceView& v) {
  json::array models;
  for (const auto& m : v.models) models.emplace_back(m);
  return json::object{{"name", v.name},
                      {"url", v.url},
                      {"weight", v.weight},
                      {"models", std::move(models)},
                      {"state", v.state()},
                      {"healthy", v.healthy},
                      {"drained", v.drained},
                      {"in_flight", v.in_flight},
                      {"dispatched", v.dispatched}};
}

json::array Strings(const std::vector<std::string>& list) {
  json::array out;
  for (const auto& s : list) out.emplace_back(s);
  return out;
}

// %XX decoding of one path segment; nullopt for a malformed escape.
std::optional<std::string> Decode(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '%') {
      out += s[i];
      continue;
    }
    auto hex = [](char c) -> int {
      if (c >= '0' && c <= '9') return c - '0';
      if (c >= 'a' && c <= 'f') return c - 'a' + 10;
      if (c >= 'A' && c <= 'F') return c - 'A' + 10;
      return -1;
    };
    if (i + 2 >= s.size()) return std::nullopt;
    const int hi = hex(s[i + 1]), lo = hex(s[i + 2]);
    if (hi < 0 || lo < 0) return std::nullopt;
    out += static_cast<char>(hi * 16 + lo);
    i += 2;
  }
  return out;
}

std::vector<std::string_view> Segments(std::string_view path) {
  std::vector<std::string_view> out;
  size_t start = 0;
  if (!path.empty() && path.front() == '/') start = 1;
  while (start <= path.size()) {
    const size_t slash = path.find('/', start);
    const size_t end = slash == std::string_view::npos ? path.size() : slash;
    out.push_back(path.substr(start, end - start));
    if (slash == std::string_view::npos) break;
    start = slash + 1;
  }
  if (!out.empty() && out.back().empty() && out.size() > 1) out.pop_back();  // trailing '/'
  return out;
}

// Standard base64 (RFC 4648, padding optional) -> bytes; nullopt for any other character.
std::optional<std::string> DecodeBase64(std::string_view in) {
  std::string out;
  uint32_t acc = 0;
  int bits = 0;
  for (char ch : in) {
    int v;
    if (ch >= 'A' && ch <= 'Z')
      v = ch - 'A';
    else if (ch >= 'a' && ch <= 'z')
      v = ch - 'a' + 26;
    else if (ch >= '0' && ch <= '9')
      v = ch - '0' + 52;
    else if (ch == '+')
      v = 62;
    else if (ch == '/')
      v = 63;
    else if (ch == '=')
      break;
    else
      return std::nullopt;
    acc = (acc << 6) | static_cast<uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out += static_cast<char>((acc >> bits) & 0xff);
    }
  }
  return out;
}

// True when an Authorization header value presents `token`: as a bearer token, or as the
// password of HTTP Basic authentication with any user name. Basic is what a browser can send:
// opening /status it asks for the password in its login dialog and sends it again with the
// page's own requests for status.json.
bool PresentsToken(std::string_view value, const Secret& token) {
  auto scheme = [&](std::string_view name) {
    return value.size() > name.size() && http::beast::iequals(value.substr(0, name.size()), name);
  };
  auto rest = [&](size_t skip) {
    std::string_view r = value.substr(skip);
    while (!r.empty() && r.front() == ' ') r.remove_prefix(1);
    return r;
  };
  if (scheme("bearer ")) return token.Matches(rest(7));
  if (scheme("basic ")) {
    const std::optional<std::string> pair = DecodeBase64(rest(6));
    if (!pair) return false;
    const size_t colon = pair->find(':');
    return colon != std::string::npos && token.Matches(std::string_view(*pair).substr(colon + 1));
  }
  return false;
}

// {"name","url","weight","models","discover_models","resolve"} -> InstanceConfig; errors name
// the field.
Result<InstanceConfig> ParseInstanceBody(const std::string& body) {
  boost::system::error_code ec;
  json::value doc = json::parse(body, ec);
  if (ec) return Status::InvalidArgument("the body is not JSON: " + ec.message());
  if (!doc.is_object()) {
    return Status::InvalidArgument("the body must be a JSON object with url (and optionally name, weight, models)");
  }
  InstanceConfig out;
  bool has_url = false;
  auto text = [](const json::value& v) { return std::string(v.as_string().data(), v.as_string().size()); };
  for (const json::key_value_pair& field : doc.as_object()) {
    const std::string_view key = field.key();
    const json::value& value = field.value();
    if (key == "name" || key == "url") {
      if (!value.is_string()) return Status::InvalidArgument(std::string(key) + ": expected a string");
      (key == "name" ? out.name : out.url) = text(value);
      has_url |= key == "url";
    } else if (key == "weight") {
      if (value.is_uint64() || (value.is_int64() && value.as_int64() >= 0)) {
        const uint64_t w = value.is_uint64() ? value.as_uint64() : static_cast<uint64_t>(value.as_int64());
        out.weight = static_cast<uint32_t>(std::min<uint64_t>(w, std::numeric_limits<uint32_t>::max()));
      } else {
        return Status::InvalidArgument("weight: expected a non-negative integer");
      }
    } else if (key == "models") {
      if (!value.is_array()) return Status::InvalidArgument("models: expected a list of names");
      for (const auto& m : value.as_array()) {
        if (!m.is_string()) return Status::InvalidArgument("models: expected a list of names");
        out.models.push_back(text(m));
      }
    } else if (key == "discover_models") {
      if (!value.is_bool()) return Status::InvalidArgument("discover_models: expected true or false");
      out.discover_models = value.as_bool();
    } else if (key == "resolve") {
      if (!value.is_string()) return Status::InvalidArgument("resolve: expected \"none\" or \"all\"");
      Result<ResolveMode> mode = ParseResolveMode(text(value));
      if (!mode.ok()) return mode.status();
      out.resolve = *mode;
    } else {
      return Status::InvalidArgument("'" + std::string(key) +
                                     "': unknown field; expected one of name, url, weight, models, "
                                     "discover_models, resolve");
    }
  }
  if (!has_url) return Status::InvalidArgument("url: is required (http://host[:port][/path])");
  return out;
}

}  // namespace

http::StringResponse AdminError(int status, std::string_view message, std::string_view code) {
  http::StringResponse res{static_cast<bhttp::status>(status), 11};
  res.set(bhttp::field::content_type, "application/json");
  res.body() = api::ErrorBody(api::MakeError(status, std::string(message), std::string(code)));
  res.prepare_payload();
  return res;
}

// -------------------------------------------------------------------------------- AdminApi

AdminApi::AdminApi(Gateway& gateway, ConfigLoader loader) : gateway_(gateway), loader_(std::move(loader)) {
  AddInstanceRoutes();
  AddStatusRoutes();
}

void AdminApi::Route(bhttp::verb method, std::string pattern, RouteHandler handler) {
  Entry e{method, {}, std::move(handler)};
  for (std::string_view s : Segments(pattern)) e.segments.emplace_back(s);
  routes_.push_back(std::move(e));
}

http::StringResponse AdminApi::Handle(const http::Request& req) const {
  std::string_view target = Target(req);
  const std::vector<std::string_view> segments = Segments(target.substr(0, target.find('?')));
  std::string allow;
  for (const Entry& e : routes_) {
    if (e.segments.size() != segments.size()) continue;
    PathParams params;
    bool match = true;
    for (size_t i = 0; i < segments.size() && match; ++i) {
      const std::string& p = e.segments[i];
      if (p.size() >= 2 && p.front() == '{' && p.back() == '}') {
        auto value = Decode(segments[i]);
        match = value.has_value() && !value->empty();
        if (match) params.emplace(p.substr(1, p.size() - 2), std::move(*value));
      } else {
        match = p == segments[i];
      }
    }
    if (!match) continue;
    if (e.method == req.method()) return e.handler(req, params);
    if (!allow.empty()) allow += ", ";
    allow += std::string(bhttp::to_string(e.method));
  }
  const std::string path(target.substr(0, target.find('?')));
  if (!allow.empty()) {
    auto res = Refused(
        req, 405,
        "method " + std::string(req.method_string()) + " is not allowed on " + path + " (allowed: " + allow + ")",
        "method_not_allowed");
    res.set(bhttp::field::allow, allow);
    return res;
  }
  return Refused(req, 404, "no admin route for " + path, "not_found");
}

void AdminApi::AddInstanceRoutes() {
  Gateway& g = gateway_;
  Route(bhttp::verb::get, "/admin/instances", [&g](const http::Request&, const PathParams&) {
    json::array list;
    for (const InstanceView& v : g.Instances()) list.push_back(InstanceJson(v));
    return JsonResponse(200, json::object{{"instances", std::move(list)}});
  });
  Route(bhttp::verb::get, "/admin/instances/{name}", [&g](const http::Request& req, const PathParams& p) {
    const std::string& name = p.at("name");
    for (const InstanceView& v : g.Instances()) {
      if (v.name == name) return JsonResponse(200, InstanceJson(v));
    }
    return RefusedStatus(req, Status::NotFound("no instance named '" + name + "'"));
  });
  Route(bhttp::verb::post, "/admin/instances", [&g](const http::Request& req, const PathParams&) {
    Result<InstanceConfig> instance = ParseInstanceBody(req.body());
    if (!instance.ok()) return Refused(req, 400, instance.status().message(), "invalid_body");
    Result<InstanceView> added = g.AddInstance(std::move(*instance));
    if (!added.ok()) return RefusedStatus(req, added.status());
    return JsonResponse(201, InstanceJson(*added));
  });
  Route(bhttp::verb::delete_, "/admin/instances/{name}", [&g](const http::Request& req, const PathParams& p) {
    const std::string& name = p.at("name");
    Result<int32_t> in_flight = g.RemoveInstance(name);
    if (!in_flight.ok()) return RefusedStatus(req, in_flight.status());
    return JsonResponse(200, json::object{{"removed", name}, {"in_flight", *in_flight}});
  });
  for (const bool drain : {true, false}) {
    Route(bhttp::verb::post, drain ? "/admin/instances/{name}/drain" : "/admin/instances/{name}/undrain",
          [&g, drain](const http::Request& req, const PathParams& p) {
            Result<InstanceView> v = g.SetDrained(p.at("name"), drain);
            if (!v.ok()) return RefusedStatus(req, v.status());
            return JsonResponse(200, InstanceJson(*v));
          });
  }
  Route(bhttp::verb::post, "/admin/reload", [this](const http::Request& req, const PathParams&) {
    if (!loader_) {
      return Refused(req, 409, "this gateway has no configuration source to reload", "no_config_source");
    }
    Result<ReloadReport> r = LoadAndReload(gateway_, loader_, "admin");
    if (!r.ok()) {
      // The message is the configuration's (it names the field); the running config stays.
      return AdminError(400, "invalid configuration, nothing changed: " + r.status().message(), "invalid_config");
    }
    return JsonResponse(200, json::object{{"reloaded", true},
                                          {"changes", Strings(r->changes)},
                                          {"restart_required", Strings(r->restart_required)}});
  });
}

void AdminApi::AddStatusRoutes() {
  Gateway& g = gateway_;
  // Neither may be cached: the numbers are live, and a proxy must not keep an operator's page.
  // Always here (behind the admin token, when one is set); the client listener serves it too
  // unless metrics.listener: admin.
  Route(bhttp::verb::get, "/metrics", [&g](const http::Request&, const PathParams&) { return g.MetricsResponse(); });
  Route(bhttp::verb::get, "/status", [](const http::Request&, const PathParams&) {
    http::StringResponse res{bhttp::status::ok, 11};
    res.set(bhttp::field::content_type, "text/html; charset=utf-8");
    res.set(bhttp::field::cache_control, "no-store");
    // The page is self-contained: it may run its own inline script and style and fetch from
    // this listener, and nothing else (no external script, font or image can sneak in).
    res.set("Content-Security-Policy",
            "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; "
            "connect-src 'self'; img-src data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'");
    res.set("X-Content-Type-Options", "nosniff");
    res.set("Referrer-Policy", "no-referrer");
    res.body() = std::string(StatusPageHtml());
    res.prepare_payload();
    return res;
  });
  Route(bhttp::verb::get, "/status.json", [&g](const http::Request&, const PathParams&) {
    http::StringResponse res{bhttp::status::ok, 11};
    res.set(bhttp::field::content_type, "application/json");
    res.set(bhttp::field::cache_control, "no-store");
    AppendReadableJson(res.body(), StatusJson(g, StatusClock::now()));
    res.prepare_payload();
    return res;
  });
}

// ----------------------------------------------------------------------------- AdminServer

AdminServer::AdminServer(const AdminConfig& config, const TimeoutsConfig& timeouts, Gateway& gateway,
                         ConfigLoader loader)
    : token_(config.token), listen_host_(config.listen_host), api_(gateway, std::move(loader)) {
  http::ServerOptions so;
  so.host = config.listen_host;
  so.port = config.listen_port;
  so.io_threads = 1;  // operators' requests are few; they never compete with client traffic
  so.max_body_bytes = kMaxAdminBodyBytes;
  so.read_timeout = std::chrono::milliseconds(static_cast<int64_t>(timeouts.client_read * 1000));
  so.write_timeout = std::chrono::milliseconds(static_cast<int64_t>(timeouts.client_write * 1000));
  so.idle_timeout = std::chrono::milliseconds(static_cast<int64_t>(timeouts.client_idle * 1000));
  server_ = std::make_unique<http::Server>(so, *this);
}

AdminServer::~AdminServer() { Stop(); }

Status AdminServer::Start() {
  if (Status s = server_->Start(); !s.ok()) return Status(s.code(), "admin " + s.message());
  spdlog::info("admin listening on {}:{} ({})", listen_host_, server_->port(),
               token_.empty() ? "no token: loopback only" : "bearer token required");
  return Status::Ok();
}

// An admin request in progress (a reload) gets a second to finish.
void AdminServer::Stop() { server_->Stop(std::chrono::milliseconds(1000)); }

http::net::awaitable<void> AdminServer::Handle(http::Exchange& ex) {
  const http::Request& req = ex.request();
  if (!token_.empty()) {
    auto it = req.find(bhttp::field::authorization);
    const bool ok = it != req.end() && PresentsToken(std::string_view(it->value().data(), it->value().size()), token_);
    if (!ok) {
      const bool absent = it == req.end();
      spdlog::warn("admin: {} {} refused (401): {} bearer token", std::string_view(req.method_string()), PathOf(req),
                   absent ? "no" : "wrong");
      http::StringResponse res = AdminError(
          401, "this admin endpoint needs the header Authorization: Bearer <admin token>", "invalid_api_key");
      res.set(bhttp::field::www_authenticate, "Bearer realm=\"prefix-router admin\"");
      // A browser shows its login dialog for this one (any user name, the token as password).
      res.insert(bhttp::field::www_authenticate, "Basic realm=\"prefix-router admin\", charset=\"UTF-8\"");
      co_await ex.Send(std::move(res));
      co_return;
    }
  }
  co_await ex.Send(api_.Handle(req));
}

}  // namespace prefix_router::gateway
