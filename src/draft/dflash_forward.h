// The DFlash drafter's forward pass on the CPU (fp32 activations), one function per module of the
// reference (z-lab/dflash dflash/model.py at 10129599dffb338ff38cfd235a53ca6d3667b4dd):
// DFlashDraftModel.forward, Qwen3DFlashDecoderLayer, Qwen3DFlashAttention, Qwen3MLP and
// compute_logits, plus the cache dflash_generate keeps.
//
// A drafter state belongs to one timeline. Its context is the target's hidden states at the
// drafter's target_layer_ids for positions [0, context_end()), each row turned into one K/V row
// per drafter layer and cached (the reference caches them the same way: it crops its cache back
// to the context after every block). A block is [last accepted token, mask × n] at positions
// context_end().. ; its rows attend to [context rows ; block rows] in one softmax, and rows 1..n
// give the drafts.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "backend/weight_view.h"
#include "base/thread_pool.h"
#include "draft/dflash_model.h"

namespace rw {

// What the drafter borrows from the target: its embedding table (the block's input, raw rows)
// and its LM head (tied to the embedding table on Gemma 4), [vocab][hidden].
struct DFlashTarget {
  WeightView embed;
  WeightView lm_head;
};

class DFlashState {
 public:
  DFlashState(const DFlashModel& model, DFlashTarget target, ThreadPool* pool);

  const DFlashModel& model() const { return model_; }
  int64_t context_end() const { return end_; }
  // Drops the context at positions >= pos (the reference's crop of its draft cache).
  void Truncate(int64_t pos);
  void Reset() { Truncate(0); }

  // Appends context rows for positions pos0..pos0+n−1: `features` is [n][layers][hidden], the
  // target's residual after each of target_layer_ids (HiddenCapture's layout). pos0 must be
  // context_end(); a pos0 past it (positions the drafter never saw) restarts the context there,
  // a pos0 before it drops the context from pos0 first.
  void AddContext(const float* features, int64_t n, int64_t pos0);

  // Runs the block ids[0..b) at positions pos0.. (-1: context_end()) and returns its final
  // hidden states (after the drafter's norm), [b][hidden]. The context is unchanged. A pos0 past
  // the context (rows the drafter never got) still drafts, from the context there is.
  std::vector<float> Block(std::span<const int> ids, int64_t pos0 = -1);

  // compute_logits: the target's LM head over `rows` hidden rows, times output_multiplier, then
  // the soft cap. hot_ids empty: every id, out is [rows][vocab]; else only those ids, out is
  // [rows][hot_ids.size()] in hot_ids' order (their head rows are gathered into one matrix the
  // first time a list is seen, then reused while the list stays the same).
  void Logits(const float* hidden, int64_t rows, std::span<const int> hot_ids, float* out);

  // The reference's draft step: the block [last, mask × n], logits of rows 1..n, argmax each
  // (the first on ties; among hot_ids when given). n < block_size in the reference; any n >= 1
  // works here.
  std::vector<int> Draft(int last, int n, std::span<const int> hot_ids = {}, int64_t pos0 = -1);

 private:
  // One cached layer: K (after k_norm and RoPE) and V rows, [row][kv_heads][head_dim], for
  // positions first..first+rows−1.
  struct LayerCache {
    std::vector<float> k, v;
    int64_t first = 0;
  };
  // DFlashDraftModel.forward's first line: hidden_norm(fc(target_hidden)).
  void ContextFeatures(const float* features, int64_t n, float* out);
  // Qwen3DFlashAttention over the block (x is the normed block input [b][H]; out [b][H]).
  void Attention(int li, const float* x, int64_t b, int64_t pos0, float* out);
  // Qwen3MLP: down(silu(gate(x)) · up(x)), in place of x's rows into out.
  void Mlp(int li, const float* x, int64_t b, float* out);
  // q/k_norm per head, then RoPE at pos0.. (rows of `heads` heads).
  void NormRope(const std::vector<float>& norm, float* x, int64_t rows, int heads, int64_t pos0);
  // Keeps a sliding layer's cache to its window (plus slack for later rewinds).
  void TrimSliding(int li);

  // The LM head's rows of the last hot list, gathered into one matrix (as stored: quantized
  // rows are copied, not widened), so the hot head is one batched product.
  struct HotHead {
    std::vector<int> ids;
    std::vector<uint8_t> data, scales, biases;
    WeightView view;
  };
  const WeightView& HotView(std::span<const int> hot_ids);

  const DFlashModel& model_;
  HotHead hot_;
  const DFlashConfig& c_;
  DFlashTarget target_;
  ThreadPool* pool_;
  int64_t end_ = 0;
  std::vector<LayerCache> cache_;
};

}  // namespace rw
