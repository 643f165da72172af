#include "bench/memory_probe.h"

#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <vector>

#include "base/timer.h"

namespace rw {

Result<MemoryProbeResult> ProbeMemoryRead(ThreadPool* pool, uint64_t bytes, int passes) {
  const uint64_t words = bytes / sizeof(uint64_t);
  if (words == 0 || passes < 1)
    return Error(ErrorCode::kInvalidArgument, "memory probe: {} bytes, {} passes", bytes, passes);
  void* p = mmap(nullptr, words * sizeof(uint64_t), PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED)
    return Error(ErrorCode::kResourceExhausted, "memory probe: cannot map {} bytes: {}", bytes,
                 std::strerror(errno));
  auto* buf = static_cast<uint64_t*>(p);
  // Written first, so every page is resident and distinct (not the shared zero page).
  for (uint64_t i = 0; i < words; ++i) buf[i] = i;
  const int threads = pool != nullptr ? pool->size() : 1;
  std::vector<uint64_t> sums(static_cast<size_t>(threads) * 8, 0);  // a cache line apart
  double best = 0;
  for (int pass = 0; pass < passes; ++pass) {
    Stopwatch sw;
    auto slice = [&](size_t b, size_t e, int thread) {
      uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
      size_t i = b;
      for (; i + 4 <= e; i += 4) {
        s0 += buf[i];
        s1 += buf[i + 1];
        s2 += buf[i + 2];
        s3 += buf[i + 3];
      }
      for (; i < e; ++i) s0 += buf[i];
      sums[static_cast<size_t>(thread) * 8] += s0 + s1 + s2 + s3;
    };
    if (pool != nullptr && threads > 1) {
      pool->ParallelFor(words, (words + threads - 1) / threads, slice, 1);
    } else {
      slice(0, words, 0);
    }
    best = std::max(best, static_cast<double>(words * sizeof(uint64_t)) / sw.Seconds() * 1e-9);
  }
  // Keeps the sums (and so the reads) alive.
  std::atomic<uint64_t> sink{0};
  for (uint64_t s : sums) sink.fetch_add(s, std::memory_order_relaxed);
  munmap(p, words * sizeof(uint64_t));
  MemoryProbeResult r;
  r.gb_s = best;
  r.threads = threads;
  r.buffer_bytes = words * sizeof(uint64_t);
  r.passes = passes;
  return r;
}

uint64_t KvBytesReadAt(const ModelConfig& c, int64_t pos, int value_bytes) {
  uint64_t total = 0;
  for (int l = 0; l < c.num_layers; ++l) {
    const bool sliding = c.layer_types[l] == LayerKind::kSliding;
    const AttentionGeometry& g = sliding ? c.sliding : c.full;
    int64_t seen = pos + 1;
    if (sliding && c.sliding_window > 0) seen = std::min<int64_t>(seen, c.sliding_window);
    total += static_cast<uint64_t>(seen) * static_cast<uint64_t>(g.num_kv_heads) *
             static_cast<uint64_t>(g.head_dim) * 2 * static_cast<uint64_t>(value_bytes);
  }
  return total;
}

DecodeMemoryBound MemoryBoundOfDecode(const ModelConfig& c, const MemoryProbeResult& probe,
                                      uint64_t core_bytes_per_token, uint64_t expert_bytes,
                                      int64_t first_pos, int64_t tokens, double seconds,
                                      int kv_value_bytes) {
  DecodeMemoryBound b;
  if (tokens <= 0 || probe.gb_s <= 0) return b;
  const double n = static_cast<double>(tokens);
  b.weight_bytes_per_token =
      static_cast<double>(core_bytes_per_token) + static_cast<double>(expert_bytes) / n;
  double kv = 0;
  for (int64_t i = 0; i < tokens; ++i)
    kv += static_cast<double>(KvBytesReadAt(c, first_pos + i, kv_value_bytes));
  b.kv_bytes_per_token = kv / n;
  b.bound_s = (b.weight_bytes_per_token + b.kv_bytes_per_token) / (probe.gb_s * 1e9);
  b.actual_s = seconds / n;
  b.ratio = b.bound_s > 0 ? b.actual_s / b.bound_s : 0;
  return b;
}

}  // namespace rw
