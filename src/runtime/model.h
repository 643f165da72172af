// A loaded Gemma 4 model ready for the CPU forward pass: the model directory (core mapped), the
// weight table bound to kernel views, small vectors (norm weights, scales) widened to fp32, RoPE
// inverse frequencies, and the expert store. Immutable after Open; shared by sessions.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "backend/cpu/ops.h"
#include "backend/weight_view.h"
#include "experts/expert_store.h"
#include "experts/memory_plan.h"
#include "experts/predictor.h"
#include "format/model_dir.h"
#include "model/gemma4_weights.h"

namespace rw {

// A kernel view of a tensor whose parts lie at their ranges from `base` (the core file's
// mapping, or an expert blob).
WeightView ViewOf(const uint8_t* base, const TensorDesc& t);
// A 1-D f32/bf16 tensor widened to fp32.
std::vector<float> VectorToF32(const uint8_t* base, const TensorDesc& t);

struct LayerView {
  bool full = false;  // full attention (else sliding window)
  // Norm weights in fp32 (empty where the layer has none).
  std::vector<float> input_ln, post_attn_ln, pre_ff_ln, post_ff_ln, post_ff_ln1, pre_ff_ln2,
      post_ff_ln2;
  std::vector<float> q_norm, k_norm;
  WeightView q, k, v, o;  // v.data == nullptr on k_eq_v layers
  WeightView gate, up, down;
  WeightView router;
  std::vector<float> router_scale, per_expert_scale;
  float layer_scalar = 1.0f;
};

// RoPE inverse frequencies (head_dim/2 floats) as transformers computes them in fp32:
// default: 1 / θ^(2k/d); proportional: the first int(partial·d/2) as default with exponent
// denominator d (the full head dim), the rest 0 (identity).
std::vector<float> RopeInvFreq(const AttentionGeometry& g);

// Early reads of the next layer's experts: kOff, kRouter (the next layer's router applied to
// the current hidden state) or kFitted (the model directory's expert_predictor.bin).
enum class EarlyRead { kOff, kRouter, kFitted };
const char* EarlyReadName(EarlyRead early);  // "off" | "router" | "fitted"
Result<EarlyRead> ParseEarlyRead(std::string_view name);

struct ModelOpenOptions {
  ExpertStoreOptions experts;
  // slots store: the memory budget the planner divides (0: a slot for every expert).
  uint64_t memory_budget = 0;
  // What the planner reserves for the KV cache and scratch.
  int64_t max_context = 8192, prefill_chunk = 512;
  int64_t prefill_span = 0;  // tokens per layer-major prefill call (0: none), for the planner
  EarlyRead early_expert_read = EarlyRead::kOff;
  cpu::KvType kv_type = cpu::KvType::kF32;  // for the planner's KV bytes
  // Lock the core file's pages in memory (mlock). Every token reads the whole core, so under
  // memory pressure (a small machine, a memory cgroup) the kernel would otherwise evict core
  // pages along with expert pages and read them back a token later. Where locking is not
  // allowed (RLIMIT_MEMLOCK) the model still opens; core_lock_status() says why.
  bool lock_core = true;
};

class RuntimeModel {
 public:
  static Result<std::unique_ptr<RuntimeModel>> Open(const std::string& dir,
                                                    const ModelOpenOptions& options = {});

  const ModelConfig& config() const { return dir_.config(); }
  const ModelDir& dir() const { return dir_; }
  const WeightView& embed() const { return embed_; }
  const std::vector<float>& final_norm() const { return final_norm_; }
  const LayerView& layer(int i) const { return layers_[i]; }
  const std::vector<float>& inv_freq(bool full) const {
    return full ? inv_freq_full_ : inv_freq_sliding_;
  }
  ExpertStore* experts() const { return experts_.get(); }
  // The slots store's plan (null for mmap or a dense model).
  const MemoryPlan* memory_plan() const { return plan_ ? &*plan_ : nullptr; }
  bool early_reads_by_router() const { return early_router_; }
  // The fitted early-read predictor (null unless early_expert_read is "fitted").
  const ExpertPredictor* predictor() const { return predictor_ ? &*predictor_ : nullptr; }
  // Bytes of core weights read per decoded token (everything but the embedding rows), and the
  // size of one expert blob.
  uint64_t core_bytes_per_token() const { return core_bytes_per_token_; }
  // Ok when the core's pages are locked in memory; otherwise why not (off, or refused).
  const Status& core_lock_status() const { return core_lock_; }

 private:
  void LockCore(bool lock);

  ModelDir dir_;
  Gemma4Weights table_;
  WeightView embed_;
  std::vector<float> final_norm_;
  std::vector<LayerView> layers_;
  std::vector<float> inv_freq_sliding_, inv_freq_full_;
  std::unique_ptr<ExpertStore> experts_;
  std::optional<MemoryPlan> plan_;
  bool early_router_ = false;
  std::optional<ExpertPredictor> predictor_;
  uint64_t core_bytes_per_token_ = 0;
  Status core_lock_;
  const uint8_t* locked_ = nullptr;
  uint64_t locked_size_ = 0;

 public:
  ~RuntimeModel();
};

}  // namespace rw
