// The workloads behind MakeWorkload, one factory per name (docs/workloads.md describes each),
// and the pieces they share. Internal to the workload library; tests may use it.
//
// Thread-safety: as for Workload (workload.h). Texts shared between a workload and its
// sessions are immutable once made, so a session may outlive its workload.
#pragma once

#include <istream>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/status.h"
#include "workload/workload.h"

namespace prefix_router::workload {

Result<std::unique_ptr<Workload>> MakeLongContext(const ParamMap& params, uint64_t seed);
Result<std::unique_ptr<Workload>> MakeShareGptLike(const ParamMap& params, uint64_t seed);
Result<std::unique_ptr<Workload>> MakeAgentic(const ParamMap& params, uint64_t seed);
Result<std::unique_ptr<Workload>> MakeRag(const ParamMap& params, uint64_t seed);
Result<std::unique_ptr<Workload>> MakeNoisyNative(const ParamMap& params, uint64_t seed);
Result<std::unique_ptr<Workload>> MakeTrace(const ParamMap& params, uint64_t seed);
Result<std::unique_ptr<Workload>> MakeMooncake(const ParamMap& params, uint64_t seed);

// One request of a trace file (docs/trace-format.md) and when it was recorded.
struct TraceEntry {
  Request request;
  std::optional<double> arrival_s;  // as recorded (MakeTrace shifts them to start at 0)
};

// Reads and checks a whole trace, one JSON object per line; `path` names it in messages
// ("trace PATH line N: ..."). InvalidArgument on the first bad line or when there is no request.
// MakeTrace reads the file through this (the fuzz target feeds it text).
Result<std::vector<TraceEntry>> ParseTrace(std::istream& in, const std::string& path);

// A session of one request, built when the session started.
class OneShotSession : public Session {
 public:
  explicit OneShotSession(Request r) : request_(std::move(r)) {}
  std::optional<Request> Next(std::string_view) override {
    if (done_) return std::nullopt;
    done_ = true;
    return std::move(request_);
  }

 private:
  Request request_;
  bool done_ = false;
};

// Streams of SubSeed (text.h): one constant per kind of generated item.
enum SeedStream : uint64_t {
  kStreamWorkload = 1,
  kStreamDocument,
  kStreamPreamble,
  kStreamSystemPrompt,
  kStreamToolBlock,
  kStreamTenantPrompt,
  kStreamSession,
  kStreamClient,
  kStreamMooncakeBlock,  // the text of a Mooncake hash id
  kStreamMooncakeTail,   // a Mooncake request's tokens beyond its listed blocks
};

}  // namespace prefix_router::workload
