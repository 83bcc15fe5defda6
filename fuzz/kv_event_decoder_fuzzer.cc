// libFuzzer target: vLLM KV event payloads (msgpack) -> KvEventBatch (src/api/kv_event_decoder.h).
//
// The input is one batch payload. Beyond "no crash, no sanitizer report, no exception", every
// batch that decodes must satisfy the decoder's contract (a BlockStored holds block_hashes x
// block_size tokens, sizes within the limits) and survive a round trip: encoded again in either
// encoding it decodes to the same values. A violation aborts, which libFuzzer reports as a crash.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <span>
#include <string>
#include <variant>

#include "api/kv_event_decoder.h"

namespace {

using namespace prefix_router;

void Fail(const char* what) {
  std::fprintf(stderr, "kv_event_decoder contract violated: %s\n", what);
  std::abort();
}

void CheckContract(const KvEventBatch& b) {
  if (b.events.size() > api::kMaxKvEventsPerBatch) Fail("too many events");
  for (const KvEvent& e : b.events) {
    if (const auto* s = std::get_if<KvBlockStored>(&e)) {
      if (s->block_size < 1 || s->block_size > api::kMaxKvBlockSize) Fail("block_size range");
      if (s->token_ids.size() != s->block_hashes.size() * s->block_size) Fail("token count");
      if (s->token_ids.size() > api::kMaxKvTokensPerEvent) Fail("tokens over the limit");
    }
    if (const auto* r = std::get_if<KvBlockRemoved>(&e)) {
      if (r->block_hashes.size() > api::kMaxKvBlocksPerEvent) Fail("hashes over the limit");
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  api::KvDecodeStats stats;
  Result<KvEventBatch> r = api::DecodeKvEventBatch(7, std::span<const uint8_t>(data, size), &stats);
  if (!r.ok()) {
    if (r.status().message().empty()) Fail("error without a message");
    return 0;
  }
  if (r->seq != 7) Fail("seq not carried");
  CheckContract(*r);
  if (std::isnan(r->ts)) return 0;  // NaN != NaN: the round trip cannot compare equal
  for (api::KvEventEncoding enc : {api::KvEventEncoding::kMap, api::KvEventEncoding::kArray}) {
    std::string bytes = api::EncodeKvEventBatch(*r, enc);
    Result<KvEventBatch> again = api::DecodeKvEventBatch(
        7, std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()));
    if (!again.ok()) Fail("re-encoded batch does not decode");
    if (!(*again == *r)) Fail("round trip changed the batch");
  }
  return 0;
}
