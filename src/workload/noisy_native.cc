// noisy-native: long-context traffic sent to the native API (POST /invocations) by several
// client programs that serialise the same request differently, as the article warns: each
// client has its own member order and whitespace, some escape newlines as \u000a, and every
// body carries per-request metadata (a request id, a creation time, a trace id) that some
// clients write first. The text the engine sees (`prompt`) is the long-context request's:
// preamble + document, then the question; only the body the router keys on is noisy.
// See docs/workloads.md and docs/normalisation.md.

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "base/json_text.h"
#include "workload/generators.h"
#include "workload/params.h"
#include "workload/sampling.h"
#include "workload/text.h"

namespace prefix_router::workload {
namespace {

constexpr std::string_view kName = "noisy-native";
constexpr uint64_t kEpoch = 1764460800;  // 2025-11-30T00:00:00Z: `created` counts from here

enum Field { kId, kCreated, kInputs, kParameters, kMetadata, kFieldCount };
constexpr std::string_view kFieldNames[kFieldCount] = {"id", "created", "inputs", "parameters", "metadata"};

enum class Spacing { kCompact, kSpaced, kPretty };

// How one client program writes a body.
struct ClientStyle {
  std::vector<Field> order;
  Spacing spacing = Spacing::kCompact;
  bool unicode_newlines = false;  // "\u000a" instead of "\n"
};

void AppendString(std::string& out, std::string_view s, bool unicode_newlines) {
  if (!unicode_newlines) {
    base::AppendJsonString(out, s);
    return;
  }
  // The same string, its newlines written as \u000a instead of \n (equal JSON, other bytes).
  out += '"';
  for (size_t nl; (nl = s.find('\n')) != std::string_view::npos; s.remove_prefix(nl + 1)) {
    base::AppendJsonEscaped(out, s.substr(0, nl));
    out += "\\u000a";
  }
  base::AppendJsonEscaped(out, s);
  out += '"';
}

std::string Hex(Rng& rng, int digits) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string s;
  uint64_t bits = rng.Next();
  for (int i = 0; i < digits; ++i) {
    if (i == 16) bits = rng.Next();
    s += kHex[bits & 0xF];
    bits >>= 4;
  }
  return s;
}

// A JSON object written in a client's style; values are already JSON text.
class ObjectWriter {
 public:
  ObjectWriter(std::string& out, Spacing spacing, int indent) : out_(out), spacing_(spacing), indent_(indent) {
    out_ += '{';
  }
  void Member(std::string_view key, std::string_view json_value) {
    if (count_++ > 0) out_ += spacing_ == Spacing::kSpaced ? ", " : ",";
    if (spacing_ == Spacing::kPretty) {
      out_ += '\n';
      out_.append(static_cast<size_t>(indent_ + 2), ' ');
    }
    out_ += '"';
    out_ += key;
    out_ += spacing_ == Spacing::kCompact ? "\":" : "\": ";
    out_ += json_value;
  }
  void Close() {
    if (spacing_ == Spacing::kPretty) {
      out_ += '\n';
      out_.append(static_cast<size_t>(indent_), ' ');
    }
    out_ += '}';
  }

 private:
  std::string& out_;
  Spacing spacing_;
  int indent_;
  int count_ = 0;
};

class NoisyNativeWorkload : public Workload {
 public:
  NoisyNativeWorkload(std::unique_ptr<Workload> inner, uint32_t clients, std::map<std::string, std::string> params,
                      uint64_t seed)
      : inner_(std::move(inner)), params_(std::move(params)), rng_(SubSeed(seed, kStreamClient, 0)) {
    for (uint32_t c = 0; c < clients; ++c) {
      Rng rng(SubSeed(seed, kStreamClient, c + 1));
      ClientStyle style;
      for (int f = 0; f < kFieldCount; ++f) style.order.push_back(static_cast<Field>(f));
      for (size_t i = style.order.size() - 1; i > 0; --i) {  // Fisher-Yates
        std::swap(style.order[i], style.order[rng.Uniform(static_cast<uint32_t>(i + 1))]);
      }
      style.spacing = static_cast<Spacing>(c % 3);
      style.unicode_newlines = (c / 3) % 2 == 1;
      styles_.push_back(std::move(style));
    }
  }

