// The GPU's side of a trace (base/trace.h): every kernel, copy and memset the GPU runs, with
// the GPU's own start and end times on the trace's clock, from CUPTI's activity API. CUPTI is
// loaded at run time (dlopen), so redwing neither needs it to start nor links it; without it
// the trace says why in its metadata and holds the CPU's spans only.
#pragma once

#include <cstdint>

#include "base/status.h"

namespace rw::cuda {

// Starts recording the GPU's activity into the trace (idempotent; call while the trace records
// events, before the work to trace). Records arrive in the trace through its flush hook
// (trace::Flush, called by ToJson and Stop). A failure (no CUPTI) is also noted in the trace.
Status StartActivityTrace();

// Called as each forward call starts: whether its GPU work (and whatever is launched before the
// next call: the draw, copies back) is recorded. Recording a kernel costs the GPU ~1.6 us, a
// fifth of a resident decode step's time, and CUPTI merely attached costs every launch (~6% of a
// resident decode step with no record taken), so calls are sampled and CUPTI is detached
// between recorded calls (cuptiFinalize; attached again for the next recorded one). Recorded:
// calls of kAlwaysTracedTokens tokens or more (prefill chunks: few, long kernels) and the small
// call after each of them, the first small call, then one in N (REDWING_TRACE_GPU_EVERY, default
// kDefaultGpuTraceEvery; 1 records every call and never detaches); and a call that would attach
// CUPTI again only once the time since the last detach is 1/budget times what the last
// attach and detach took (REDWING_TRACE_GPU_BUDGET, default 0.01; 0: no limit).
// False when the activity trace is not running.
bool TraceGpuForCall(int64_t tokens);
// Whether calls are sampled (the trace runs and N > 1). A sampled recorded call must not replay
// a CUDA graph: CUPTI times the kernels of a graph instantiated while its records were off as
// the whole graph, and a graph instantiated while they were on carries their cost on every
// replay. So with sampling the decode graph is captured while records are off, and the
// recorded calls run kernel by kernel.
bool GpuTraceSampled();
inline constexpr int kDefaultGpuTraceEvery = 16;
inline constexpr int64_t kAlwaysTracedTokens = 64;

}  // namespace rw::cuda
