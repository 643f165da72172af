#include "backend/cuda/activity_trace.h"

#include <dlfcn.h>

#include <cxxabi.h>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <type_traits>

#include <cuda_runtime.h>
#include <fmt/format.h>

#include "base/timer.h"
#include "base/trace.h"

#if REDWING_HAVE_CUPTI_HEADER
#include <cupti.h>
#endif

namespace rw::cuda {

#if REDWING_HAVE_CUPTI_HEADER
namespace {

// The CUPTI entry points we use, looked up in the library at run time.
struct Cupti {
  decltype(&cuptiActivityRegisterCallbacks) register_callbacks = nullptr;
  decltype(&cuptiActivityEnable) enable = nullptr;
  decltype(&cuptiActivityDisable) disable = nullptr;
  decltype(&cuptiActivityFlushAll) flush_all = nullptr;
  decltype(&cuptiActivityGetNextRecord) next_record = nullptr;
  decltype(&cuptiActivityGetNumDroppedRecords) dropped = nullptr;
  decltype(&cuptiGetTimestamp) timestamp = nullptr;
  decltype(&cuptiGetResultString) result_string = nullptr;
  decltype(&cuptiActivityRegisterTimestampCallback) timestamp_callback = nullptr;  // optional
  // Detaching between recorded calls (optional: without them the kinds are switched off).
  decltype(&cuptiSubscribe) subscribe = nullptr;
  decltype(&cuptiEnableDomain) enable_domain = nullptr;
  decltype(&cuptiFinalize) finalize = nullptr;
};

Cupti g_cupti;
// Added to CUPTI's times when it could not take ours (the timestamp callback is missing).
int64_t g_offset_ns = 0;
std::mutex g_mu;  // the tracks' table and the dropped count
std::map<uint64_t, int> g_tracks;
size_t g_dropped = 0;

// Sampling of forward calls (TraceGpuForCall).
std::mutex g_sample_mu;
bool g_running = false;   // StartOnce succeeded
bool g_recording = true;  // the GPU kinds are enabled now
int g_every = kDefaultGpuTraceEvery;
int64_t g_small_calls = 0;
// With detaching: CUPTI is attached only while recording. Attaching and detaching cost time
// (measured each cycle), so small calls are recorded at most as often as keeps that cost within
// g_budget of the time between cycles (REDWING_TRACE_GPU_BUDGET; 0: no limit).
bool g_detach = false;
bool g_attached = true;
double g_budget = 0.01;
int64_t g_cycle_ns = 0;     // the last attach + detach
int64_t g_detached_at = 0;  // when the last detach ended
int64_t g_since_recorded = 0;
bool g_first_after_big = false;
bool g_finalize_requested = false;

constexpr size_t kBufferBytes = 8 << 20;

uint64_t CUPTIAPI TraceClock() {
  return static_cast<uint64_t>(NowNanos());
}

int StreamTrack(uint32_t device, uint32_t stream) {
  const uint64_t key = (static_cast<uint64_t>(device) << 32) | stream;
  std::lock_guard<std::mutex> lock(g_mu);
  auto it = g_tracks.find(key);
  if (it != g_tracks.end()) return it->second;
  const int t = trace::Track("GPU " + std::to_string(device) + " stream " + std::to_string(stream));
  g_tracks[key] = t;
  return t;
}

// "void rw::cuda::(anonymous namespace)::MatVecKernel<4, 2>(...)" -> "rw::cuda::MatVecKernel<4,
// 2>": the return type, the anonymous namespace and the parameter list repeat what the name and
// the template say and make every row unreadable.
const char* KernelName(const char* mangled) {
  static std::mutex mu;
  static std::map<const char*, const char*> cache;  // CUPTI keeps one pointer per kernel
  std::lock_guard<std::mutex> lock(mu);
  auto it = cache.find(mangled);
  if (it != cache.end()) return it->second;
  int status = 0;
  char* d = abi::__cxa_demangle(mangled, nullptr, nullptr, &status);
  std::string name = status == 0 && d != nullptr ? d : mangled;
  std::free(d);
  if (name.rfind("void ", 0) == 0) name.erase(0, 5);
  for (size_t p; (p = name.find("(anonymous namespace)::")) != std::string::npos;)
    name.erase(p, 23);
  if (!name.empty() && name.back() == ')') {
    int depth = 0;
    for (size_t i = name.size(); i-- > 0;) {
      if (name[i] == ')') ++depth;
      if (name[i] == '(' && --depth == 0) {
        name.resize(i);
        break;
      }
    }
  }
  const char* interned = trace::Intern(name);
  cache[mangled] = interned;
  return interned;
}

const char* CopyName(uint8_t kind) {
  switch (kind) {
    case CUPTI_ACTIVITY_MEMCPY_KIND_HTOD:
      return "copy host to device";
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOH:
      return "copy device to host";
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOD:
      return "copy device to device";
    default:
      return "copy";
  }
}

void CUPTIAPI RequestBuffer(uint8_t** buffer, size_t* size, size_t* max_records) {
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, kBufferBytes));
  *size = *buffer != nullptr ? kBufferBytes : 0;
  *max_records = 0;
}

