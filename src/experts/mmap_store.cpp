// The simplest ExpertStore: the layer files are mapped once and Acquire is pointer arithmetic.
#include <atomic>

#include "experts/expert_store.h"

namespace rw {
namespace {

class MmapExpertStore final : public ExpertStore {
 public:
  Status Open(const ModelDir& dir) {
    const ExpertIndex* idx = dir.experts();
    if (idx == nullptr)
      return Error(ErrorCode::kNotFound, "{}: the model has no routed experts", dir.path());
    num_experts_ = idx->num_experts;
    for (const ExpertLayerInfo& info : idx->layers) {
      RW_ASSIGN_OR_RETURN(MappedFile m, MappedFile::Open(dir.FilePath(info.file)));
      if (m.size() < info.layout.stride * static_cast<uint64_t>(num_experts_))
        return Error(ErrorCode::kCorrupt, "{}: {} bytes, {} experts × stride {} expected", m.path(),
                     m.size(), num_experts_, info.layout.stride);
      maps_.push_back(std::move(m));
      layouts_.push_back(&info.layout);
    }
    return Status::Ok();
  }

  Status Acquire(int layer, std::span<const int> experts, ExpertRef* out) override {
    if (layer < 0 || layer >= static_cast<int>(maps_.size()))
      return Error(ErrorCode::kInvalidArgument, "expert layer {} out of range", layer);
    const ExpertLayout* layout = layouts_[layer];
    for (size_t i = 0; i < experts.size(); ++i) {
      int e = experts[i];
      if (e < 0 || e >= num_experts_)
        return Error(ErrorCode::kInvalidArgument, "expert {} out of range", e);
      out[i] = ExpertRef{maps_[layer].data() + layout->stride * static_cast<uint64_t>(e), layout};
      bytes_.fetch_add(layout->blob_size, std::memory_order_relaxed);
    }
    acquires_.fetch_add(experts.size(), std::memory_order_relaxed);
    return Status::Ok();
  }

  ExpertStoreStats stats() const override {
    return ExpertStoreStats{acquires_.load(), bytes_.load()};
  }
  const char* kind() const override { return "mmap"; }

 private:
  int num_experts_ = 0;
  std::vector<MappedFile> maps_;
  std::vector<const ExpertLayout*> layouts_;
  std::atomic<uint64_t> acquires_{0}, bytes_{0};
};

}  // namespace

Result<std::unique_ptr<ExpertStore>> OpenMmapExpertStore(const ModelDir& dir) {
  auto store = std::make_unique<MmapExpertStore>();
  RW_RETURN_IF_ERROR(store->Open(dir));
  return std::unique_ptr<ExpertStore>(std::move(store));
}

}  // namespace rw
