#include "runtime/cuda_model.h"

#include <cuda_runtime.h>

#include <algorithm>

#include "backend/cuda/cuda_check.h"
#include "runtime/cuda_forward.h"
#include "runtime/forward.h"
#include "runtime/kv_cache.h"

namespace rw {

cuda::DevMat ToDevMat(const WeightView& w) {
  cuda::DevMat d;
  d.type = w.type == WeightType::kF32    ? cuda::DevMat::kF32
           : w.type == WeightType::kBf16 ? cuda::DevMat::kBf16
                                         : cuda::DevMat::kAffine;
  d.bits = w.bits;
  d.group = w.group;
  d.rows = w.rows;
  d.cols = w.cols;
  d.data = w.data;
  d.scales = w.scales;
  d.biases = w.biases;
  return d;
}

namespace {

// An expert matrix whose pointers are byte offsets within the blob (resolved in the kernels).
cuda::DevMat OffsetMat(const TensorDesc& t) {
  cuda::DevMat d;
  d.type = t.type == TensorType::kF32    ? cuda::DevMat::kF32
           : t.type == TensorType::kBf16 ? cuda::DevMat::kBf16
                                         : cuda::DevMat::kAffine;
  d.bits = t.bits;
  d.group = t.group_size;
  d.rows = t.rows();
  d.cols = t.cols();
  d.data = reinterpret_cast<const void*>(static_cast<uintptr_t>(t.data.offset));
  d.scales = reinterpret_cast<const uint16_t*>(static_cast<uintptr_t>(t.scales.offset));
  d.biases = reinterpret_cast<const uint16_t*>(static_cast<uintptr_t>(t.biases.offset));
  return d;
}

}  // namespace

uint64_t CudaModel::SessionBytes(const ModelConfig& c, int64_t max_context, int64_t chunk) {
  // The KV cache exactly; scratch bounded by twice the CPU pass's (the GPU adds the split-KV
  // partials, the expert plan and a second logits row at most).
  return KvCache::BytesFor(c, max_context, chunk) + 2 * ForwardPass::ScratchBytes(c, chunk) +
         CudaForwardPass::SplitBytes(c, chunk) + (64ull << 20);
}

Result<cuda::DevMat> CudaModel::Matrix(const WeightView& w) {
  if (w.data == nullptr) return cuda::DevMat{};
  RW_ASSIGN_OR_RETURN(cuda::DeviceWeight dw, cuda::DeviceWeight::Upload(w));
  core_bytes_ += static_cast<uint64_t>(w.rows * w.RowBytes());
  weights_.push_back(std::move(dw));
  return ToDevMat(weights_.back().view());
}

Result<const float*> CudaModel::Vector(const std::vector<float>& v) {
  if (v.empty()) return static_cast<const float*>(nullptr);
  RW_ASSIGN_OR_RETURN(cuda::DeviceBuffer b, cuda::DeviceBuffer::Alloc(v.size() * sizeof(float)));
  RW_RETURN_IF_ERROR(b.CopyFromHost(v.data(), v.size() * sizeof(float)));
  core_bytes_ += v.size() * sizeof(float);
  vectors_.push_back(std::move(b));
  return static_cast<const float*>(vectors_.back().data());
}

CudaModel::~CudaModel() {
  experts_.reset();
  if (stream_ != nullptr) cudaStreamDestroy(static_cast<cudaStream_t>(stream_));
}

Result<std::unique_ptr<CudaModel>> CudaModel::Upload(const RuntimeModel& host,
                                                     const CudaModelOptions& o, ThreadPool* pool) {
  RW_RETURN_IF_ERROR(cuda::DeviceStatus());
  auto m = std::unique_ptr<CudaModel>(new CudaModel(host));
  const ModelConfig& c = host.config();
  RW_ASSIGN_OR_RETURN(m->embed_, m->Matrix(host.embed()));
  RW_ASSIGN_OR_RETURN(m->final_norm_, m->Vector(host.final_norm()));
  RW_ASSIGN_OR_RETURN(m->inv_freq_sliding_, m->Vector(host.inv_freq(false)));
  RW_ASSIGN_OR_RETURN(m->inv_freq_full_, m->Vector(host.inv_freq(true)));
  for (int i = 0; i < c.num_layers; ++i) {
    const LayerView& h = host.layer(i);
    CudaLayer d;
    RW_ASSIGN_OR_RETURN(d.q, m->Matrix(h.q));
    RW_ASSIGN_OR_RETURN(d.k, m->Matrix(h.k));
    RW_ASSIGN_OR_RETURN(d.v, m->Matrix(h.v));
    RW_ASSIGN_OR_RETURN(d.o, m->Matrix(h.o));
    RW_ASSIGN_OR_RETURN(d.gate, m->Matrix(h.gate));
    RW_ASSIGN_OR_RETURN(d.up, m->Matrix(h.up));
    RW_ASSIGN_OR_RETURN(d.down, m->Matrix(h.down));
    RW_ASSIGN_OR_RETURN(d.router, m->Matrix(h.router));
    RW_ASSIGN_OR_RETURN(d.input_ln, m->Vector(h.input_ln));
    RW_ASSIGN_OR_RETURN(d.post_attn_ln, m->Vector(h.post_attn_ln));
    RW_ASSIGN_OR_RETURN(d.pre_ff_ln, m->Vector(h.pre_ff_ln));
    RW_ASSIGN_OR_RETURN(d.post_ff_ln, m->Vector(h.post_ff_ln));
    RW_ASSIGN_OR_RETURN(d.post_ff_ln1, m->Vector(h.post_ff_ln1));
    RW_ASSIGN_OR_RETURN(d.pre_ff_ln2, m->Vector(h.pre_ff_ln2));
    RW_ASSIGN_OR_RETURN(d.post_ff_ln2, m->Vector(h.post_ff_ln2));
    RW_ASSIGN_OR_RETURN(d.q_norm, m->Vector(h.q_norm));
    RW_ASSIGN_OR_RETURN(d.k_norm, m->Vector(h.k_norm));
    RW_ASSIGN_OR_RETURN(d.router_scale, m->Vector(h.router_scale));
    RW_ASSIGN_OR_RETURN(d.per_expert_scale, m->Vector(h.per_expert_scale));
    m->layers_.push_back(d);
  }
  if (!c.enable_moe) return m;

  // Routed experts: one slot size for all layers, offsets resolved in the kernels.
  const ExpertIndex* idx = host.dir().experts();
  CHECK(idx != nullptr);
  uint64_t stride = 0;
  std::vector<uint64_t> sizes;
  for (int i = 0; i < c.num_layers; ++i) {
    const ExpertLayout& l = idx->layers[static_cast<size_t>(i)].layout;
    m->layers_[static_cast<size_t>(i)].experts = {OffsetMat(l.gate), OffsetMat(l.up),
                                                  OffsetMat(l.down)};
    sizes.push_back(l.blob_size);
    stride = std::max<uint64_t>(stride, (l.blob_size + 255) / 256 * 256);
  }
  const int64_t all = int64_t{c.num_layers} * c.num_experts;
  int64_t slots = all;
  if (o.vram_budget > 0) {
    const uint64_t placed = m->core_bytes_ + SessionBytes(c, o.max_context, o.prefill_chunk);
    if (o.vram_budget < placed + stride * static_cast<uint64_t>(c.top_k))
      return Error(ErrorCode::kResourceExhausted,
                   "--vram-budget {} MB is too small: the core, KV cache and scratch take {} MB "
                   "and at least {} experts ({} MB) must fit",
                   o.vram_budget >> 20, placed >> 20, c.top_k,
                   (stride * static_cast<uint64_t>(c.top_k)) >> 20);
    slots = std::min<int64_t>(all, static_cast<int64_t>((o.vram_budget - placed) / stride));
  } else {
    size_t free_b = 0, total_b = 0;
    RW_CUDA_RETURN_IF_ERROR(cudaMemGetInfo(&free_b, &total_b), "cudaMemGetInfo");
    const uint64_t need =
        stride * static_cast<uint64_t>(all) + SessionBytes(c, o.max_context, o.prefill_chunk);
    if (need > free_b)
      return Error(ErrorCode::kResourceExhausted,
                   "the experts ({} MB) and one session ({} MB) do not fit in the GPU's {} MB "
                   "free; give --vram-budget to stream experts from host memory",
                   (stride * all) >> 20, SessionBytes(c, o.max_context, o.prefill_chunk) >> 20,
                   free_b >> 20);
  }
  RW_ASSIGN_OR_RETURN(m->experts_,
                      CudaExpertCache::Create(host.experts(), c.num_layers, c.num_experts, stride,
                                              sizes, slots, pool, o.experts));
  if (m->experts_->all_resident()) {
    cudaStream_t s;
    RW_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "stream");
    m->stream_ = s;
    RW_ASSIGN_OR_RETURN(m->resident_table_, m->experts_->LoadAll(s));
  }
  return m;
}

}  // namespace rw