void CUPTIAPI BufferDone(CUcontext ctx, uint32_t stream, uint8_t* buffer, size_t, size_t valid) {
  CUpti_Activity* rec = nullptr;
  while (g_cupti.next_record(buffer, valid, &rec) == CUPTI_SUCCESS) {
    switch (rec->kind) {
      case CUPTI_ACTIVITY_KIND_KERNEL:
      case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: {
        const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(rec);
        trace::CompleteOnTrack(StreamTrack(k->deviceId, k->streamId), KernelName(k->name),
                               "gpu kernel", static_cast<int64_t>(k->start) + g_offset_ns,
                               static_cast<int64_t>(k->end) + g_offset_ns, "blocks",
                               static_cast<int64_t>(k->gridX) * k->gridY * k->gridZ, "threads",
                               static_cast<int64_t>(k->blockX) * k->blockY * k->blockZ);
        break;
      }
      case CUPTI_ACTIVITY_KIND_MEMCPY: {
        const auto* m = reinterpret_cast<const CUpti_ActivityMemcpy6*>(rec);
        trace::CompleteOnTrack(StreamTrack(m->deviceId, m->streamId), CopyName(m->copyKind),
                               "gpu copy", static_cast<int64_t>(m->start) + g_offset_ns,
                               static_cast<int64_t>(m->end) + g_offset_ns, "bytes",
                               static_cast<int64_t>(m->bytes));
        break;
      }
      case CUPTI_ACTIVITY_KIND_MEMSET: {
        const auto* m = reinterpret_cast<const CUpti_ActivityMemset4*>(rec);
        trace::CompleteOnTrack(StreamTrack(m->deviceId, m->streamId), "memset", "gpu copy",
                               static_cast<int64_t>(m->start) + g_offset_ns,
                               static_cast<int64_t>(m->end) + g_offset_ns, "bytes",
                               static_cast<int64_t>(m->bytes));
        break;
      }
      default:
        break;
    }
  }
  size_t dropped = 0;
  if (g_cupti.dropped != nullptr && g_cupti.dropped(ctx, stream, &dropped) == CUPTI_SUCCESS &&
      dropped > 0) {
    std::lock_guard<std::mutex> lock(g_mu);
    g_dropped += dropped;
    trace::SetNote("gpu_dropped_records", std::to_string(g_dropped));
  }
  std::free(buffer);
}

Status Load() {
  void* lib = nullptr;
  std::string tried;
  const char* names[] = {
#ifdef REDWING_CUPTI_LIBRARY
      REDWING_CUPTI_LIBRARY,
#endif
      "libcupti.so", "libcupti.so.13", "libcupti.so.12"};
  for (const char* n : names) {
    lib = dlopen(n, RTLD_NOW | RTLD_LOCAL);
    if (lib != nullptr) break;
    const char* err = dlerror();
    tried += std::string(tried.empty() ? "" : "; ") + (err != nullptr ? err : n);
  }
  if (lib == nullptr)
    return Error(ErrorCode::kUnsupported, "CUPTI not found, so GPU kernels are not traced ({})",
                 tried);
  auto sym = [&](auto& fn, const char* name) {
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(lib, name));
    return fn != nullptr;
  };
  if (!sym(g_cupti.register_callbacks, "cuptiActivityRegisterCallbacks") ||
      !sym(g_cupti.enable, "cuptiActivityEnable") ||
      !sym(g_cupti.disable, "cuptiActivityDisable") ||
      !sym(g_cupti.flush_all, "cuptiActivityFlushAll") ||
      !sym(g_cupti.next_record, "cuptiActivityGetNextRecord") ||
      !sym(g_cupti.timestamp, "cuptiGetTimestamp") ||
      !sym(g_cupti.result_string, "cuptiGetResultString"))
    return Error(ErrorCode::kUnsupported, "CUPTI lacks the activity API we use");
  sym(g_cupti.dropped, "cuptiActivityGetNumDroppedRecords");
  sym(g_cupti.timestamp_callback, "cuptiActivityRegisterTimestampCallback");
  if (!sym(g_cupti.subscribe, "cuptiSubscribe") ||
      !sym(g_cupti.enable_domain, "cuptiEnableDomain") || !sym(g_cupti.finalize, "cuptiFinalize"))
    g_cupti.finalize = nullptr;
  return Status::Ok();
}

