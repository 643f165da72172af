// The fault-handling half of CudaForwardPass: Run names the layer a CUDA error came from and
// remembers how far the call got; afterwards the Session (--fault-policy failover-cpu) reads back
// what the device still holds (the residual, the KV cache) to finish on the CPU. Also the
// testing hooks: REDWING_CUDA_INJECT_FAULT and RunLayers.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/tuning.h"
#include "runtime/cuda_forward.h"

namespace rw {
namespace {

cudaStream_t S(void* s) {
  return static_cast<cudaStream_t>(s);
}

}  // namespace

Status CudaForwardPass::Run(const int* ids, int64_t m, int64_t pos0, LogitsRows rows, float* logits,
                            ForwardStats* stats) {
  fault_layer_ = inject_layer_ >= 0 && calls_ == inject_call_ ? inject_layer_ : -1;
  ++calls_;
  layer_ = -1;
  residual_intact_ = false;
  Status st = RunCall(ids, m, pos0, rows, logits, stats);
  fault_layer_ = -1;
  if (st.code() != ErrorCode::kDevice || layer_ < 0) return st;
  // An error seen while waiting may come from any op queued before this point.
  return st.Annotate(layer_ < c_.num_layers
                         ? fmt::format("CUDA forward pass at layer {} of {}", layer_, c_.num_layers)
                         : std::string("CUDA forward pass at the head"));
}

Status CudaForwardPass::AtLayer(int li) {
  layer_ = li;
  residual_intact_ = true;
  if (li != fault_layer_) return Status::Ok();
  lost_ = inject_sticky_;
  return Error(ErrorCode::kDevice, "CUDA error in {}: injected by REDWING_CUDA_INJECT_FAULT{}",
               li < c_.num_layers ? "the layer's first op" : "the head's first op",
               inject_sticky_ ? " (sticky: the device is unreadable from now on)" : "");
}

Status CudaForwardPass::ReadInjectedFault() {
  // Read per pass, not once (backend/cuda/tuning.h): a test gives one session the fault.
  const char* env = std::getenv("REDWING_CUDA_INJECT_FAULT");
  cuda::FaultInjection f;
  std::string error;
  if (!cuda::ParseFaultInjection(env, &f, &error))
    return Error(ErrorCode::kInvalidArgument, "{}", error);
  if (f.layer > c_.num_layers)
    return Error(ErrorCode::kInvalidArgument,
                 "REDWING_CUDA_INJECT_FAULT must be <layer>[,<call>[,sticky]] with the layer in "
                 "0..{} and the call counted from 0, not '{}'",
                 c_.num_layers, env);
  inject_layer_ = f.layer;
  inject_call_ = f.call;
  inject_sticky_ = f.sticky;
  return Status::Ok();
}

// A launch error is reported when the op is queued and leaves the work queued before it to run;
// an error in running kernels is sticky (the context is lost) and fails every later call.
Status CudaForwardPass::Readable() {
  if (lost_)
    return Error(ErrorCode::kDevice,
                 "CUDA error in reading the device back: lost (injected sticky fault)");
  RW_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(S(stream_)), "waiting for the queued work");
  cudaGetLastError();  // clears an error already reported at launch; a sticky one stays
  return Status::Ok();
}

Status CudaForwardPass::DownloadResidual(int64_t m, float* x) {
  CHECK(m >= 1 && m <= max_chunk_);
  RW_RETURN_IF_ERROR(Readable());
  RW_CUDA_RETURN_IF_ERROR(
      cudaMemcpy(x, x_, static_cast<size_t>(m * c_.hidden_size) * 4, cudaMemcpyDeviceToHost),
      "reading the residual back");
  return Status::Ok();
}

Status CudaForwardPass::DownloadKv(KvCache& kv, int64_t end) {
  RW_RETURN_IF_ERROR(Readable());
  for (int li = 0; li < c_.num_layers; ++li) {
    const size_t l = static_cast<size_t>(li);
    const int64_t cap = capacity_[l];
    CHECK_MSG(kv.capacity(li) == cap, "layer {}: host cache of {} slots, device {}", li,
              kv.capacity(li), cap);
    // Layout [kv head][slot][head_dim]: each head's first min(end, cap) slots (the ring's every
    // slot once it has wrapped).
    const int64_t used = std::min(end, cap);
    if (used <= 0) continue;
    const AttentionGeometry& g = c_.geometry(li);
    const size_t pitch = static_cast<size_t>(cap * g.head_dim) * 4;
    const size_t width = static_cast<size_t>(used * g.head_dim) * 4;
    RW_CUDA_RETURN_IF_ERROR(
        cudaMemcpy2D(kv.k(li), pitch, k_cache_[l], pitch, width,
                     static_cast<size_t>(g.num_kv_heads), cudaMemcpyDeviceToHost),
        "reading layer {}'s K cache back", li);
    RW_CUDA_RETURN_IF_ERROR(
        cudaMemcpy2D(kv.v(li), pitch, v_cache_[l], pitch, width,
                     static_cast<size_t>(g.num_kv_heads), cudaMemcpyDeviceToHost),
        "reading layer {}'s V cache back", li);
  }
  return Status::Ok();
}

Status CudaForwardPass::RunLayers(const int* ids, int64_t m, int64_t pos0, int end_layer,
                                  float* x) {
  CHECK(m >= 1 && m <= max_chunk_ && end_layer >= 0 && end_layer <= c_.num_layers);
  std::memcpy(h_params_, &pos0, 8);
  std::memcpy(h_params_ + 8, ids, static_cast<size_t>(m) * 4);
  RW_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(params_, h_params_, 8 + 4 * static_cast<size_t>(m),
                                          cudaMemcpyHostToDevice, S(stream_)),
                          "parameters");
  marks_ = 0;
  RW_RETURN_IF_ERROR(Embed(m));
  RW_RETURN_IF_ERROR(RopeTables(m));
  for (int li = 0; li < end_layer; ++li) RW_RETURN_IF_ERROR(DecoderLayer(li, m));
  ++syncs_;
  return DownloadResidual(m, x);
}

}  // namespace rw
