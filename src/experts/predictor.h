// Routing traces and the fitted early-read predictor.
//
// A routing trace records, for every token run through the model, the experts each layer chose:
// [tokens][layers][top_k] ids. `redwing trace` writes one; `redwing fit-predictor` turns traces
// into a per-layer transition table P[l][i][j] = how often expert j was chosen at layer l+1 in
// tokens that chose expert i at layer l (normalized per i), stored in the model directory. During
// decode the `fitted` early-read mode scores layer l+1's experts by summing P[l][i][·] over the
// experts i chosen at layer l and reads the best top_k early.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"

namespace rw {

struct RoutingTrace {
  int layers = 0, top_k = 0, num_experts = 0;
  std::vector<int32_t> ids;  // [tokens][layers][top_k]

  int64_t tokens() const {
    return layers * top_k == 0 ? 0 : static_cast<int64_t>(ids.size()) / (layers * top_k);
  }
  const int32_t* token(int64_t t, int layer) const { return &ids[(t * layers + layer) * top_k]; }

  Status Write(const std::string& path) const;
  static Result<RoutingTrace> Read(const std::string& path);
};

// The file name of the predictor inside a model directory.
inline constexpr const char* kPredictorFileName = "expert_predictor.bin";

class ExpertPredictor {
 public:
  // Fits the transition table from traces of one model (all with the same geometry).
  static Result<ExpertPredictor> Fit(std::span<const RoutingTrace> traces);
  Status Write(const std::string& path) const;
  // Checks the geometry against the model's.
  static Result<ExpertPredictor> Read(const std::string& path, int layers, int num_experts);

  // The top_k experts layer+1 will most probably choose, given layer's choice.
  void Predict(int layer, std::span<const int> chosen, int top_k, std::vector<int>* out) const;
  // Over a trace: the share of predicted experts that were then chosen.
  double Accuracy(const RoutingTrace& trace) const;

  int layers() const { return layers_; }
  int num_experts() const { return num_experts_; }

 private:
  int layers_ = 0, num_experts_ = 0;
  std::vector<float> p_;  // [layers-1][E][E]
};

}  // namespace rw
