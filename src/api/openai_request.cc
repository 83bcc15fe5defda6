#include "api/openai_request.h"

// simdjson's On-Demand API is inlined for the instruction set this file is compiled for, but its
// stage 1 (structural indexing and UTF-8 validation, most of the work) runs through the
// library's runtime dispatch, so a portable build still uses AVX2 or AVX-512 where the CPU has
// them (measured: a dedicated -mavx2 build of this file was no faster).
#include <simdjson.h>
#include <xxhash.h>

#include <charconv>
#include <cstring>
#include <optional>
#include <string>

#include "core/prefix_key.h"

namespace prefix_router::api {
namespace {

namespace od = simdjson::ondemand;
using simdjson::error_code;

// Separators of the extracted text (see openai_request.h).
constexpr std::string_view kAfterRole = "\x1f";
constexpr std::string_view kBetweenParts = "\x1d";
constexpr std::string_view kAfterMessage = "\x1e";
constexpr std::string_view kBetweenPrompts = "\x1e";
constexpr char kOpaquePart = '\x1a';

// The parser's depth limit. On-Demand checks it only in simdjson's development builds (as an
// assertion) and skips unread values without recursion, so DigestValue, our one recursive
// walk, enforces it itself: requests never need more.
constexpr size_t kMaxDepth = 64;

Status JsonError(error_code e, std::string_view where) {
  std::string msg = "invalid JSON";
  if (!where.empty()) {
    msg += " at ";
    msg += where;
  }
  msg += ": ";
  msg += simdjson::error_message(e);
  return Status::InvalidArgument(std::move(msg));
}

Status TypeError(std::string_view where, std::string_view expected) {
  return Status::InvalidArgument(std::string(where) + ": expected " + std::string(expected));
}

// Distinguishes "wrong type" (a client mistake we describe) from broken JSON.
Status ValueError(error_code e, std::string_view where, std::string_view expected) {
  return e == simdjson::INCORRECT_TYPE ? TypeError(where, expected) : JsonError(e, where);
}

std::string Where(std::string_view field, size_t index) {
  return std::string(field) + "[" + std::to_string(index) + "]";
}

uint64_t Mix(uint64_t x) {
  x ^= x >> 31;
  x *= 0x7FB5D329728EA185ULL;
  x ^= x >> 27;
  x *= 0x81DADEF4BC2DD44DULL;
  x ^= x >> 33;
  return x;
}

std::string_view TrimRight(std::string_view s) {
  while (!s.empty() && (s.back() == ' ' || s.back() == '\n' || s.back() == '\r' || s.back() == '\t')) {
    s.remove_suffix(1);
  }
  return s;
}

// A digest of any JSON value that ignores formatting and object field order (fields are
// combined by a commutative sum), so equivalent non-text parts key alike.
error_code DigestValue(od::value value, uint64_t& out);

error_code DigestObject(od::object object, uint64_t& out) {
  uint64_t sum = 0;
  uint64_t count = 0;
  for (auto field : object) {
    std::string_view key;
    if (auto e = field.unescaped_key().get(key)) return e;
    od::value v;
    if (auto e = field.value().get(v)) return e;
    uint64_t d = 0;
    if (auto e = DigestValue(v, d)) return e;
    sum += Mix(XXH3_64bits_withSeed(key.data(), key.size(), 1) ^ Mix(d + 0x9E3779B97F4A7C15ULL));
    ++count;
  }
  out = Mix(sum ^ Mix(count + 0x6F626A));  // "obj"
  return simdjson::SUCCESS;
}

error_code DigestValue(od::value value, uint64_t& out) {
  if (value.current_depth() >= static_cast<int32_t>(kMaxDepth)) return simdjson::DEPTH_ERROR;
  od::json_type type;
  if (auto e = value.type().get(type)) return e;
  switch (type) {
    case od::json_type::object: {
      od::object o;
      if (auto e = value.get_object().get(o)) return e;
      return DigestObject(o, out);
    }
    case od::json_type::array: {
      od::array a;
      if (auto e = value.get_array().get(a)) return e;
      uint64_t h = 0x617272;  // "arr"
      for (auto element : a) {
        od::value v;
        if (auto e = element.get(v)) return e;
        uint64_t d = 0;
        if (auto e = DigestValue(v, d)) return e;
        h = Mix(h * 31 + d);
      }
      out = h;
      return simdjson::SUCCESS;
    }
    case od::json_type::string: {
      std::string_view s;
      if (auto e = value.get_string().get(s)) return e;
      out = XXH3_64bits_withSeed(s.data(), s.size(), 2);
      return simdjson::SUCCESS;
    }
    case od::json_type::number: {
      std::string_view token = TrimRight(value.raw_json_token());
      out = XXH3_64bits_withSeed(token.data(), token.size(), 3);
      return simdjson::SUCCESS;
    }
    case od::json_type::boolean: {
      bool b = false;
      if (auto e = value.get_bool().get(b)) return e;
      out = b ? 0x74727565 : 0x66616c7365;
      return simdjson::SUCCESS;
    }
    case od::json_type::null: {
      bool is_null = false;
      if (auto e = value.is_null().get(is_null)) return e;
      if (!is_null) return simdjson::N_ATOM_ERROR;  // type() only peeks at the first letter
      out = 0x6e756c6c;
      return simdjson::SUCCESS;
    }
  }
  return simdjson::INCORRECT_TYPE;
}

class Extractor {
 public:
  Extractor(TextPrefixHasher& hasher, const KeyNormaliser* normaliser)
      : h_(hasher), sink_(hasher), normaliser_(normaliser && normaliser->has_patterns() ? normaliser : nullptr) {}

