#include "api/key_normalisation.h"

// Boost.Regex rather than std::regex: libstdc++'s std::regex matches by recursion (a long
// input can overflow the stack) and is several times slower; Boost.Regex is header-only since
// 1.76, does not recurse, and bounds a pathological match's work (it throws, caught below).
#include <simdjson.h>
#include <boost/regex.hpp>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstring>
#include <exception>
#include <string>
#include <utility>

#include "base/json_text.h"

namespace prefix_router::api {
namespace {

namespace dom = simdjson::dom;

std::vector<std::string> SplitPath(std::string_view path) {
  std::vector<std::string> out;
  size_t start = 0;
  while (true) {
    const size_t dot = path.find('.', start);
    out.emplace_back(path.substr(start, dot == std::string_view::npos ? path.npos : dot - start));
    if (dot == std::string_view::npos) break;
    start = dot + 1;
  }
  return out;
}

// Per-thread scratch of the canonical form: the DOM parser (its capacity grows to the largest
// body seen, up to kMaxCanonicalBodyBytes), a padded copy of the body and the member stack.
struct CanonicalScratch {
  dom::parser parser{kMaxCanonicalBodyBytes};
  std::string padded;
  std::vector<std::pair<std::string_view, dom::element>> members;
  bool depth_set = false;
};

CanonicalScratch& ThreadScratch() {
  thread_local CanonicalScratch scratch;
  return scratch;
}

}  // namespace

struct KeyNormaliser::Impl {
  std::vector<std::vector<std::string>> paths;  // exclude_fields split at '.'
  boost::regex pattern;                         // all exclude_patterns as one alternation
  bool has_pattern = false;
};

KeyNormaliser::KeyNormaliser(KeyNormalisation options)
    : options_(std::move(options)), impl_(std::make_unique<Impl>()) {}

KeyNormaliser::~KeyNormaliser() = default;

Result<std::shared_ptr<const KeyNormaliser>> KeyNormaliser::Create(const KeyNormalisation& options) {
  std::shared_ptr<KeyNormaliser> n(new KeyNormaliser(options));
  if (options.exclude_fields.size() > kMaxExcludeFields) {
    return Status::InvalidArgument("exclude_fields: at most " + std::to_string(kMaxExcludeFields) + " paths, got " +
                                   std::to_string(options.exclude_fields.size()));
  }
  for (size_t i = 0; i < options.exclude_fields.size(); ++i) {
    const std::string where = "exclude_fields[" + std::to_string(i) + "]";
    std::vector<std::string> segments = SplitPath(options.exclude_fields[i]);
    for (const auto& s : segments) {
      if (s.empty()) {
        return Status::InvalidArgument(where + ": '" + options.exclude_fields[i] +
                                       "' has an empty segment; expected name, a.b.c or * segments");
      }
    }
    if (segments.size() > kMaxFieldPathSegments) {
      return Status::InvalidArgument(where + ": at most " + std::to_string(kMaxFieldPathSegments) + " segments");
    }
    n->impl_->paths.push_back(std::move(segments));
  }
  if (options.exclude_patterns.size() > kMaxExcludePatterns) {
    return Status::InvalidArgument("exclude_patterns: at most " + std::to_string(kMaxExcludePatterns) +
                                   " patterns, got " + std::to_string(options.exclude_patterns.size()));
  }
  std::string combined;
  for (size_t i = 0; i < options.exclude_patterns.size(); ++i) {
    const std::string where = "exclude_patterns[" + std::to_string(i) + "]";
    const std::string& text = options.exclude_patterns[i];
    try {
      boost::regex one(text, boost::regex::perl);
      if (boost::regex_match(std::string(), one)) {
        return Status::InvalidArgument(where + ": '" + text +
                                       "' matches the empty string; a pattern must match some text");
      }
    } catch (const std::exception& e) {
      return Status::InvalidArgument(where + ": '" + text + "' is not a valid regular expression (" + e.what() + ")");
    }
    if (!combined.empty()) combined += '|';
    combined += "(?:" + text + ")";
  }
  if (!combined.empty()) {
    try {
      n->impl_->pattern = boost::regex(combined, boost::regex::perl | boost::regex::optimize);
      n->impl_->has_pattern = true;
    } catch (const std::exception& e) {
      return Status::InvalidArgument(std::string("exclude_patterns: the patterns do not combine (") + e.what() + ")");
    }
  }
  return std::shared_ptr<const KeyNormaliser>(std::move(n));
}

void KeyNormaliser::AppendFiltered(std::string_view text, KeyTextSink& sink) const {
  if (!impl_->has_pattern) {
    sink.Append(text);
    return;
  }
  const char* const begin = text.data();
  const size_t n = text.size();
  size_t pos = 0;
  while (pos < n) {
    const size_t want = sink.MaxBytesWanted();
    if (want == 0) return;
    const size_t window = std::min(n - pos, want > n ? n : want + kPatternLookahead);
    const size_t end = pos + window;
    auto flags = boost::match_default | boost::match_not_dot_newline;
    if (pos > 0) flags |= boost::match_prev_avail;
    if (end < n) flags |= boost::match_not_eol | boost::match_not_eow;
    boost::cmatch m;
    bool found = false;
    try {
      found = boost::regex_search(begin + pos, begin + end, m, impl_->pattern, flags);
    } catch (const std::exception&) {
      // Too complex to match (Boost.Regex's bound on backtracking): keep the rest as it is.
      sink.Append(text.substr(pos));
      return;
    }
    if (!found) {
      sink.Append(text.substr(pos, window));
      if (end == n) return;
      pos = end;  // only reached when the sink took everything: it is full now
      continue;
    }
    const size_t start = pos + static_cast<size_t>((m[0].first - (begin + pos)));
    const size_t stop = start + static_cast<size_t>(m[0].second - m[0].first);
    if (start > pos && !sink.Append(text.substr(pos, start - pos))) return;
    if (stop == start) {  // a zero-width match (\b, ^): removes nothing, keep one byte
      if (start < n && !sink.Append(text.substr(start, 1))) return;
      pos = start + 1;
      continue;
    }
    pos = stop;
  }
}

namespace {

// Writes the canonical form into `out` up to `limit` bytes, then stops.
class CanonicalWriter final : public KeyTextSink {
 public:
  CanonicalWriter(const KeyNormaliser& n, const std::vector<std::vector<std::string>>& paths,
                  std::vector<std::pair<std::string_view, dom::element>>& members, std::string& out, size_t limit)
      : n_(n), paths_(paths), members_(members), out_(out), limit_(limit) {}

