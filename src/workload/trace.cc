// trace: replays a JSONL file of recorded requests (docs/trace-format.md), one session of one
// turn per line, with the recorded arrival times when the file has them. The file is read and
// validated completely when the workload is made, so a bad line fails before any request is
// sent, naming its line number.

#include <boost/json.hpp>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "workload/generators.h"
#include "workload/params.h"

namespace prefix_router::workload {
namespace {

namespace json = boost::json;

constexpr std::string_view kName = "trace";
constexpr uint32_t kMaxTokensLimit = 1'000'000;

bool IsSpace(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; }

size_t SkipSpace(std::string_view s, size_t i) {
  while (i < s.size() && IsSpace(s[i])) ++i;
  return i;
}

// REQUIRES: s[i] == '"' and the string is valid JSON. Returns the index past the closing quote.
size_t SkipString(std::string_view s, size_t i) {
  for (++i; i < s.size(); ++i) {
    if (s[i] == '\\') {
      ++i;
    } else if (s[i] == '"') {
      return i + 1;
    }
  }
  return s.size();
}

// REQUIRES: a valid JSON value starts at s[i]. Returns the index just past it.
size_t SkipValue(std::string_view s, size_t i) {
  if (i >= s.size()) return i;
  if (s[i] == '"') return SkipString(s, i);
  if (s[i] == '{' || s[i] == '[') {
    int depth = 0;
    while (i < s.size()) {
      const char c = s[i];
      if (c == '"') {
        i = SkipString(s, i);
        continue;
      }
      if (c == '{' || c == '[') ++depth;
      if (c == '}' || c == ']') {
        if (--depth == 0) return i + 1;
      }
      ++i;
    }
    return i;
  }
  while (i < s.size() && s[i] != ',' && s[i] != '}' && s[i] != ']' && !IsSpace(s[i])) ++i;
  return i;
}

// The exact text of the top-level member `key` of the JSON object `text` (already validated by
// a full parse), so a recorded native body is replayed byte for byte (the native API keys raw
// bytes: re-serializing would change numbers' spelling and the key). Counts the occurrences.
std::string_view RawMember(std::string_view text, std::string_view key, int& occurrences) {
  occurrences = 0;
  std::string_view found;
  size_t i = SkipSpace(text, 0);
  if (i >= text.size() || text[i] != '{') return found;
  ++i;
  while (true) {
    i = SkipSpace(text, i);
    if (i >= text.size() || text[i] != '"') return found;
    const size_t key_end = SkipString(text, i);
    const std::string_view raw_key = text.substr(i, key_end - i);
    bool match = false;
    if (raw_key.find('\\') == std::string_view::npos) {
      match = raw_key.substr(1, raw_key.size() - 2) == key;
    } else {
      boost::system::error_code ec;
      const json::value k = json::parse(raw_key, ec);
      match = !ec && k.is_string() && k.as_string() == key;
    }
    i = SkipSpace(text, key_end);
    if (i >= text.size() || text[i] != ':') return found;
    const size_t value_start = SkipSpace(text, i + 1);
    const size_t value_end = SkipValue(text, value_start);
    if (match) {
      ++occurrences;
      found = text.substr(value_start, value_end - value_start);
    }
    i = SkipSpace(text, value_end);
    if (i >= text.size() || text[i] != ',') return found;
    ++i;
  }
}

// Routing groups must be usable on the API they are sent with (docs/keys.md).
bool ValidNativeGroup(std::string_view g) {
  if (g.empty() || g.size() > 64) return false;
  for (char c : g) {
    if (c < 0x21 || c > 0x7e) return false;
  }
  return true;
}

class LineParser {
 public:
  LineParser(std::string path, size_t line) : where_(path + " line " + std::to_string(line)) {}

  Status Error(std::string_view message) const {
    return Status::InvalidArgument("trace " + where_ + ": " + std::string(message));
  }

