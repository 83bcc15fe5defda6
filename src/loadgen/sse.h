// SseParser: an incremental parser of a text/event-stream body (the WHATWG HTML "server-sent
// events" framing that OpenAI-compatible servers stream completions in).
//
// Bytes arrive in whatever pieces TCP and the server's chunked encoding produce: an event may be
// split anywhere (even between the CR and LF of a line ending, or inside a UTF-8 sequence), and
// one read may hold several events. Feed() takes the pieces in order and calls back once per
// complete event. Lines end with LF, CRLF or a lone CR; `data:` lines of one event are joined
// with LF; comments (`:` lines) and unknown fields are skipped; an event is dispatched at the
// blank line that ends it, and only if it had a `data` field (as browsers do).
//
// Finish() is for the end of the body: a last event without its blank line is dispatched there
// rather than dropped (lenient where the standard discards; servers that end `data: [DONE]`
// without the blank line are then still understood).
//
// Memory is bounded: a line or an event larger than `max_event_bytes` makes the parser fail
// (failed() turns true and it ignores further input), so a server that never ends a line cannot
// grow it without limit.
//
// Thread-compatible: one parser per response.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace prefix_router::loadgen {

struct SseEvent {
  std::string_view event;  // the `event:` field ("" when absent)
  std::string_view data;   // the `data:` lines joined with LF
};

class SseParser {
 public:
  explicit SseParser(size_t max_event_bytes = 16u << 20) : max_event_bytes_(max_event_bytes) {}

  // Parses the next piece of the body; `on_event(const SseEvent&)` is called for each complete
  // event, in order. The views in the event are valid during the call only.
  template <typename OnEvent>
  void Feed(std::string_view bytes, OnEvent&& on_event);

  // The body ended: dispatches a pending event that lacked its terminating blank line.
  template <typename OnEvent>
  void Finish(OnEvent&& on_event);

  bool failed() const { return failed_; }

 private:
  template <typename OnEvent>
  void Line(std::string_view line, OnEvent& on_event);

  size_t max_event_bytes_;
  std::string line_;   // a line split across pieces
  std::string data_;   // data of the event being assembled
  std::string event_;  // its `event:` field
  bool has_data_ = false;
  bool skip_lf_ = false;  // the last piece ended with CR: a leading LF belongs to that line end
  bool failed_ = false;
};

template <typename OnEvent>
void SseParser::Feed(std::string_view bytes, OnEvent&& on_event) {
  size_t i = 0;
  if (failed_) return;
  if (skip_lf_ && !bytes.empty()) {
    if (bytes[0] == '\n') i = 1;
    skip_lf_ = false;
  }
  while (i < bytes.size()) {
    const size_t end = bytes.find_first_of("\r\n", i);
    if (end == std::string_view::npos) {
      line_.append(bytes.substr(i));
      if (line_.size() > max_event_bytes_) failed_ = true;
      return;
    }
    const std::string_view piece = bytes.substr(i, end - i);
    // Lines wholly inside this piece are parsed in place, without a copy.
    if (line_.empty()) {
      Line(piece, on_event);
    } else {
      line_.append(piece);
      Line(line_, on_event);
      line_.clear();
    }
    if (failed_) return;
    i = end + 1;
    if (bytes[end] == '\r') {
      if (i < bytes.size()) {
        if (bytes[i] == '\n') ++i;
      } else {
        skip_lf_ = true;
      }
    }
  }
}

template <typename OnEvent>
void SseParser::Finish(OnEvent&& on_event) {
  if (failed_) return;
  if (!line_.empty()) {
    std::string last = std::move(line_);
    line_.clear();
    Line(last, on_event);
  }
  Line(std::string_view(), on_event);  // the missing blank line
}

template <typename OnEvent>
void SseParser::Line(std::string_view line, OnEvent& on_event) {
  if (line.empty()) {
    if (has_data_) on_event(SseEvent{event_, data_});
    data_.clear();
    event_.clear();
    has_data_ = false;
    return;
  }
  if (line[0] == ':') return;  // comment (servers send these as keep-alives)
  const size_t colon = line.find(':');
  std::string_view field = line.substr(0, colon);
  std::string_view value;
  if (colon != std::string_view::npos) {
    value = line.substr(colon + 1);
    if (!value.empty() && value[0] == ' ') value.remove_prefix(1);
  }
  if (field == "data") {
    if (has_data_) data_ += '\n';
    data_.append(value);
    has_data_ = true;
    if (data_.size() > max_event_bytes_) failed_ = true;
  } else if (field == "event") {
    event_.assign(value);
  }
}

}  // namespace prefix_router::loadgen
