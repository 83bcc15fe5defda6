// Being written (issue 5): replaced by the Beast client.
#include "loadgen/loadgen.h"

namespace prefix_router::loadgen {

Result<LoadRun> RunLoad(const LoadOptions&, workload::Workload&) {
  return Status::Internal("loadgen: not written yet");
}

}  // namespace prefix_router::loadgen