  bool full() const { return out_.size() >= limit_; }

  // `live`: bit p set when exclude path p matched every key from the root down to here.
  void Value(dom::element e, uint64_t live, size_t depth) {
    if (full()) return;
    switch (e.type()) {
      case dom::element_type::OBJECT: Object(dom::object(e), live, depth); return;
      case dom::element_type::ARRAY: {
        Put("[");
        bool first = true;
        for (dom::element item : dom::array(e)) {
          if (full()) return;
          if (!first) Put(",");
          first = false;
          Value(item, live, depth);  // arrays are transparent to paths
        }
        Put("]");
        return;
      }
      case dom::element_type::STRING: {
        std::string_view s = e.get_string().value_unsafe();
        Put("\"");
        if (n_.has_patterns()) {
          n_.AppendFiltered(s, *this);
        } else {
          Append(s);
        }
        Put("\"");
        return;
      }
      case dom::element_type::INT64: {
        char buf[24];
        auto r = std::to_chars(buf, buf + sizeof buf, e.get_int64().value_unsafe());
        Put(std::string_view(buf, static_cast<size_t>(r.ptr - buf)));
        return;
      }
      case dom::element_type::UINT64: {
        char buf[24];
        auto r = std::to_chars(buf, buf + sizeof buf, e.get_uint64().value_unsafe());
        Put(std::string_view(buf, static_cast<size_t>(r.ptr - buf)));
        return;
      }
      case dom::element_type::DOUBLE: {
        char buf[32];
        double v = e.get_double().value_unsafe();
        if (v == 0) v = 0;  // -0.0 as 0, as RFC 8785 does (and so that canonical is idempotent)
        // The shortest form of a large integral double is an integer literal ("7.3e19" gives
        // "73000000000000000000"), which no longer fits 64 bits and so would not parse again
        // (simdjson refuses such integers): from 2^63 on, always the exponent form.
        auto r = std::abs(v) >= 0x1p63 ? std::to_chars(buf, buf + sizeof buf, v, std::chars_format::scientific)
                                       : std::to_chars(buf, buf + sizeof buf, v);
        Put(std::string_view(buf, static_cast<size_t>(r.ptr - buf)));
        return;
      }
      case dom::element_type::BOOL: Put(e.get_bool().value_unsafe() ? "true" : "false"); return;
      case dom::element_type::NULL_VALUE: Put("null"); return;
    }
  }

