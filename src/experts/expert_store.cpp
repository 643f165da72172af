#include "experts/expert_store.h"

namespace rw {

Status ExpertStore::Acquire(int layer, std::span<const int> experts, ExpertRef* out) {
  RW_RETURN_IF_ERROR(Begin(layer, experts, nullptr));
  for (size_t i = 0; i < experts.size(); ++i) {
    Result<ExpertRef> r = Wait(layer, i);
    if (!r.ok()) {
      Release(layer);
      return r.status();
    }
    out[i] = *r;
  }
  return Status::Ok();
}

Result<std::unique_ptr<ExpertStore>> OpenExpertStore(const ModelDir& dir,
                                                     const ExpertStoreOptions& options) {
  if (options.io_threads < 1 || options.io_threads > 256)
    return Error(ErrorCode::kInvalidArgument, "I/O threads must be in 1..256, not {}",
                 options.io_threads);
  if (options.kind == ExpertStoreKind::kSlots) return OpenSlotExpertStore(dir, options);
  return OpenMmapExpertStore(dir, options);
}

const char* ExpertStoreKindName(ExpertStoreKind kind) {
  return kind == ExpertStoreKind::kSlots ? "slots" : "mmap";
}

Result<ExpertStoreKind> ParseExpertStoreKind(std::string_view name) {
  if (name == "mmap") return ExpertStoreKind::kMmap;
  if (name == "slots") return ExpertStoreKind::kSlots;
  return Error(ErrorCode::kInvalidArgument, "expert store must be mmap or slots, not '{}'", name);
}

}  // namespace rw