  // Text from the request (not roles, separators or digests): patterns apply to it.
  void Text(std::string_view s) {
    if (normaliser_) {
      normaliser_->AppendFiltered(s, sink_);
    } else {
      h_.Append(s);
    }
  }

  // The Responses API's `input`: a string, or an array of items keyed like chat messages.
  Status Input(od::value value) {
    responses_ = true;
    list_ = "input";
    od::json_type type;
    if (auto e = value.type().get(type)) return JsonError(e, "input");
    if (type == od::json_type::string) {
      std::string_view s;
      if (auto e = value.get_string().get(s)) return JsonError(e, "input");
      Text(s);
      return Status::Ok();
    }
    if (type != od::json_type::array) return TypeError("input", "a string or an array of input items");
    od::array items;
    if (auto e = value.get_array().get(items)) return JsonError(e, "input");
    size_t index = 0;
    for (auto element : items) {
      od::value item;
      if (auto e = element.get(item)) return JsonError(e, Where("input", index));
      if (!h_.full()) {
        if (Status s = Message(item, index); !s.ok()) return s;
      }
      ++index;
    }
    return Status::Ok();
  }

  Status Messages(od::value value) {
    od::array messages;
    if (auto e = value.get_array().get(messages)) {
      return ValueError(e, "messages", "an array of message objects");
    }
    size_t index = 0;
    for (auto element : messages) {
      od::value item;
      if (auto e = element.get(item)) return JsonError(e, Where("messages", index));
      if (!h_.full()) {
        if (Status s = Message(item, index); !s.ok()) return s;
      }
      ++index;
    }
    if (index == 0) return Status::InvalidArgument("messages: must be a non-empty array");
    return Status::Ok();
  }