  Result<TraceEntry> Parse(std::string_view text) {
    boost::system::error_code ec;
    const json::value v = json::parse(text, ec);
    if (ec) return Error("invalid JSON: " + ec.message());
    if (!v.is_object()) return Error("expected a JSON object");
    const json::object& o = v.as_object();
    static constexpr std::string_view kFields[] = {"arrival_s",  "messages", "prompt",        "body",
                                                   "max_tokens", "model",    "routing_group", "prompt_cache_key",
                                                   "api",        "label",    "meta"};
    for (const auto& member : o) {
      bool known = false;
      for (std::string_view f : kFields) known = known || member.key() == f;
      if (!known) return Error("unknown field '" + std::string(member.key()) + "'");
    }

    TraceEntry e;
    Request& r = e.request;
    if (const json::value* a = o.if_contains("arrival_s")) {
      if (!a->is_number()) return Error("arrival_s: expected a number");
      const double t = a->to_number<double>();
      if (!std::isfinite(t) || t < 0) return Error("arrival_s: expected a number >= 0");
      e.arrival_s = t;
    }

    const json::value* messages = o.if_contains("messages");
    const json::value* prompt = o.if_contains("prompt");
    const json::value* body = o.if_contains("body");
    const int contents = (messages != nullptr) + (prompt != nullptr) + (body != nullptr);
    if (contents != 1) return Error("expected exactly one of messages, prompt or body");
    if (messages) {
      if (Status s = ParseMessages(*messages, r.messages); !s.ok()) return s;
    } else if (prompt) {
      if (!prompt->is_string()) return Error("prompt: expected a string");
      r.prompt = std::string(prompt->as_string());
    } else {
      if (body->is_object()) {
        int occurrences = 0;
        r.body = std::string(RawMember(text, "body", occurrences));
        if (occurrences != 1) return Error("body: the field appears more than once");
      } else if (body->is_string()) {
        r.body = std::string(body->as_string());
        if (r.body.empty()) return Error("body: expected a non-empty string or an object");
      } else {
        return Error("body: expected a JSON object (or a string of raw bytes)");
      }
    }

    if (const json::value* m = o.if_contains("max_tokens")) {
      double n = -1;
      if (m->is_number()) n = m->to_number<double>();
      if (!(n >= 1 && n <= kMaxTokensLimit && n == std::floor(n))) {
        return Error("max_tokens: expected an integer in [1, " + std::to_string(kMaxTokensLimit) + "]");
      }
      r.max_tokens = static_cast<uint32_t>(n);
    }
    if (Status s = OptionalString(o, "model", r.model); !s.ok()) return s;
    if (Status s = OptionalString(o, "label", r.label); !s.ok()) return s;
    const json::value* group = o.if_contains("routing_group");
    const json::value* cache_key = o.if_contains("prompt_cache_key");
    if (group && cache_key) return Error("give routing_group or prompt_cache_key, not both");
    if (Status s = OptionalString(o, group ? "routing_group" : "prompt_cache_key", r.routing_group); !s.ok()) {
      return s;
    }

    std::string api;
    if (Status s = OptionalString(o, "api", api); !s.ok()) return s;
    if (api.empty()) {
      r.api = messages ? api::ApiKind::kChatCompletions : (prompt ? api::ApiKind::kCompletions : api::ApiKind::kNative);
    } else if (api == "chat") {
      if (body) return Error("api chat: body is for the native API; use messages");
      if (prompt) r.messages.push_back(Message{"user", std::move(r.prompt)});
      r.prompt.clear();
      r.api = api::ApiKind::kChatCompletions;
    } else if (api == "completions") {
      if (!prompt) return Error("api completions needs a prompt");
      r.api = api::ApiKind::kCompletions;
    } else if (api == "native") {
      r.api = api::ApiKind::kNative;
    } else {
      return Error("api: '" + api + "' is not chat, completions or native");
    }

    if (r.api == api::ApiKind::kNative) {
      if (!r.routing_group.empty() && !ValidNativeGroup(r.routing_group)) {
        return Error("routing group: the native API needs 1 to 64 printable ASCII characters");
      }
    } else if (r.routing_group.size() > 1024) {
      return Error("prompt_cache_key: longer than 1024 bytes");
    }
    return e;
  }

 private:
  Status OptionalString(const json::object& o, std::string_view field, std::string& out) const {
    const json::value* v = o.if_contains(field);
    if (!v || v->is_null()) return Status::Ok();
    if (!v->is_string()) return Error(std::string(field) + ": expected a string");
    out = std::string(v->as_string());
    return Status::Ok();
  }

  // OpenAI chat messages: role and content (a string, null, or an array of text parts); other
  // message fields (name, tool_calls, ...) are not replayed.
  Status ParseMessages(const json::value& v, std::vector<Message>& out) const {
    if (!v.is_array() || v.as_array().empty()) {
      return Error("messages: expected a non-empty array");
    }
    size_t i = 0;
    for (const json::value& m : v.as_array()) {
      const std::string at = "messages[" + std::to_string(i++) + "]";
      if (!m.is_object()) return Error(at + ": expected an object");
      const json::object& mo = m.as_object();
      const json::value* role = mo.if_contains("role");
      if (!role || !role->is_string() || role->as_string().empty()) {
        return Error(at + ".role: expected a non-empty string");
      }
      Message msg;
      msg.role = std::string(role->as_string());
      const json::value* content = mo.if_contains("content");
      if (content == nullptr || content->is_null()) {
        // An assistant message carrying only tool calls.
      } else if (content->is_string()) {
        msg.content = std::string(content->as_string());
      } else if (content->is_array()) {
        size_t j = 0;
        for (const json::value& part : content->as_array()) {
          const std::string pat = at + ".content[" + std::to_string(j++) + "]";
          const json::object* po = part.if_object();
          const json::value* type = po ? po->if_contains("type") : nullptr;
          const json::value* text = po ? po->if_contains("text") : nullptr;
          if (!type || !type->is_string() || type->as_string() != "text" || !text || !text->is_string()) {
            return Error(pat +
                         ": only {\"type\": \"text\", \"text\": string} parts are "
                         "supported (send other parts with a native body)");
          }
          // Consecutive text parts are one text to the engine's tokenizer.
          msg.content += std::string_view(text->as_string());
        }
      } else {
        return Error(at + ".content: expected a string, null or an array of text parts");
      }
      out.push_back(std::move(msg));
    }
    return Status::Ok();
  }

