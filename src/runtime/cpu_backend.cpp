// The CPU forward pass (runtime/forward.h) and its KV cache behind ForwardBackend.
#include <algorithm>

#include "runtime/forward_backend.h"

namespace rw {
namespace {

class CpuBackend final : public ForwardBackend {
 public:
  CpuBackend(const RuntimeModel& model, int64_t max_context, int64_t max_chunk, ThreadPool* pool,
             KvType kv_type, Precision precision)
      : kv_(model.config(), max_context, max_chunk, kv_type),
        fwd_(model, max_chunk),
        pool_(pool),
        num_layers_(model.config().num_layers) {
    fwd_.set_precision(precision);
  }

  BackendKind kind() const override { return BackendKind::kCpu; }
  int64_t max_chunk() const override { return fwd_.max_chunk(); }
  int64_t sliding_capacity() const override { return kv_.sliding_capacity(); }
  bool layer_major() const override { return true; }

  Status Run(const int* ids, int64_t m, int64_t pos0, LogitsRows rows, float* logits,
             ForwardStats* stats, const std::atomic<bool>* cancel) override {
    return fwd_.Run(kv_, ids, m, pos0, rows, logits, pool_, stats, cancel);
  }
  Status RunLayerMajor(const int* ids, int64_t n, int64_t pos0, LogitsRows rows, float* logits,
                       ForwardStats* stats, const std::atomic<bool>* cancel) override {
    return fwd_.RunLayerMajor(kv_, ids, n, pos0, rows, logits, pool_, stats, cancel);
  }
  Status RunFrom(const float* x, int first_layer, int64_t m, int64_t pos0, LogitsRows rows,
                 float* logits, ForwardStats* stats) override {
    return fwd_.RunFrom(kv_, x, first_layer, m, pos0, rows, logits, pool_, stats);
  }

  Status SetCapture(std::vector<int> layers) override {
    std::sort(layers.begin(), layers.end());
    layers.erase(std::unique(layers.begin(), layers.end()), layers.end());
    for (const int li : layers)
      if (li < 0 || li >= num_layers_)
        return Error(ErrorCode::kInvalidArgument,
                     "cannot capture the hidden state of layer {}: the model has {} layers", li,
                     num_layers_);
    capture_ = HiddenCapture{};
    capture_.layers = std::move(layers);
    fwd_.set_capture(capture_.layers.empty() ? nullptr : &capture_);
    return Status::Ok();
  }
  const HiddenCapture& capture() const override { return capture_; }

  void set_routing_trace(RoutingTrace* trace) override { fwd_.set_routing_trace(trace); }
  void set_before_layer(std::function<void(int layer)> hook) override {
    fwd_.set_before_layer(std::move(hook));
  }
  KvCache* host_cache() override { return &kv_; }

 private:
  KvCache kv_;
  ForwardPass fwd_;
  ThreadPool* pool_;
  int num_layers_;
  HiddenCapture capture_;
};

}  // namespace

std::unique_ptr<ForwardBackend> NewCpuBackend(const RuntimeModel& model, int64_t max_context,
                                              int64_t max_chunk, ThreadPool* pool, KvType kv_type,
                                              Precision precision) {
  return std::make_unique<CpuBackend>(model, max_context, max_chunk, pool, kv_type, precision);
}

}  // namespace rw