Status Check(CUptiResult r, const char* what) {
  if (r == CUPTI_SUCCESS) return Status::Ok();
  const char* text = nullptr;
  if (g_cupti.result_string != nullptr) g_cupti.result_string(r, &text);
  return Error(ErrorCode::kUnsupported, "CUPTI {}: {}", what,
               text != nullptr ? text : std::to_string(static_cast<int>(r)));
}

// REDWING_TRACE_GPU_EVERY: a positive integer; anything else keeps the default (with a note).
int GpuTraceEvery() {
  const char* v = std::getenv("REDWING_TRACE_GPU_EVERY");
  if (v == nullptr || *v == '\0') return kDefaultGpuTraceEvery;
  char* end = nullptr;
  const long n = std::strtol(v, &end, 10);
  if (*end != '\0' || n < 1 || n > 1'000'000) {
    trace::SetNote("gpu_sampling_error", std::string("REDWING_TRACE_GPU_EVERY=") + v +
                                             " is not a positive integer; the default was used");
    return kDefaultGpuTraceEvery;
  }
  return static_cast<int>(n);
}

// REDWING_TRACE_GPU_BUDGET: the share of time attaching and detaching CUPTI may take, 0..1.
double GpuTraceBudget() {
  const char* v = std::getenv("REDWING_TRACE_GPU_BUDGET");
  if (v == nullptr || *v == '\0') return 0.01;
  char* end = nullptr;
  const double b = std::strtod(v, &end);
  if (*end != '\0' || !(b >= 0 && b <= 1)) {
    trace::SetNote("gpu_sampling_error", std::string("REDWING_TRACE_GPU_BUDGET=") + v +
                                             " is not a number from 0 to 1; 0.01 was used");
    return 0.01;
  }
  return b;
}

// The kinds sampling switches together.
constexpr CUpti_ActivityKind kGpuKinds[] = {CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL,
                                            CUPTI_ACTIVITY_KIND_MEMCPY, CUPTI_ACTIVITY_KIND_MEMSET};

// CUPTI on: our clock, the buffers, the kinds (also after a detach: any CUPTI call attaches it
// again, with none of its earlier settings).
Status Attach() {
  // One clock with the CPU's spans: CUPTI converts the GPU's times to ours.
  if (g_cupti.timestamp_callback == nullptr ||
      g_cupti.timestamp_callback(&TraceClock) != CUPTI_SUCCESS) {
    uint64_t cupti_now = 0;
    const int64_t before = NowNanos();
    g_cupti.timestamp(&cupti_now);
    const int64_t after = NowNanos();
    g_offset_ns = (before + after) / 2 - static_cast<int64_t>(cupti_now);
    trace::SetNote("gpu_clock", "CUPTI's clock shifted by an offset measured at start");
  } else {
    trace::SetNote("gpu_clock", "CUPTI timestamps from the trace's own clock");
  }
  RW_RETURN_IF_ERROR(
      Check(g_cupti.register_callbacks(&RequestBuffer, &BufferDone), "buffer callbacks"));
  for (CUpti_ActivityKind kind : kGpuKinds)
    RW_RETURN_IF_ERROR(Check(g_cupti.enable(kind), "kernels, copies and memsets"));
  g_attached = true;
  return Status::Ok();
}

// CUPTI's own recipe for detaching: cuptiFinalize at the exit of a CUDA API call on a thread
// that makes one, so that no other CUPTI call is in flight.
void CUPTIAPI FinalizeAtApiExit(void*, CUpti_CallbackDomain, CUpti_CallbackId, const void* data) {
  const auto* cb = static_cast<const CUpti_CallbackData*>(data);
  if (cb->callbackSite != CUPTI_API_EXIT || !g_finalize_requested) return;
  g_finalize_requested = false;
  g_cupti.finalize();
}

// CUPTI off entirely: its records flushed into the trace, then finalized. An attached CUPTI
// costs every launch something even with no kind enabled (~6% of a resident decode step).
Status Detach() {
  RW_RETURN_IF_ERROR(Check(g_cupti.flush_all(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED), "flush"));
  CUpti_SubscriberHandle subscriber = nullptr;
  RW_RETURN_IF_ERROR(
      Check(g_cupti.subscribe(&subscriber, &FinalizeAtApiExit, nullptr), "subscribe"));
  RW_RETURN_IF_ERROR(
      Check(g_cupti.enable_domain(1, subscriber, CUPTI_CB_DOMAIN_RUNTIME_API), "callbacks"));
  g_finalize_requested = true;
  int device = 0;
  cudaGetDevice(&device);  // the API call at whose exit CUPTI finalizes
  if (g_finalize_requested) {
    g_finalize_requested = false;
    return Error(ErrorCode::kUnsupported, "CUPTI did not call back to be detached");
  }
  g_attached = false;
  return Status::Ok();
}

