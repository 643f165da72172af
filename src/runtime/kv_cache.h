// Per-session KV cache: for each layer, K and V as fp32 [n_kv_heads][capacity][head_dim] (the
// layout AttendOne/AttendBlock read), position p in slot p % capacity. Sliding layers keep a ring
// of window + chunk − 1 slots (the window plus room for one prefill chunk, AttendBlock's
// contract); full layers keep max_context slots. Memory is reserved untouched, so only the
// positions actually used become resident.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "backend/cpu/ops.h"
#include "format/model_config.h"

namespace rw {

class KvCache {
 public:
  KvCache(const ModelConfig& config, int64_t max_context, int64_t max_chunk);
  // What the constructor reserves (and a long context eventually touches).
  static uint64_t BytesFor(const ModelConfig& config, int64_t max_context, int64_t max_chunk);

  int64_t capacity(int layer) const { return layers_[layer].capacity; }
  float* k(int layer) { return layers_[layer].k.get(); }
  float* v(int layer) { return layers_[layer].v.get(); }
  cpu::KvCacheView View(int layer) const;
  int64_t max_context() const { return max_context_; }
  // Slots of the sliding rings (0 without sliding layers).
  int64_t sliding_capacity() const { return sliding_capacity_; }
  uint64_t bytes_reserved() const { return bytes_; }

 private:
  struct Layer {
    std::unique_ptr<float[]> k, v;
    int n_kv_heads = 0, head_dim = 0;
    int64_t capacity = 0;
  };
  std::vector<Layer> layers_;
  int64_t max_context_ = 0, sliding_capacity_ = 0;
  uint64_t bytes_ = 0;
};

}  // namespace rw
