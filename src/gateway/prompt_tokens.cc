#include "gateway/prompt_tokens.h"

#include <simdjson.h>

#include <array>
#include <limits>

#include "engine_model/engine_request.h"

namespace prefix_router::gateway {
namespace od = simdjson::ondemand;
namespace {

Status Invalid(std::string msg) { return Status::InvalidArgument(std::move(msg)); }

std::string_view TrimTrailingSpace(std::string_view s) {
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\n' || s.back() == '\r')) {
    s.remove_suffix(1);
  }
  return s;
}

// The raw JSON text of a value (objects and arrays walked to their end), without the whitespace
// after it. Views into the padded input.
simdjson::simdjson_result<std::string_view> RawValue(od::value v) {
  od::json_type type;
  if (auto e = v.type().get(type)) return e;
  std::string_view raw;
  if (type == od::json_type::array) {
    od::array a;
    if (auto e = v.get_array().get(a)) return e;
    if (auto e = a.raw_json().get(raw)) return e;
  } else if (type == od::json_type::object) {
    od::object o;
    if (auto e = v.get_object().get(o)) return e;
    if (auto e = o.raw_json().get(raw)) return e;
  } else {
    raw = v.raw_json_token();
  }
  return TrimTrailingSpace(raw);
}

// Members copied to a chat /tokenize request (vLLM's TokenizeChatRequest), in this order.
constexpr std::array<std::string_view, 10> kChatMembers = {"model",
                                                           "messages",
                                                           "tools",
                                                           "chat_template",
                                                           "chat_template_kwargs",
                                                           "add_generation_prompt",
                                                           "continue_final_message",
                                                           "add_special_tokens",
                                                           "documents",
                                                           "mm_processor_kwargs"};

Status ReadId(od::value v, std::vector<uint32_t>& out) {
  uint64_t id = 0;
  if (v.get_uint64().get(id) || id > std::numeric_limits<uint32_t>::max()) {
    return Invalid("prompt: token ids must be integers from 0 to 2^32-1");
  }
  out.push_back(static_cast<uint32_t>(id));
  return Status::Ok();
}

// A completion prompt: the raw text of a string prompt (the first of several: the engine serves
// each, the first one routes), or the ids of an id prompt (the first of several).
Status ReadPrompt(od::value v, std::string_view& text, TokenizeQuery& q) {
  od::json_type type;
  if (v.type().get(type)) return Invalid("prompt: invalid JSON");
  if (type == od::json_type::string) {
    if (RawValue(v).get(text)) return Invalid("prompt: invalid JSON");
    return Status::Ok();
  }
  if (type != od::json_type::array) return Invalid("prompt: expected a string or an array");
  od::array a;
  if (v.get_array().get(a)) return Invalid("prompt: invalid JSON");
  enum class Kind { kNone, kStrings, kIds, kIdLists } kind = Kind::kNone;
  for (auto element : a) {
    od::value e;
    if (element.get(e)) return Invalid("prompt: invalid JSON");
    if (kind == Kind::kIds) {
      if (Status s = ReadId(e, q.tokens); !s.ok()) return s;
      continue;
    }
    if (kind != Kind::kNone) continue;  // a later prompt of a batch
    od::json_type et;
    if (e.type().get(et)) return Invalid("prompt: invalid JSON");
    if (et == od::json_type::string) {
      kind = Kind::kStrings;
      if (RawValue(e).get(text)) return Invalid("prompt: invalid JSON");
    } else if (et == od::json_type::array) {
      kind = Kind::kIdLists;
      q.has_tokens = true;
      od::array ids;
      if (e.get_array().get(ids)) return Invalid("prompt: invalid JSON");
      for (auto id : ids) {
        od::value idv;
        if (id.get(idv)) return Invalid("prompt: invalid JSON");
        if (Status s = ReadId(idv, q.tokens); !s.ok()) return s;
      }
    } else {
      kind = Kind::kIds;
      q.has_tokens = true;
      if (Status s = ReadId(e, q.tokens); !s.ok()) return s;
    }
  }
  if (kind == Kind::kNone) return Invalid("prompt: must not be empty");
  if (q.has_tokens && q.tokens.empty()) return Invalid("prompt: must not be empty");
  return Status::Ok();
}

void AppendMember(std::string& out, std::string_view key, std::string_view raw) {
  out += out.size() > 1 ? ",\"" : "\"";
  out += key;
  out += "\":";
  out += raw;
}

}  // namespace

bool WantsPromptTokens(const RoutingOptions& options) { return UsesKvEvents(options.strategy); }

