#include "install/convert_repack.h"

#include <algorithm>
#include <cstring>
#include <mutex>

#include "base/bf16.h"
#include "base/check.h"
#include "base/thread_pool.h"
#include "install/quantize.h"

namespace rw {
namespace {

// Source bytes read per step when converting (bf16 rounding, quantization).
constexpr uint64_t kChunkBytes = 8u << 20;

Status ReadSlice(TensorReader& r, const SourceSlice& s, int expert, int64_t row0, int64_t rows,
                 void* dst) {
  return r.Read(s.tensor, s.ByteOffset(expert) + static_cast<uint64_t>(row0) * s.row_bytes,
                static_cast<uint64_t>(rows) * s.row_bytes, dst);
}

// Quantizes rows of bf16 values on the default pool; rows are independent.
Status QuantizeRows(const uint16_t* w, int64_t rows, int64_t cols, int bits, int group, uint32_t* q,
                    uint16_t* scales, uint16_t* biases) {
  std::mutex mu;
  Status first;
  const int64_t words = AffinePackedCols(cols, bits), groups = AffineGroups(cols, group);
  const size_t grain = static_cast<size_t>(std::max<int64_t>(1, 65536 / cols));
  ThreadPool::Default().ParallelFor(static_cast<size_t>(rows), grain, [&](size_t b, size_t e, int) {
    Status st = QuantizeAffineBf16(w + b * cols, static_cast<int64_t>(e - b), cols, bits, group,
                                   q + b * words, scales + b * groups, biases + b * groups);
    if (!st.ok()) {
      std::lock_guard<std::mutex> lock(mu);
      if (first.ok()) first = Status(st.code(), fmt::format("row {}+: {}", b, st.message()));
    }
  });
  return first;
}

}  // namespace

Status CheckpointReader::Read(const std::string& tensor, uint64_t offset, uint64_t n, void* dst) {
  auto e = ck_.Find(tensor);
  if (e.file == nullptr)
    return Error(ErrorCode::kNotFound, "{}: tensor '{}' is missing", ck_.dir(), tensor);
  return e.file->ReadRange(*e.tensor, offset, n, dst);
}

Status RepackTensor(const TensorPlan& p, int expert, TensorReader& reader, uint8_t* data,
                    uint8_t* scales, uint8_t* biases, RepackScratch* scratch) {
  const TensorDesc& t = p.target;
  const int64_t rows = t.numel() / t.cols(), cols = t.cols();
  auto annotate = [&](Status st) {
    return st.ok() ? st : st.Annotate(fmt::format("converting '{}'", p.weight.tensor));
  };
  if (p.src_affine) {
    // MLX affine is redwing's affine layout: copy words, scales and biases verbatim.
    CHECK(t.type == TensorType::kAffine && t.bits == p.src_bits && t.group_size == p.src_group);
    CHECK(p.weight.ByteSize() == t.ExpectedDataBytes() &&
          p.scales.ByteSize() == t.ExpectedScaleBytes());
    RW_RETURN_IF_ERROR(ReadSlice(reader, p.weight, expert, 0, p.weight.rows, data));
    RW_RETURN_IF_ERROR(ReadSlice(reader, p.scales, expert, 0, p.scales.rows, scales));
    return ReadSlice(reader, p.biases, expert, 0, p.biases.rows, biases);
  }
  const bool src_f32 = p.src_dtype == StDType::kF32;
  if ((t.type == TensorType::kF32 && src_f32) || (t.type == TensorType::kBf16 && !src_f32)) {
    CHECK(p.weight.ByteSize() == t.ExpectedDataBytes());
    return ReadSlice(reader, p.weight, expert, 0, rows, data);
  }
  CHECK(t.type != TensorType::kF32);  // planning never widens
  const int64_t chunk_rows = std::max<int64_t>(
      1, static_cast<int64_t>(kChunkBytes / std::max<uint64_t>(1, p.weight.row_bytes)));
  for (int64_t r0 = 0; r0 < rows; r0 += chunk_rows) {
    const int64_t n = std::min(chunk_rows, rows - r0);
    const size_t count = static_cast<size_t>(n * cols);
    // bf16 values of this chunk: straight from a bf16 source, or f32 rounded to nearest even.
    const uint16_t* w16;
    if (src_f32) {
      scratch->src.resize(count * 4);
      RW_RETURN_IF_ERROR(ReadSlice(reader, p.weight, expert, r0, n, scratch->src.data()));
      uint16_t* dst = t.type == TensorType::kBf16
                          ? reinterpret_cast<uint16_t*>(data) + r0 * cols
                          : (scratch->bf16.resize(count), scratch->bf16.data());
      const float* f = reinterpret_cast<const float*>(scratch->src.data());
      for (size_t k = 0; k < count; ++k) dst[k] = F32ToBf16(f[k]);
      if (t.type == TensorType::kBf16) continue;
      w16 = dst;
    } else {
      scratch->bf16.resize(count);
      RW_RETURN_IF_ERROR(ReadSlice(reader, p.weight, expert, r0, n, scratch->bf16.data()));
      w16 = scratch->bf16.data();
    }
    CHECK(t.type == TensorType::kAffine);
    const int64_t words = AffinePackedCols(cols, t.bits), groups = AffineGroups(cols, t.group_size);
    RW_RETURN_IF_ERROR(annotate(QuantizeRows(w16, n, cols, t.bits, t.group_size,
                                             reinterpret_cast<uint32_t*>(data) + r0 * words,
                                             reinterpret_cast<uint16_t*>(scales) + r0 * groups,
                                             reinterpret_cast<uint16_t*>(biases) + r0 * groups)));
  }
  return Status::Ok();
}

TensorPlan RestrictRows(const TensorPlan& p, int64_t row0, int64_t rows) {
  TensorPlan sub = p;
  sub.target.shape = {rows, p.target.cols()};
  for (SourceSlice* s : {&sub.weight, &sub.scales, &sub.biases}) {
    if (s->tensor.empty()) continue;
    s->row_begin += row0;
    s->rows = rows;
  }
  return sub;
}

Status WriteCoreTensor(const TensorPlan& p, TensorReader& reader, CoreWriter& core,
                       RepackScratch* scratch, uint64_t block_bytes) {
  RW_ASSIGN_OR_RETURN(TensorDesc d, core.Reserve(p.target));
  const bool affine = d.type == TensorType::kAffine;
  const int64_t rows = d.numel() / d.cols();
  const uint64_t data_bytes = d.ExpectedDataBytes(),
                 scale_bytes = affine ? d.ExpectedScaleBytes() : 0;
  // Output bytes per row, and source bytes per row (weight plus, for affine sources, scales and
  // biases). Row blocks need the source's rows to be the target's rows; every planned core
  // tensor has that, and anything else is repacked whole.
  const uint64_t data_row = rows > 0 ? data_bytes / rows : 0;
  const uint64_t scale_row = rows > 0 ? scale_bytes / rows : 0;
  uint64_t src_row = p.weight.row_bytes;
  if (p.src_affine) src_row += p.scales.row_bytes + p.biases.row_bytes;
  const bool splittable = rows > 1 && p.weight.rows == rows && data_row * rows == data_bytes &&
                          scale_row * rows == scale_bytes &&
                          (!p.src_affine || (p.scales.rows == rows && p.biases.rows == rows));
  const uint64_t per_row = std::max<uint64_t>({1, data_row + 2 * scale_row, src_row});
  const int64_t block_rows =
      splittable ? std::clamp<int64_t>(static_cast<int64_t>(block_bytes / per_row), 1, rows)
                 : std::max<int64_t>(rows, 1);  // whole
  std::vector<uint8_t> data, scales, biases;
  int64_t r0 = 0;
  do {
    const int64_t n = std::min(block_rows, rows - r0);
    const bool whole = n >= rows;
    const uint64_t nd = whole ? data_bytes : data_row * n, ns = whole ? scale_bytes : scale_row * n;
    data.resize(nd);
    scales.resize(ns);
    biases.resize(ns);
    RW_RETURN_IF_ERROR(RepackTensor(whole ? p : RestrictRows(p, r0, n), -1, reader, data.data(),
                                    scales.data(), biases.data(), scratch));
    RW_RETURN_IF_ERROR(core.WriteAt(d.data.offset + r0 * data_row, data.data(), nd));
    if (affine) {
      RW_RETURN_IF_ERROR(core.WriteAt(d.scales.offset + r0 * scale_row, scales.data(), ns));
      RW_RETURN_IF_ERROR(core.WriteAt(d.biases.offset + r0 * scale_row, biases.data(), ns));
    }
    r0 += n;
  } while (r0 < rows);
  return Status::Ok();
}

ExpertLayout PlannedExpertLayout(const ExpertLayerPlan& lp) {
  return ExpertLayout::Make(lp.gate.target, lp.up.target, lp.down.target);
}

uint64_t PlannedOutputBytes(const ConvertPlan& plan) {
  uint64_t total = kCoreAlignment;
  for (const TensorPlan& p : plan.core) {
    total += AlignUp(p.target.ExpectedDataBytes(), kCoreAlignment);
    if (p.target.type == TensorType::kAffine)
      total += 2 * AlignUp(p.target.ExpectedScaleBytes(), kCoreAlignment);
  }
  for (const ExpertLayerPlan& lp : plan.experts)
    total += PlannedExpertLayout(lp).stride * static_cast<uint64_t>(plan.config.num_experts);
  return total;
}

Status WritePlannedTensors(const ConvertPlan& plan, TensorReader& reader, const ModelDirWriter& out,
                           const std::function<void(const std::string&)>& progress) {
  RepackScratch scratch;
  RW_ASSIGN_OR_RETURN(CoreWriter core, CoreWriter::Create(out.Path(kCoreName)));
  int last_layer = -1;
  for (size_t k = 0; k < plan.core.size(); ++k) {
    const TensorPlan& p = plan.core[k];
    int layer = -1;
    if (std::sscanf(p.target.name.c_str(), "layers.%d.", &layer) == 1 && layer != last_layer &&
        progress) {
      progress(fmt::format("core: layer {}/{} ({}/{} tensors)", layer + 1, plan.config.num_layers,
                           k, plan.core.size()));
      last_layer = layer;
    }
    RW_RETURN_IF_ERROR(WriteCoreTensor(p, reader, core, &scratch));
  }
  RW_RETURN_IF_ERROR(core.Finish());
  if (progress)
    progress(
        fmt::format("core: {} tensors, {:.1f} MB", plan.core.size(), core.bytes_written() / 1e6));
  // Release the core scratch before the experts: only one blob is needed from here on.
  scratch = RepackScratch();
  if (plan.experts.empty()) return Status::Ok();

  ExpertIndex index;
  index.num_layers = static_cast<int>(plan.experts.size());
  index.num_experts = plan.config.num_experts;
  std::vector<uint8_t> blob;
  for (const ExpertLayerPlan& lp : plan.experts) {
    ExpertLayerInfo info;
    info.file = ExpertLayerFileName(lp.layer);
    info.layout = PlannedExpertLayout(lp);
    RW_RETURN_IF_ERROR(info.layout.Validate(info.file));
    RW_ASSIGN_OR_RETURN(
        ExpertLayerWriter w,
        ExpertLayerWriter::Create(out.Path(info.file), info.layout, index.num_experts));
    blob.assign(info.layout.stride, 0);
    for (int e = 0; e < index.num_experts; ++e) {
      std::fill(blob.begin(), blob.end(), 0);  // padding is part of the checksum
      const TensorPlan* parts[] = {&lp.gate, &lp.up, &lp.down};
      const TensorDesc* descs[] = {&info.layout.gate, &info.layout.up, &info.layout.down};
      for (int k = 0; k < 3; ++k) {
        const TensorDesc& d = *descs[k];
        uint8_t* base = blob.data();
        bool affine = d.type == TensorType::kAffine;
        RW_RETURN_IF_ERROR(RepackTensor(*parts[k], e, reader, base + d.data.offset,
                                        affine ? base + d.scales.offset : nullptr,
                                        affine ? base + d.biases.offset : nullptr, &scratch));
      }
      RW_RETURN_IF_ERROR(w.Write(e, blob.data()));
    }
    RW_ASSIGN_OR_RETURN(info.xxh3, w.Finish());
    index.layers.push_back(std::move(info));
    if (progress)
      progress(fmt::format("experts: layer {}/{} ({} experts)", lp.layer + 1,
                           plan.config.num_layers, index.num_experts));
  }
  return WriteFileAtomic(out.Path(kExpertIndexName), index.ToJson().dump(1) + "\n");
}

}  // namespace rw
