// The model's weights on the GPU, uploaded once per Engine: every core matrix and norm vector
// (norms widened to fp32 as RuntimeModel has them), the RoPE inverse frequencies, and the routed
// experts in a VRAM expert cache sized by the VRAM budget (all of them when it allows).
//
// Placement under a budget: the core is uploaded first, then the KV cache and scratch of one
// session (at the engine's context and chunk) are set aside, and the rest becomes expert slots.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "backend/cuda/cuda.h"
#include "backend/cuda/ops.h"
#include "base/thread_pool.h"
#include "runtime/cuda_expert_cache.h"
#include "runtime/model.h"

namespace rw {

class DeviceModel;
class CudaModel;
// The CUDA weights behind a DeviceModel from UploadCudaModel (runtime/forward_backend.h), for
// tests that build passes by hand; null for null.
const CudaModel* CudaModelOf(const DeviceModel* device);

struct CudaLayer {
  cuda::DevMat q, k, v, o, gate, up, down, router;
  // fp32 device vectors (null where the layer has none).
  const float *input_ln = nullptr, *post_attn_ln = nullptr, *pre_ff_ln = nullptr,
              *post_ff_ln = nullptr, *post_ff_ln1 = nullptr, *pre_ff_ln2 = nullptr,
              *post_ff_ln2 = nullptr, *q_norm = nullptr, *k_norm = nullptr, *router_scale = nullptr,
              *per_expert_scale = nullptr;
  cuda::ExpertMats experts;  // offsets within a blob
};

struct CudaModelOptions {
  uint64_t vram_budget = 0;  // bytes for everything on the GPU; 0: all experts resident
  int64_t max_context = 8192, prefill_chunk = 512;
  CudaExpertCacheOptions experts;  // under a budget: mapped or copy path, promotions
};

class CudaModel {
 public:
  static Result<std::unique_ptr<CudaModel>> Upload(const RuntimeModel& model,
                                                   const CudaModelOptions& options,
                                                   ThreadPool* pool);
  ~CudaModel();

  const RuntimeModel& host() const { return host_; }
  const ModelConfig& config() const { return host_.config(); }
  const CudaLayer& layer(int i) const { return layers_[static_cast<size_t>(i)]; }
  const cuda::DevMat& embed() const { return embed_; }
  const float* final_norm() const { return final_norm_; }
  const float* inv_freq(bool full) const { return full ? inv_freq_full_ : inv_freq_sliding_; }
  CudaExpertCache* experts() const { return experts_.get(); }
  // Device table [layer·E + e] of blob addresses when every expert is resident, else null.
  const uint8_t* const* resident_table() const { return resident_table_; }
  // The table decode kernels index by the router's choice on the GPU: the resident table, or
  // the mapped path's (VRAM slot or pinned host address per expert); null on the copy path.
  const uint8_t* const* decode_table() const {
    if (resident_table_ != nullptr) return resident_table_;
    return experts_ != nullptr && experts_->mapped() ? experts_->table() : nullptr;
  }
  // How routed experts reach the kernels: "resident", "mapped", "copy" (or "none").
  const char* expert_path() const {
    if (experts_ == nullptr) return "none";
    if (resident_table_ != nullptr) return "resident";
    return experts_->mapped() ? "mapped" : "copy";
  }
  uint64_t core_device_bytes() const { return core_bytes_; }
  // Device bytes of one session's KV cache and scratch (what the budget sets aside).
  static uint64_t SessionBytes(const ModelConfig& c, int64_t max_context, int64_t chunk);

 private:
  explicit CudaModel(const RuntimeModel& m) : host_(m) {}
  Result<cuda::DevMat> Matrix(const WeightView& w);
  Result<const float*> Vector(const std::vector<float>& v);

  const RuntimeModel& host_;
  std::vector<cuda::DeviceWeight> weights_;
  std::vector<cuda::DeviceBuffer> vectors_;
  std::vector<CudaLayer> layers_;
  cuda::DevMat embed_;
  const float* final_norm_ = nullptr;
  const float *inv_freq_sliding_ = nullptr, *inv_freq_full_ = nullptr;
  std::unique_ptr<CudaExpertCache> experts_;
  const uint8_t* const* resident_table_ = nullptr;
  uint64_t core_bytes_ = 0;
  void* stream_ = nullptr;  // for the initial expert upload
};

// The kernel-side view of a WeightView whose pointers are already device addresses (or, for
// experts, offsets).
cuda::DevMat ToDevMat(const WeightView& w);

}  // namespace rw
