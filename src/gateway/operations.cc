// Run-time changes of the gateway: membership, drain and reload (see gateway.h and
// operations.h). Every change is a new configuration of the fleet, validated like a file, built
// into a new RoutingState and swapped in; nothing mutates a RoutingState that requests may hold.
//
// Discovery (discovery_loop.cc) goes through the same door: running_ holds the instances as
// configured (by the file, the flags and the admin API), and a `resolve: all` instance there is a
// template; the RoutingState is built from EffectiveLocked(running_), which replaces each
// template by one instance per address it last resolved to and configured served names by
// discovered ones. So a reload or an admin change keeps what discovery learned for the instances
// it keeps (a template keeps its addresses while its name, host and port are unchanged; an
// instance its discovered names while its name and url are), and a discovery change keeps every
// configured change. Admin remove takes configured names: a derived instance
// (NAME@ADDRESS:PORT) would come back at the next resolution, so removing one is refused
// (remove its template, or drain it: drain and undrain take derived names, and the drain holds
// while the address stays in the answer).
#include <spdlog/spdlog.h>

#include <algorithm>
#include <utility>

#include "gateway/config_schema.h"
#include "gateway/gateway.h"
#include "http/tls.h"

namespace prefix_router::gateway {
namespace {

std::string Join(const std::vector<std::string>& parts, std::string_view sep) {
  std::string out;
  for (const auto& p : parts) {
    if (!out.empty()) out += sep;
    out += p;
  }
  return out;
}

std::string DescribeOptions(const RoutingOptions& o) {
  const bool instances = o.flow_control.saturation != FlowSaturation::kPool;
  const uint32_t per_tenant = o.flow_control.max_in_flight_per_tenant;
  return fmt::format(
      "{}, prefix_length {}, concurrency_threshold {}, spill_mode {}, balance_factor {}, max_in_flight {}{}{}{}{}",
      StrategyName(o.strategy), o.prefix_length, o.concurrency_threshold, SpillModeName(o.spill), o.balance_factor,
      o.max_in_flight, instances ? ", saturated when every instance holds concurrency_threshold" : "",
      per_tenant > 0 ? fmt::format(", at most {} in flight per tenant", per_tenant) : std::string(),
      o.flow_control.max_queue == 0 ? std::string()
      : o.max_in_flight == 0 && !instances && per_tenant == 0
          ? std::string(", flow_control.max_queue ignored (no max_in_flight)")
          : fmt::format(", queue of {} for {:g} s", o.flow_control.max_queue, o.flow_control.max_queue_wait),
      o.key_normalisation.enabled() ? ", key normalisation on" : "");
}

// A pool's Policy: the previous one while the options are unchanged (it keeps what it learned:
// prefix-aware's sticky key homes and share meter, round-robin's turn), else a new one.
Pool KeepOrMakePoolPolicy(const RoutingOptions& options, const Pool* previous, const std::string& what,
                          std::vector<std::string>* changes) {
  if (previous && previous->options == options) {
    return Pool{options, previous->policy, previous->in_flight};
  }
  if (changes) {
    changes->push_back(fmt::format("{}: {} ({}; a new policy starts with no learned state)", what,
                                   previous ? "routing options changed" : "added", DescribeOptions(options)));
  }
  Pool pool{options, MakePolicy(options)};
  // Requests still running count toward the pool's ceiling whatever its new options.
  if (previous) pool.in_flight = previous->in_flight;
  return pool;
}

// ... with its key normaliser (ValidateConfig compiled it once already, so it cannot fail here)
// and its flow control (the previous queue while the count, ceiling and flow options are the same),
// reading `fleet` for in-flight saturation (the instances eligible for `served_name`, "" = all).
Pool KeepOrMakePool(const RoutingOptions& options, const Pool* previous, const std::string& what,
                    std::vector<std::string>* changes, const std::shared_ptr<const FleetSnapshot>& fleet,
                    const std::string& served_name) {
  Pool pool = KeepOrMakePoolPolicy(options, previous, what, changes);
  const bool instances = options.flow_control.saturation != FlowSaturation::kPool;
  // A per-tenant bound needs the flow's counts even without a queue (its requests then get 429).
  if ((options.flow_control.max_queue > 0 && options.max_in_flight > 0) || instances ||
      options.flow_control.max_in_flight_per_tenant > 0) {
    // The objectives only classify arriving requests (read from the pool's options): a change to
    // them keeps the queue.
    auto queue_settings = [](FlowQueueOptions o) {
      o.objectives.clear();
      return o;
    };
    if (previous && previous->flow && previous->in_flight == pool.in_flight &&
        queue_settings(previous->flow->options()) == queue_settings(options.flow_control) &&
        previous->flow->max_in_flight() == options.max_in_flight &&
        (!instances || previous->options.concurrency_threshold == options.concurrency_threshold)) {
      pool.flow = previous->flow;
      if (instances) pool.flow->SetFleet(fleet);
    } else {
      pool.flow = std::make_shared<PoolFlow>(options.flow_control, options.max_in_flight, pool.in_flight,
                                             instances ? fleet : nullptr, served_name,
                                             options.concurrency_threshold);
    }
  }
  if (options.key_normalisation.enabled()) {
    if (previous && previous->normaliser && previous->options.key_normalisation == options.key_normalisation) {
      pool.normaliser = previous->normaliser;
    } else if (auto n = api::KeyNormaliser::Create(options.key_normalisation); n.ok()) {
      pool.normaliser = *n;
    } else {
      spdlog::error("{}: key_normalisation: {} (should never happen: validated at load)", what, n.status().message());
    }
  }
  return pool;
}

const InstanceConfig* FindInstance(const std::vector<InstanceConfig>& list, std::string_view name) {
  for (const auto& ic : list) {
    if (ic.name == name) return &ic;
  }
  return nullptr;
}

InstanceView ViewOf(const FleetSnapshot& f, uint32_t i) {
  const InstanceSpec& spec = f.spec(i);
  const InstanceState& st = f.state(i);
  InstanceView v;
  v.name = spec.name;
  v.url = spec.url;
  v.weight = spec.weight;
  v.models = spec.serves;
  v.in_flight = st.in_flight.load();
  v.dispatched = st.dispatched.load();
  v.healthy = st.available.load();
  v.drained = st.drained.load();
  return v;
}

// ValidateConfig's messages name the field as instances[N].field; an operation on one instance
// names the field alone.
Status WithoutIndexOf(const Status& s, size_t index) {
  const std::string prefix = "instances[" + std::to_string(index) + "].";
  if (s.message().starts_with(prefix)) return Status(s.code(), s.message().substr(prefix.size()));
  return s;
}

std::string DescribeKeys(const ClientsConfig& c) {
  if (!c.key_set) return "off";
  const size_t keys = c.key_set->size();
  const size_t tenants = c.key_set->tenant_count();
  return fmt::format("{} key{} for {} tenant{}", keys, keys == 1 ? "" : "s", tenants, tenants == 1 ? "" : "s");
}

std::string DescribeLimits(const TenantLimits& l) {
  if (!l.any()) return "no limit";
  std::vector<std::string> parts;
  if (l.requests_per_minute > 0) {
    parts.push_back(fmt::format("{} requests/min (burst {})", l.requests_per_minute,
                                l.request_burst ? l.request_burst : l.requests_per_minute));
  }
  if (l.tokens_per_minute > 0) {
    parts.push_back(fmt::format("{} tokens/min (burst {})", l.tokens_per_minute,
                                l.token_burst ? l.token_burst : l.tokens_per_minute));
  }
  return Join(parts, ", ");
}

}  // namespace

// ------------------------------------------------------------------------------ building

Result<std::shared_ptr<RoutingState>> Gateway::BuildRouting(const GatewayConfig& c, const RoutingState* previous,
                                                            std::vector<std::string>* changes, bool reread_files) {
  std::vector<InstanceSpec> specs;
  for (const auto& ic : c.instances) {
    specs.push_back({ic.name, ic.url, ic.weight, ic.models, ic.models_only_listed});
  }
  auto fleet = FleetSnapshot::Create(std::move(specs), previous ? previous->fleet.get() : nullptr);
  if (!fleet.ok()) return fleet.status();
  auto rs = std::make_shared<RoutingState>();
  rs->fleet = *fleet;
  for (const auto& ic : c.instances) {
    rs->discovery.push_back({ic.models_polled, ic.model_entries});
  }
  for (uint32_t i = 0; i < c.instances.size(); ++i) {
    const InstanceConfig& ic = c.instances[i];
    std::optional<uint32_t> old = previous ? previous->fleet->Find(ic.name) : std::nullopt;
    if (!old) {
      if (changes) {
        changes->push_back(fmt::format("added instance {} ({}, weight {}{})", ic.name, ic.url, ic.weight,
                                       ic.models.empty() ? "" : ", models " + Join(ic.models, ",")));
      }
      rs->instances.push_back(NewRuntime(ic));
      continue;
    }
    const InstanceSpec& was = previous->fleet->spec(*old);
    const auto& old_rt = previous->instances[*old];
    const UpstreamTarget& old_target = old_rt->target;
    const bool same_tls = !ic.https || (old_target.tls_config == ic.tls && !reread_files);
    // (Secret::SameAs is false for two empty secrets: it never matches an empty credential.)
    const bool same_credentials =
        old_target.authorization.empty() ? ic.authorization.empty() : old_target.authorization.SameAs(ic.authorization);
    if (was.url == ic.url && same_tls && same_credentials) {
      rs->instances.push_back(old_rt);  // keeps its health counters and connections' identity
    } else if (was.url == ic.url) {
      // Same server, new TLS context (settings changed, or a reload re-reads the CA file) or
      // new credentials: a new runtime (the old one stays with requests in flight), with its
      // place in rotation and its counts.
      rs->instances.push_back(NewRuntime(ic));
      rs->instances.back()->stats = old_rt->stats;
      if (changes && !same_credentials) {
        changes->push_back(fmt::format("instance {}: authorization changed", ic.name));
      }
      if (changes && ic.https && !(old_target.tls_config == ic.tls)) {
        changes->push_back(
            fmt::format("instance {}: upstream_tls ca_file '{}', verify {}", ic.name, ic.tls.ca_file, ic.tls.verify));
      }
    } else {
      // A new address is a new server as far as health goes: it starts in rotation, and the
      // checks (or live traffic) judge it afresh. In-flight counts and drain carry over.
      rs->instances.push_back(NewRuntime(ic));
      rs->instances.back()->stats = old_rt->stats;  // the status page's counts go on by name
      rs->fleet->state(i).available.store(true);
      if (changes) changes->push_back(fmt::format("instance {}: url {} -> {}", ic.name, was.url, ic.url));
    }
    if (changes && was.weight != ic.weight) {
      changes->push_back(fmt::format("instance {}: weight {} -> {}", ic.name, was.weight, ic.weight));
    }
    if (changes && was.serves != ic.models) {
      changes->push_back(
          fmt::format("instance {}: models [{}] -> [{}]", ic.name, Join(was.serves, ","), Join(ic.models, ",")));
    }
  }
  if (previous && changes) {
    for (uint32_t i = 0; i < previous->fleet->size(); ++i) {
      const std::string& name = previous->fleet->spec(i).name;
      if (rs->fleet->Find(name)) continue;
      changes->push_back(fmt::format("removed instance {} ({} requests in flight finish there)", name,
                                     previous->fleet->state(i).in_flight.load()));
    }
  }
  rs->default_pool = KeepOrMakePool(c.routing, previous ? &previous->default_pool : nullptr, "routing",
                                    previous ? changes : nullptr, rs->fleet, "");
  for (const auto& [name, options] : c.pools) {
    const Pool* old = nullptr;
    if (previous) {
      auto it = previous->pools.find(name);
      if (it != previous->pools.end()) old = &it->second;
    }
    rs->pools.emplace(name, KeepOrMakePool(options, old, "pools." + name, previous ? changes : nullptr, rs->fleet, name));
  }
  if (previous && changes) {
    for (const auto& [name, pool] : previous->pools) {
      if (!rs->pools.contains(name)) {
        changes->push_back("pools." + name + ": removed (the name routes with `routing`)");
      }
    }
  }
  return rs;
}

void Gateway::ApplyClientsAndLimits(const GatewayConfig& next, const GatewayConfig* previous,
                                    std::vector<std::string>* changes) {
  const ClientsConfig* was = previous ? &previous->clients : nullptr;
  const bool keys_changed = !was || (was->key_set == nullptr) != (next.clients.key_set == nullptr) ||
                            (was->key_set && !was->key_set->SameAs(*next.clients.key_set));
  if (keys_changed) {
    client_keys_.store(next.clients.key_set);
    if (changes) {
      changes->push_back(
          fmt::format("clients: {} (was {})", DescribeKeys(next.clients), was ? DescribeKeys(*was) : "off"));
    }
  }
  if (!previous || !(previous->rate_limits == next.rate_limits)) {
    limiter_->Configure(next.rate_limits);
    if (changes) {
      changes->push_back(fmt::format("rate_limits: default {}, {} tenant overrides, max_tenants {}",
                                     DescribeLimits(next.rate_limits.defaults), next.rate_limits.tenants.size(),
                                     next.rate_limits.max_tenants));
    }
  }
}

Result<std::vector<std::string>> Gateway::ApplyLocked(GatewayConfig candidate, bool reread_files) {
  candidate.admin = AdminConfig{};      // unchanged at run time; its token is not re-read
  candidate.tls = ListenerTlsConfig{};  // the listener's files are re-read by Reload alone
  // The client keys were read when `candidate` was validated (or at start); they are not read
  // again here, where a file removed since would fail an unrelated change.
  ClientsConfig clients = std::move(candidate.clients);
  candidate.clients = ClientsConfig{};
  Status validated = ValidateConfig(candidate);
  candidate.clients = std::move(clients);
  if (Status s = validated; !s.ok()) {
    // The fleet is what changed: a broken rule there is a conflict with the current state
    // (no instance left, a pool nobody serves); other messages are about the input.
    const bool conflict = s.message().starts_with("instances: at least one") || s.message().starts_with("pools.");
    return conflict ? Status::FailedPrecondition(s.message()) : s;
  }
  auto changes = SwapLocked(EffectiveLocked(candidate), reread_files);
  if (!changes.ok()) return changes.status();
  ApplyClientsAndLimits(candidate, &running_, &*changes);
  running_ = std::move(candidate);
  std::erase_if(resolved_, [&](const auto& entry) {
    const InstanceConfig* t = FindInstance(running_.instances, entry.first);
    return t == nullptr || t->resolve != ResolveMode::kAll;
  });
  // Templates and instances added here are resolved and polled at once, not at the next tick.
  if (std::any_of(running_.instances.begin(), running_.instances.end(), [this](const InstanceConfig& ic) {
        return ic.resolve == ResolveMode::kAll || DiscoversModels(ic, running_.discovery);
      })) {
    RequestDiscovery();
  }
  return changes;
}

GatewayConfig Gateway::EffectiveLocked(const GatewayConfig& running) const {
  GatewayConfig out = running;
  out.instances.clear();
  std::vector<InstanceConfig> derived;
  // discovery.kubernetes: one instance per Ready pod, after the configured ones.
  std::vector<InstanceConfig> templates = running.instances;
  const KubernetesDiscoveryConfig& k8s = running.discovery.kubernetes;
  if (k8s.enabled) {
    InstanceConfig t = k8s.instance;
    t.resolve = ResolveMode::kNone;
    templates.push_back(std::move(t));  // a marker: expanded below, never an instance itself
  }
  for (size_t ti = 0; ti < templates.size(); ++ti) {
    const InstanceConfig& t = templates[ti];
    derived.clear();
    if (k8s.enabled && ti + 1 == templates.size()) {
      for (const KubernetesEndpoint& e : kubernetes_endpoints_) {
        InstanceConfig d = t;
        const std::string address = FormatAddress({e.address, e.port});
        d.name = t.name + "@" + e.pod;
        d.url = "http://" + address;
        d.host = e.address;
        d.port = e.port;
        d.base_path.clear();
        d.https = false;
        derived.push_back(std::move(d));
      }
    } else if (t.resolve == ResolveMode::kAll) {
      auto it = resolved_.find(t.name);
      if (it != resolved_.end() && it->second.host == t.host && it->second.port == t.port) {
        for (const ResolvedAddress& a : it->second.addresses) {
          InstanceConfig d = t;
          const std::string address = FormatAddress(a);
          d.resolve = ResolveMode::kNone;
          d.name = t.name + "@" + address;
          d.url = (t.https ? "https://" : "http://") + address + t.base_path;
          d.host = a.address;
          d.port = a.port;
          // The name the operator wrote, as virtual hosts and proxies in front of the model
          // servers expect it.
          const bool ipv6 = t.host.find(':') != std::string::npos;
          d.host_header = (ipv6 ? "[" + t.host + "]" : t.host) + ":" + std::to_string(t.port);
          d.tls_name = t.host;  // https: the certificate names the service, not the address
          derived.push_back(std::move(d));
        }
      }
    } else {
      derived.push_back(t);
    }
    for (InstanceConfig& d : derived) {
      if (DiscoversModels(d, running.discovery)) {
        d.models_polled = true;
        auto it = discovered_.find(d.name);
        if (it != discovered_.end() && it->second.url == d.url && it->second.names) {
          d.models = *it->second.names;
          d.model_entries = it->second.entries;
          d.models_only_listed = true;
        } else if (d.discover_models.value_or(false)) {
          // Asked for by name: the configured list stands until a poll succeeds (empty: no name
          // at all). Left to discovery.models, the instance serves what it would
          // without discovery until it answers a list: it may have no /v1/models at all (a
          // native /invocations container), and a bare `--instance` must not 404 meanwhile.
          d.models_only_listed = true;
        }
      }
      out.instances.push_back(std::move(d));
    }
  }
  return out;
}

Result<std::vector<std::string>> Gateway::SwapLocked(const GatewayConfig& effective, bool reread_files) {
  auto previous = routing_.load();
  std::vector<std::string> changes;
  auto next = BuildRouting(effective, previous.get(), &changes, reread_files);
  if (!next.ok()) return next.status();
  routing_.store(*next);
  UpdateKvSources(effective, **next);
  // What discovery learned about instances that are gone is forgotten (bounded memory).
  std::erase_if(discovered_, [&](const auto& entry) { return !(*next)->fleet->Find(entry.first); });
  // A removed instance's state lives on in the previous snapshot, which requests in flight
  // still hold: drained, their retries cannot pick it. (Added back later, it gets new state.)
  for (uint32_t i = 0; i < previous->fleet->size(); ++i) {
    if (!(*next)->fleet->Find(previous->fleet->spec(i).name)) previous->fleet->state(i).drained.store(true);
  }
  // Health checks follow the new state (the previous state's loops end at their next tick).
  if (config_.health.interval > 0 && server_->thread_count() > 0 && !server_->stopping()) {
    std::shared_ptr<const RoutingState> rs = *next;
    for (uint32_t i = 0; i < rs->fleet->size(); ++i) {
      SpawnLoop(server_->context(i % server_->thread_count()), "health", HealthLoop(rs, i));
    }
  }
  return changes;
}

// ---------------------------------------------------------------------------- operations

std::vector<InstanceView> Gateway::Instances() const {
  auto rs = routing_.load();
  std::vector<InstanceView> out;
  for (uint32_t i = 0; i < rs->fleet->size(); ++i) out.push_back(ViewOf(*rs->fleet, i));
  return out;
}

Result<InstanceView> Gateway::AddInstance(InstanceConfig instance) {
  std::lock_guard lock(ops_mu_);
  GatewayConfig candidate = running_;
  if (!instance.name.empty() && FindInstance(candidate.instances, instance.name)) {
    return Status::FailedPrecondition("instance '" + instance.name + "' already exists");
  }
  const size_t index = candidate.instances.size();
  candidate.instances.push_back(std::move(instance));
  {
    // The default name (host:port) is only known after validation.
    GatewayConfig probe = candidate;
    probe.admin = AdminConfig{};
    probe.clients = ClientsConfig{};  // read at load; see ApplyLocked
    if (Status s = ValidateConfig(probe); !s.ok()) {
      if (s.message().starts_with("instances[" + std::to_string(index) + "].name: '") &&
          s.message().find("is also the name of") != std::string::npos) {
        return Status::FailedPrecondition("instance '" + probe.instances[index].name + "' already exists");
      }
      return WithoutIndexOf(s, index);
    }
    candidate.instances[index].name = probe.instances[index].name;
  }
  const std::string name = candidate.instances[index].name;
  auto changes = ApplyLocked(std::move(candidate));
  if (!changes.ok()) return WithoutIndexOf(changes.status(), index);
  auto rs = routing_.load();
  spdlog::info("admin: {}{}; {} instances", Join(*changes, "; "),
               changes->empty() ? "added " + name + " (resolve: all; its instances follow its resolution)" : "",
               rs->fleet->size());
  if (const auto i = rs->fleet->Find(name)) return ViewOf(*rs->fleet, *i);
  // A `resolve: all` template: its instances (NAME@ADDRESS:PORT) appear once it is resolved.
  const InstanceConfig& t = *FindInstance(running_.instances, name);
  InstanceView v;
  v.name = t.name;
  v.url = t.url;
  v.weight = t.weight;
  v.models = t.models;
  return v;
}

Result<int32_t> Gateway::RemoveInstance(std::string_view name) {
  std::lock_guard lock(ops_mu_);
  GatewayConfig candidate = running_;
  auto it = std::find_if(candidate.instances.begin(), candidate.instances.end(),
                         [&](const InstanceConfig& ic) { return ic.name == name; });
  if (it == candidate.instances.end()) {
    const std::string& k8s_name = running_.discovery.kubernetes.instance.name;
    if (running_.discovery.kubernetes.enabled && name.starts_with(k8s_name + "@") && routing_.load()->fleet->Find(name)) {
      return Status::FailedPrecondition("'" + std::string(name) +
                                        "' is a pod found by discovery.kubernetes: it leaves when the pod is no "
                                        "longer Ready; drain it to take it out of rotation");
    }
    if (routing_.load()->fleet->Find(name)) {
      return Status::FailedPrecondition("'" + std::string(name) +
                                        "' is derived by resolve: all and would come back at the next "
                                        "resolution; remove '" +
                                        std::string(name.substr(0, name.find('@'))) +
                                        "' (all its addresses) or drain this one");
    }
    return Status::NotFound("no instance named '" + std::string(name) + "'");
  }
  candidate.instances.erase(it);
  auto previous = routing_.load();
  auto changes = ApplyLocked(std::move(candidate));
  if (!changes.ok()) {
    return Status(changes.status().code(), "cannot remove '" + std::string(name) + "': " + changes.status().message());
  }
  // A `resolve: all` template's requests are those of its instances (NAME@ADDRESS:PORT).
  int32_t in_flight = 0;
  for (uint32_t i = 0; i < previous->fleet->size(); ++i) {
    const std::string& n = previous->fleet->spec(i).name;
    if (n == name || (n.size() > name.size() && n.starts_with(name) && n[name.size()] == '@')) {
      in_flight += previous->fleet->state(i).in_flight.load();
    }
  }
  spdlog::info("admin: {}; {} instances", Join(*changes, "; "), routing_.load()->fleet->size());
  return in_flight;
}

Result<InstanceView> Gateway::SetDrained(std::string_view name, bool drained) {
  std::lock_guard lock(ops_mu_);
  auto rs = routing_.load();
  auto i = rs->fleet->Find(name);
  if (!i) {
    if (const InstanceConfig* t = FindInstance(running_.instances, name); t && t->resolve == ResolveMode::kAll) {
      return Status::FailedPrecondition("'" + std::string(name) +
                                        "' stands for one instance per address (resolve: all); "
                                        "drain them by name (" +
                                        std::string(name) + "@ADDRESS:PORT)");
    }
    return Status::NotFound("no instance named '" + std::string(name) + "'");
  }
  InstanceState& st = rs->fleet->state(*i);
  if (st.drained.exchange(drained) != drained) {
    spdlog::info("admin: instance {} {} ({} requests in flight{})", name, drained ? "drained" : "undrained",
                 st.in_flight.load(),
                 drained ? " finish there; new ones go elsewhere" : "; it takes new requests again");
  } else {
    spdlog::info("admin: instance {} was already {}", name, drained ? "drained" : "not drained");
  }
  return ViewOf(*rs->fleet, *i);
}

GatewayConfig Gateway::running_config() const {
  std::lock_guard lock(ops_mu_);
  return running_;
}

ReloadReport Gateway::Reload(GatewayConfig next, std::string_view trigger) {
  std::lock_guard lock(ops_mu_);
  ReloadReport report;
  report.restart_required = RestartRequired(config_, next);
  GatewayConfig candidate = running_;
  candidate.instances = std::move(next.instances);
  candidate.routing = next.routing;
  candidate.pools = std::move(next.pools);
  candidate.clients = std::move(next.clients);
  candidate.rate_limits = std::move(next.rate_limits);
  candidate.upstream_tls = next.upstream_tls;
  // The listener's certificate: `next` was validated, so its files loaded a moment ago; built
  // again here for the server (a file replaced in between is caught, and the old pair stays).
  std::string tls_change;
  if (config_.tls.enabled && next.tls.enabled) {
    auto tls = http::MakeServerTlsContext(next.tls.cert_file, next.tls.key_file, "tls");
    if (tls.ok()) {
      server_->SetTlsContext(*tls);
      tls_change = "tls: certificate and key re-read from " + next.tls.cert_file + " and " + next.tls.key_file +
                   " (new connections use them)";
    } else {
      report.restart_required.push_back("(tls not reloaded, the previous certificate stays: " + tls.status().message() +
                                        ")");
    }
  }
  auto changes = ApplyLocked(std::move(candidate), /*reread_files=*/true);
  if (!changes.ok()) {
    // REQUIRES says `next` was valid, and the rest of `candidate` is the running config: a
    // failure here is a bug. Nothing was swapped.
    spdlog::error("config reload ({}) failed after validation: {}", trigger, changes.status().message());
    report.restart_required.push_back("(reload failed: " + changes.status().message() + ")");
    return report;
  }
  report.changes = std::move(*changes);
  if (!tls_change.empty()) report.changes.push_back(std::move(tls_change));
  spdlog::info("config reloaded ({}): {}{}", trigger,
               report.changes.empty() ? std::string("no change to instances, routing, pools, clients or rate_limits")
                                      : Join(report.changes, "; "),
               report.restart_required.empty() ? std::string()
                                               : "; needs a restart to apply: " + Join(report.restart_required, ", "));
  return report;
}

// ------------------------------------------------------------------------------- helpers

Result<ReloadReport> LoadAndReload(Gateway& gateway, const ConfigLoader& loader, std::string_view trigger) {
  Result<GatewayConfig> next = loader();
  if (!next.ok()) {
    spdlog::warn("config reload ({}) rejected, the running configuration stays: {}", trigger, next.status().message());
    return next.status();
  }
  for (const std::string& w : ConfigWarnings(*next)) spdlog::warn("config reload ({}): {}", trigger, w);
  return gateway.Reload(std::move(*next), trigger);
}

std::vector<std::string> RestartRequired(const GatewayConfig& a, const GatewayConfig& b) {
  std::vector<std::string> out;
  for (const ConfigField& f : ConfigSchema()) {
    // Sections turned on by being present: turning one on or off needs a restart (clients
    // excepted: keys are reloaded). The admin token is compared, never shown; its file and
    // variable are named as the token.
    if (f.path == "tls.cert_file" && a.tls.enabled != b.tls.enabled) out.push_back("tls");
    if (f.path == "engine_metrics.interval" && a.engine_metrics.enabled != b.engine_metrics.enabled) {
      out.push_back("engine_metrics");
    }
    if (f.path.starts_with("admin.")) {
      const AdminConfig& aa = a.admin;
      const AdminConfig& ab = b.admin;
      if (f.path == "admin.listen" && (aa.enabled != ab.enabled || (aa.enabled && aa.listen != ab.listen))) {
        out.push_back("admin.listen");
      }
      if (f.path == "admin.token_file" && aa.enabled && ab.enabled &&
          (aa.token_file != ab.token_file || aa.token_env != ab.token_env || !aa.token.SameAs(ab.token))) {
        out.push_back("admin.token");
      }
      continue;
    }
    if (f.path == "discovery.kubernetes") {
      const KubernetesDiscoveryConfig& ka = a.discovery.kubernetes;
      const KubernetesDiscoveryConfig& kb = b.discovery.kubernetes;
      const InstanceConfig& ta = ka.instance;
      const InstanceConfig& tb = kb.instance;
      if (ka.enabled != kb.enabled || ka.selector != kb.selector || ta.name != tb.name || ta.weight != tb.weight ||
          ta.models != tb.models || ta.discover_models != tb.discover_models ||
          ta.authorization_env != tb.authorization_env || ta.authorization_file != tb.authorization_file) {
        out.push_back(f.path);
      }
    }
    if (f.scalar() && !f.reloadable && f.get(a) != f.get(b)) out.push_back(f.path);
  }
  return out;
}

}  // namespace prefix_router::gateway
