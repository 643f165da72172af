// Per-session KV cache: for each layer, K and V as [n_kv_heads][capacity][head_dim] of the
// cache's KvType (the layout AttendOne/AttendBlock read), position p in slot p % capacity.
// Sliding layers keep a ring of window + chunk − 1 slots (the window plus room for one prefill
// chunk, AttendBlock's contract); full layers keep max_context slots. Memory is reserved
// untouched, so only the positions actually used become resident.
//
// fp32 is the reference; bf16 and fp16 halve the bytes (each K/V value rounded once, when
// stored; attention reads them widened). The error against fp32 is in docs/PERFORMANCE.md.
#pragma once

#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include "backend/cpu/ops.h"
#include "base/status.h"
#include "format/model_config.h"

namespace rw {

using cpu::KvType;
const char* KvTypeName(KvType type);  // "f32" | "bf16" | "f16"
Result<KvType> ParseKvType(std::string_view name);
// The CPU backend's KV cache type unless told otherwise: fp32, so that what a user runs is the
// reference model's arithmetic (greedy ids equal to transformers' on the golden fixtures). f16
// halves the cache (needed for 32K contexts in ~2 GB) at 0.1-0.8% logits error on the prompt and
// up to ~4% in decode (docs/PERFORMANCE.md), which can change tokens: an opt-in, not a default.
inline constexpr KvType kDefaultKvType = KvType::kF32;

class KvCache {
 public:
  KvCache(const ModelConfig& config, int64_t max_context, int64_t max_chunk,
          KvType type = KvType::kF32);
  // What the constructor reserves (and a long context eventually touches).
  static uint64_t BytesFor(const ModelConfig& config, int64_t max_context, int64_t max_chunk,
                           KvType type = KvType::kF32);

  KvType type() const { return type_; }
  int64_t capacity(int layer) const { return layers_[layer].capacity; }
  // The raw rows (KvType elements), for KvStore.
  void* k_data(int layer) { return layers_[layer].k.get(); }
  void* v_data(int layer) { return layers_[layer].v.get(); }
  // fp32 caches only (a GPU backend's copy back into the host cache).
  float* k(int layer);
  float* v(int layer);
  cpu::KvCacheView View(int layer) const;
  int64_t max_context() const { return max_context_; }
  // Slots of the sliding rings (0 without sliding layers).
  int64_t sliding_capacity() const { return sliding_capacity_; }
  uint64_t bytes_reserved() const { return bytes_; }

 private:
  struct Layer {
    std::unique_ptr<unsigned char[]> k, v;
    int n_kv_heads = 0, head_dim = 0;
    int64_t capacity = 0;
  };
  KvType type_;
  std::vector<Layer> layers_;
  int64_t max_context_ = 0, sliding_capacity_ = 0;
  uint64_t bytes_ = 0;
};

}  // namespace rw
