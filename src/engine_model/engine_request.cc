#include "engine_model/engine_request.h"

#include <xxhash.h>
#include <boost/json.hpp>

namespace prefix_router::engine_model {
namespace json = boost::json;
namespace {

Status Invalid(std::string msg) { return Status::InvalidArgument(std::move(msg)); }

Result<uint32_t> MaxTokens(const json::object& o, const char* key) {
  const json::value* v = o.if_contains(key);
  if (!v || v->is_null()) return 0u;
  if (v->is_int64() && v->as_int64() >= 1 && v->as_int64() <= (1 << 24)) {
    return static_cast<uint32_t>(v->as_int64());
  }
  if (v->is_uint64() && v->as_uint64() >= 1 && v->as_uint64() <= (1u << 24)) {
    return static_cast<uint32_t>(v->as_uint64());
  }
  return Invalid(std::string(key) + ": expected an integer from 1 to 16777216");
}

Status ReadStreamOptions(const json::object& o, EngineHttpRequest& r) {
  if (const json::value* s = o.if_contains("stream"); s && !s->is_null()) {
    if (!s->is_bool()) return Invalid("stream: expected a boolean");
    r.stream = s->as_bool();
  }
  if (const json::value* so = o.if_contains("stream_options"); so && so->is_object()) {
    if (const json::value* u = so->as_object().if_contains("include_usage"); u && u->is_bool()) {
      r.include_usage = u->as_bool();
    }
  }
  return Status::Ok();
}

Status ReadMessages(const json::value& v, EngineHttpRequest& r) {
  if (!v.is_array() || v.as_array().empty()) return Invalid("messages: expected a non-empty array");
  for (const json::value& m : v.as_array()) {
    if (!m.is_object()) return Invalid("messages: each message must be an object");
    const json::object& mo = m.as_object();
    ChatMessage msg;
    const json::value* role = mo.if_contains("role");
    if (!role || !role->is_string()) return Invalid("messages: each message needs a string role");
    msg.role = std::string(role->as_string());
    const json::value* content = mo.if_contains("content");
    if (content && content->is_string()) {
      msg.content = std::string(content->as_string());
    } else if (content && content->is_array()) {
      for (const json::value& part : content->as_array()) {
        if (!part.is_object()) return Invalid("messages: content parts must be objects");
        const json::object& po = part.as_object();
        const json::value* type = po.if_contains("type");
        const json::value* text = po.if_contains("text");
        if (type && type->is_string() && type->as_string() == "text" && text && text->is_string()) {
          msg.parts.push_back(ChatPart::Text(std::string(text->as_string())));
        } else {
          const std::string raw = json::serialize(part);
          msg.parts.push_back(ChatPart::NonText(XXH3_64bits(raw.data(), raw.size())));
        }
      }
    } else if (content && !content->is_null()) {
      return Invalid("messages: content must be a string, an array of parts or null");
    }
    r.messages.push_back(std::move(msg));
  }
  return Status::Ok();
}

Status ReadPrompt(const json::value& v, EngineHttpRequest& r) {
  if (v.is_string()) {
    r.prompt = std::string(v.as_string());
    return Status::Ok();
  }
  if (v.is_array() && !v.as_array().empty()) {
    const json::array& a = v.as_array();
    if (a[0].is_string()) {
      r.prompt = std::string(a[0].as_string());  // batched prompts: the emulator serves the first
      return Status::Ok();
    }
    const json::array* ids = &a;
    if (a[0].is_array()) ids = &a[0].as_array();
    r.prompt_is_ids = true;
    for (const json::value& id : *ids) {
      if (!id.is_int64() || id.as_int64() < 0) return Invalid("prompt: token ids must be non-negative integers");
      r.prompt_ids.push_back(static_cast<uint32_t>(id.as_int64()));
    }
    if (r.prompt_ids.empty()) return Invalid("prompt: must not be empty");
    return Status::Ok();
  }
  return Invalid("prompt: expected a string, an array of strings or an array of token ids");
}

std::string Quote(std::string_view s) { return json::serialize(json::string_view(s.data(), s.size())); }

// `stream`: the usage chunk of a stream, where vLLM leaves out a null prompt_tokens_details
// (see Usage).
std::string UsageJson(const Usage& u, bool stream) {
  std::string out = "{\"prompt_tokens\":" + std::to_string(u.prompt_tokens) +
                    ",\"completion_tokens\":" + std::to_string(u.completion_tokens) +
                    ",\"total_tokens\":" + std::to_string(u.prompt_tokens + u.completion_tokens);
  if (u.prompt_tokens_details && u.cached_tokens > 0) {
    out += ",\"prompt_tokens_details\":{\"cached_tokens\":" + std::to_string(u.cached_tokens) + "}";
  } else if (!stream) {
    out += ",\"prompt_tokens_details\":null";
  }
  return out + "}";
}

std::string Head(const EngineHttpRequest& r, const std::string& id, int64_t created, bool chunk) {
  const bool chat = r.shape == RequestShape::kChat;
  std::string out = "{\"id\":" + Quote(id) + ",\"object\":\"";
  out += chat ? (chunk ? "chat.completion.chunk" : "chat.completion") : "text_completion";
  out += "\",\"created\":" + std::to_string(created) + ",\"model\":" + Quote(r.model);
  return out;
}

}  // namespace

Result<EngineHttpRequest> ParseEngineRequest(std::string_view path, std::string_view body) {
  json::error_code ec;
  json::value doc = json::parse(json::string_view(body.data(), body.size()), ec);
  if (ec) return Invalid("invalid JSON: " + ec.message());
  if (!doc.is_object()) return Invalid("the request body must be a JSON object");
  const json::object& o = doc.as_object();
  EngineHttpRequest r;
  if (const json::value* m = o.if_contains("model"); m && m->is_string()) r.model = std::string(m->as_string());
  if (Status s = ReadStreamOptions(o, r); !s.ok()) return s;

  const bool native = path == "/invocations";
  if (path == "/v1/chat/completions" || (native && o.contains("messages"))) {
    r.shape = RequestShape::kChat;
    const json::value* msgs = o.if_contains("messages");
    if (!msgs) return Invalid("messages: is required");
    if (Status s = ReadMessages(*msgs, r); !s.ok()) return s;
    // max_completion_tokens (the current name) wins over max_tokens (deprecated) unless it is
    // absent or null: clients that send every field write "max_completion_tokens": null.
    const json::value* mct = o.if_contains("max_completion_tokens");
    auto mt = MaxTokens(o, mct && !mct->is_null() ? "max_completion_tokens" : "max_tokens");
    if (!mt.ok()) return mt.status();
    r.max_tokens = *mt ? *mt : kDefaultChatMaxTokens;
  } else if (path == "/v1/completions" || (native && o.contains("prompt"))) {
    r.shape = RequestShape::kCompletion;
    const json::value* p = o.if_contains("prompt");
    if (!p) return Invalid("prompt: is required");
    if (Status s = ReadPrompt(*p, r); !s.ok()) return s;
    auto mt = MaxTokens(o, "max_tokens");
    if (!mt.ok()) return mt.status();
    r.max_tokens = *mt ? *mt : kDefaultCompletionMaxTokens;
  } else if (native && o.contains("inputs")) {
    r.shape = RequestShape::kTgi;
    const json::value* in = o.if_contains("inputs");
    if (!in->is_string()) return Invalid("inputs: expected a string");
    r.prompt = std::string(in->as_string());
    r.max_tokens = kDefaultCompletionMaxTokens;
    r.stream = false;
    if (const json::value* params = o.if_contains("parameters"); params && params->is_object()) {
      auto mt = MaxTokens(params->as_object(), "max_new_tokens");
      if (!mt.ok()) return mt.status();
      if (*mt) r.max_tokens = *mt;
    }
  } else if (native) {
    return Invalid("the body needs messages, prompt or inputs");
  } else {
    return Invalid("unsupported path");
  }
  return r;
}

Result<TokenizeRequest> ParseTokenizeRequest(std::string_view body) {
  json::error_code ec;
  json::value doc = json::parse(json::string_view(body.data(), body.size()), ec);
  if (ec) return Invalid("invalid JSON: " + ec.message());
  if (!doc.is_object()) return Invalid("the request body must be a JSON object");
  const json::object& o = doc.as_object();
  auto flag = [&o](const char* key, bool fallback) -> Result<bool> {
    const json::value* v = o.if_contains(key);
    if (!v || v->is_null()) return fallback;
    if (!v->is_bool()) return Invalid(std::string(key) + ": expected a boolean");
    return v->as_bool();
  };
  TokenizeRequest out;
  if (const json::value* m = o.if_contains("model"); m && m->is_string()) out.model = std::string(m->as_string());
  EngineHttpRequest r;
  if (const json::value* msgs = o.if_contains("messages")) {
    if (Status s = ReadMessages(*msgs, r); !s.ok()) return s;
    Result<bool> generation = flag("add_generation_prompt", true);
    if (!generation.ok()) return generation.status();
    out.tokens.push_back(kBeginOfText);
    for (const ChatMessage& m : r.messages) AppendChatMessage(m, out.tokens);
    if (*generation) AppendGenerationPrompt(out.tokens);
    return out;
  }
  const json::value* p = o.if_contains("prompt");
  if (!p) return Invalid("the body needs messages or prompt");
  if (Status s = ReadPrompt(*p, r); !s.ok()) return s;
  if (r.prompt_is_ids) {
    out.tokens = std::move(r.prompt_ids);
    return out;
  }
  Result<bool> special = flag("add_special_tokens", true);
  if (!special.ok()) return special.status();
  if (*special) {
    out.tokens = RenderCompletion(r.prompt);
  } else {
    Tokenize(r.prompt, out.tokens);
  }
  return out;
}

std::string TokenizeResponseBody(const std::vector<uint32_t>& tokens, uint32_t max_model_len) {
  std::string out = "{\"count\":" + std::to_string(tokens.size()) +
                    ",\"max_model_len\":" + std::to_string(max_model_len) + ",\"tokens\":[";
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (i > 0) out += ',';
    out += std::to_string(tokens[i]);
  }
  out += "],\"token_strs\":null}";
  return out;
}

