#include "install/installer_layout.h"

#include <algorithm>
#include <cstring>
#include <map>

#include "install/convert_repack.h"

namespace rw {
namespace {

struct Located {
  size_t shard;
  const StTensor* tensor;
};

class LayoutBuilder {
 public:
  LayoutBuilder(InstallLayout* out, const std::vector<SourceShard>& shards) : out_(out) {
    for (size_t s = 0; s < shards.size(); ++s)
      for (const StTensor& t : shards[s].tensors) where_[t.name] = Located{s, &t};
  }

  // Spans for target part(s) of plan p for `expert` (-1: core), placed at data/scales/biases.
  Status Add(const TensorPlan& p, int expert, int file, const TensorDesc& placed, uint64_t base,
             int unit) {
    const TensorDesc& t = p.target;
    const bool verbatim = p.src_affine ||
                          (t.type == TensorType::kF32 && p.src_dtype == StDType::kF32) ||
                          (t.type == TensorType::kBf16 && p.src_dtype != StDType::kF32);
    if (verbatim) {
      RW_RETURN_IF_ERROR(Copy(p.weight, expert, file, base + placed.data.offset, unit));
      if (p.src_affine) {
        RW_RETURN_IF_ERROR(Copy(p.scales, expert, file, base + placed.scales.offset, unit));
        RW_RETURN_IF_ERROR(Copy(p.biases, expert, file, base + placed.biases.offset, unit));
      }
      return Status::Ok();
    }
    SinkSpan s;
    RW_RETURN_IF_ERROR(Source(p.weight, expert, &s));
    const uint64_t rows = static_cast<uint64_t>(t.numel() / t.cols());
    s.file = file;
    s.convert = true;
    s.plan = &p;
    s.row_bytes = p.weight.row_bytes;
    s.data_off = base + placed.data.offset;
    s.data_row = t.ExpectedDataBytes() / rows;
    if (t.type == TensorType::kAffine) {
      s.scales_off = base + placed.scales.offset;
      s.biases_off = base + placed.biases.offset;
      s.scale_row = t.ExpectedScaleBytes() / rows;
    }
    s.unit = unit;
    return Push(std::move(s));
  }

 private:
  Status Source(const SourceSlice& slice, int expert, SinkSpan* s) {
    auto it = where_.find(slice.tensor);
    if (it == where_.end())
      return Error(ErrorCode::kInternal, "planned tensor '{}' is in no shard", slice.tensor);
    const StTensor& t = *it->second.tensor;
    const uint64_t off = slice.ByteOffset(expert), n = slice.ByteSize();
    if (off + n > t.size)
      return Error(ErrorCode::kInternal, "slice of '{}' beyond the tensor", slice.tensor);
    s->begin = t.offset + off;
    s->end = s->begin + n;
    s->tensor = slice.tensor;
    shard_ = it->second.shard;
    return Status::Ok();
  }
  Status Copy(const SourceSlice& slice, int expert, int file, uint64_t target, int unit) {
    SinkSpan s;
    RW_RETURN_IF_ERROR(Source(slice, expert, &s));
    s.file = file;
    s.offset = target;
    s.unit = unit;
    return Push(std::move(s));
  }
  Status Push(SinkSpan s) {
    if (s.unit >= 0) out_->unit_source_bytes[s.unit] += s.end - s.begin;
    if (s.end > s.begin) out_->shards[shard_].spans.push_back(std::move(s));
    return Status::Ok();
  }

