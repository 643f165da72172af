// The CUDA forward pass (runtime/cuda_forward.h) behind ForwardBackend, and the GPU's copy of
// the weights behind DeviceModel. Built only with CUDA (cuda_backend_none.cpp otherwise).
#include <algorithm>
#include <string>

#include "backend/cuda/activity_trace.h"
#include "backend/cuda/cuda.h"
#include "backend/cuda/tuning.h"
#include "base/log.h"
#include "base/trace.h"
#include "runtime/cuda_forward.h"
#include "runtime/cuda_model.h"
#include "runtime/forward_backend.h"

namespace rw {
namespace {

class CudaBackend final : public ForwardBackend {
 public:
  explicit CudaBackend(std::unique_ptr<CudaForwardPass> pass) : pass_(std::move(pass)) {}

  BackendKind kind() const override { return BackendKind::kCuda; }
  int64_t max_chunk() const override { return pass_->max_chunk(); }
  int64_t sliding_capacity() const override { return pass_->sliding_capacity(); }

  // The GPU runs a chunk whole: `cancel` is polled by the caller between chunks.
  Status Run(const int* ids, int64_t m, int64_t pos0, LogitsRows rows, float* logits,
             ForwardStats* stats, const std::atomic<bool>* cancel) override {
    (void)cancel;
    Status s = pass_->Run(ids, m, pos0, rows, logits, stats);
    if (s.ok()) Captured();
    return s;
  }

  Status Verify(const int* ids, int64_t k, int64_t pos0, float* logits,
                ForwardStats* stats) override {
    Status s = pass_->Verify(ids, k, pos0, logits, stats);
    if (s.ok()) Captured();
    return s;
  }

  Status SetCapture(std::vector<int> layers) override {
    std::sort(layers.begin(), layers.end());
    layers.erase(std::unique(layers.begin(), layers.end()), layers.end());
    RW_RETURN_IF_ERROR(pass_->SetCapture(layers));
    capture_ = HiddenCapture{};
    capture_.layers = std::move(layers);
    return Status::Ok();
  }
  const HiddenCapture& capture() const override { return capture_; }

  bool samples_on_device() const override { return true; }
  void SetPenalty(float penalty, std::span<const int> ids) override {
    pass_->SetPenalty(penalty, ids);
  }
  Status RunAndSample(int id, int64_t pos0, uint64_t seed, double temperature,
                      int64_t sample_position, int* token, ForwardStats* stats) override {
    Status s = pass_->RunAndSample(id, pos0, seed, temperature, sample_position, token, stats);
    if (s.ok()) Captured();
    return s;
  }
  Status RunAndTopK(int id, int64_t pos0, int k, std::vector<int>* ids, std::vector<float>* values,
                    std::vector<float>* logits, ForwardStats* stats) override {
    Status s = pass_->RunAndTopK(id, pos0, k, ids, values, logits, stats);
    if (s.ok()) Captured();
    return s;
  }
  int max_top_k() const override { return CudaForwardPass::kMaxTopK; }
  Status VerifyAndPick(const int* ids, int64_t k, int64_t pos0, uint64_t seed, double temperature,
                       int top_k, std::vector<RowPick>* picks, ForwardStats* stats) override {
    Status s = pass_->VerifyAndPick(ids, k, pos0, seed, temperature, top_k, picks, stats);
    if (s.ok()) Captured();
    return s;
  }
  int64_t max_verify_picks() const override { return CudaForwardPass::kMaxVerifyPicks; }
  uint64_t host_syncs() const override { return pass_->host_syncs(); }

  Result<int> HandOver(ForwardBackend& to, int64_t pos0, int64_t m,
                       std::vector<float>* residual) override {
    KvCache* kv = to.host_cache();
    if (kv == nullptr)
      return Error(ErrorCode::kUnsupported, "the {} backend has no host KV cache to take over",
                   BackendName(to.kind()));
    // What the device still holds: the K/V of every position so far (the failed call's too,
    // for the layers before resume_layer) and the residual entering resume_layer.
    RW_RETURN_IF_ERROR(pass_->DownloadKv(*kv, pos0 + m));
    const int layer = pass_->resume_layer();
    if (layer >= 0) {
      residual->resize(static_cast<size_t>(m * pass_->config_hidden()));
      RW_RETURN_IF_ERROR(pass_->DownloadResidual(m, residual->data()));
    }
    return layer;
  }

