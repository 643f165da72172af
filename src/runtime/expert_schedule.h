// How the CPU forward pass gets Gemma4TextExperts (F3) computed: which experts a chunk needs,
// in what batches the store is asked for them, in what order and on which threads they run, and
// the reads started early for the next layer. The numerics are the reference module's,
// moe = Σ_e w_e · down_e(gelu_tanh(gate_e u2) ⊙ up_e u2), summed in ascending expert order
// whatever order the experts were computed in, so every store and thread count gives the same
// bits. ForwardPass owns one and calls Begin, then Run, once per layer that has experts.
#pragma once

#include <cstdint>
#include <mutex>
#include <utility>
#include <vector>

#include "base/status.h"
#include "base/thread_pool.h"
#include "base/zeroed_floats.h"
#include "runtime/model.h"

namespace rw {

class ExpertSchedule {
 public:
  // Scratch for chunks of up to max_chunk tokens (per-thread scratch grows on first use).
  ExpertSchedule(const RuntimeModel& model, int64_t max_chunk);
  // Floats of scratch an ExpertSchedule takes for chunks of max_chunk with `threads` computing
  // experts.
  static int64_t ScratchFloats(const ModelConfig& config, int64_t max_chunk, int threads);

  // Plans layer li's experts for a chunk of m tokens from their router choice (idx, w: [m][k])
  // and asks the store for the first batch, so its reads overlap whatever the caller computes
  // before Run (the dense MLP). One token (decode): also asks for the next layer's likely
  // experts at low priority, guessed by the next layer's router from the residual h ([1][H]),
  // or by the fitted predictor, as the model says.
  Status Begin(int li, int64_t m, const int* idx, const float* w, const float* h);
  // Computes every planned expert on its users' rows of u2 ([m][H], the experts' normed input),
  // batch by batch, and writes moe ([m][H]) = the weighted sum of their outputs. Adds the
  // (token, expert) pairs computed to *pairs, and to *stall_s the wall time in which a thread
  // waited for a read while none computed.
  Status Run(int li, int64_t m, const float* u2, float* moe, ThreadPool* pool, int64_t* pairs,
             double* stall_s);

  // How well the early reads guessed, since the last call: experts guessed for a next layer,
  // how many of them it then chose, and how many it chose in all (recall = right / chosen,
  // precision = right / guessed). Only decode steps guess.
  struct EarlyCounts {
    int64_t guessed = 0, right = 0, chosen = 0;
  };
  EarlyCounts TakeEarlyCounts() { return std::exchange(early_counts_, EarlyCounts{}); }
  // The experts' matvec arithmetic (the early reads' router guess stays exact).
  void set_precision(cpu::Precision precision) { precision_ = precision; }

 private:
  // Times the stretches in which some thread waits for an expert read and no thread computes
  // (a thread computing while another waits hides that wait).
  class StallClock {
   public:
    void Enter(bool waiting);  // a thread starts waiting (true) or computing (false)
    void Leave(bool waiting);
    double TakeSeconds();  // the stall time so far, reset to 0

   private:
    void Update(int64_t now);
    std::mutex mu_;
    int waiting_ = 0, computing_ = 0;
    int64_t since_ = -1;  // start of the current stall (ns), -1: none
    int64_t total_ns_ = 0;
  };
  struct Scratch {
    ZeroedFloats in, g, u;  // grouped input rows, gate and up outputs
  };
  void EarlyReads(int next, const float* h);
  Status RunBatch(int li, size_t b, const float* u2, ThreadPool* pool);
  void RunExpert(size_t i, const ExpertRef& ref, const float* u2, Scratch& s, ThreadPool* pool);
  bool SideBySide(size_t b0, size_t b1, int threads) const;
  void EnsureScratch(int threads);

  const RuntimeModel& model_;
  const ModelConfig& c_;
  int64_t max_chunk_;
  // One scratch per thread computing experts, and every (token, expert) output [m·k][H].
  std::vector<Scratch> scratch_;
  ZeroedFloats y_;
  // The current layer's plan: distinct experts (ascending), their (token, weight) users, each
  // expert's first row in y_, the batches Begin is asked for, residency at Begin.
  std::vector<int> used_;
  std::vector<std::vector<std::pair<int, float>>> users_;
  std::vector<int64_t> row0_;
  std::vector<std::pair<size_t, size_t>> batches_;
  std::vector<uint8_t> resident_;
  bool single_token_ = false;
  // The chunk has at most kExactRows tokens (a verify): experts run the exact multi-row matvec,
  // so each token's rows are the bits a decode step gives it. A prefill chunk's experts use
  // MatMul (faster from 9 users on).
  bool exact_rows_ = false;
  cpu::Precision precision_ = cpu::Precision::kExact;
  ZeroedFloats early_r_, early_logits_;  // the next layer's router guess
  std::vector<int> early_guess_;
  int early_guess_layer_ = -1;  // the layer early_guess_ is for (-1: none)
  EarlyCounts early_counts_;
  StallClock stall_;
};

}  // namespace rw