  Status Prompt(od::value value) {
    od::json_type type;
    if (auto e = value.type().get(type)) return JsonError(e, "prompt");
    if (type == od::json_type::string) {
      std::string_view s;
      if (auto e = value.get_string().get(s)) return JsonError(e, "prompt");
      Text(s);
      return Status::Ok();
    }
    if (type != od::json_type::array) {
      return TypeError("prompt", "a string, an array of strings or an array of token ids");
    }
    od::array items;
    if (auto e = value.get_array().get(items)) return JsonError(e, "prompt");
    size_t index = 0;
    for (auto element : items) {
      od::value item;
      if (auto e = element.get(item)) return JsonError(e, Where("prompt", index));
      if (h_.full()) {
        ++index;
        continue;
      }
      od::json_type t;
      if (auto e = item.type().get(t)) return JsonError(e, Where("prompt", index));
      if (t == od::json_type::number) {
        if (index > 0) h_.Append(" ");
        if (Status s = TokenId(item, Where("prompt", index)); !s.ok()) return s;
      } else if (t == od::json_type::string) {
        if (index > 0) h_.Append(kBetweenPrompts);
        std::string_view s;
        if (auto e = item.get_string().get(s)) return JsonError(e, Where("prompt", index));
        Text(s);
      } else if (t == od::json_type::array) {
        if (index > 0) h_.Append(kBetweenPrompts);
        od::array ids;
        if (auto e = item.get_array().get(ids)) return JsonError(e, Where("prompt", index));
        size_t k = 0;
        for (auto id : ids) {
          od::value v;
          if (auto e = id.get(v)) return JsonError(e, Where("prompt", index));
          if (k++ > 0) h_.Append(" ");
          if (Status s = TokenId(v, Where("prompt", index)); !s.ok()) return s;
        }
      } else {
        return TypeError(Where("prompt", index), "a string, a token id or an array of token ids");
      }
      ++index;
    }
    if (index == 0) return Status::InvalidArgument("prompt: must not be an empty array");
    return Status::Ok();
  }

 private:
  Status Message(od::value item, size_t index) {
    od::object message;
    if (auto e = item.get_object().get(message)) {
      return ValueError(e, Where(list_, index), "an object");
    }
    std::string_view role;
    if (auto e = message.find_field_unordered("role").get_string().get(role)) {
      if (e == simdjson::NO_SUCH_FIELD && responses_) {
        // A Responses item that is not a message (function_call, function_call_output,
        // reasoning, item_reference, ...): keyed by its digest, like a non-text part.
        uint64_t digest = 0;
        if (auto e2 = message.reset().error()) return JsonError(e2, Where(list_, index));
        if (auto e2 = DigestObject(message, digest)) return JsonError(e2, Where(list_, index));
        AppendOpaque(digest);
        h_.Append(kAfterMessage);
        return Status::Ok();
      }
      if (e == simdjson::NO_SUCH_FIELD) {
        return Status::InvalidArgument(Where(list_, index) + ".role: is required");
      }
      return ValueError(e, Where(list_, index) + ".role", "a string");
    }
    h_.Append(role);
    h_.Append(kAfterRole);
    od::value content;
    error_code e = message.find_field_unordered("content").get(content);
    if (e && e != simdjson::NO_SUCH_FIELD) return JsonError(e, Where(list_, index) + ".content");
    if (!e) {
      if (Status s = Content(content, index); !s.ok()) return s;
    }
    h_.Append(kAfterMessage);
    return Status::Ok();
  }

