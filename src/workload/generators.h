// The workloads behind MakeWorkload, one factory per name (docs/workloads.md describes each),
// and the pieces they share. Internal to the workload library; tests may use it.
//
// Thread-safety: as for Workload (workload.h). Texts shared between a workload and its
// sessions are immutable once made, so a session may outlive its workload.
#pragma once

#include <memory>
#include <optional>
#include <string_view>
#include <utility>

#include "core/status.h"
#include "workload/workload.h"

namespace prefix_router::workload {

Result<std::unique_ptr<Workload>> MakeLongContext(const ParamMap& params, uint64_t seed);
Result<std::unique_ptr<Workload>> MakeShareGptLike(const ParamMap& params, uint64_t seed);
Result<std::unique_ptr<Workload>> MakeAgentic(const ParamMap& params, uint64_t seed);
Result<std::unique_ptr<Workload>> MakeRag(const ParamMap& params, uint64_t seed);
Result<std::unique_ptr<Workload>> MakeTrace(const ParamMap& params, uint64_t seed);

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
};

}  // namespace prefix_router::workload
