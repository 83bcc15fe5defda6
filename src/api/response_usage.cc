#include "api/response_usage.h"

#include <algorithm>
#include <cstdint>

namespace prefix_router::api {
namespace {

constexpr std::string_view kDataField = "data:";
constexpr uint32_t kMaxDepth = 1u << 20;  // deeper than any response: treated as not JSON

}  // namespace

void UsageScanner::Feed(std::string_view bytes) {
  if (framing_ == Framing::kJson) {
    for (const char c : bytes) {
      if (done_) return;  // the document ended: the rest is not read
      JsonByte(c);
    }
    return;
  }
  // SSE (WHATWG): lines end with LF, CR or CRLF; a blank line ends an event; only `data:` lines
  // carry the event's JSON, joined with LF (whitespace to JSON); comments and other fields are
  // skipped.
  for (const char c : bytes) {
    if (after_cr_) {
      after_cr_ = false;
      if (c == '\n') continue;  // the LF of a CRLF
    }
    if (c == '\r' || c == '\n') {
      after_cr_ = c == '\r';
      if (line_empty_) {
        if (event_has_data_) ResetDocument();  // the event ended: the next data is a new document
        event_has_data_ = false;
      } else if (line_ == Line::kData || line_ == Line::kSpace) {
        JsonByte('\n');
      }
      line_ = Line::kField;
      field_matched_ = 0;
      line_empty_ = true;
      continue;
    }
    line_empty_ = false;
    switch (line_) {
      case Line::kField:
        if (c != kDataField[field_matched_]) {
          line_ = Line::kSkip;
        } else if (++field_matched_ == kDataField.size()) {
          line_ = Line::kSpace;
          event_has_data_ = true;
        }
        break;
      case Line::kSpace:
        line_ = Line::kData;
        if (c != ' ') JsonByte(c);  // one space after the colon is not part of the value
        break;
      case Line::kData: JsonByte(c); break;
      case Line::kSkip: break;
    }
  }
}

void UsageScanner::ResetDocument() {
  kinds_ = 0;
  depth_ = usage_depth_ = details_depth_ = response_depth_ = 0;
  done_ = in_string_ = escape_ = string_is_key_ = expect_key_ = in_number_ = false;
  target_ = Target::kNone;
  number_ = 0;
  key_len_ = 0;
  key_long_ = false;
}

void UsageScanner::JsonByte(char c) {
  if (done_) return;
  if (in_string_) {
    if (escape_) {
      escape_ = false;
      key_long_ = true;  // an escaped key matches none of ours (harmless for values)
    } else if (c == '\\') {
      escape_ = true;
    } else if (c == '"') {
      in_string_ = false;
      if (string_is_key_) KeyEnded();
    } else if (string_is_key_) {
      if (key_len_ < sizeof key_) {
        key_[key_len_++] = c;
      } else {
        key_long_ = true;
      }
    }
    return;
  }
  if (in_number_) {
    if (c >= '0' && c <= '9') {
      if (number_integral_) number_ = std::min<uint64_t>(number_ * 10 + static_cast<uint64_t>(c - '0'), UINT32_MAX);
      return;
    }
    if (c == '.' || c == 'e' || c == 'E' || c == '+' || c == '-') {
      number_integral_ = false;  // a fraction or exponent: the integral part stands
      return;
    }
    NumberEnded();  // and `c` is read below
  }
  switch (c) {
    case ' ':
    case '\t':
    case '\n':
    case '\r':
    case ':': return;
    case '"':
      in_string_ = true;
      escape_ = false;
      string_is_key_ = expect_key_ && TopIsObject();
      expect_key_ = false;
      if (string_is_key_) {
        key_len_ = 0;
        key_long_ = false;
      } else {
        target_ = Target::kNone;  // a string value is no count
      }
      return;
    case '{': Open(true); return;
    case '[': Open(false); return;
    case '}':
    case ']': Close(); return;
    case ',':
      expect_key_ = TopIsObject();
      target_ = Target::kNone;
      return;
    default:
      if ((c >= '0' && c <= '9') || c == '-') {
        in_number_ = true;
        number_negative_ = c == '-';
        number_integral_ = true;
        number_ = c == '-' ? 0 : static_cast<uint64_t>(c - '0');
        return;
      }
      // true, false, null (or bytes that are not JSON): not a count.
      target_ = Target::kNone;
      if (depth_ == 0) done_ = true;  // not a JSON object or array at all
  }
}

void UsageScanner::NumberEnded() {
  in_number_ = false;
  const auto value = static_cast<uint32_t>(number_negative_ ? 0 : number_);
  switch (target_) {
    case Target::kPrompt: current_.prompt_tokens = value; break;
    case Target::kCompletion: current_.completion_tokens = value; break;
    case Target::kCached:
      current_.cached_tokens = value;
      current_.cached_present = true;
      break;
    default: break;
  }
  target_ = Target::kNone;
}

void UsageScanner::KeyEnded() {
  target_ = Target::kNone;
  if (key_long_) return;
  const std::string_view k(key_, key_len_);
  if (usage_depth_ != 0 && depth_ == usage_depth_) {
    if (k == "prompt_tokens" || k == "input_tokens") {
      target_ = Target::kPrompt;
    } else if (k == "completion_tokens" || k == "output_tokens") {
      target_ = Target::kCompletion;
    } else if (k == "prompt_tokens_details" || k == "input_tokens_details") {
      target_ = Target::kDetails;
    }
  } else if (details_depth_ != 0 && depth_ == details_depth_) {
    if (k == "cached_tokens") target_ = Target::kCached;
  } else if (depth_ == 1 || (response_depth_ != 0 && depth_ == response_depth_)) {
    if (k == "usage") {
      target_ = Target::kUsage;
    } else if (depth_ == 1 && k == "response") {
      target_ = Target::kResponse;
    }
  }
}

void UsageScanner::Open(bool object) {
  const Target target = target_;
  target_ = Target::kNone;
  if (depth_ >= kMaxDepth) {
    done_ = true;
    return;
  }
  ++depth_;
  if (depth_ <= 64) {
    const uint64_t bit = uint64_t{1} << (depth_ - 1);
    kinds_ = object ? kinds_ | bit : kinds_ & ~bit;
  }
  expect_key_ = object;
  if (!object) return;
  switch (target) {
    case Target::kUsage:
      usage_depth_ = depth_;
      current_ = ResponseUsage{};
      break;
    case Target::kResponse: response_depth_ = depth_; break;
    case Target::kDetails: details_depth_ = depth_; break;
    default: break;
  }
}

void UsageScanner::Close() {
  target_ = Target::kNone;
  expect_key_ = false;
  if (depth_ == 0) {  // more closed than opened: not JSON
    done_ = true;
    return;
  }
  if (depth_ == details_depth_) details_depth_ = 0;
  if (depth_ == usage_depth_) {
    usage_depth_ = 0;
    details_depth_ = 0;
    current_.present = true;
    result_ = current_;
  }
  if (depth_ == response_depth_) response_depth_ = 0;
  if (--depth_ == 0) done_ = true;
}

}  // namespace prefix_router::api