std::vector<uint32_t> PromptTokens(const EngineHttpRequest& r) {
  if (r.shape == RequestShape::kChat) return RenderChat(r.messages);
  if (r.prompt_is_ids) return r.prompt_ids;
  return RenderCompletion(r.prompt);
}

std::string CompletionBody(const EngineHttpRequest& r, const std::string& id, int64_t created, const std::string& text,
                           const Usage& usage) {
  if (r.shape == RequestShape::kTgi) return "[{\"generated_text\":" + Quote(text) + "}]";
  std::string out = Head(r, id, created, false);
  if (r.shape == RequestShape::kChat) {
    out += ",\"choices\":[{\"index\":0,\"message\":{\"role\":\"assistant\",\"content\":" + Quote(text) +
           "},\"logprobs\":null,\"finish_reason\":\"length\"}]";
  } else {
    out += ",\"choices\":[{\"index\":0,\"text\":" + Quote(text) + ",\"logprobs\":null,\"finish_reason\":\"length\"}]";
  }
  out += ",\"usage\":" + UsageJson(usage, false) + "}";
  return out;
}

std::string StreamChunk(const EngineHttpRequest& r, const std::string& id, int64_t created, const std::string& text,
                        bool first) {
  std::string out = "data: " + Head(r, id, created, true);
  if (r.shape == RequestShape::kChat) {
    out += ",\"choices\":[{\"index\":0,\"delta\":{";
    if (first) out += "\"role\":\"assistant\",";
    out += "\"content\":" + Quote(text) + "},\"logprobs\":null,\"finish_reason\":null}]}\n\n";
  } else {
    out += ",\"choices\":[{\"index\":0,\"text\":" + Quote(text) + ",\"logprobs\":null,\"finish_reason\":null}]}\n\n";
  }
  return out;
}

std::string StreamEnd(const EngineHttpRequest& r, const std::string& id, int64_t created, const Usage& usage) {
  std::string out = "data: " + Head(r, id, created, true);
  if (r.shape == RequestShape::kChat) {
    out += ",\"choices\":[{\"index\":0,\"delta\":{},\"logprobs\":null,\"finish_reason\":\"length\"}]}\n\n";
  } else {
    out += ",\"choices\":[{\"index\":0,\"text\":\"\",\"logprobs\":null,\"finish_reason\":\"length\"}]}\n\n";
  }
  if (r.include_usage) {
    out += "data: " + Head(r, id, created, true) + ",\"choices\":[],\"usage\":" + UsageJson(usage, true) + "}\n\n";
  }
  out += "data: [DONE]\n\n";
  return out;
}

std::string VllmErrorBody(int status, std::string_view type, std::string_view message) {
  return "{\"error\":{\"message\":" + Quote(message) + ",\"type\":" + Quote(type) +
         ",\"param\":null,\"code\":" + std::to_string(status) + "}}";
}

}  // namespace prefix_router::engine_model
