#include "runtime/kv_cache.h"

#include <algorithm>

#include "base/check.h"

namespace rw {

const char* KvTypeName(KvType type) {
  switch (type) {
    case KvType::kBf16:
      return "bf16";
    case KvType::kF16:
      return "f16";
    case KvType::kF32:
      break;
  }
  return "f32";
}

Result<KvType> ParseKvType(std::string_view name) {
  if (name == "f32") return KvType::kF32;
  if (name == "bf16") return KvType::kBf16;
  if (name == "f16") return KvType::kF16;
  return Error(ErrorCode::kInvalidArgument, "KV cache type must be f32, bf16 or f16, not '{}'",
               name);
}

KvCache::KvCache(const ModelConfig& c, int64_t max_context, int64_t max_chunk, KvType type)
    : type_(type), max_context_(max_context) {
  CHECK(max_context > 0 && max_chunk > 0);
  sliding_capacity_ = std::min<int64_t>(max_context, int64_t{c.sliding_window} + max_chunk - 1);
  const size_t elem = static_cast<size_t>(cpu::KvTypeBytes(type));
  for (int i = 0; i < c.num_layers; ++i) {
    const AttentionGeometry& g = c.geometry(i);
    Layer l;
    l.n_kv_heads = g.num_kv_heads;
    l.head_dim = g.head_dim;
    l.capacity = c.is_full(i) ? max_context : sliding_capacity_;
    const size_t n = static_cast<size_t>(l.n_kv_heads) * l.capacity * l.head_dim * elem;
    // new unsigned char[n] (not value-initialized): pages stay untouched until written. The
    // allocator's alignment (16 bytes) suits every element type.
    l.k.reset(new unsigned char[n]);
    l.v.reset(new unsigned char[n]);
    bytes_ += 2 * n;
    layers_.push_back(std::move(l));
  }
  bool any_sliding = false;
  for (int i = 0; i < c.num_layers; ++i) any_sliding |= !c.is_full(i);
  if (!any_sliding) sliding_capacity_ = 0;
}

uint64_t KvCache::BytesFor(const ModelConfig& c, int64_t max_context, int64_t max_chunk,
                           KvType type) {
  const int64_t sliding = std::min<int64_t>(max_context, int64_t{c.sliding_window} + max_chunk - 1);
  uint64_t bytes = 0;
  for (int i = 0; i < c.num_layers; ++i) {
    const AttentionGeometry& g = c.geometry(i);
    const int64_t cap = c.is_full(i) ? max_context : sliding;
    bytes += 2 * static_cast<uint64_t>(cpu::KvTypeBytes(type)) *
             static_cast<uint64_t>(g.num_kv_heads) * cap * g.head_dim;
  }
  return bytes;
}

float* KvCache::k(int layer) {
  CHECK_MSG(type_ == KvType::kF32, "fp32 rows of a {} KV cache", KvTypeName(type_));
  return reinterpret_cast<float*>(layers_[layer].k.get());
}

float* KvCache::v(int layer) {
  CHECK_MSG(type_ == KvType::kF32, "fp32 rows of a {} KV cache", KvTypeName(type_));
  return reinterpret_cast<float*>(layers_[layer].v.get());
}

cpu::KvCacheView KvCache::View(int layer) const {
  const Layer& l = layers_[layer];
  return cpu::KvCacheView{l.k.get(), l.v.get(), l.n_kv_heads, l.head_dim, l.capacity, type_};
}

}  // namespace rw
