// How fast this machine's memory streams to the CPU, and what that allows a decoded token: the
// yardstick for "how far decode is from the memory-bandwidth bound" (bytes a token touches ÷
// read bandwidth). Measured in the same run as the decode it judges, since on a shared machine
// the bandwidth left to this process drifts from minute to minute.
#pragma once

#include <cstdint>

#include "base/status.h"
#include "base/thread_pool.h"
#include "format/model_config.h"

namespace rw {

struct MemoryProbeResult {
  double gb_s = 0;  // the best pass
  int threads = 0;
  uint64_t buffer_bytes = 0;
  int passes = 0;
};

// Sums a freshly written buffer of `bytes` (far larger than the caches) `passes` times, each
// thread of `pool` (null: this thread) reading one contiguous slice. Errors: no memory.
Result<MemoryProbeResult> ProbeMemoryRead(ThreadPool* pool, uint64_t bytes = uint64_t{256} << 20,
                                          int passes = 3);

// Bytes of KV cache one decode step at position `pos` reads on the CPU: K and V (value_bytes
// each value: 4 for fp32, 2 for a half cache) of every position each layer attends to (a
// sliding layer the last sliding_window, a full layer all).
uint64_t KvBytesReadAt(const ModelConfig& c, int64_t pos, int value_bytes = 4);

// A CPU decode run against the memory-bandwidth bound: the bytes each token touched (the core's
// weights, head included, the experts it acquired, the KV cache it read) over the probe's rate.
struct DecodeMemoryBound {
  double weight_bytes_per_token = 0, kv_bytes_per_token = 0;
  double bound_s = 0;   // per token, at the probe's rate
  double actual_s = 0;  // per token, measured
  double ratio = 0;     // actual ÷ bound
};
// tokens decoded at positions first_pos, first_pos + 1, ... in `seconds`, acquiring
// expert_bytes of experts in all.
DecodeMemoryBound MemoryBoundOfDecode(const ModelConfig& c, const MemoryProbeResult& probe,
                                      uint64_t core_bytes_per_token, uint64_t expert_bytes,
                                      int64_t first_pos, int64_t tokens, double seconds,
                                      int kv_value_bytes = 4);

}  // namespace rw