  Status Content(od::value content, size_t index) {
    od::json_type type;
    if (auto e = content.type().get(type)) return JsonError(e, Where(list_, index) + ".content");
    switch (type) {
      case od::json_type::string: {
        std::string_view s;
        if (auto e = content.get_string().get(s)) {
          return JsonError(e, Where(list_, index) + ".content");
        }
        Text(s);
        return Status::Ok();
      }
      case od::json_type::null: {
        // type() only peeks at the first letter: make sure the atom is really `null`.
        bool is_null = false;
        if (auto e = content.is_null().get(is_null)) return JsonError(e, Where(list_, index) + ".content");
        if (!is_null) return JsonError(simdjson::N_ATOM_ERROR, Where(list_, index) + ".content");
        return Status::Ok();
      }
      case od::json_type::array: break;
      default: return TypeError(Where(list_, index) + ".content", "a string, an array of content parts or null");
    }
    od::array parts;
    if (auto e = content.get_array().get(parts)) return JsonError(e, Where(list_, index) + ".content");
    size_t k = 0;
    for (auto element : parts) {
      const std::string where = Where(list_, index) + Where(".content", k);
      od::value part_value;
      if (auto e = element.get(part_value)) return JsonError(e, where);
      if (h_.full()) {
        ++k;
        continue;
      }
      if (k > 0) h_.Append(kBetweenParts);
      od::object part;
      if (auto e = part_value.get_object().get(part)) return ValueError(e, where, "a content part object");
      std::string_view type_name;
      if (auto e = part.find_field_unordered("type").get_string().get(type_name)) {
        if (e == simdjson::NO_SUCH_FIELD) return Status::InvalidArgument(where + ".type: is required");
        return ValueError(e, where + ".type", "a string");
      }
      const bool text_part = type_name == "text" || type_name == "refusal" ||
                             (responses_ && (type_name == "input_text" || type_name == "output_text"));
      if (text_part) {
        const std::string field(type_name == "refusal" ? "refusal" : "text");
        std::string_view text;
        if (auto e = part.find_field_unordered(field).get_string().get(text)) {
          if (e == simdjson::NO_SUCH_FIELD) {
            return Status::InvalidArgument(where + "." + field + ": is required");
          }
          return ValueError(e, where + "." + field, "a string");
        }
        Text(text);
      } else {
        uint64_t digest = 0;
        if (auto e = part.reset().error()) return JsonError(e, where);
        if (auto e = DigestObject(part, digest)) return JsonError(e, where);
        AppendOpaque(digest);
      }
      ++k;
    }
    return Status::Ok();
  }

  Status TokenId(od::value v, const std::string& where) {
    uint64_t id = 0;
    if (auto e = v.get_uint64().get(id)) return ValueError(e, where, "a non-negative integer token id");
    char buf[24];
    auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), id);
    h_.Append(std::string_view(buf, static_cast<size_t>(end - buf)));
    return Status::Ok();
  }

  void AppendOpaque(uint64_t digest) {
    char buf[17];
    buf[0] = kOpaquePart;
    static constexpr char kHex[] = "0123456789abcdef";
    for (int i = 0; i < 16; ++i) buf[16 - i] = kHex[(digest >> (4 * i)) & 0xF];
    h_.Append(std::string_view(buf, sizeof(buf)));
  }

  TextPrefixHasher& h_;
  HasherSink sink_;
  const KeyNormaliser* normaliser_;
  bool responses_ = false;              // Responses API input rather than chat messages
  std::string_view list_ = "messages";  // the array's name in error messages
};

}  // namespace

struct OpenAiRequestParser::Impl {
  od::parser parser;
  std::string padded;  // reused copy of bodies that arrive without padding
};

OpenAiRequestParser::OpenAiRequestParser() : impl_(std::make_unique<Impl>()) {
  // Lower the depth limit; capacity still grows with the largest body seen.
  if (impl_->parser.allocate(64 * 1024, kMaxDepth) != simdjson::SUCCESS) impl_->parser = od::parser();
}

OpenAiRequestParser::~OpenAiRequestParser() = default;