  InstallLayout* out_;
  std::map<std::string, Located> where_;
  size_t shard_ = 0;
};

// CoreWriter's placement: every part at the next 4 KiB boundary after the previous one.
void PlaceCore(InstallLayout* l) {
  uint64_t end = kCoreAlignment;
  auto part = [&](uint64_t n, ByteRange* r) {
    r->offset = end;
    r->size = n;
    end = AlignUp(end + n, kCoreAlignment);
  };
  for (const TensorPlan& p : l->plan.core) {
    TensorDesc d = p.target;
    part(d.ExpectedDataBytes(), &d.data);
    if (d.type == TensorType::kAffine) {
      part(d.ExpectedScaleBytes(), &d.scales);
      part(d.ExpectedScaleBytes(), &d.biases);
    }
    l->core_tensors.push_back(std::move(d));
  }
  Json dir{{"version", 1}, {"alignment", kCoreAlignment}, {"tensors", Json::array()}};
  for (const TensorDesc& t : l->core_tensors) dir["tensors"].push_back(t.ToJson());
  l->core_directory = dir.dump();
  l->core_data_end = end;
  l->core_size = end + l->core_directory.size();
}

}  // namespace

uint64_t InstallLayout::target_file_size(int file) const {
  if (file == kCoreFileId) return core_size;
  return expert_layers[file - 1].layout.stride * static_cast<uint64_t>(num_experts);
}

std::string InstallLayout::target_file_name(int file) const {
  return file == kCoreFileId ? std::string(kCoreName) : expert_layers[file - 1].file;
}

uint64_t InstallLayout::total_output_bytes() const {
  uint64_t n = 0;
  for (int f = 0; f < num_files(); ++f) n += target_file_size(f);
  return n;
}

Result<InstallLayout> BuildInstallLayout(ConvertPlan plan, const std::vector<SourceShard>& shards) {
  InstallLayout l;
  l.plan = std::move(plan);
  l.num_experts = l.plan.config.num_experts;
  for (const SourceShard& s : shards)
    l.shards.push_back(ShardLayout{s.file, s.size, s.sha256, {}, 0, s.header});
  PlaceCore(&l);
  for (const ExpertLayerPlan& lp : l.plan.experts) {
    ExpertLayerInfo info;
    info.file = ExpertLayerFileName(lp.layer);
    info.layout = PlannedExpertLayout(lp);
    RW_RETURN_IF_ERROR(info.layout.Validate(info.file));
    l.expert_layers.push_back(std::move(info));
  }
  l.unit_source_bytes.assign(l.expert_layers.size() * static_cast<size_t>(l.num_experts), 0);

  LayoutBuilder b(&l, shards);
  for (size_t k = 0; k < l.plan.core.size(); ++k)
    RW_RETURN_IF_ERROR(b.Add(l.plan.core[k], -1, kCoreFileId, l.core_tensors[k], 0, -1));
  for (size_t li = 0; li < l.plan.experts.size(); ++li) {
    const ExpertLayerPlan& lp = l.plan.experts[li];
    const ExpertLayout& lay = l.expert_layers[li].layout;
    for (int e = 0; e < l.num_experts; ++e) {
      const int unit = static_cast<int>(li) * l.num_experts + e;
      const uint64_t base = lay.stride * static_cast<uint64_t>(e);
      RW_RETURN_IF_ERROR(b.Add(lp.gate, e, 1 + static_cast<int>(li), lay.gate, base, unit));
      RW_RETURN_IF_ERROR(b.Add(lp.up, e, 1 + static_cast<int>(li), lay.up, base, unit));
      RW_RETURN_IF_ERROR(b.Add(lp.down, e, 1 + static_cast<int>(li), lay.down, base, unit));
    }
  }
  for (ShardLayout& s : l.shards) {
    std::sort(s.spans.begin(), s.spans.end(),
              [](const SinkSpan& a, const SinkSpan& b) { return a.begin < b.begin; });
    for (size_t k = 0; k < s.spans.size(); ++k) {
      if (k > 0 && s.spans[k].begin < s.spans[k - 1].end)
        return Error(ErrorCode::kUnsupported,
                     "{}: bytes {}-{} of '{}' would feed two targets (overlaps '{}')", s.file,
                     s.spans[k].begin, s.spans[k - 1].end - 1, s.spans[k].tensor,
                     s.spans[k - 1].tensor);
      if (s.spans[k].end > s.size)
        return Error(ErrorCode::kCorrupt, "{}: tensor '{}' ends past the shard", s.file,
                     s.spans[k].tensor);
      s.needed_bytes += s.spans[k].end - s.spans[k].begin;
    }
  }
  return l;
}

Status FinishCoreFile(const InstallLayout& layout, File& core) {
  struct Header {
    char magic[8];
    uint64_t dir_offset, dir_size, data_end;
  } h{};
  static_assert(sizeof(Header) == 32);
  std::memcpy(h.magic, kCoreMagic, 8);
  h.dir_offset = layout.core_data_end;
  h.dir_size = layout.core_directory.size();
  h.data_end = layout.core_data_end;
  RW_RETURN_IF_ERROR(core.PwriteAll(layout.core_directory.data(), layout.core_directory.size(),
                                    layout.core_data_end));
  RW_RETURN_IF_ERROR(core.Truncate(layout.core_size));
  RW_RETURN_IF_ERROR(core.Sync());
  // The magic goes in last, as CoreWriter does: a core file without it never parses.
  RW_RETURN_IF_ERROR(core.PwriteAll(&h, sizeof h, 0));
  return core.Sync();
}

}  // namespace rw
