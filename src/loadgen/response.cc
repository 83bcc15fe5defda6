#include "loadgen/response.h"

#include <boost/json.hpp>

#include <cstdlib>

namespace prefix_router::loadgen {
namespace {

namespace json = boost::json;

// The usage member of a chunk or body, read as the gateway reads it (api/response_usage.h).
void ReadUsage(std::string_view text, Usage* usage) {
  if (!usage) return;
  api::UsageScanner scanner;
  scanner.Feed(text);
  if (scanner.usage().present) *usage = scanner.usage();
}

// A non-empty string member, or nullptr.
const json::string* Text(const json::object& o, std::string_view key) {
  const json::value* v = o.if_contains(key);
  if (!v || !v->is_string() || v->as_string().empty()) return nullptr;
  return &v->as_string();
}

void Append(std::string* reply, const json::string& s) {
  if (reply) reply->append(s.data(), s.size());
}

bool ReadError(const json::object& o, ChunkInfo& info) {
  const json::value* e = o.if_contains("error");
  if (!e || e->is_null()) return false;
  info.error = true;
  if (e->is_object()) {
    if (const json::value* m = e->as_object().if_contains("message"); m && m->is_string()) {
      info.error_message = std::string(m->as_string());
    }
  } else if (e->is_string()) {
    info.error_message = std::string(e->as_string());
  }
  if (info.error_message.empty()) info.error_message = json::serialize(*e);
  return true;
}

const json::object* FirstChoice(const json::object& o) {
  const json::value* c = o.if_contains("choices");
  if (!c || !c->is_array() || c->as_array().empty()) return nullptr;
  const json::value& first = c->as_array()[0];
  return first.is_object() ? &first.as_object() : nullptr;
}

template <typename Fn>
ChunkInfo WithParsed(std::string_view text, Fn&& fn) {
  // Chunks are small: parse into a stack buffer (a heap fallback covers larger bodies).
  unsigned char buffer[4096];
  json::monotonic_resource mr(buffer, sizeof(buffer));
  json::error_code ec;
  json::value doc = json::parse(json::string_view(text.data(), text.size()), ec, &mr);
  ChunkInfo info;
  if (ec) return info;
  fn(doc, info);
  return info;
}

}  // namespace

ChunkInfo ParseStreamChunk(std::string_view data, std::string* reply, Usage* usage) {
  return WithParsed(data, [&](const json::value& doc, ChunkInfo& info) {
    if (!doc.is_object()) return;
    info.valid = true;
    const json::object& o = doc.as_object();
    if (ReadError(o, info)) return;
    ReadUsage(data, usage);
    const json::object* choice = FirstChoice(o);
    if (!choice) return;
    if (const json::value* d = choice->if_contains("delta"); d && d->is_object()) {
      const json::object& delta = d->as_object();
      if (const json::string* s = Text(delta, "content")) {
        Append(reply, *s);
        info.has_content = true;
      }
      if (Text(delta, "reasoning_content") || Text(delta, "reasoning")) info.has_content = true;
    }
    if (const json::string* s = Text(*choice, "text")) {
      Append(reply, *s);
      info.has_content = true;
    }
  });
}

ChunkInfo ParseCompletionBody(std::string_view body, std::string* reply, Usage* usage) {
  return WithParsed(body, [&](const json::value& doc, ChunkInfo& info) {
    const json::object* o = nullptr;
    if (doc.is_object()) {
      o = &doc.as_object();
    } else if (doc.is_array() && !doc.as_array().empty() && doc.as_array()[0].is_object()) {
      o = &doc.as_array()[0].as_object();  // TGI: [{"generated_text": ...}]
    }
    if (!o) return;
    info.valid = true;
    if (ReadError(*o, info)) return;
    ReadUsage(body, usage);
    if (const json::string* s = Text(*o, "generated_text")) {
      Append(reply, *s);
      info.has_content = true;
    }
    const json::object* choice = FirstChoice(*o);
    if (!choice) return;
    if (const json::value* m = choice->if_contains("message"); m && m->is_object()) {
      if (const json::string* s = Text(m->as_object(), "content")) {
        Append(reply, *s);
        info.has_content = true;
      }
    }
    if (const json::string* s = Text(*choice, "text")) {
      Append(reply, *s);
      info.has_content = true;
    }
  });
}

bool ParseEngineTiming(std::string_view header, EngineTiming* out) {
  bool any = false;
  while (!header.empty()) {
    const size_t semi = header.find(';');
    std::string_view item = header.substr(0, semi);
    header = semi == std::string_view::npos ? std::string_view() : header.substr(semi + 1);
    while (!item.empty() && item.front() == ' ') item.remove_prefix(1);
    while (!item.empty() && item.back() == ' ') item.remove_suffix(1);
    const size_t eq = item.find('=');
    if (eq == std::string_view::npos) continue;
    const std::string_view key = item.substr(0, eq);
    const std::string value(item.substr(eq + 1));
    char* end = nullptr;
    const double v = std::strtod(value.c_str(), &end);
    if (end == value.c_str() || *end != '\0' || !(v >= 0)) continue;
    if (key == "queue") {
      out->queue_s = v;
      any = true;
    } else if (key == "ttft") {
      out->ttft_s = v;
      any = true;
    } else if (key == "cached") {
      out->cached_tokens = static_cast<int64_t>(v);
    } else if (key == "prompt") {
      out->prompt_tokens = static_cast<int64_t>(v);
    }
  }
  return any;
}

bool IsOverflowDecision(std::string_view decision) { return decision == "overflow" || decision == "saturated"; }

}  // namespace prefix_router::loadgen
