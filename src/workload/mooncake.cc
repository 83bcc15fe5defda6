// mooncake: replays a Mooncake FAST'25 trace (kvcache-ai/Mooncake, FAST25-release/traces/*.jsonl):
// one request per line with its arrival time, prompt and output lengths, and the prompt as a
// list of KV block ids, where equal ids mean equal blocks behind equal prefixes. The trace holds
// no text, so each id becomes a fixed synthetic text of exactly `block_tokens` tokens of the
// engine's tokenizer: requests that share leading ids share leading tokens, and the engines'
// prefix caches and the router see the trace's sharing. docs/workloads.md has the parameters.
//
// Only ids and lengths are kept: the hour-long conversation trace has 182,790 distinct blocks,
// about 370 MB of text, so a request's text is generated when its session is asked for it (about
// 9 microseconds of lexicon lookups per 512-token block) and never stored.

#include <boost/json.hpp>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "engine_model/tokenizer.h"
#include "workload/generators.h"
#include "workload/params.h"
#include "workload/text.h"

namespace prefix_router::workload {
namespace {

namespace json = boost::json;

constexpr std::string_view kName = "mooncake";
// Far above any model's context (the conversation trace's longest prompt is 126,195 tokens),
// low enough that one request's text (4 bytes per token) stays a few tens of MB.
constexpr uint32_t kMaxInputLength = 10'000'000;
constexpr uint32_t kMaxOutputLength = 1'000'000;

// One request of the trace, as recorded; its text is made by BuildRequest.
struct Entry {
  double arrival_s = 0;       // from the first replayed request
  uint32_t input_length = 0;  // prompt tokens (message contents)
  uint32_t max_tokens = 1;    // output_length, at least 1
  uint32_t line = 0;          // in the file: seeds the text beyond the listed blocks
  uint32_t ids_count = 0;
  size_t ids_begin = 0;  // into MooncakeTrace::ids
};

// Everything a session needs, immutable once made, so a session may outlive its workload.
struct MooncakeTrace {
  uint64_t seed = 0;
  uint32_t block_tokens = 512;
  uint32_t system_blocks = 1;
  std::string model;
  std::vector<Entry> entries;
  std::vector<uint64_t> ids;  // every entry's hash ids, back to back
};

// Appends the first `tokens` tokens of block text `index` of `stream`: exactly block_tokens
// tokens of prose ending in ".\n\n", its first word capitalised with no space before it. A
// piece of the tokenizer then never spans two blocks (the paragraph break is a piece of its
// own, and the next block's first word starts a new one), so a block tokenizes the same after
// any other block or at the start of a message: equal ids give equal engine tokens.
void AppendBlock(const MooncakeTrace& t, uint64_t stream, uint64_t index, uint32_t tokens, std::string& scratch,
                 std::string& out) {
  Rng rng(SubSeed(t.seed, stream, index));
  scratch.clear();
  AppendExactProse(rng, t.block_tokens - 1, scratch);
  scratch += "\n\n";
  const size_t bytes = tokens < t.block_tokens ? engine_model::TokenPrefixBytes(scratch, tokens) : scratch.size();
  out.append(scratch, 0, bytes);
}

Request BuildRequest(const MooncakeTrace& t, const Entry& e) {
  Request r;
  r.api = api::ApiKind::kChatCompletions;
  r.model = t.model;
  r.max_tokens = e.max_tokens;
  const uint64_t* ids = t.ids.data() + e.ids_begin;
  const size_t system = std::min<size_t>(t.system_blocks, e.ids_count);
  // The first block after the system blocks: a conversation's later turns resend it.
  r.label = system < e.ids_count ? "conv-" + std::to_string(ids[system]) : "system-only";

  // Prose measures 4.0 characters per token: one allocation per message.
  std::string system_text, user_text, scratch;
  const uint64_t system_tokens = std::min<uint64_t>(e.input_length, uint64_t{t.block_tokens} * system);
  system_text.reserve(system_tokens * 4 + 64);
  user_text.reserve((e.input_length - system_tokens) * 4 + 64);
  uint32_t left = e.input_length;
  for (size_t i = 0; i < e.ids_count && left > 0; ++i) {
    const uint32_t take = std::min(left, t.block_tokens);
    AppendBlock(t, kStreamMooncakeBlock, ids[i], take, scratch, i < system ? system_text : user_text);
    left -= take;
  }
  // Tokens beyond the listed blocks (a trace that lists whole blocks only): a partial block of
  // this request's own, which no other request shares.
  if (left > 0) AppendBlock(t, kStreamMooncakeTail, e.line, left, scratch, user_text);

  if (!system_text.empty()) r.messages.push_back(Message{"system", std::move(system_text)});
  if (!user_text.empty()) r.messages.push_back(Message{"user", std::move(user_text)});
  return r;
}

class MooncakeSession : public Session {
 public:
  MooncakeSession(std::shared_ptr<const MooncakeTrace> trace, size_t index) : trace_(std::move(trace)), index_(index) {}