 private:
  // The pass's pinned [layer][m][hidden] reordered to HiddenCapture's [m][layer][hidden].
  void Captured() {
    const int64_t m = pass_->captured_tokens();
    if (capture_.layers.empty() || m == 0) return;
    const int64_t L = static_cast<int64_t>(capture_.layers.size()), H = pass_->config_hidden(),
                  M = pass_->max_chunk();
    capture_.tokens = m;
    capture_.rows.resize(static_cast<size_t>(m * L * H));
    const float* src = pass_->captured();
    for (int64_t l = 0; l < L; ++l)
      for (int64_t t = 0; t < m; ++t)
        std::copy_n(src + (l * M + t) * H, H, &capture_.rows[static_cast<size_t>((t * L + l) * H)]);
  }

  std::unique_ptr<CudaForwardPass> pass_;
  HiddenCapture capture_;
};

class CudaDeviceModel final : public DeviceModel {
 public:
  CudaDeviceModel(std::unique_ptr<CudaModel> model, bool graphs)
      : model_(std::move(model)), graphs_(graphs) {}

  BackendKind kind() const override { return BackendKind::kCuda; }
  Result<std::unique_ptr<ForwardBackend>> NewBackend(int64_t max_context,
                                                     int64_t max_chunk) const override {
    RW_ASSIGN_OR_RETURN(std::unique_ptr<CudaForwardPass> pass,
                        CudaForwardPass::Create(*model_, max_context, max_chunk));
    pass->set_use_graphs(graphs_);
    return std::unique_ptr<ForwardBackend>(std::make_unique<CudaBackend>(std::move(pass)));
  }
  std::string expert_path() const override { return model_->expert_path(); }
  ExpertStoreStats expert_stats() const override {
    ExpertStoreStats out;
    if (const CudaExpertCache* c = model_->experts()) {
      const CudaExpertCacheStats cs = c->stats();
      out.acquires = cs.requests;
      out.hits = cs.hits;
      out.misses = cs.misses;
      // Host → GPU over PCIe: copies into VRAM, plus the mapped path's in-place reads.
      out.bytes_read = cs.bytes_copied + cs.bytes_mapped;
      out.prefetches = cs.promotions;  // mapped: copies ahead of demand
      out.wait_seconds = cs.fill_seconds;
    }
    return out;
  }

  const CudaModel* model() const { return model_.get(); }

 private:
  std::unique_ptr<CudaModel> model_;
  bool graphs_;
};

}  // namespace

const CudaModel* CudaModelOf(const DeviceModel* device) {
  return device != nullptr ? static_cast<const CudaDeviceModel*>(device)->model() : nullptr;
}

// A bad REDWING_CUDA_* value stops the upload with what was wrong.
static Status TuningStatus() {
  const std::string& errors = cuda::TuningErrors();
  if (errors.empty()) return Status::Ok();
  return Error(ErrorCode::kInvalidArgument, "{}", errors);
}

Status CudaBackendAvailable() {
  return cuda::DeviceStatus();
}

Result<std::unique_ptr<DeviceModel>> UploadCudaModel(const RuntimeModel& model,
                                                     const CudaBackendOptions& o,
                                                     ThreadPool* pool) {
  RW_RETURN_IF_ERROR(CudaBackendAvailable().Annotate("--backend cuda"));
  CudaModelOptions co;
  co.vram_budget = o.vram_budget;
  co.max_context = o.max_context;
  co.prefill_chunk = o.prefill_chunk;
  // Environment overrides (backend/cuda/tuning.h, parsed once), to compare the expert paths and
  // graphs without a flag.
  RW_RETURN_IF_ERROR(TuningStatus());
  const cuda::Tuning& env = cuda::CurrentTuning();
  CudaExpertPath path = o.experts;
  if (env.experts == cuda::ExpertPath::kAuto) path = CudaExpertPath::kAuto;
  if (env.experts == cuda::ExpertPath::kMapped) path = CudaExpertPath::kMapped;
  if (env.experts == cuda::ExpertPath::kCopy) path = CudaExpertPath::kCopy;
  co.experts.mapped = path != CudaExpertPath::kCopy;
  co.experts.max_promotions = env.promotions >= 0 ? env.promotions : o.promotions;
  co.experts.prefill_in_place = env.prefill_experts == cuda::ExpertPath::kUnset
                                    ? o.prefill_in_place
                                    : env.prefill_experts == cuda::ExpertPath::kMapped;
  const bool graphs = o.graphs && env.graphs;
  // A trace that records events gets the GPU's kernels and copies too (from the upload on).
  if ((trace::CurrentMode() & trace::kEvents) != 0)
    if (Status s = cuda::StartActivityTrace(); !s.ok()) RW_LOG_WARN("trace: {}", s.ToString());
  RW_ASSIGN_OR_RETURN(std::unique_ptr<CudaModel> cm, CudaModel::Upload(model, co, pool));
  return std::unique_ptr<DeviceModel>(std::make_unique<CudaDeviceModel>(std::move(cm), graphs));
}

}  // namespace rw
