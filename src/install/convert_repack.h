// Repacking: executes a ConvertPlan, turning source tensor bytes into redwing tensors (copied
// verbatim, rounded to bf16, or MLX-affine quantized) and writing core.bin and the expert files
// of a staged model directory. Memory stays bounded by one row block of a core tensor (at most
// kRepackBlockBytes of source or output) plus one expert blob: sources are read by row range,
// never whole files, and never mapped; core tensors are written in row blocks with
// CoreWriter::Reserve / WriteAt.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "format/core_file.h"
#include "format/model_dir.h"
#include "install/convert_plan.h"
#include "install/safetensors.h"

namespace rw {

// Where source bytes come from: a local checkpoint here; the installer may supply its own.
class TensorReader {
 public:
  virtual ~TensorReader() = default;
  // Reads bytes [offset, offset + n) of source tensor `tensor` into dst. Errors name the file
  // and the tensor.
  virtual Status Read(const std::string& tensor, uint64_t offset, uint64_t n, void* dst) = 0;
};

class CheckpointReader : public TensorReader {
 public:
  explicit CheckpointReader(const SafetensorsCheckpoint& ck) : ck_(ck) {}
  Status Read(const std::string& tensor, uint64_t offset, uint64_t n, void* dst) override;

 private:
  const SafetensorsCheckpoint& ck_;
};

// Buffers reused from tensor to tensor, so the peak is the largest tensor, not the sum.
struct RepackScratch {
  std::vector<uint8_t> src;
  std::vector<uint16_t> bf16;
};

// Produces target p (of expert `expert`, or -1 for core tensors) into data, scales and biases,
// which hold p.target.ExpectedDataBytes() / ExpectedScaleBytes() bytes (scales/biases only for
// affine targets).
Status RepackTensor(const TensorPlan& p, int expert, TensorReader& reader, uint8_t* data,
                    uint8_t* scales, uint8_t* biases, RepackScratch* scratch);

// Bytes of source, and of output, that one row block of a core tensor may take (a single row
// larger than this is a block of its own).
inline constexpr uint64_t kRepackBlockBytes = 16u << 20;

// Target p restricted to its rows [row0, row0 + rows): the same conversion of those rows only
// (core tensors; the result's target is [rows, cols]).
TensorPlan RestrictRows(const TensorPlan& p, int64_t row0, int64_t rows);

// Reserves core tensor p in `core` and writes it in row blocks of at most block_bytes of source
// and of output each; the bytes equal RepackTensor of the whole tensor.
Status WriteCoreTensor(const TensorPlan& p, TensorReader& reader, CoreWriter& core,
                       RepackScratch* scratch, uint64_t block_bytes = kRepackBlockBytes);

// The blob layout of one expert layer of the plan.
ExpertLayout PlannedExpertLayout(const ExpertLayerPlan& lp);

// Writes core.bin, experts/layer_NNN.bin and experts/index.json into the writer's staging
// directory. progress (optional) receives one line per layer.
Status WritePlannedTensors(const ConvertPlan& plan, TensorReader& reader, const ModelDirWriter& out,
                           const std::function<void(const std::string&)>& progress = {});

// Bytes the plan's tensors take in the model directory (core and experts, with alignment).
uint64_t PlannedOutputBytes(const ConvertPlan& plan);

}  // namespace rw
