// What deploy/kubernetes/ and the two Dockerfiles promise, checked offline (no cluster, no
// container runtime): every manifest parses and has a known kind and apiVersion; the
// configuration each Deployment is started with passes the gateway's own reader and validation;
// container ports, Services, probes and the InferencePool agree with that configuration; the
// Roles grant exactly the Kubernetes API calls discovery makes (KubernetesApiCalls()); every
// Deployment runs the image scripts/image.sh builds, as the Dockerfiles' user, without
// privileges. A change to one side (a port in router.yaml, a verb in the code, the version in
// CMakeLists.txt) fails here until the other side follows. docs/kubernetes.md describes the files.
#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "gateway/config.h"
#include "gateway/kubernetes_discovery.h"
#include "testing/test_pki.h"

namespace prefix_router::gateway {
namespace {

namespace fs = std::filesystem;

const fs::path kSource = PR_SOURCE_DIR;
const fs::path kManifests = kSource / "deploy" / "kubernetes";
constexpr char kNamespace[] = "inference";
constexpr char kImageName[] = "localhost/prefix-router";

std::string ReadFile(const fs::path& path) {
  std::ifstream in(path);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

std::string Str(const YAML::Node& node) { return node && node.IsScalar() ? node.as<std::string>() : ""; }

// One object of a manifest file (a file may hold several, separated by ---).
struct Object {
  fs::path file;
  YAML::Node node;
  std::string kind;
  std::string name;
};

std::vector<Object> LoadManifests() {
  std::vector<Object> objects;
  std::vector<fs::path> files;
  for (const auto& entry : fs::recursive_directory_iterator(kManifests)) {
    if (entry.path().extension() == ".yaml" && entry.path().filename() != "kustomization.yaml") {
      files.push_back(entry.path());
    }
  }
  std::sort(files.begin(), files.end());
  for (const fs::path& file : files) {
    for (const YAML::Node& doc : YAML::LoadAllFromFile(file.string())) {
      if (!doc || doc.IsNull()) continue;
      objects.push_back({file, doc, Str(doc["kind"]), Str(doc["metadata"]["name"])});
    }
  }
  return objects;
}

const std::vector<Object>& Manifests() {
  static const std::vector<Object> objects = LoadManifests();
  return objects;
}

std::vector<const Object*> OfKind(std::string_view kind) {
  std::vector<const Object*> out;
  for (const Object& o : Manifests()) {
    if (o.kind == kind) out.push_back(&o);
  }
  return out;
}

const Object* Find(std::string_view kind, std::string_view name) {
  for (const Object* o : OfKind(kind)) {
    if (o->name == name) return o;
  }
  return nullptr;
}

std::map<std::string, std::string> StringMap(const YAML::Node& node) {
  std::map<std::string, std::string> out;
  if (node && node.IsMap()) {
    for (const auto& kv : node) out[kv.first.as<std::string>()] = kv.second.as<std::string>();
  }
  return out;
}

// Every pair of `subset` is in `labels` (a selector matches a pod's labels).
bool Selects(const std::map<std::string, std::string>& subset, const std::map<std::string, std::string>& labels) {
  if (subset.empty()) return false;
  return std::all_of(subset.begin(), subset.end(), [&](const auto& kv) {
    auto it = labels.find(kv.first);
    return it != labels.end() && it->second == kv.second;
  });
}

YAML::Node PodSpec(const Object& deployment) { return deployment.node["spec"]["template"]["spec"]; }
std::map<std::string, std::string> PodLabels(const Object& deployment) {
  return StringMap(deployment.node["spec"]["template"]["metadata"]["labels"]);
}
YAML::Node Containers(const Object& deployment) { return PodSpec(deployment)["containers"]; }

std::vector<std::string> Args(const YAML::Node& container) {
  std::vector<std::string> out;
  for (const auto& a : container["args"]) out.push_back(a.as<std::string>());
  return out;
}

// container port name -> number
std::map<std::string, int> ContainerPorts(const YAML::Node& container) {
  std::map<std::string, int> out;
  for (const auto& p : container["ports"]) out[Str(p["name"])] = p["containerPort"].as<int>();
  return out;
}
std::set<int> PortNumbers(const std::map<std::string, int>& ports) {
  std::set<int> out;
  for (const auto& [name, number] : ports) out.insert(number);
  return out;
}

// host and port of "host:port" or "[v6]:port"
std::pair<std::string, int> SplitListen(const std::string& listen) {
  const size_t colon = listen.rfind(':');
  if (colon == std::string::npos) return {listen, -1};
  std::string host = listen.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[') host = host.substr(1, host.size() - 2);
  return {host, std::stoi(listen.substr(colon + 1))};
}
bool IsLoopback(const std::string& host) { return host == "localhost" || host == "::1" || host.starts_with("127."); }

// The configuration a `prefix-router serve --config PATH` container is started with: the
// ConfigMap key mounted at PATH. Empty (and a test failure) when it cannot be found.
struct RouterConfig {
  std::string text;
  YAML::Node yaml;
  std::string path;  // the --config argument
};

std::optional<RouterConfig> ConfigOf(const Object& deployment, const YAML::Node& container) {
  const std::vector<std::string> args = Args(container);
  if (args.empty() || args[0] != "serve") return std::nullopt;
  auto flag = std::find(args.begin(), args.end(), "--config");
  if (flag == args.end() || flag + 1 == args.end()) {
    ADD_FAILURE() << deployment.name << ": serve without --config";
    return std::nullopt;
  }
  const fs::path path = *(flag + 1);
  for (const auto& mount : container["volumeMounts"]) {
    if (Str(mount["mountPath"]) != path.parent_path().string()) continue;
    for (const auto& volume : PodSpec(deployment)["volumes"]) {
      if (Str(volume["name"]) != Str(mount["name"]) || !volume["configMap"]) continue;
      const Object* cm = Find("ConfigMap", Str(volume["configMap"]["name"]));
      if (!cm) break;
      const std::string text = Str(cm->node["data"][path.filename().string()]);
      if (text.empty()) break;
      return RouterConfig{text, YAML::Load(text), path.string()};
    }
  }
  ADD_FAILURE() << deployment.name << ": no ConfigMap key is mounted at " << path;
  return std::nullopt;
}

// The listeners of a configuration that other pods reach: the client listener, the picker's
// (epp.listen) and the admin listener when it is not on loopback. name -> port.
std::map<std::string, int> ReachablePorts(const YAML::Node& config) {
  std::map<std::string, int> out;
  const std::string listen = config["listen"] ? Str(config["listen"]) : "127.0.0.1:8080";
  if (!listen.empty() && !IsLoopback(SplitListen(listen).first)) out["listen"] = SplitListen(listen).second;
  if (config["epp"] && !IsLoopback(SplitListen(Str(config["epp"]["listen"])).first)) {
    out["epp.listen"] = SplitListen(Str(config["epp"]["listen"])).second;
  }
  if (config["admin"]) {
    const std::string admin = config["admin"]["listen"] ? Str(config["admin"]["listen"]) : "127.0.0.1:9090";
    if (!IsLoopback(SplitListen(admin).first)) out["admin.listen"] = SplitListen(admin).second;
  }
  return out;
}

// Every (Deployment, its serve container, its configuration).
struct Gateway {
  const Object* deployment;
  YAML::Node container;
  RouterConfig config;
  bool epp() const { return static_cast<bool>(config.yaml["epp"]); }
};
std::vector<Gateway> Gateways() {
  std::vector<Gateway> out;
  for (const Object* d : OfKind("Deployment")) {
    for (const auto& c : Containers(*d)) {
      if (auto config = ConfigOf(*d, c)) out.push_back({d, c, *config});
    }
  }
  return out;
}

std::vector<const Object*> ServicesOf(const Object& deployment) {
  std::vector<const Object*> out;
  for (const Object* s : OfKind("Service")) {
    if (Selects(StringMap(s->node["spec"]["selector"]), PodLabels(deployment))) out.push_back(s);
  }
  return out;
}

// A Service port's targetPort as a number (a name is looked up in the container's ports).
int TargetPort(const YAML::Node& service_port, const std::map<std::string, int>& container_ports) {
  const YAML::Node target = service_port["targetPort"] ? service_port["targetPort"] : service_port["port"];
  const std::string s = Str(target);
  if (!s.empty() && std::all_of(s.begin(), s.end(), ::isdigit)) return std::stoi(s);
  auto it = container_ports.find(s);
  return it == container_ports.end() ? -1 : it->second;
}

// `text` as validation would see it in a pod. This machine lacks what a pod has: the API
// server's address in the environment (KUBERNETES_SERVICE_HOST/_PORT) and the service account's
// CA (discovery.kubernetes.ca_file defaults to /var/run/secrets/kubernetes.io/serviceaccount/
// ca.crt, which validation loads); a throwaway CA stands in for it when the file names none.
std::string AsInAPod(const std::string& text, const std::string& ca_file) {
  setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1", 0);
  setenv("KUBERNETES_SERVICE_PORT", "443", 0);
  YAML::Node node = YAML::Load(text);
  if (node["discovery"] && node["discovery"]["kubernetes"] && !node["discovery"]["kubernetes"]["ca_file"]) {
    node["discovery"]["kubernetes"]["ca_file"] = ca_file;
  }
  YAML::Emitter out;
  out << node;
  return out.c_str();
}

// ---------------------------------------------------------------------------- the manifests

// Every object is of a kind the deployment uses, at the API version this project writes for.
TEST(KubernetesManifestsTest, EveryObjectHasAKnownKindAndApiVersion) {
  const std::map<std::string, std::string> versions = {
      {"ConfigMap", "v1"},
      {"Service", "v1"},
      {"ServiceAccount", "v1"},
      {"Deployment", "apps/v1"},
      {"Role", "rbac.authorization.k8s.io/v1"},
      {"RoleBinding", "rbac.authorization.k8s.io/v1"},
      {"InferencePool", "inference.networking.k8s.io/v1"},
      {"HTTPRoute", "gateway.networking.k8s.io/v1"},
  };
  ASSERT_GE(Manifests().size(), 14u) << kManifests;
  for (const Object& o : Manifests()) {
    SCOPED_TRACE(o.file.string() + ": " + o.kind + " " + o.name);
    ASSERT_TRUE(versions.count(o.kind)) << "unexpected kind";
    EXPECT_EQ(Str(o.node["apiVersion"]), versions.at(o.kind));
    EXPECT_FALSE(o.name.empty());
    EXPECT_EQ(Str(o.node["metadata"]["namespace"]), kNamespace);
  }
  for (const char* kind :
       {"ConfigMap", "Service", "ServiceAccount", "Deployment", "Role", "RoleBinding", "InferencePool", "HTTPRoute"}) {
    EXPECT_FALSE(OfKind(kind).empty()) << "no " << kind;
  }
}

// `kubectl apply -k DIR` applies every manifest of DIR: each kustomization lists exactly its files.
TEST(KubernetesManifestsTest, KustomizationsListEveryManifestOfTheirDirectory) {
  int dirs = 0;
  for (const auto& entry : fs::directory_iterator(kManifests)) {
    if (!entry.is_directory()) continue;
    ++dirs;
    SCOPED_TRACE(entry.path().string());
    const fs::path k = entry.path() / "kustomization.yaml";
    ASSERT_TRUE(fs::exists(k));
    const YAML::Node node = YAML::LoadFile(k.string());
    EXPECT_EQ(Str(node["kind"]), "Kustomization");
    std::set<std::string> listed, present;
    for (const auto& r : node["resources"]) listed.insert(r.as<std::string>());
    for (const auto& f : fs::directory_iterator(entry.path())) {
      if (f.path().extension() == ".yaml" && f.path().filename() != "kustomization.yaml") {
        present.insert(f.path().filename().string());
      }
    }
    EXPECT_EQ(listed, present);
  }
  EXPECT_EQ(dirs, 3);  // standalone, epp, model-server
}

// The configuration each gateway Deployment starts with is one `serve` accepts: the gateway's
// own reader and validation, so an unknown key or a value out of range fails here, not in a pod.
TEST(KubernetesManifestsTest, EmbeddedConfigurationsPassTheGatewaysValidation) {
  const std::vector<Gateway> gateways = Gateways();
  ASSERT_EQ(gateways.size(), 2u);  // standalone and picker
  prefix_router::testing::TestPki pki("kubernetes-manifests-test");
  ASSERT_TRUE(pki.ok());
  int epp = 0;
  for (const Gateway& g : gateways) {
    SCOPED_TRACE(g.deployment->name);
    Result<GatewayConfig> parsed = ParseConfigYaml(AsInAPod(g.config.text, pki.ca_file()));
    ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
    GatewayConfig config = std::move(parsed.value());
    Status valid = ValidateConfig(config);
    EXPECT_TRUE(valid.ok()) << valid.ToString();
    // Discovery finds the model servers; no instance is listed by hand.
    EXPECT_TRUE(g.config.yaml["discovery"]["kubernetes"].IsMap());
    EXPECT_FALSE(g.config.yaml["instances"]);
    epp += g.epp();
  }
  EXPECT_EQ(epp, 1);
}

// Container ports are exactly the listeners other pods reach; each Service port targets one of
// them; the picker's Service speaks HTTP/2 without TLS on the port the InferencePool names.
TEST(KubernetesManifestsTest, PortsAndServicesMatchTheConfiguration) {
  for (const Gateway& g : Gateways()) {
    SCOPED_TRACE(g.deployment->name);
    const std::map<std::string, int> listeners = ReachablePorts(g.config.yaml);
    const std::map<std::string, int> ports = ContainerPorts(g.container);
    EXPECT_EQ(PortNumbers(ports), PortNumbers(listeners));
    ASSERT_TRUE(listeners.count("listen")) << "the client listener must not be on loopback in a pod";
    const std::vector<const Object*> services = ServicesOf(*g.deployment);
    ASSERT_EQ(services.size(), 1u);
    const YAML::Node service_ports = services[0]->node["spec"]["ports"];
    ASSERT_GT(service_ports.size(), 0u);
    for (const auto& sp : service_ports) {
      SCOPED_TRACE(services[0]->name + " port " + Str(sp["port"]));
      const int target = TargetPort(sp, ports);
      EXPECT_TRUE(PortNumbers(ports).count(target)) << "targetPort " << target << " is no container port";
      EXPECT_EQ(sp["port"].as<int>(), target);
    }
    if (g.epp()) {
      // The gateway reaches the picker on the Service; the client listener stays pod-local.
      ASSERT_EQ(service_ports.size(), 1u);
      EXPECT_EQ(TargetPort(service_ports[0], ports), listeners.at("epp.listen"));
      EXPECT_EQ(Str(service_ports[0]["appProtocol"]), "kubernetes.io/h2c");
      EXPECT_EQ(listeners.at("epp.listen"), 9002);
    } else {
      ASSERT_EQ(service_ports.size(), 1u);
      EXPECT_EQ(TargetPort(service_ports[0], ports), listeners.at("listen"));
    }
    if (g.config.yaml["admin"] && !listeners.count("admin.listen")) {
      // A loopback admin listener is for kubectl port-forward, never a Service.
      const int admin = SplitListen(Str(g.config.yaml["admin"]["listen"])).second;
      for (const auto& sp : service_ports) EXPECT_NE(TargetPort(sp, ports), admin);
    }
  }
}

// Readiness follows the fleet (/health on the client listener; the picker's gRPC `readiness`
// service); liveness never restarts a gateway because the model servers are down.
TEST(KubernetesManifestsTest, ProbesPointAtTheRightListenersAndServices) {
  for (const Gateway& g : Gateways()) {
    SCOPED_TRACE(g.deployment->name);
    const std::map<std::string, int> listeners = ReachablePorts(g.config.yaml);
    const YAML::Node readiness = g.container["readinessProbe"];
    const YAML::Node liveness = g.container["livenessProbe"];
    ASSERT_TRUE(readiness && liveness);
    if (g.epp()) {
      EXPECT_EQ(readiness["grpc"]["port"].as<int>(), listeners.at("epp.listen"));
      EXPECT_EQ(Str(readiness["grpc"]["service"]), "readiness");
      EXPECT_EQ(liveness["grpc"]["port"].as<int>(), listeners.at("epp.listen"));
      EXPECT_EQ(Str(liveness["grpc"]["service"]), "liveness");
    } else {
      EXPECT_EQ(Str(readiness["httpGet"]["path"]), "/health");
      EXPECT_EQ(readiness["httpGet"]["port"].as<int>(), listeners.at("listen"));
      // /health answers 503 while no model server can serve: not a liveness signal.
      if (liveness["httpGet"]) {
        EXPECT_NE(Str(liveness["httpGet"]["path"]), "/health");
      }
      const YAML::Node port = liveness["tcpSocket"] ? liveness["tcpSocket"]["port"] : liveness["httpGet"]["port"];
      EXPECT_EQ(port.as<int>(), listeners.at("listen"));
    }
  }
}

using ApiCall = std::tuple<std::string, std::string, std::string>;  // group, resource, verb

// Each gateway's ServiceAccount is granted exactly the calls its discovery makes: all of
// KubernetesApiCalls() when it follows an InferencePool, the core group's (pods) with an explicit
// selector. A verb the code starts using, or one the Role grants that it does not, fails here.
TEST(KubernetesManifestsTest, RolesGrantExactlyTheCallsDiscoveryMakes) {
  std::set<ApiCall> all, core;
  for (const KubernetesApiCall& c : KubernetesApiCalls()) {
    all.emplace(c.api_group, c.resource, c.verb);
    if (c.api_group.empty()) core.emplace(c.api_group, c.resource, c.verb);
  }
  ASSERT_FALSE(core.empty());
  for (const Gateway& g : Gateways()) {
    SCOPED_TRACE(g.deployment->name);
    const std::string account = Str(PodSpec(*g.deployment)["serviceAccountName"]);
    ASSERT_FALSE(account.empty());
    ASSERT_TRUE(Find("ServiceAccount", account));
    std::set<ApiCall> granted;
    for (const Object* binding : OfKind("RoleBinding")) {
      bool bound = false;
      for (const auto& s : binding->node["subjects"]) {
        bound |= Str(s["kind"]) == "ServiceAccount" && Str(s["name"]) == account && Str(s["namespace"]) == kNamespace;
      }
      if (!bound) continue;
      EXPECT_EQ(Str(binding->node["roleRef"]["kind"]), "Role");
      const Object* role = Find("Role", Str(binding->node["roleRef"]["name"]));
      ASSERT_TRUE(role) << binding->name;
      for (const auto& rule : role->node["rules"]) {
        for (const auto& group : rule["apiGroups"]) {
          for (const auto& resource : rule["resources"]) {
            for (const auto& verb : rule["verbs"]) granted.emplace(Str(group), Str(resource), Str(verb));
          }
        }
      }
    }
    const bool follows_pool = static_cast<bool>(g.config.yaml["discovery"]["kubernetes"]["inference_pool"]);
    EXPECT_EQ(granted, follows_pool ? all : core);
  }
}

// Every Deployment runs the image scripts/image.sh builds: localhost/prefix-router:VERSION, with
// VERSION the project's (CMakeLists.txt), so a version bump fails here until the manifests follow.
TEST(KubernetesManifestsTest, DeploymentsRunTheImageImageShBuilds) {
  const std::string script = ReadFile(kSource / "scripts" / "image.sh");
  EXPECT_NE(script.find(std::string("image_name=") + kImageName + "\n"), std::string::npos);
  EXPECT_NE(script.find("image=${IMAGE:-$image_name:$version}"), std::string::npos);
  const std::string image = std::string(kImageName) + ":" + PR_VERSION;
  int containers = 0;
  for (const Object* d : OfKind("Deployment")) {
    for (const auto& c : Containers(*d)) {
      EXPECT_EQ(Str(c["image"]), image) << d->name;
      ++containers;
    }
  }
  EXPECT_EQ(containers, 3);
}

// The InferencePool selects the model servers (not the picker) on the port they serve, names the
// picker's Service and port, and agrees with both discovery configurations: the picker follows
// the pool by name, the standalone gateway's explicit selector and port are the pool's.
TEST(KubernetesManifestsTest, InferencePoolAgreesWithModelServersPickerAndDiscovery) {
  const std::vector<const Object*> pools = OfKind("InferencePool");
  ASSERT_EQ(pools.size(), 1u);
  const Object& pool = *pools[0];
  const YAML::Node spec = pool.node["spec"];
  const std::map<std::string, std::string> match = StringMap(spec["selector"]["matchLabels"]);
  ASSERT_FALSE(match.empty());
  ASSERT_EQ(spec["targetPorts"].size(), 1u);
  const int target_port = spec["targetPorts"][0]["number"].as<int>();

  int model_servers = 0;
  const std::vector<Gateway> gateways = Gateways();
  for (const Object* d : OfKind("Deployment")) {
    if (!Selects(match, PodLabels(*d))) continue;
    ++model_servers;
    for (const Gateway& g : gateways) EXPECT_NE(g.deployment, d) << "the pool selects a gateway";
    std::set<int> ports;
    for (const auto& c : Containers(*d)) {
      for (int p : PortNumbers(ContainerPorts(c))) ports.insert(p);
    }
    EXPECT_TRUE(ports.count(target_port)) << d->name << " does not serve on " << target_port;
  }
  EXPECT_EQ(model_servers, 1);

  const YAML::Node ref = spec["endpointPickerRef"];
  EXPECT_TRUE(!ref["group"] || Str(ref["group"]).empty());
  EXPECT_TRUE(!ref["kind"] || Str(ref["kind"]) == "Service");
  const std::string failure_mode = Str(ref["failureMode"]);
  EXPECT_TRUE(failure_mode == "FailOpen" || failure_mode == "FailClose") << failure_mode;
  const Object* picker_service = Find("Service", Str(ref["name"]));
  ASSERT_TRUE(picker_service) << "endpointPickerRef names no Service";
  const int picker_port = ref["port"]["number"].as<int>();
  EXPECT_EQ(picker_port, 9002);

  int pickers = 0, standalone = 0;
  for (const Gateway& g : gateways) {
    SCOPED_TRACE(g.deployment->name);
    const YAML::Node k8s = g.config.yaml["discovery"]["kubernetes"];
    if (g.epp()) {
      ++pickers;
      EXPECT_EQ(Str(k8s["inference_pool"]), pool.name);
      EXPECT_EQ(Str(k8s["namespace"]), Str(pool.node["metadata"]["namespace"]));
      // The Service the pool names is this picker's, and its port 9002 reaches epp.listen.
      const std::vector<const Object*> services = ServicesOf(*g.deployment);
      ASSERT_EQ(services.size(), 1u);
      EXPECT_EQ(services[0], picker_service);
      bool reaches = false;
      for (const auto& sp : picker_service->node["spec"]["ports"]) {
        reaches |= sp["port"].as<int>() == picker_port &&
                   TargetPort(sp, ContainerPorts(g.container)) == ReachablePorts(g.config.yaml).at("epp.listen");
      }
      EXPECT_TRUE(reaches) << "port " << picker_port << " of " << picker_service->name << " does not reach epp.listen";
    } else {
      ++standalone;
      EXPECT_FALSE(k8s["inference_pool"]);
      EXPECT_EQ(StringMap(k8s["selector"]), match);
      EXPECT_EQ(k8s["target_port"].as<int>(), target_port);
      EXPECT_EQ(Str(k8s["namespace"]), Str(pool.node["metadata"]["namespace"]));
    }
  }
  EXPECT_EQ(pickers, 1);
  EXPECT_EQ(standalone, 1);
}

// The HTTPRoute sends to the InferencePool (the gateway then asks the picker), not to a Service.
TEST(KubernetesManifestsTest, HttpRouteSendsToTheInferencePool) {
  const std::vector<const Object*> routes = OfKind("HTTPRoute");
  ASSERT_EQ(routes.size(), 1u);
  int refs = 0;
  for (const auto& rule : routes[0]->node["spec"]["rules"]) {
    for (const auto& b : rule["backendRefs"]) {
      ++refs;
      EXPECT_EQ(Str(b["group"]), "inference.networking.k8s.io");
      EXPECT_EQ(Str(b["kind"]), "InferencePool");
      EXPECT_TRUE(Find("InferencePool", Str(b["name"]))) << Str(b["name"]);
    }
  }
  EXPECT_GE(refs, 1);
  EXPECT_FALSE(Str(routes[0]->node["spec"]["parentRefs"][0]["name"]).empty());
}

// The user number of the final stage's USER instruction in a Dockerfile (-1 if none or not a number).
int DockerfileUser(const fs::path& file);

// Every pod runs as the images' non-root user, on a read-only root, without privilege escalation
// or capabilities, with a memory limit.
TEST(KubernetesManifestsTest, PodsRunAsTheImageUserWithoutPrivileges) {
  const int image_user = DockerfileUser(kSource / "Dockerfile");
  ASSERT_GT(image_user, 0);
  for (const Object* d : OfKind("Deployment")) {
    SCOPED_TRACE(d->name);
    const YAML::Node pod = PodSpec(*d)["securityContext"];
    EXPECT_TRUE(pod["runAsNonRoot"].as<bool>(false));
    EXPECT_EQ(pod["runAsUser"].as<int>(0), image_user);
    EXPECT_EQ(Str(pod["seccompProfile"]["type"]), "RuntimeDefault");
    for (const auto& c : Containers(*d)) {
      const YAML::Node sc = c["securityContext"];
      EXPECT_FALSE(sc["allowPrivilegeEscalation"].as<bool>(true));
      EXPECT_TRUE(sc["readOnlyRootFilesystem"].as<bool>(false));
      bool drops_all = false;
      for (const auto& cap : sc["capabilities"]["drop"]) drops_all |= Str(cap) == "ALL";
      EXPECT_TRUE(drops_all);
      EXPECT_FALSE(sc["privileged"].as<bool>(false));
      EXPECT_FALSE(Str(c["resources"]["limits"]["memory"]).empty());
    }
  }
}

// ---------------------------------------------------------------------------- the Dockerfiles

// A Dockerfile's instructions (continuation lines joined, comments dropped), by stage.
struct Instruction {
  std::string op;    // upper case
  std::string args;  // the rest of the line
};
std::vector<std::vector<Instruction>> DockerfileStages(const fs::path& file) {
  std::vector<std::vector<Instruction>> stages(1);  // stages[0]: before the first FROM (ARGs)
  std::istringstream in(ReadFile(file));
  std::string line, logical;
  auto flush = [&] {
    const size_t start = logical.find_first_not_of(" \t");
    if (start == std::string::npos) return;
    std::istringstream words(logical.substr(start));
    Instruction i;
    words >> i.op;
    std::transform(i.op.begin(), i.op.end(), i.op.begin(), ::toupper);
    std::getline(words >> std::ws, i.args);
    if (i.op == "FROM") stages.emplace_back();
    stages.back().push_back(i);
  };
  while (std::getline(in, line)) {
    const size_t first = line.find_first_not_of(" \t");
    if (first != std::string::npos && line[first] == '#') continue;
    if (!line.empty() && line.back() == '\\') {
      logical += line.substr(0, line.size() - 1) + " ";
      continue;
    }
    logical += line;
    flush();
    logical.clear();
  }
  flush();
  return stages;
}

std::vector<std::string> Values(const std::vector<Instruction>& stage, std::string_view op) {
  std::vector<std::string> out;
  for (const Instruction& i : stage) {
    if (i.op == op) out.push_back(i.args);
  }
  return out;
}

int DockerfileUser(const fs::path& file) {
  const std::vector<std::string> users = Values(DockerfileStages(file).back(), "USER");
  if (users.size() != 1) return -1;
  const std::string uid = users[0].substr(0, users[0].find(':'));
  if (uid.empty() || !std::all_of(uid.begin(), uid.end(), ::isdigit)) return -1;
  return std::stoi(uid);
}

std::set<int> ExposedPorts(const std::vector<Instruction>& stage) {
  std::set<int> out;
  for (const std::string& args : Values(stage, "EXPOSE")) {
    std::istringstream words(args);
    for (std::string w; words >> w;) out.insert(std::stoi(w.substr(0, w.find('/'))));
  }
  return out;
}

// An exec-form (JSON array) ENTRYPOINT or CMD; a JSON array is a YAML flow sequence.
std::vector<std::string> ExecForm(const std::vector<Instruction>& stage, std::string_view op) {
  const std::vector<std::string> values = Values(stage, op);
  std::vector<std::string> out;
  if (values.size() != 1) return out;
  for (const auto& w : YAML::Load(values[0])) out.push_back(w.as<std::string>());
  return out;
}

// Both Dockerfiles make the same image: a numeric non-root USER (Kubernetes can check
// runAsNonRoot only for a number), the ports the manifests' configurations listen on, the
// entry point, and a command whose --config path is where the Deployments mount theirs.
TEST(DockerfileTest, BothDockerfilesAgreeWithEachOtherAndTheManifests) {
  const fs::path full = kSource / "Dockerfile";
  const fs::path prebuilt = kSource / "deploy" / "Dockerfile.prebuilt";
  const auto full_stages = DockerfileStages(full);
  const auto prebuilt_stages = DockerfileStages(prebuilt);
  ASSERT_EQ(full_stages.size(), 3u) << "ARGs, build stage, runtime stage";
  ASSERT_EQ(prebuilt_stages.size(), 2u) << "ARGs, one stage";
  EXPECT_TRUE(Values(prebuilt_stages.back(), "RUN").empty()) << "the prebuilt variant must build without RUN";
  for (const auto* stages : {&full_stages, &prebuilt_stages}) {
    EXPECT_EQ(Values(stages->front(), "ARG"), std::vector<std::string>{"BASE=localhost/debian:12"});
    EXPECT_EQ(Values(stages->back(), "FROM"), std::vector<std::string>{"${BASE}"});
  }
  const int user = DockerfileUser(full);
  EXPECT_GT(user, 0);
  EXPECT_EQ(DockerfileUser(prebuilt), user);
  EXPECT_EQ(Values(full_stages.back(), "USER"), Values(prebuilt_stages.back(), "USER"));

  std::set<int> listened;
  std::string config_path;
  for (const Gateway& g : Gateways()) {
    for (int p : PortNumbers(ReachablePorts(g.config.yaml))) listened.insert(p);
    config_path = g.config.path;
  }
  EXPECT_EQ(ExposedPorts(full_stages.back()), listened);
  EXPECT_EQ(ExposedPorts(prebuilt_stages.back()), listened);

  const std::vector<std::string> entrypoint = {"prefix-router"};
  const std::vector<std::string> cmd = {"serve", "--config", config_path};
  EXPECT_EQ(ExecForm(full_stages.back(), "ENTRYPOINT"), entrypoint);
  EXPECT_EQ(ExecForm(prebuilt_stages.back(), "ENTRYPOINT"), entrypoint);
  EXPECT_EQ(ExecForm(full_stages.back(), "CMD"), cmd);
  EXPECT_EQ(ExecForm(prebuilt_stages.back(), "CMD"), cmd);

  // The image's own default configuration is valid and listens on an exposed port.
  const std::string text = ReadFile(kSource / "deploy" / "router.yaml");
  Result<GatewayConfig> parsed = ParseConfigYaml(text);
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  Status valid = ValidateConfig(parsed.value());
  EXPECT_TRUE(valid.ok()) << valid.ToString();
  EXPECT_TRUE(ExposedPorts(full_stages.back()).count(parsed->listen_port)) << parsed->listen;
  EXPECT_FALSE(IsLoopback(parsed->listen_host)) << parsed->listen;
}

// The Dockerfile's build stage installs every package scripts/setup.sh installs to build, so a
// dependency added for the build (gRPC for the picker, say) cannot be missed in the image; the
// rest of setup.sh is named here as test, benchmark, fuzzing or browser tooling.
TEST(DockerfileTest, BuildStageInstallsTheBuildPackagesOfSetupSh) {
  const std::set<std::string> not_for_the_build = {"git",
                                                   "clang-14",
                                                   "libclang-rt-14-dev",
                                                   "libgtest-dev",
                                                   "libgmock-dev",
                                                   "libbenchmark-dev",
                                                   "openssl",
                                                   "valgrind",
                                                   "python3",
                                                   "curl",
                                                   "systemd",
                                                   "haproxy",
                                                   "nginx",
                                                   "wrk",
                                                   "chromium",
                                                   "fonts-liberation"};
  const std::string setup = ReadFile(kSource / "scripts" / "setup.sh");
  const size_t open = setup.find("packages=(");
  ASSERT_NE(open, std::string::npos);
  const size_t close = setup.find(')', open);
  std::istringstream words(setup.substr(open + 10, close - open - 10));
  std::set<std::string> wanted;
  for (std::string w; words >> w;) {
    if (!not_for_the_build.count(w)) wanted.insert(w);
  }
  ASSERT_GT(wanted.size(), 10u);
  std::set<std::string> installed;
  for (const std::string& run : Values(DockerfileStages(kSource / "Dockerfile")[1], "RUN")) {
    std::istringstream rw(run);
    for (std::string w; rw >> w;) installed.insert(w);
  }
  for (const std::string& p : wanted)
    EXPECT_TRUE(installed.count(p)) << p << " (scripts/setup.sh) is not installed by the Dockerfile's build stage";
}

}  // namespace
}  // namespace prefix_router::gateway
