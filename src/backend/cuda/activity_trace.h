// The GPU's side of a trace (base/trace.h): every kernel, copy and memset the GPU runs, with
// the GPU's own start and end times on the trace's clock, from CUPTI's activity API. CUPTI is
// loaded at run time (dlopen), so redwing neither needs it to start nor links it; without it
// the trace says why in its metadata and holds the CPU's spans only.
#pragma once

#include "base/status.h"

namespace rw::cuda {

// Starts recording the GPU's activity into the trace (idempotent; call while the trace records
// events, before the work to trace). Records arrive in the trace through its flush hook
// (trace::Flush, called by ToJson and Stop). A failure (no CUPTI) is also noted in the trace.
Status StartActivityTrace();

}  // namespace rw::cuda