  // KeyTextSink: string content, escaped as RFC 8785 does.
  bool Append(std::string_view s) override {
    // Every input byte gives at least one output byte: what cannot fit is not scanned. The
    // filter (AppendFiltered) hands a string over in pieces cut at byte offsets, so UTF-8 is
    // kept byte for byte (the parser has validated the whole string).
    base::AppendJsonEscaped(out_, s.substr(0, MaxBytesWanted()), base::InvalidUtf8::kKeep);
    if (out_.size() > limit_) out_.resize(limit_);
    return !full();
  }
  size_t MaxBytesWanted() const override { return full() ? 0 : limit_ - out_.size(); }

 private:
  void Put(std::string_view s) {
    const size_t room = limit_ - std::min(limit_, out_.size());
    out_.append(s.data(), std::min(room, s.size()));
  }

  void Object(dom::object o, uint64_t live, size_t depth) {
    // The members go on a shared stack (no allocation per object once it has grown); this
    // object's are [base, end), read by index because nested objects push above them.
    const size_t base = members_.size();
    for (dom::key_value_pair kv : o) members_.emplace_back(kv.key, kv.value);
    const size_t end = members_.size();
    std::stable_sort(members_.begin() + static_cast<std::ptrdiff_t>(base),
                     members_.begin() + static_cast<std::ptrdiff_t>(end),
                     [](const auto& a, const auto& b) { return a.first < b.first; });
    Put("{");
    bool first = true;
    for (size_t i = base; i < end && !full(); ++i) {
      const std::string_view key = members_[i].first;
      const dom::element value = members_[i].second;
      uint64_t child = 0;
      bool excluded = false;
      for (uint64_t bits = live; bits != 0; bits &= bits - 1) {
        const size_t p = static_cast<size_t>(__builtin_ctzll(bits));
        const std::string& segment = paths_[p][depth];
        if (segment != "*" && segment != key) continue;
        if (depth + 1 == paths_[p].size()) {
          excluded = true;
          break;
        }
        child |= uint64_t{1} << p;
      }
      if (excluded) continue;
      if (!first) Put(",");
      first = false;
      Put("\"");
      Append(key);
      Put("\":");
      Value(value, child, depth + 1);
    }
    Put("}");
    members_.resize(base);
  }

  const KeyNormaliser& n_;
  const std::vector<std::vector<std::string>>& paths_;
  std::vector<std::pair<std::string_view, dom::element>>& members_;
  std::string& out_;
  const size_t limit_;
};

}  // namespace

bool KeyNormaliser::CanonicalNativePrefix(std::string_view body, size_t prefix_length, std::string& out) const {
  out.clear();
  if (body.empty() || body.size() > kMaxCanonicalBodyBytes) return false;
  CanonicalScratch& s = ThreadScratch();
  if (!s.depth_set) {
    // The depth limit bounds the recursion of CanonicalWriter::Value as well.
    if (s.parser.allocate(64 * 1024, kMaxCanonicalDepth) != simdjson::SUCCESS) return false;
    s.depth_set = true;
  }
  s.padded.assign(body);
  s.padded.append(simdjson::SIMDJSON_PADDING, '\0');
  dom::element root;
  if (s.parser.parse(s.padded.data(), body.size(), false).get(root) != simdjson::SUCCESS) {
    return false;
  }
  s.members.clear();
  const uint64_t live = impl_->paths.empty() ? 0 : (~uint64_t{0} >> (64 - impl_->paths.size()));
  CanonicalWriter writer(*this, impl_->paths, s.members, out, prefix_length);
  writer.Value(root, live, 0);
  return true;
}

}  // namespace prefix_router::api
