// A tiny process-wide tracer behind two outputs: Chrome trace JSON (the "trace event format";
// open the file in https://ui.perfetto.dev or chrome://tracing) and a timing profile (spans
// summed per part and per layer, JSON; docs/PERFORMANCE.md names every field).
//
// Off by default. While off, a TraceScope costs one relaxed atomic load and a branch, so scopes
// may stay in hot code (per layer, per expert read). While on, a scope reads the steady clock
// (the clock of base/timer.h's NowNanos) twice and, in event mode, appends one fixed-size event
// to a buffer owned by its thread; in profile mode it adds its duration to a small table owned
// by its thread (an uncontended lock either way, no allocation except when a buffer grows).
//
// Usage:
//   trace::Start();                                  // clears earlier events, turns recording on
//   { TraceScope s("prefill", "bench"); ... }        // one complete ("X") event
//   { TraceScope s("layer", "forward", "layer", li); ... }   // with an integer argument
//   { TraceScope s("wait", "experts", "layer", li, "expert", e); ... }  // with two
//   trace::SetThreadName("io-3");                    // shown as the track's name
//   trace::Stop();
//   Status st = trace::WriteJson("trace.json");      // after the traced work has finished
//
// Rules: `name`, `category` and the argument names must be string literals (or otherwise
// outlive the write, e.g. from Intern): only the pointers are stored. Thread ids in the file are
// small numbers assigned in order of each thread's first event; the OS thread id goes into the
// thread's name metadata. Tracks (Track) are rows of their own for work that is not a thread's
// (a GPU stream). Events are capped (kMaxEvents in all; later ones are counted as dropped and
// the count is written into the file's metadata); the profile has no cap. Events of threads that
// have exited are kept. A span whose first argument is named "layer" counts towards that layer
// in the profile.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include "base/status.h"
#include "base/timer.h"

namespace rw::trace {

// What recording keeps (bits; Start takes any union).
enum Mode : unsigned {
  kEvents = 1,   // every span, for ToJson / WriteJson
  kProfile = 2,  // sums per (category, name, layer), for ProfileJson / WriteProfile
};

namespace internal {
extern std::atomic<unsigned> g_mode;
struct Args {
  const char* name1 = nullptr;
  int64_t value1 = 0;
  const char* name2 = nullptr;
  int64_t value2 = 0;
};
void Record(const char* name, const char* category, int64_t begin_ns, int64_t end_ns,
            const Args& args);
}  // namespace internal

// Whether anything is being recorded (one relaxed load).
inline bool Enabled() {
  return internal::g_mode.load(std::memory_order_relaxed) != 0;
}
// The modes being recorded (0 when off).
inline unsigned CurrentMode() {
  return internal::g_mode.load(std::memory_order_relaxed);
}

// Clears all recorded events and sums (and the dropped count), makes now time zero in the file,
// and turns recording on in `mode` (kEvents, kProfile or both).
void Start(unsigned mode = kEvents);
// Turns recording off; what was recorded stays until the next Start.
void Stop();
// Events recorded since Start (and events dropped because of the cap).
uint64_t EventCount();
uint64_t DroppedCount();
constexpr uint64_t kMaxEvents = 4'000'000;

// Names the calling thread's track (copied). Cheap when tracing is off; may be called before
// Start (the name is kept).
void SetThreadName(const std::string& name);

// A track of its own (not a thread's), e.g. "GPU stream 7", created on first use of the name;
// returns its id for CompleteOnTrack. Its events sort after the threads'.
int Track(const std::string& name);
// A copy of s that lives as long as the process (for names only known at run time, e.g. a
// kernel's name). The same text gives the same pointer.
const char* Intern(std::string_view s);

// Records an already-measured span [begin_ns, end_ns) in NowNanos() time (when enabled).
inline void Complete(const char* name, const char* category, int64_t begin_ns, int64_t end_ns,
                     const char* arg_name = nullptr, int64_t arg_value = 0) {
  if (Enabled()) internal::Record(name, category, begin_ns, end_ns, {arg_name, arg_value});
}
// The same on a track of Track's (when enabled).
void CompleteOnTrack(int track, const char* name, const char* category, int64_t begin_ns,
                     int64_t end_ns, const char* arg_name = nullptr, int64_t arg_value = 0,
                     const char* arg2_name = nullptr, int64_t arg2_value = 0);
// Adds an already-measured duration to the profile alone (profile mode; no event): for times
// measured elsewhere, e.g. the GPU's per-op times of REDWING_CUDA_TIMING=1. layer < 0: none.
void AddToProfile(const char* name, const char* category, int64_t layer, int64_t ns);
// A zero-length event ("i" phase in the file).
inline void Instant(const char* name, const char* category) {
  if (Enabled()) {
    const int64_t t = NowNanos();
    internal::Record(name, category, t, -1, {});
  }
}

// Sources that deliver their events late (the GPU's activity records) register a hook that
// delivers everything pending; ToJson, ProfileJson and Flush call every hook first.
void AddFlushHook(std::function<void()> hook);
void Flush();
// A line for the file's metadata ("otherData" in the trace, "notes" in the profile), e.g. why
// the GPU's kernels are missing. Kept across Start.
void SetNote(const std::string& key, const std::string& value);

// The whole trace as Chrome trace JSON: {"traceEvents": [...], "displayTimeUnit": "ms",
// "otherData": {...}}. Timestamps in microseconds since Start. Call once the traced threads are
// quiet (events recorded concurrently may or may not be included).
std::string ToJson();
// ToJson written atomically to path.
Status WriteJson(const std::string& path);

// The profile (format redwing-profile/1): the sums of every (category, name), per layer where
// the spans named one, a summary of the forward pass's parts, the seconds since Start.
// `extra_json` (a JSON object's text) is merged in at the top level (e.g. the command line).
// Resets nothing.
std::string ProfileJson(const std::string& extra_json = "{}");
// ProfileJson written atomically to path.
Status WriteProfile(const std::string& path, const std::string& extra_json = "{}");
// Clears the profile's sums and restarts its clock (recording goes on): serve's per-dump window.
void ResetProfile();

}  // namespace rw::trace

namespace rw {

// Records one complete event from construction to destruction (if tracing was on at
// construction).
class TraceScope {
 public:
  explicit TraceScope(const char* name, const char* category = "redwing",
                      const char* arg_name = nullptr, int64_t arg_value = 0,
                      const char* arg2_name = nullptr, int64_t arg2_value = 0)
      : name_(name), category_(category), args_{arg_name, arg_value, arg2_name, arg2_value} {
    if (trace::Enabled()) begin_ = NowNanos();
  }
  ~TraceScope() {
    if (begin_ >= 0) trace::internal::Record(name_, category_, begin_, NowNanos(), args_);
  }
  TraceScope(const TraceScope&) = delete;
  TraceScope& operator=(const TraceScope&) = delete;

 private:
  const char* name_;
  const char* category_;
  trace::internal::Args args_;
  int64_t begin_ = -1;
};

}  // namespace rw
