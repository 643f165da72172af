// trace_bench: nanoseconds per TraceScope (a span with a layer argument, as the forward pass
// records them), with recording off, in event mode (--trace), in profile mode (--profile) and in
// both, on one thread and on several at once. Multiplied by the scopes a decoded token records
// (a trace's event count over its tokens), it bounds what tracing adds to a CPU decode step.
//
//   trace_bench [--scopes 1000000] [--threads 2] [--reps 5]
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "base/timer.h"
#include "base/trace.h"

namespace {

// Keeps the loop from being folded away: each scope is followed by a store the compiler must do.
volatile int64_t g_sink = 0;

void Scopes(int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    rw::TraceScope s("attention", "forward", "layer", i & 31);
    g_sink = i;
  }
}

// Best of `reps` runs of `threads` threads each recording `n` scopes: ns per scope per thread.
double NsPerScope(int64_t n, int threads, int reps, unsigned mode) {
  double best = 1e30;
  for (int r = 0; r < reps; ++r) {
    if (mode != 0) rw::trace::Start(mode);
    const int64_t t0 = rw::NowNanos();
    std::vector<std::thread> ts;
    for (int t = 1; t < threads; ++t) ts.emplace_back(Scopes, n);
    Scopes(n);
    for (std::thread& t : ts) t.join();
    const int64_t t1 = rw::NowNanos();
    if (mode != 0) rw::trace::Stop();
    best = std::min(best, static_cast<double>(t1 - t0) / static_cast<double>(n));
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  int64_t scopes = 1'000'000;
  int threads = 2, reps = 5;
  for (int i = 1; i < argc; ++i) {
    const bool has = i + 1 < argc;
    if (std::strcmp(argv[i], "--scopes") == 0 && has) {
      scopes = std::atoll(argv[++i]);
    } else if (std::strcmp(argv[i], "--threads") == 0 && has) {
      threads = std::atoi(argv[++i]);
    } else if (std::strcmp(argv[i], "--reps") == 0 && has) {
      reps = std::atoi(argv[++i]);
    } else {
      std::fprintf(stderr,
                   "usage: trace_bench [--scopes N] [--threads T] [--reps R]\n"
                   "unknown or incomplete flag: %s\n",
                   argv[i]);
      return 2;
    }
  }
  // Events are capped at kMaxEvents per Start; stay under it so every scope is really recorded.
  const int64_t cap = static_cast<int64_t>(rw::trace::kMaxEvents) / std::max(1, threads);
  if (scopes < 1 || scopes > cap || threads < 1 || reps < 1) {
    std::fprintf(stderr,
                 "trace_bench: need 1 <= scopes <= %lld (the event cap / threads), "
                 "threads >= 1, reps >= 1\n",
                 static_cast<long long>(cap));
    return 2;
  }
  struct Mode {
    const char* name;
    unsigned bits;
  } modes[] = {{"off", 0},
               {"profile", rw::trace::kProfile},
               {"events (trace)", rw::trace::kEvents},
               {"both", rw::trace::kEvents | rw::trace::kProfile}};
  std::printf("ns per TraceScope (best of %d runs of %lld scopes per thread)\n", reps,
              static_cast<long long>(scopes));
  std::printf("%-16s %12s %12s\n", "mode", "1 thread",
              (std::to_string(threads) + " threads").c_str());
  for (const Mode& m : modes) {
    const double one = NsPerScope(scopes, 1, reps, m.bits);
    const double many = NsPerScope(scopes, threads, reps, m.bits);
    std::printf("%-16s %12.1f %12.1f\n", m.name, one, many);
  }
  return 0;
}
