// The DFlash drafter (issue 26) behind the Drafter interface: z-lab's block-diffusion draft model
// (src/draft) fed with the target's hidden states at its target_layer_ids. Each Propose runs one
// block [last token, mask × n] over the context the timeline has built so far and proposes the
// argmax of rows 1..n (greedy drafts also under sampling: the target's own draw decides what is
// emitted, so the text is plain decoding's whatever the drafts).
#pragma once

#include <memory>
#include <span>
#include <string>
#include <vector>

#include "draft/dflash_forward.h"
#include "draft/dflash_model.h"
#include "engine/drafter.h"
#include "engine/engine.h"

namespace rw {

class DFlashDrafter final : public Drafter {
 public:
  // `model` must fit `target` (Check). The drafter runs on the CPU with `pool`'s threads.
  DFlashDrafter(std::shared_ptr<const DFlashModel> model, const RuntimeModel& target,
                ThreadPool* pool);
  // Whether a drafter fits a target: the same hidden size, layers inside the target, the mask id
  // inside its vocabulary. The error names what differs.
  static Status Check(const DFlashConfig& draft, const ModelConfig& target);

  std::string name() const override { return "dflash"; }
  std::vector<int> layers() const override { return model_->config().target_layer_ids; }
  void Context(int64_t pos0, const float* rows, int64_t n) override;
  // Up to min(n, block_size − 1) drafts after context (the timeline's tokens and the last emitted
  // one).
  std::vector<int> Propose(std::span<const int> context, int n) override;

  // Score only these ids in the drafter's head (empty: the whole vocabulary). Drafts outside the
  // list are never proposed; exactness is untouched.
  void set_hot_ids(std::vector<int> ids) { hot_ids_ = std::move(ids); }
  const DFlashState& state() const { return state_; }

 private:
  std::shared_ptr<const DFlashModel> model_;
  DFlashState state_;
  std::vector<int> hot_ids_;
};

// Loads the drafter directory `dir` for `engine`'s model.
Result<std::shared_ptr<DFlashDrafter>> MakeDFlashDrafter(const std::string& dir,
                                                         const Engine& engine);

// The drafter `redwing run` uses without --drafter: <model>/drafter when it holds a drafter.
std::string DefaultDrafterDir(const std::string& model_dir);

}  // namespace rw
