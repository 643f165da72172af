#include "runtime/model.h"

#include <sys/mman.h>

#include <cerrno>
#include <cstring>

#include <cmath>

#include "base/bf16.h"
#include "base/file.h"
#include "base/thread_pool.h"
#include "runtime/forward.h"
#include "runtime/kv_cache.h"

namespace rw {

WeightView ViewOf(const uint8_t* base, const TensorDesc& t) {
  const int64_t rows = t.shape.size() >= 2 ? t.rows() : 1, cols = t.cols();
  switch (t.type) {
    case TensorType::kF32:
      return F32Weight(reinterpret_cast<const float*>(base + t.data.offset), rows, cols);
    case TensorType::kBf16:
      return Bf16Weight(reinterpret_cast<const uint16_t*>(base + t.data.offset), rows, cols);
    case TensorType::kAffine:
      return AffineWeight(reinterpret_cast<const uint32_t*>(base + t.data.offset), rows, cols,
                          t.bits, t.group_size,
                          reinterpret_cast<const uint16_t*>(base + t.scales.offset),
                          reinterpret_cast<const uint16_t*>(base + t.biases.offset));
  }
  return {};
}

std::vector<float> VectorToF32(const uint8_t* base, const TensorDesc& t) {
  std::vector<float> out(t.numel());
  if (t.type == TensorType::kF32) {
    std::memcpy(out.data(), base + t.data.offset, out.size() * 4);
  } else {
    CHECK(t.type == TensorType::kBf16);
    const auto* p = reinterpret_cast<const uint16_t*>(base + t.data.offset);
    for (size_t i = 0; i < out.size(); ++i) out[i] = Bf16ToF32(p[i]);
  }
  return out;
}

std::vector<float> RopeInvFreq(const AttentionGeometry& g) {
  const int d = g.head_dim, half = d / 2;
  // Number of rotated pairs: all for "default"; int(partial·d // 2) for "proportional".
  int rotated = half;
  if (g.rope_type == "proportional")
    rotated = static_cast<int>(std::floor(g.partial_rotary_factor * d / 2));
  std::vector<float> inv(half, 0.0f);
  const float base = static_cast<float>(g.rope_theta);
  for (int k = 0; k < rotated; ++k) {
    // torch: arange(0, d, 2).float() / d, then base ** that (fp32 pow), then 1.0 / that.
    float e = static_cast<float>(2 * k) / static_cast<float>(d);
    inv[k] = 1.0f / std::pow(base, e);
  }
  return inv;
}

const char* EarlyReadName(EarlyRead early) {
  switch (early) {
    case EarlyRead::kRouter:
      return "router";
    case EarlyRead::kFitted:
      return "fitted";
    case EarlyRead::kOff:
      break;
  }
  return "off";
}

Result<EarlyRead> ParseEarlyRead(std::string_view name) {
  if (name == "off") return EarlyRead::kOff;
  if (name == "router") return EarlyRead::kRouter;
  if (name == "fitted") return EarlyRead::kFitted;
  return Error(ErrorCode::kInvalidArgument,
               "early expert reads must be off, router or fitted, not '{}'", name);
}

Result<std::unique_ptr<RuntimeModel>> RuntimeModel::Open(const std::string& path,
                                                         const ModelOpenOptions& o) {
  auto m = std::unique_ptr<RuntimeModel>(new RuntimeModel());
  RW_ASSIGN_OR_RETURN(m->dir_, ModelDir::Open(path));
  const ModelConfig& c = m->dir_.config();
  if (c.geometry(0).rope_type != "default" && c.geometry(0).rope_type != "proportional")
    return Error(ErrorCode::kUnsupported, "{}: rope type {}", path, c.geometry(0).rope_type);
  RW_ASSIGN_OR_RETURN(m->table_, BindGemma4Model(m->dir_));
  const uint8_t* base = m->dir_.core().base();
  m->embed_ = ViewOf(base, *m->table_.embed_tokens);
  m->final_norm_ = VectorToF32(base, *m->table_.norm);
  uint64_t bytes = 0;
  auto linear = [&](const TensorDesc* t) {
    if (t == nullptr) return WeightView{};
    bytes += t->data.size + t->scales.size + t->biases.size;
    return ViewOf(base, *t);
  };
  auto vec = [&](const TensorDesc* t) { return t ? VectorToF32(base, *t) : std::vector<float>{}; };
  for (int i = 0; i < c.num_layers; ++i) {
    const Gemma4LayerWeights& w = m->table_.layers[i];
    LayerView l;
    l.full = c.is_full(i);
    l.input_ln = vec(w.input_layernorm);
    l.post_attn_ln = vec(w.post_attention_layernorm);
    l.pre_ff_ln = vec(w.pre_feedforward_layernorm);
    l.post_ff_ln = vec(w.post_feedforward_layernorm);
    l.post_ff_ln1 = vec(w.post_feedforward_layernorm_1);
    l.pre_ff_ln2 = vec(w.pre_feedforward_layernorm_2);
    l.post_ff_ln2 = vec(w.post_feedforward_layernorm_2);
    l.q_norm = vec(w.q_norm);
    l.k_norm = vec(w.k_norm);
    l.q = linear(w.q_proj);
    l.k = linear(w.k_proj);
    l.v = linear(w.v_proj);
    l.o = linear(w.o_proj);
    l.gate = linear(w.gate_proj);
    l.up = linear(w.up_proj);
    l.down = linear(w.down_proj);
    l.router = linear(w.router_proj);
    l.router_scale = vec(w.router_scale);
    l.per_expert_scale = vec(w.router_per_expert_scale);
    l.layer_scalar = vec(w.layer_scalar)[0];
    m->layers_.push_back(std::move(l));
  }
  // The tied head streams the whole embedding once per token.
  bytes += m->table_.embed_tokens->data.size + m->table_.embed_tokens->scales.size +
           m->table_.embed_tokens->biases.size;
  m->core_bytes_per_token_ = bytes;
  m->inv_freq_sliding_ = RopeInvFreq(c.sliding);
  m->inv_freq_full_ = RopeInvFreq(c.full);
  if (c.enable_moe) {
    const ExpertIndex* idx = m->dir_.experts();  // checked by BindGemma4Model
    m->early_router_ = o.early_expert_read == EarlyRead::kRouter;
    if (o.early_expert_read == EarlyRead::kFitted) {
      const std::string pred = JoinPath(path, kPredictorFileName);
      if (!PathExists(pred))
        return Error(ErrorCode::kNotFound,
                     "{} has no {}: record routing with `redwing trace` and fit one with "
                     "`redwing fit-predictor` first",
                     path, kPredictorFileName);
      RW_ASSIGN_OR_RETURN(m->predictor_, ExpertPredictor::Read(pred, c.num_layers, c.num_experts));
    }
    ExpertStoreOptions eo = o.experts;
    if (eo.kind == ExpertStoreKind::kSlots) {
      const ExpertLayout& layout = idx->layers[0].layout;
      MemoryNeeds needs;
      needs.core_bytes = m->dir_.core().size();
      needs.kv_bytes = KvCache::BytesFor(c, o.max_context, o.prefill_chunk, o.kv_type);
      needs.scratch_bytes = ForwardPass::ScratchBytes(c, o.prefill_chunk, o.prefill_span,
                                                      ThreadPool::Default().size());
      needs.layers = c.num_layers;
      needs.experts_per_layer = c.num_experts;
      needs.top_k = c.top_k;
      needs.expert_stride = layout.stride;
      const uint64_t budget = o.memory_budget > 0 ? o.memory_budget : UINT64_MAX / 2;
      RW_ASSIGN_OR_RETURN(MemoryPlan plan, PlanMemory(budget, needs));
      eo.slots_per_layer = plan.slots_per_layer;
      m->plan_ = plan;
    }
    RW_ASSIGN_OR_RETURN(m->experts_, OpenExpertStore(m->dir_, eo));
  }
  m->LockCore(o.lock_core);
  return m;
}

void RuntimeModel::LockCore(bool lock) {
  const CoreFile& core = dir_.core();
  if (!lock) {
    core_lock_ = Error(ErrorCode::kUnsupported, "core locking is off");
    return;
  }
  // mlock faults every page in: at load the core is read once, sequentially.
  if (mlock(core.base(), core.size()) != 0) {
    const int err = errno;
    core_lock_ = Error(ErrorCode::kUnsupported,
                       "mlock of the {} core refused ({}): raise the locked-memory limit "
                       "(ulimit -l) to keep the core resident under memory pressure",
                       FormatBytes(core.size()), std::strerror(err));
    madvise(const_cast<uint8_t*>(core.base()), core.size(), MADV_WILLNEED);
    return;
  }
  locked_ = core.base();
  locked_size_ = core.size();
  core_lock_ = Status::Ok();
}

RuntimeModel::~RuntimeModel() {
  if (locked_ != nullptr) munlock(locked_, locked_size_);
}

}  // namespace rw
