// Monotonic time and a simple stopwatch.
#pragma once

#include <chrono>
#include <cstdint>

namespace rw {

inline int64_t NowNanos() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

class Stopwatch {
 public:
  Stopwatch() : start_(NowNanos()) {}
  void Reset() { start_ = NowNanos(); }
  double Seconds() const { return static_cast<double>(NowNanos() - start_) * 1e-9; }
  double Millis() const { return static_cast<double>(NowNanos() - start_) * 1e-6; }

 private:
  int64_t start_;
};

// Peak resident set size of this process in bytes (VmHWM), 0 if unknown.
uint64_t PeakRssBytes();
// Current anonymous (private) and file-backed resident bytes from /proc/self/status.
struct RssBreakdown {
  uint64_t anon = 0;
  uint64_t file = 0;
};
RssBreakdown CurrentRss();

}  // namespace rw
