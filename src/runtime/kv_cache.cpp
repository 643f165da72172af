#include "runtime/kv_cache.h"

#include <algorithm>

namespace rw {

KvCache::KvCache(const ModelConfig& c, int64_t max_context, int64_t max_chunk)
    : max_context_(max_context) {
  CHECK(max_context > 0 && max_chunk > 0);
  sliding_capacity_ = std::min<int64_t>(max_context, int64_t{c.sliding_window} + max_chunk - 1);
  for (int i = 0; i < c.num_layers; ++i) {
    const AttentionGeometry& g = c.geometry(i);
    Layer l;
    l.n_kv_heads = g.num_kv_heads;
    l.head_dim = g.head_dim;
    l.capacity = c.is_full(i) ? max_context : sliding_capacity_;
    const size_t n = static_cast<size_t>(l.n_kv_heads) * l.capacity * l.head_dim;
    // new float[n] (not value-initialized): pages stay untouched until written.
    l.k.reset(new float[n]);
    l.v.reset(new float[n]);
    bytes_ += 2 * n * sizeof(float);
    layers_.push_back(std::move(l));
  }
  bool any_sliding = false;
  for (int i = 0; i < c.num_layers; ++i) any_sliding |= !c.is_full(i);
  if (!any_sliding) sliding_capacity_ = 0;
}

uint64_t KvCache::BytesFor(const ModelConfig& c, int64_t max_context, int64_t max_chunk) {
  const int64_t sliding = std::min<int64_t>(max_context, int64_t{c.sliding_window} + max_chunk - 1);
  uint64_t bytes = 0;
  for (int i = 0; i < c.num_layers; ++i) {
    const AttentionGeometry& g = c.geometry(i);
    const int64_t cap = c.is_full(i) ? max_context : sliding;
    bytes += 2 * sizeof(float) * static_cast<uint64_t>(g.num_kv_heads) * cap * g.head_dim;
  }
  return bytes;
}

cpu::KvCacheView KvCache::View(int layer) const {
  const Layer& l = layers_[layer];
  return cpu::KvCacheView{l.k.get(), l.v.get(), l.n_kv_heads, l.head_dim, l.capacity};
}

}  // namespace rw