Status StartOnce() {
  RW_RETURN_IF_ERROR(Load());
  RW_RETURN_IF_ERROR(Attach());
  trace::AddFlushHook([] {
    std::lock_guard<std::mutex> lock(g_sample_mu);
    if (g_attached) g_cupti.flush_all(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  });
  g_every = GpuTraceEvery();
  g_budget = GpuTraceBudget();
  g_detach = g_every > 1 && g_cupti.finalize != nullptr;
  trace::SetNote("gpu", "CUPTI activity: every kernel, copy and memset of the recorded calls");
  trace::SetNote(
      "gpu_sampling",
      g_every == 1 ? std::string("every forward call")
                   : fmt::format("forward calls of {}+ tokens, and the first and then one in {} of "
                                 "the smaller calls (decode, verify){}: \"forward call\" spans "
                                 "with gpu_traced 1{}",
                                 kAlwaysTracedTokens, g_every,
                                 g_detach && g_budget > 0
                                     ? fmt::format(", at most as often as keeps attaching CUPTI "
                                                   "within {:g}% of the time",
                                                   100 * g_budget)
                                     : "",
                                 g_detach ? "; CUPTI detached between recorded calls" : ""));
  g_running = true;
  return Status::Ok();
}

}  // namespace

Status StartActivityTrace() {
  static const Status started = [] {
    Status s = StartOnce();
    if (!s.ok()) trace::SetNote("gpu", s.ToString());
    return s;
  }();
  return started;
}

bool TraceGpuForCall(int64_t tokens) {
  if (!g_running) return false;
  std::lock_guard<std::mutex> lock(g_sample_mu);
  bool record = true;
  if (g_every > 1) {
    // Attaching CUPTI again costs time: no sooner than the budget allows.
    const bool may_attach =
        !g_detach || g_attached || g_budget <= 0 ||
        NowNanos() - g_detached_at >= static_cast<int64_t>(g_cycle_ns / g_budget);
    if (tokens >= kAlwaysTracedTokens) {
      record = may_attach;
      g_first_after_big = record;  // and the step after it while CUPTI is still attached
    } else {
      // The first small call, the first after a recorded big one, then one in g_every.
      const int64_t n = g_small_calls++;
      ++g_since_recorded;
      record = (n == 0 || g_first_after_big || g_since_recorded >= g_every) && may_attach;
      g_first_after_big = false;
      if (record) g_since_recorded = 0;
    }
  }
  if (g_detach) {
    const int64_t t0 = NowNanos();
    Status st = Status::Ok();
    if (record && !g_attached) st = Attach();
    if (!record && g_attached) st = Detach();
    if (!st.ok()) {
      trace::SetNote("gpu_sampling_error", st.ToString());
      g_running = false;  // stop sampling where it is: a trace with fewer records, never a crash
      return false;
    }
    const int64_t t1 = NowNanos();
    if (record != g_recording) {
      if (record) {
        g_cycle_ns = t1 - t0;  // the attach; the detach is added when it comes
      } else {
        g_cycle_ns += t1 - t0;
        g_detached_at = t1;
        trace::SetNote("gpu_attach_detach_ms", fmt::format("{:.3f}", g_cycle_ns * 1e-6));
      }
    }
    g_recording = record;
    return record;
  }
  if (record != g_recording) {
    // Switching costs a driver call per kind; with sampling that happens twice per N calls.
    for (CUpti_ActivityKind kind : kGpuKinds) {
      const CUptiResult r = record ? g_cupti.enable(kind) : g_cupti.disable(kind);
      if (r != CUPTI_SUCCESS) {
        trace::SetNote("gpu_sampling_error", Check(r, "switching the GPU records").ToString());
        g_running = false;  // leave it as it is: a trace with more records, never a crash
        return g_recording;
      }
    }
    g_recording = record;
  }
  return record;
}

bool GpuTraceSampled() {
  std::lock_guard<std::mutex> lock(g_sample_mu);
  return g_running && g_every > 1;
}

#else  // no cupti.h at build time

bool TraceGpuForCall(int64_t) {
  return false;
}

bool GpuTraceSampled() {
  return false;
}

Status StartActivityTrace() {
  static const Status started = [] {
    Status s(ErrorCode::kUnsupported,
             "built without CUPTI's headers, so GPU kernels are not traced");
    trace::SetNote("gpu", s.ToString());
    return s;
  }();
  return started;
}

#endif

}  // namespace rw::cuda