Result<std::vector<uint32_t>> EnginePromptTokens(api::ApiKind api, std::string_view body) {
  std::string_view path;
  switch (api) {
    case api::ApiKind::kChatCompletions: path = "/v1/chat/completions"; break;
    case api::ApiKind::kCompletions: path = "/v1/completions"; break;
    case api::ApiKind::kNative: path = "/invocations"; break;
    default: return Status::InvalidArgument("no prompt tokens for this API");
  }
  Result<engine_model::EngineHttpRequest> r = engine_model::ParseEngineRequest(path, body);
  if (!r.ok()) return r.status();
  return engine_model::PromptTokens(*r);
}

Result<TokenizeQuery> TokenizeQueryFor(api::ApiKind api, std::string_view body) {
  if (api != api::ApiKind::kChatCompletions && api != api::ApiKind::kCompletions && api != api::ApiKind::kNative) {
    return Invalid("no prompt tokens for this API");
  }
  const simdjson::padded_string padded(body);
  thread_local od::parser parser;
  od::document doc;
  if (parser.iterate(padded).get(doc)) return Invalid("invalid JSON");
  od::object o;
  if (doc.get_object().get(o)) return Invalid("the request body must be a JSON object");
  // The last occurrence of each member wins, as in the engine's JSON parser.
  std::array<std::string_view, kChatMembers.size()> chat{};
  std::string_view inputs, special;
  TokenizeQuery q;
  std::string_view prompt;
  bool has_prompt = false;
  for (auto field : o) {
    std::string_view key;
    if (field.unescaped_key().get(key)) return Invalid("invalid JSON");
    od::value v;
    if (field.value().get(v)) return Invalid("invalid JSON");
    if (key == "prompt" && api != api::ApiKind::kChatCompletions) {
      q = TokenizeQuery{};
      prompt = {};
      if (Status s = ReadPrompt(v, prompt, q); !s.ok()) return s;
      has_prompt = true;
      continue;
    }
    if (key == "inputs" && api == api::ApiKind::kNative) {
      if (RawValue(v).get(inputs)) return Invalid("invalid JSON");
      continue;
    }
    for (size_t k = 0; k < kChatMembers.size(); ++k) {
      if (key != kChatMembers[k]) continue;
      if (RawValue(v).get(chat[k])) return Invalid("invalid JSON");
      if (key == "add_special_tokens") special = chat[k];
      break;
    }
  }
  if (doc.current_location().error() != simdjson::OUT_OF_BOUNDS) return Invalid("invalid JSON: trailing content");
  const bool is_chat = api == api::ApiKind::kChatCompletions || (api == api::ApiKind::kNative && !chat[1].empty());
  std::string out = "{";
  if (is_chat) {
    if (chat[1].empty()) return Invalid("messages: is required");
    for (size_t k = 0; k < kChatMembers.size(); ++k) {
      if (!chat[k].empty()) AppendMember(out, kChatMembers[k], chat[k]);
    }
    q = TokenizeQuery{};
  } else {
    if (!has_prompt && inputs.empty()) {
      return Invalid(api == api::ApiKind::kNative ? "the body needs messages, prompt or inputs"
                                                  : "prompt: is required");
    }
    if (q.has_tokens) return q;
    if (!chat[0].empty()) AppendMember(out, "model", chat[0]);
    AppendMember(out, "prompt", has_prompt ? prompt : inputs);
    if (!special.empty()) AppendMember(out, "add_special_tokens", special);
  }
  out += '}';
  q.body = std::move(out);
  return q;
}

Result<std::vector<uint32_t>> ParseTokenizeAnswer(std::string_view body, size_t max_tokens) {
  const simdjson::padded_string padded(body);
  thread_local od::parser parser;
  od::document doc;
  if (parser.iterate(padded).get(doc)) return Invalid("the /tokenize answer is not JSON");
  od::object o;
  if (doc.get_object().get(o)) return Invalid("the /tokenize answer is not a JSON object");
  std::vector<uint32_t> tokens;
  bool found = false;
  for (auto field : o) {
    std::string_view key;
    if (field.unescaped_key().get(key)) return Invalid("the /tokenize answer is not JSON");
    if (key != "tokens") continue;
    od::array a;
    if (field.value().get_array().get(a)) return Invalid("the /tokenize answer's tokens are not an array");
    tokens.clear();
    for (auto element : a) {
      uint64_t id = 0;
      if (element.get_uint64().get(id) || id > std::numeric_limits<uint32_t>::max()) {
        return Invalid("the /tokenize answer's tokens must be integers from 0 to 2^32-1");
      }
      if (tokens.size() == max_tokens) {
        return Status::ResourceExhausted("the /tokenize answer has more than " + std::to_string(max_tokens) +
                                         " tokens");
      }
      tokens.push_back(static_cast<uint32_t>(id));
    }
    found = true;
  }
  if (!found) return Invalid("the /tokenize answer has no tokens");
  if (doc.current_location().error() != simdjson::OUT_OF_BOUNDS) {
    return Invalid("the /tokenize answer is not JSON: trailing content");
  }
  return tokens;
}

}  // namespace prefix_router::gateway
