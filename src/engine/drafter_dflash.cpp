#include "engine/drafter_dflash.h"

#include <algorithm>

#include "base/file.h"

namespace rw {

Status DFlashDrafter::Check(const DFlashConfig& d, const ModelConfig& t) {
  if (d.hidden != t.hidden_size)
    return Error(ErrorCode::kInvalidArgument,
                 "the drafter's hidden size {} differs from the model's {} (a drafter reads the "
                 "model's embedding rows and hidden states: it was made for another model)",
                 d.hidden, t.hidden_size);
  for (const int l : d.target_layer_ids)
    if (l >= t.num_layers)
      return Error(ErrorCode::kInvalidArgument,
                   "the drafter reads layer {} of the model, which has {} layers", l, t.num_layers);
  if (d.mask_token_id >= t.vocab_size)
    return Error(ErrorCode::kInvalidArgument,
                 "the drafter's mask_token_id {} is outside the model's vocabulary ({} ids)",
                 d.mask_token_id, t.vocab_size);
  return Status::Ok();
}

DFlashDrafter::DFlashDrafter(std::shared_ptr<const DFlashModel> model, const RuntimeModel& target,
                             ThreadPool* pool)
    : model_(std::move(model)),
      state_(*model_, DFlashTarget{target.embed(), target.embed()}, pool) {}

void DFlashDrafter::Context(int64_t pos0, const float* rows, int64_t n) {
  state_.AddContext(rows, n, pos0);
}

std::vector<int> DFlashDrafter::Propose(std::span<const int> context, int n) {
  if (context.empty() || n <= 0) return {};
  // The block starts at the last emitted token's position; the context rows end just before it.
  const int64_t start = static_cast<int64_t>(context.size()) - 1;
  if (state_.context_end() > start) state_.Truncate(start);
  // Rows missing before start (a backend call whose capture did not reach the drafter) only
  // make the drafts worse: draft at the block's true position from the context there is.
  const int k = std::min(n, model_->config().block_size - 1);
  return state_.Draft(context.back(), k, hot_ids_, start);
}

Result<std::shared_ptr<DFlashDrafter>> MakeDFlashDrafter(const std::string& dir,
                                                         const Engine& engine) {
  RW_ASSIGN_OR_RETURN(std::unique_ptr<DFlashModel> m, DFlashModel::Open(dir));
  if (Status st = DFlashDrafter::Check(m->config(), engine.config()); !st.ok())
    return Error(st.code(), "{}: {}", dir, st.message());
  return std::make_shared<DFlashDrafter>(std::shared_ptr<const DFlashModel>(std::move(m)),
                                         engine.model(), engine.pool());
}

std::string DefaultDrafterDir(const std::string& model_dir) {
  const std::string d = JoinPath(model_dir, "drafter");
  return DFlashModel::IsDrafterDir(d) ? d : std::string();
}

}  // namespace rw
