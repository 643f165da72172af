// A tiny process-wide tracer that writes Chrome trace JSON (the "trace event format"; open the
// file in https://ui.perfetto.dev or chrome://tracing).
//
// Off by default. While off, a TraceScope costs one relaxed atomic load and a branch, so scopes
// may stay in hot code (per layer, per expert read). While on, a scope reads the steady clock
// (the clock of base/timer.h's NowNanos) twice and appends one fixed-size event to a buffer owned
// by its thread (an uncontended lock, no allocation except when the buffer grows).
//
// Usage:
//   trace::Start();                                  // clears earlier events, turns recording on
//   { TraceScope s("prefill", "bench"); ... }        // one complete ("X") event
//   { TraceScope s("layer", "forward", "layer", li); ... }   // with one integer argument
//   trace::SetThreadName("io-3");                    // shown as the track's name
//   trace::Stop();
//   Status st = trace::WriteJson("trace.json");      // after the traced work has finished
//
// Rules: `name`, `category` and the argument name must be string literals (or otherwise outlive
// the write): only the pointers are stored. Thread ids in the file are small numbers assigned in
// order of each thread's first event; the OS thread id goes into the thread's name metadata.
// Events are capped (kMaxEvents in all; later ones are counted as dropped and the count is
// written into the file's metadata). Events of threads that have exited are kept.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>

#include "base/status.h"
#include "base/timer.h"

namespace rw::trace {

namespace internal {
extern std::atomic<bool> g_enabled;
void Record(const char* name, const char* category, int64_t begin_ns, int64_t end_ns,
            const char* arg_name, int64_t arg_value);
}  // namespace internal

// Whether events are being recorded (one relaxed load).
inline bool Enabled() {
  return internal::g_enabled.load(std::memory_order_relaxed);
}

// Clears all recorded events (and the dropped count), makes now time zero in the file, and
// turns recording on.
void Start();
// Turns recording off; recorded events stay until the next Start.
void Stop();
// Events recorded since Start (and events dropped because of the cap).
uint64_t EventCount();
uint64_t DroppedCount();
constexpr uint64_t kMaxEvents = 4'000'000;

// Names the calling thread's track (copied). Cheap when tracing is off; may be called before
// Start (the name is kept).
void SetThreadName(const std::string& name);

// Records an already-measured span [begin_ns, end_ns) in NowNanos() time (when enabled).
inline void Complete(const char* name, const char* category, int64_t begin_ns, int64_t end_ns,
                     const char* arg_name = nullptr, int64_t arg_value = 0) {
  if (Enabled()) internal::Record(name, category, begin_ns, end_ns, arg_name, arg_value);
}
// A zero-length event ("i" phase in the file).
inline void Instant(const char* name, const char* category) {
  if (Enabled()) {
    const int64_t t = NowNanos();
    internal::Record(name, category, t, -1, nullptr, 0);
  }
}

// The whole trace as Chrome trace JSON: {"traceEvents": [...], "displayTimeUnit": "ms",
// "otherData": {...}}. Timestamps in microseconds since Start. Call once the traced threads are
// quiet (events recorded concurrently may or may not be included).
std::string ToJson();
// ToJson written atomically to path.
Status WriteJson(const std::string& path);

}  // namespace rw::trace

namespace rw {

// Records one complete event from construction to destruction (if tracing was on at
// construction).
class TraceScope {
 public:
  explicit TraceScope(const char* name, const char* category = "redwing",
                      const char* arg_name = nullptr, int64_t arg_value = 0)
      : name_(name), category_(category), arg_name_(arg_name), arg_value_(arg_value) {
    if (trace::Enabled()) begin_ = NowNanos();
  }
  ~TraceScope() {
    if (begin_ >= 0)
      trace::internal::Record(name_, category_, begin_, NowNanos(), arg_name_, arg_value_);
  }
  TraceScope(const TraceScope&) = delete;
  TraceScope& operator=(const TraceScope&) = delete;

 private:
  const char* name_;
  const char* category_;
  const char* arg_name_;
  int64_t arg_value_;
  int64_t begin_ = -1;
};

}  // namespace rw