  std::optional<Request> Next(std::string_view) override {
    if (done_) return std::nullopt;
    done_ = true;
    return BuildRequest(*trace_, trace_->entries[index_]);
  }

 private:
  const std::shared_ptr<const MooncakeTrace> trace_;
  const size_t index_;
  bool done_ = false;
};

class MooncakeWorkload : public Workload {
 public:
  MooncakeWorkload(std::shared_ptr<const MooncakeTrace> trace, std::map<std::string, std::string> params)
      : trace_(std::move(trace)), params_(std::move(params)) {}

  std::string_view name() const override { return kName; }
  double mean_turns() const override { return 1.0; }
  std::map<std::string, std::string> Parameters() const override { return params_; }

  SessionStart NextSession() override {
    if (next_ == trace_->entries.size()) return SessionStart{};
    const size_t i = next_++;
    return SessionStart{std::make_unique<MooncakeSession>(trace_, i), trace_->entries[i].arrival_s};
  }

 private:
  const std::shared_ptr<const MooncakeTrace> trace_;
  const std::map<std::string, std::string> params_;
  size_t next_ = 0;
};

// Reads and checks every line of a trace; keeps the requests recorded in [from_s, until_s),
// times still as recorded (seconds).
class TraceReader {
 public:
  TraceReader(const std::string& path, uint32_t block_tokens, double from_s, double until_s, MooncakeTrace& out)
      : path_(path), block_tokens_(block_tokens), from_s_(from_s), until_s_(until_s), out_(out) {}

  Status Read(std::istream& in) {
    std::string text;
    uint32_t line = 0;
    double last_ms = 0;
    bool any = false;
    while (std::getline(in, text)) {
      ++line;
      if (!text.empty() && text.back() == '\r') text.pop_back();
      if (text.find_first_not_of(" \t") == std::string::npos) continue;
      double ms = 0;
      if (Status s = ReadLine(text, line, ms); !s.ok()) return s;
      if (any && ms < last_ms) {
        return Error(line, "timestamp decreases (" + FormatNumber(ms) + " after " + FormatNumber(last_ms) + ")");
      }
      any = true;
      last_ms = ms;
    }
    if (in.bad()) return Status::InvalidArgument("mooncake: cannot read '" + path_ + "'");
    if (!any) return Status::InvalidArgument("mooncake " + path_ + ": no requests");
    return Status::Ok();
  }

 private:
  Status Error(uint32_t line, std::string_view message) const {
    return Status::InvalidArgument("mooncake " + path_ + " line " + std::to_string(line) + ": " + std::string(message));
  }

  // An integer in [lo, hi] (JSON integers, or numbers with no fraction such as 512.0).
  static bool Integer(const json::value& v, double lo, double hi, double& out) {
    if (!v.is_number()) return false;
    const double d = v.to_number<double>();
    if (!(d >= lo && d <= hi && d == std::floor(d))) return false;
    out = d;
    return true;
  }