  std::string_view name() const override { return kName; }
  double mean_turns() const override { return 1.0; }
  std::map<std::string, std::string> Parameters() const override { return params_; }

  SessionStart NextSession() override {
    SessionStart start = inner_->NextSession();
    std::optional<Request> base = start.session->Next("");
    const uint64_t n = counter_++;
    const uint32_t client = rng_.Uniform(static_cast<uint32_t>(styles_.size()));
    const ClientStyle& style = styles_[client];
    Request r;
    r.api = api::ApiKind::kNative;
    r.model = base->model;
    r.label = base->label;
    r.max_tokens = base->max_tokens;
    // What the engine is asked: the model container builds its prompt from `inputs`.
    r.prompt = base->messages[0].content + "\n\n" + base->messages[1].content;

    const std::string request_id = "req-" + Hex(rng_, 16);
    const std::string trace_id = Hex(rng_, 32);
    const int pretty = style.spacing == Spacing::kPretty ? 2 : 0;
    std::string body;
    body.reserve(r.prompt.size() + 512);
    ObjectWriter top(body, style.spacing, 0);
    for (Field f : style.order) {
      std::string value;
      switch (f) {
        case kId: AppendString(value, request_id, false); break;
        case kCreated: value = std::to_string(kEpoch + n); break;
        case kInputs: AppendString(value, r.prompt, style.unicode_newlines); break;
        case kParameters: {
          ObjectWriter o(value, style.spacing, pretty);
          // Member order inside nested objects varies by client too.
          if (style.order[0] < kInputs) {
            o.Member("temperature", "0.7");
            o.Member("max_new_tokens", std::to_string(r.max_tokens));
          } else {
            o.Member("max_new_tokens", std::to_string(r.max_tokens));
            o.Member("temperature", "0.7");
          }
          o.Close();
          break;
        }
        case kMetadata: {
          ObjectWriter o(value, style.spacing, pretty);
          std::string name;
          AppendString(name, "client-" + std::to_string(client), false);
          std::string trace;
          AppendString(trace, trace_id, false);
          o.Member("trace_id", trace);
          o.Member("client", name);
          o.Close();
          break;
        }
        case kFieldCount: break;
      }
      top.Member(kFieldNames[f], value);
    }
    top.Close();
    r.body = std::move(body);
    return SessionStart{std::make_unique<OneShotSession>(std::move(r)), std::nullopt};
  }

 private:
  std::unique_ptr<Workload> inner_;
  const std::map<std::string, std::string> params_;
  Rng rng_;
  std::vector<ClientStyle> styles_;
  uint64_t counter_ = 0;
};

}  // namespace

Result<std::unique_ptr<Workload>> MakeNoisyNative(const ParamMap& params, uint64_t seed) {
  // `clients` is ours; every other parameter is long-context's.
  ParamMap own;
  ParamMap rest = params;
  if (auto it = rest.find("clients"); it != rest.end()) {
    own.insert(*it);
    rest.erase(it);
  }
  ParamReader p(kName, own);
  const uint32_t clients = p.Int("clients", 6, 1, 64);
  if (Status s = p.Finish(); !s.ok()) return s;
  auto inner = MakeLongContext(rest, seed);
  if (!inner.ok()) {
    std::string msg = inner.status().message();
    if (const size_t at = msg.find("long-context"); at != std::string::npos) msg.replace(at, 12, kName);
    return Status::InvalidArgument(msg);
  }
  std::map<std::string, std::string> effective = (*inner)->Parameters();
  for (const auto& [k, v] : p.effective()) effective[k] = v;
  return std::unique_ptr<Workload>(
      std::make_unique<NoisyNativeWorkload>(std::move(*inner), clients, std::move(effective), seed));
}

}  // namespace prefix_router::workload
