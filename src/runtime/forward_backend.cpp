#include "runtime/forward_backend.h"

#include <algorithm>

namespace rw {

const char* BackendName(BackendKind kind) {
  return kind == BackendKind::kCuda ? "cuda" : "cpu";
}

Result<BackendKind> ParseBackendKind(std::string_view name) {
  if (name == "cpu") return BackendKind::kCpu;
  if (name == "cuda") return BackendKind::kCuda;
  return Error(ErrorCode::kInvalidArgument, "backend must be cpu or cuda, not '{}'", name);
}

const char* PrecisionName(Precision precision) {
  return precision == Precision::kFast ? "fast" : "exact";
}

Result<Precision> ParsePrecision(std::string_view name) {
  if (name == "exact") return Precision::kExact;
  if (name == "fast") return Precision::kFast;
  return Error(ErrorCode::kInvalidArgument, "precision must be exact or fast, not '{}'", name);
}

const char* FaultPolicyName(FaultPolicy policy) {
  return policy == FaultPolicy::kFailoverCpu ? "failover-cpu" : "fail-closed";
}

Result<FaultPolicy> ParseFaultPolicy(std::string_view name) {
  if (name == "fail-closed") return FaultPolicy::kFailClosed;
  if (name == "failover-cpu") return FaultPolicy::kFailoverCpu;
  return Error(ErrorCode::kInvalidArgument,
               "fault policy must be fail-closed or failover-cpu, not '{}'", name);
}

const char* CudaExpertPathName(CudaExpertPath path) {
  switch (path) {
    case CudaExpertPath::kMapped:
      return "mapped";
    case CudaExpertPath::kCopy:
      return "copy";
    case CudaExpertPath::kAuto:
      break;
  }
  return "auto";
}

Result<CudaExpertPath> ParseCudaExpertPath(std::string_view name) {
  if (name == "auto") return CudaExpertPath::kAuto;
  if (name == "mapped") return CudaExpertPath::kMapped;
  if (name == "copy") return CudaExpertPath::kCopy;
  return Error(ErrorCode::kInvalidArgument,
               "CUDA expert path must be auto, mapped or copy, not '{}'", name);
}

Status ForwardBackend::RunLayerMajor(const int* ids, int64_t n, int64_t pos0, LogitsRows rows,
                                     float* logits, ForwardStats* stats,
                                     const std::atomic<bool>* cancel) {
  (void)ids, (void)n, (void)pos0, (void)rows, (void)logits, (void)stats, (void)cancel;
  return Error(ErrorCode::kUnsupported, "the {} backend runs prompts chunk by chunk",
               BackendName(kind()));
}

bool ForwardBackend::CanTruncate(int64_t position, int64_t pos, int64_t window) const {
  if (pos < 0 || pos > position) return false;
  const int64_t cap = sliding_capacity();
  if (cap == 0) return true;
  // Ring slots hold positions [position − cap, position); the next query at pos needs
  // [pos − window + 1, pos).
  return std::max<int64_t>(0, pos - window + 1) >= std::max<int64_t>(0, position - cap);
}

Status ForwardBackend::RunAndSample(int id, int64_t pos0, uint64_t seed, double temperature,
                                    int64_t sample_position, int* token, ForwardStats* stats) {
  (void)id, (void)pos0, (void)seed, (void)temperature, (void)sample_position, (void)token,
      (void)stats;
  return Error(ErrorCode::kUnsupported, "drawing tokens on the device needs --backend cuda");
}

Status ForwardBackend::RunAndTopK(int id, int64_t pos0, int k, std::vector<int>* ids,
                                  std::vector<float>* values, std::vector<float>* logits,
                                  ForwardStats* stats) {
  (void)id, (void)pos0, (void)k, (void)ids, (void)values, (void)logits, (void)stats;
  return Error(ErrorCode::kUnsupported, "top-k on the device needs --backend cuda");
}

Result<int> ForwardBackend::HandOver(ForwardBackend& to, int64_t pos0, int64_t m,
                                     std::vector<float>* residual) {
  (void)to, (void)pos0, (void)m, (void)residual;
  return Error(ErrorCode::kUnsupported, "the {} backend cannot hand a call over",
               BackendName(kind()));
}

Status ForwardBackend::RunFrom(const float* x, int first_layer, int64_t m, int64_t pos0,
                               LogitsRows rows, float* logits, ForwardStats* stats) {
  (void)x, (void)first_layer, (void)m, (void)pos0, (void)rows, (void)logits, (void)stats;
  return Error(ErrorCode::kUnsupported, "the {} backend cannot finish another's call",
               BackendName(kind()));
}

}  // namespace rw
