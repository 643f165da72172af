// Routing popularity of a model directory under a proxy input (see synth.h).
#include <algorithm>
#include <cmath>
#include <numeric>

#include "base/bf16.h"
#include "format/model_dir.h"
#include "install/quantize.h"
#include "install/synth.h"
#include "install/synth_gen.h"

namespace rw {
namespace {

Result<std::vector<float>> LoadFloats(const ModelDir& dir, const std::string& name) {
  const TensorDesc* t = dir.core().Find(name);
  if (t == nullptr) return Error(ErrorCode::kNotFound, "{}: no tensor '{}'", dir.path(), name);
  std::vector<float> out(t->numel());
  const CoreFile& core = dir.core();
  switch (t->type) {
    case TensorType::kF32:
      std::copy_n(core.Ptr<float>(t->data), out.size(), out.begin());
      break;
    case TensorType::kBf16:
      for (size_t i = 0; i < out.size(); ++i) out[i] = Bf16ToF32(core.Ptr<uint16_t>(t->data)[i]);
      break;
    case TensorType::kAffine:
      RW_RETURN_IF_ERROR(DequantizeAffine(
          core.Ptr<uint32_t>(t->data), core.Ptr<uint16_t>(t->scales), core.Ptr<uint16_t>(t->biases),
          t->rows(), t->cols(), t->bits, t->group_size, out.data()));
      break;
  }
  return out;
}

}  // namespace

Result<RoutingPopularity> MeasureRoutingPopularity(const std::string& model_dir, int tokens,
                                                   uint64_t seed) {
  RW_ASSIGN_OR_RETURN(ModelDir dir, ModelDir::Open(model_dir));
  const ModelConfig& c = dir.config();
  if (!c.enable_moe) return Error(ErrorCode::kInvalidArgument, "{}: not a MoE model", model_dir);
  if (tokens <= 0) return Error(ErrorCode::kInvalidArgument, "tokens must be positive");
  RoutingPopularity pop;
  pop.num_layers = c.num_layers;
  pop.num_experts = c.num_experts;
  pop.top_k = c.top_k;
  pop.tokens = tokens;
  const int h = c.hidden_size, n = c.num_experts;
  const int n_top = std::max(1, static_cast<int>(std::lround(0.1 * n)));
  pop.top10_uniform = static_cast<double>(n_top) / n;
  std::vector<float> x(h), logits(n);
  std::vector<int> order(n);
  for (int l = 0; l < c.num_layers; ++l) {
    RW_ASSIGN_OR_RETURN(std::vector<float> w,
                        LoadFloats(dir, fmt::format("layers.{}.router.proj", l)));
    RW_ASSIGN_OR_RETURN(std::vector<float> scale,
                        LoadFloats(dir, fmt::format("layers.{}.router.scale", l)));
    std::vector<int64_t> counts(n, 0);
    synth::Stream s(synth::TensorKey(seed, "routing_proxy"), static_cast<uint64_t>(l), 0);
    for (int t = 0; t < tokens; ++t) {
      // Gaussian hidden state (Box-Muller), then the router's own input transform.
      double ss = 0;
      for (int i = 0; i < h; i += 2) {
        double u1 = (static_cast<double>(s.Next() >> 11) + 1.0) * 0x1.0p-53,
               u2 = static_cast<double>(s.Next() >> 11) * 0x1.0p-53;
        double r = std::sqrt(-2.0 * std::log(u1));
        x[i] = static_cast<float>(r * std::cos(2 * M_PI * u2));
        if (i + 1 < h) x[i + 1] = static_cast<float>(r * std::sin(2 * M_PI * u2));
      }
      for (int i = 0; i < h; ++i) ss += static_cast<double>(x[i]) * x[i];
      const float norm = static_cast<float>(1.0 / std::sqrt(ss / h + c.rms_norm_eps) /
                                            std::sqrt(static_cast<double>(h)));
      for (int i = 0; i < h; ++i) x[i] *= norm * scale[i];
      for (int e = 0; e < n; ++e) {
        const float* row = w.data() + static_cast<size_t>(e) * h;
        float acc = 0;
        for (int i = 0; i < h; ++i) acc += row[i] * x[i];
        logits[e] = acc;
      }
      std::iota(order.begin(), order.end(), 0);
      std::partial_sort(order.begin(), order.begin() + c.top_k, order.end(), [&](int a, int b) {
        return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
      });
      for (int k = 0; k < c.top_k; ++k) counts[order[k]]++;
    }
    std::vector<int64_t> sorted = counts;
    std::sort(sorted.begin(), sorted.end(), std::greater<>());
    const double picks = static_cast<double>(tokens) * c.top_k;
    pop.top10_share += std::accumulate(sorted.begin(), sorted.begin() + n_top, int64_t{0}) / picks;
    pop.max_over_uniform += sorted[0] / (picks / n);
    pop.counts.push_back(std::move(counts));
  }
  pop.top10_share /= c.num_layers;
  pop.max_over_uniform /= c.num_layers;
  return pop;
}

}  // namespace rw