Result<ParsedRequest> OpenAiRequestParser::Parse(ApiKind api, std::string_view body, uint32_t prefix_length,
                                                 bool padded, std::string* keyed_text,
                                                 const KeyNormaliser* normaliser) {
  const bool chat = api == ApiKind::kChatCompletions;
  const bool responses = api == ApiKind::kResponses;
  const bool keyed = HasPrefixKey(api);
  simdjson::padded_string_view input;
  if (padded) {
    input = simdjson::padded_string_view(body.data(), body.size(), body.size() + kBodyPadding);
  } else {
    impl_->padded.assign(body);
    impl_->padded.append(simdjson::SIMDJSON_PADDING, ' ');
    input = simdjson::padded_string_view(impl_->padded.data(), body.size(), impl_->padded.size());
  }
  od::document doc;
  if (auto e = impl_->parser.iterate(input).get(doc)) return JsonError(e, "");
  od::object root;
  if (auto e = doc.get_object().get(root)) {
    return ValueError(e, "request body", "a JSON object");
  }

  ParsedRequest out;
  out.api = api;
  TextPrefixHasher hasher(prefix_length, keyed_text);
  Extractor extractor(hasher, normaliser);
  bool have_model = false;
  bool have_text = false;
  std::optional<std::string_view> instructions;
  const std::string_view text_field = chat ? "messages" : responses ? "input" : keyed ? "prompt" : "";
  for (auto field : root) {
    std::string_view key;
    if (auto e = field.unescaped_key().get(key)) return JsonError(e, "");
    od::value value;
    if (auto e = field.value().get(value)) return JsonError(e, key);
    if (key == "model") {
      if (auto e = value.get_string().get(out.served_name)) return ValueError(e, "model", "a string");
      have_model = true;
    } else if (!text_field.empty() && key == text_field) {
      if (have_text) return Status::InvalidArgument(std::string(text_field) + ": appears twice");
      have_text = true;
      if (responses) continue;  // keyed after `instructions`, below
      Status s = chat ? extractor.Messages(value) : extractor.Prompt(value);
      if (!s.ok()) return s;
    } else if (responses && key == "instructions") {
      bool is_null = false;
      if (value.is_null().get(is_null) == simdjson::SUCCESS && is_null) continue;
      std::string_view text;
      if (auto e = value.get_string().get(text)) return ValueError(e, "instructions", "a string or null");
      instructions = text;  // a view into the parser's string buffer, valid for this document
    } else if (key == "prompt_cache_key") {
      bool is_null = false;
      if (value.is_null().get(is_null) == simdjson::SUCCESS && is_null) continue;
      std::string_view group;
      if (auto e = value.get_string().get(group)) {
        return ValueError(e, "prompt_cache_key", "a string or null");
      }
      if (group.size() > kMaxPromptCacheKeyBytes) {
        return Status::InvalidArgument("prompt_cache_key: longer than " + std::to_string(kMaxPromptCacheKeyBytes) +
                                       " bytes");
      }
      out.routing_group = group;
    } else if (key == "stream") {
      bool is_null = false;
      if (value.is_null().get(is_null) == simdjson::SUCCESS && is_null) continue;
      if (auto e = value.get_bool().get(out.stream)) return ValueError(e, "stream", "a boolean");
    }
  }
  if (doc.current_location().error() != simdjson::OUT_OF_BOUNDS)
    return Status::InvalidArgument("invalid JSON: content after the request object");
  // tokenize and detokenize (vLLM) take an optional model: without one any instance answers.
  const bool model_optional = api == ApiKind::kTokenize || api == ApiKind::kDetokenize;
  if (!have_model && !model_optional) return Status::InvalidArgument("model: is required");
  if (!keyed) return out;
  if (responses) {
    // Instructions first whatever the field order: they are the stable system prompt.
    if (instructions) {
      extractor.Text(*instructions);
      hasher.Append(kAfterMessage);
    }
    if (have_text) {
      od::value input;
      if (auto e = root.reset().error()) return JsonError(e, "");
      if (auto e = root.find_field_unordered("input").get(input)) return JsonError(e, "input");
      if (Status s = extractor.Input(input); !s.ok()) return s;
    }
  } else if (!have_text) {
    return Status::InvalidArgument(std::string(text_field) + ": is required");
  }
  out.key = hasher.Finish(out.routing_group);
  out.prefix_units = hasher.chars();
  return out;
}

}  // namespace prefix_router::api
