// Helpers shared by the workload tests.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "workload/workload.h"

namespace prefix_router::workload::testing {

inline std::unique_ptr<Workload> MustMake(std::string_view name, const ParamMap& params, uint64_t seed = 1) {
  Result<std::unique_ptr<Workload>> w = MakeWorkload(name, params, seed);
  EXPECT_TRUE(w.ok()) << w.status().ToString();
  if (!w.ok()) return nullptr;
  return std::move(w).value();
}

// The reply a test "engine" gives to the n-th request of a run: distinct and recognisable.
inline std::string FakeReply(size_t n) { return "reply number " + std::to_string(n) + " ends"; }

// Runs `sessions` sessions to their end, answering each turn with FakeReply; returns every
// request in order, each session's requests contiguous.
inline std::vector<Request> RunSessions(Workload& w, size_t sessions, std::vector<size_t>* turns = nullptr) {
  std::vector<Request> out;
  for (size_t s = 0; s < sessions; ++s) {
    SessionStart start = w.NextSession();
    if (!start.session) break;
    std::string reply;
    size_t n = 0;
    while (std::optional<Request> r = start.session->Next(reply)) {
      out.push_back(std::move(*r));
      reply = FakeReply(out.size());
      ++n;
    }
    if (turns) turns->push_back(n);
  }
  return out;
}

// The number of leading bytes `a` and `b` share.
inline size_t CommonPrefix(std::string_view a, std::string_view b) {
  size_t i = 0;
  while (i < a.size() && i < b.size() && a[i] == b[i]) ++i;
  return i;
}

inline std::string FirstLine(std::string_view s) { return std::string(s.substr(0, s.find('\n'))); }

}  // namespace prefix_router::workload::testing
