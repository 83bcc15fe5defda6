// The SSE parser's contract: the same events whatever the split of the body into pieces, every
// line-ending style, the standard's field rules, and bounded memory.
#include "loadgen/sse.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace prefix_router::loadgen {
namespace {

struct Got {
  std::string event;
  std::string data;
  bool operator==(const Got&) const = default;
};

std::vector<Got> ParseInPieces(std::string_view body, const std::vector<size_t>& cuts) {
  std::vector<Got> out;
  auto on = [&](const SseEvent& e) { out.push_back({std::string(e.event), std::string(e.data)}); };
  SseParser p;
  size_t at = 0;
  for (size_t cut : cuts) {
    p.Feed(body.substr(at, cut - at), on);
    at = cut;
  }
  p.Feed(body.substr(at), on);
  p.Finish(on);
  return out;
}

std::vector<Got> ParseWhole(std::string_view body) { return ParseInPieces(body, {}); }

// A vLLM-like stream: role chunk, content chunks, usage, [DONE].
const std::string kStream =
    "data: {\"choices\":[{\"delta\":{\"role\":\"assistant\",\"content\":\"He\"}}]}\n\n"
    "data: {\"choices\":[{\"delta\":{\"content\":\"llo\"}}]}\n\n"
    ": keep-alive comment\n\n"
    "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":5}}\n\n"
    "data: [DONE]\n\n";

// Several events in one piece come out in order, comments are skipped.
TEST(SseParser, SeveralEventsInOnePiece) {
  auto got = ParseWhole(kStream);
  ASSERT_EQ(got.size(), 4u);
  EXPECT_EQ(got[1].data, "{\"choices\":[{\"delta\":{\"content\":\"llo\"}}]}");
  EXPECT_EQ(got[3].data, "[DONE]");
}

// Every single cut point and every pair of cut points yields the same events.
TEST(SseParser, AnySplitGivesTheSameEvents) {
  for (const std::string& body : {kStream, std::string("data: a\r\n\r\ndata: b\r\rdata: c\n\r\n")}) {
    const auto whole = ParseWhole(body);
    for (size_t i = 0; i <= body.size(); ++i) {
      ASSERT_EQ(ParseInPieces(body, {i}), whole) << "cut at " << i;
      for (size_t j = i; j <= body.size(); j += 3) ASSERT_EQ(ParseInPieces(body, {i, j}), whole);
    }
  }
}

// One byte per piece (a server flushing every byte) is still the same stream.
TEST(SseParser, OneBytePerPiece) {
  std::vector<size_t> cuts;
  for (size_t i = 1; i < kStream.size(); ++i) cuts.push_back(i);
  EXPECT_EQ(ParseInPieces(kStream, cuts), ParseWhole(kStream));
}

// CRLF, lone CR and LF all end lines; a CR at the end of a piece followed by LF is one ending.
TEST(SseParser, LineEndings) {
  const std::vector<Got> want = {{"", "a"}, {"", "b"}, {"", "c"}};
  EXPECT_EQ(ParseWhole("data: a\r\n\r\ndata: b\r\rdata: c\n\n"), want);
  EXPECT_EQ(ParseInPieces("data: a\r\n\r\ndata: b\n\ndata: c\n\n", {8}), want);  // cut between CR and LF
}

// Multi-line data is joined with LF; `event:` is reported; one leading space is stripped; no
// space is fine too; unknown fields are ignored.
TEST(SseParser, FieldRules) {
  auto got = ParseWhole("event: error\ndata: line1\ndata:line2\nid: 7\nretry: 10\n\n");
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].event, "error");
  EXPECT_EQ(got[0].data, "line1\nline2");
  // The event name does not leak into the next event.
  got = ParseWhole("event: x\ndata: 1\n\ndata: 2\n\n");
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[1].event, "");
}

// A blank line without data dispatches nothing (as browsers do).
TEST(SseParser, EventWithoutDataIsNotDispatched) { EXPECT_TRUE(ParseWhole("event: ping\n\n\n\n: c\n\n").empty()); }

// A last event without its blank line is still dispatched by Finish.
TEST(SseParser, FinishDispatchesUnterminatedEvent) {
  EXPECT_EQ(ParseWhole("data: x\n\ndata: [DONE]"), (std::vector<Got>{{"", "x"}, {"", "[DONE]"}}));
  EXPECT_EQ(ParseWhole("data: [DONE]\n"), (std::vector<Got>{{"", "[DONE]"}}));
}

// A line that never ends makes the parser fail instead of growing without bound.
TEST(SseParser, BoundedLine) {
  SseParser p(64);
  int events = 0;
  auto on = [&](const SseEvent&) { ++events; };
  for (int i = 0; i < 10; ++i) p.Feed("data: xxxxxxxxxxxxxxxxxxxx", on);
  EXPECT_TRUE(p.failed());
  p.Feed("\n\n", on);
  EXPECT_EQ(events, 0);
}

}  // namespace
}  // namespace prefix_router::loadgen