  Status ReadLine(std::string_view text, uint32_t line, double& ms) {
    boost::system::error_code ec;
    const json::value v = json::parse(text, ec);
    if (ec) return Error(line, "invalid JSON: " + ec.message());
    if (!v.is_object()) return Error(line, "expected a JSON object");
    const json::object& o = v.as_object();
    // Other fields are ignored: derived traces add their own.
    const json::value* timestamp = o.if_contains("timestamp");
    if (!timestamp || !timestamp->is_number() || !std::isfinite(timestamp->to_number<double>()) ||
        timestamp->to_number<double>() < 0) {
      return Error(line, "timestamp: expected a number of milliseconds >= 0");
    }
    ms = timestamp->to_number<double>();
    double input = 0, output = 0;
    const json::value* in = o.if_contains("input_length");
    if (!in || !Integer(*in, 1, kMaxInputLength, input)) {
      return Error(line, "input_length: expected an integer in [1, " + std::to_string(kMaxInputLength) + "]");
    }
    const json::value* outl = o.if_contains("output_length");
    if (!outl || !Integer(*outl, 0, kMaxOutputLength, output)) {
      return Error(line, "output_length: expected an integer in [0, " + std::to_string(kMaxOutputLength) + "]");
    }
    const json::value* hash_ids = o.if_contains("hash_ids");
    if (!hash_ids || !hash_ids->is_array()) return Error(line, "hash_ids: expected an array");
    const json::array& ids = hash_ids->as_array();
    for (size_t i = 0; i < ids.size(); ++i) {
      const json::value& id = ids[i];
      if (!(id.is_uint64() || (id.is_int64() && id.as_int64() >= 0))) {
        return Error(line, "hash_ids[" + std::to_string(i) + "]: expected an integer >= 0");
      }
    }
    // The listed blocks cover the prompt, the last one possibly partial (Mooncake's traces: k
    // ids for (k-1) x B < input_length <= k x B), or cover its whole blocks only, the rest
    // being a partial block of the request's own (k x B <= input_length < (k+1) x B). Anything
    // else cannot be either, and usually means block_tokens does not match the trace.
    const double b = block_tokens_;
    const double k = static_cast<double>(ids.size());
    if (!(input > (k - 1) * b && input < (k + 1) * b)) {
      return Error(line, "input_length " + FormatNumber(input) + " does not fit " + std::to_string(ids.size()) +
                             " hash_ids of block_tokens " + std::to_string(block_tokens_) + " (expected more than " +
                             FormatNumber(std::max(0.0, (k - 1) * b)) + " and less than " + FormatNumber((k + 1) * b) +
                             "): is block_tokens the trace's block size?");
    }

    const double at_s = ms / 1000;
    if (at_s < from_s_ || at_s >= until_s_) return Status::Ok();
    Entry e;
    e.arrival_s = at_s;
    e.input_length = static_cast<uint32_t>(input);
    e.max_tokens = std::max<uint32_t>(1, static_cast<uint32_t>(output));
    e.line = line;
    e.ids_begin = out_.ids.size();
    e.ids_count = static_cast<uint32_t>(ids.size());
    for (const json::value& id : ids) out_.ids.push_back(id.to_number<uint64_t>());
    out_.entries.push_back(e);
    return Status::Ok();
  }

  const std::string& path_;
  const uint32_t block_tokens_;
  const double from_s_;
  const double until_s_;
  MooncakeTrace& out_;
};

}  // namespace

Result<std::unique_ptr<Workload>> MakeMooncake(const ParamMap& params, uint64_t seed) {
  ParamReader p(kName, params);
  auto trace = std::make_shared<MooncakeTrace>();
  trace->seed = seed;
  const std::string path = p.Text("file", "");
  // 16 is vLLM's default KV block; below it a block's closing sentence would be most of it.
  trace->block_tokens = p.Int("block_tokens", 512, 16, 1'000'000);
  trace->system_blocks = p.Int("system_blocks", 1, 0, 1'000'000);
  const double from_s = p.Real("from_s", 0, 0, 1e9);
  double until_s = std::numeric_limits<double>::infinity();
  if (const std::string u = p.Raw("until_s", "none"); u == "none") {
    p.Record("until_s", "none");
  } else {
    until_s = p.Real("until_s", 0, 0, 1e9);
    if (!(from_s < until_s)) {
      p.Fail("until_s", FormatNumber(until_s) + " is not above from_s (" + FormatNumber(from_s) + ")");
    }
  }
  trace->model = p.Text("model", "");
  if (Status s = p.Finish(); !s.ok()) return s;
  if (path.empty()) {
    return Status::InvalidArgument(
        "mooncake: parameter file is required (a Mooncake JSONL trace, e.g. "
        "data/mooncake/conversation_trace_600s.jsonl in the repository)");
  }

  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return Status::InvalidArgument("mooncake: parameter file: cannot open '" + path + "': " + std::strerror(errno));
  }
  TraceReader reader(path, trace->block_tokens, from_s, until_s, *trace);
  if (Status s = reader.Read(in); !s.ok()) return s;
  if (trace->entries.empty()) {
    return Status::InvalidArgument("mooncake " + path + ": no request with from_s <= timestamp / " +
                                   "1000 < until_s (from_s " + FormatNumber(from_s) + ", until_s " +
                                   p.effective().at("until_s") + ")");
  }
  // Times count from the first replayed request, so a held-out part starts at once.
  const double first = trace->entries.front().arrival_s;
  for (Entry& e : trace->entries) e.arrival_s -= first;
  trace->ids.shrink_to_fit();
  trace->entries.shrink_to_fit();
  return std::unique_ptr<Workload>(
      std::make_unique<MooncakeWorkload>(std::shared_ptr<const MooncakeTrace>(std::move(trace)), p.effective()));
}

}  // namespace prefix_router::workload