  std::string where_;
};

class TraceWorkload : public Workload {
 public:
  TraceWorkload(std::vector<TraceEntry> entries, bool loop, double period_s, std::map<std::string, std::string> params)
      : entries_(std::move(entries)), loop_(loop), period_s_(period_s), params_(std::move(params)) {}

  std::string_view name() const override { return kName; }
  double mean_turns() const override { return 1.0; }
  std::map<std::string, std::string> Parameters() const override { return params_; }

  SessionStart NextSession() override {
    if (next_ == entries_.size()) {
      if (!loop_) return SessionStart{};
      next_ = 0;
      offset_s_ += period_s_;
    }
    const TraceEntry& e = entries_[next_++];
    SessionStart s;
    s.session = std::make_unique<OneShotSession>(e.request);
    if (e.arrival_s) s.arrival_s = *e.arrival_s + offset_s_;
    return s;
  }

 private:
  const std::vector<TraceEntry> entries_;  // arrival_s relative to the first entry's
  const bool loop_;
  const double period_s_;
  const std::map<std::string, std::string> params_;
  size_t next_ = 0;
  double offset_s_ = 0;
};

}  // namespace

Result<std::vector<TraceEntry>> ParseTrace(std::istream& in, const std::string& path) {
  std::vector<TraceEntry> entries;
  std::string line;
  size_t line_number = 0;
  size_t first_line = 0;  // of the first request
  while (std::getline(in, line)) {
    ++line_number;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    const size_t start = SkipSpace(line, 0);
    if (start == line.size() || line[start] == '#') continue;
    LineParser parser(path, line_number);
    Result<TraceEntry> e = parser.Parse(line);
    if (!e.ok()) return e.status();
    if (entries.empty()) {
      first_line = line_number;
    } else {
      const bool had_times = entries.front().arrival_s.has_value();
      if (had_times != e->arrival_s.has_value()) {
        return parser.Error(had_times ? "arrival_s missing (earlier lines have it: give it on "
                                        "every line or on none)"
                                      : "arrival_s given, but line " + std::to_string(first_line) +
                                            " has none (give it on every line or on none)");
      }
      if (had_times && *e->arrival_s < *entries.back().arrival_s) {
        return parser.Error("arrival_s decreases (" + FormatNumber(*e->arrival_s) + " after " +
                            FormatNumber(*entries.back().arrival_s) + ")");
      }
    }
    entries.push_back(std::move(*e));
  }
  if (in.bad()) return Status::InvalidArgument("trace: cannot read '" + path + "'");
  if (entries.empty()) return Status::InvalidArgument("trace " + path + ": no requests");
  return entries;
}

Result<std::unique_ptr<Workload>> MakeTrace(const ParamMap& params, uint64_t /*seed*/) {
  ParamReader p(kName, params);
  const std::string path = p.Text("file", "");
  const bool loop = p.Bool("loop", false);
  if (Status s = p.Finish(); !s.ok()) return s;
  if (path.empty()) {
    return Status::InvalidArgument("trace: parameter file is required (a JSONL trace path)");
  }

  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return Status::InvalidArgument("trace: parameter file: cannot open '" + path + "': " + std::strerror(errno));
  }
  Result<std::vector<TraceEntry>> parsed = ParseTrace(in, path);
  if (!parsed.ok()) return parsed.status();
  std::vector<TraceEntry> entries = std::move(parsed).value();

  // Times count from the first request, so epoch timestamps replay at once.
  double period_s = 0;
  if (entries.front().arrival_s) {
    const double first = *entries.front().arrival_s;
    for (TraceEntry& e : entries) *e.arrival_s -= first;
    const double span = *entries.back().arrival_s;
    // The next pass starts one mean inter-arrival gap after the last request.
    period_s = entries.size() > 1 ? span + span / static_cast<double>(entries.size() - 1) : 0;
    if (loop && period_s <= 0) {
      return Status::InvalidArgument("trace " + path + ": loop needs arrival times that span some time");
    }
  }
  return std::unique_ptr<Workload>(std::make_unique<TraceWorkload>(std::move(entries), loop, period_s, p.effective()));
}

}  // namespace prefix_router::workload
