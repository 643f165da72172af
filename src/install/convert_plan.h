// Conversion planning: which source tensor (and which rows of it) feeds each tensor of a redwing
// model directory, in which encoding, and what it becomes. Planning only looks at config.json and
// the tensors' names, dtypes and shapes (safetensors headers), never at tensor data, so it can run
// on headers fetched over the network as well as on a local checkpoint, and every structural error
// (missing tensor, wrong shape, bits that disagree with the shapes, unknown tensors) is found
// before anything is written.
//
// Sources (reference/gemma4-model.md §3):
//   - Hugging Face bf16/f32: keys "model.language_model.*" (Gemma4ForConditionalGeneration) or
//     "model.*" (Gemma4ForCausalLM); experts fused as experts.gate_up_proj [E, 2I, H] (rows 0..I-1
//     gate, I..2I-1 up) and experts.down_proj [E, H, I].
//   - MLX affine: keys "language_model.model.*"; each quantized module as .weight (U32 words),
//     .scales and .biases; experts as experts.switch_glu.{gate,up,down}_proj [E, out, ...].
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "base/json.h"
#include "base/status.h"
#include "format/model_config.h"
#include "format/tensor.h"
#include "install/safetensors.h"

namespace rw {

enum class SourceKind { kHf, kMlx };
const char* SourceKindName(SourceKind k);  // "hf" / "mlx"

// What --quantize asks for. Norms, scales and layer_scalar always keep their source float type.
//   keep: values exactly as the source stores them (bf16, f32, or MLX affine copied verbatim).
//   q4:   float sources only: 4-bit affine g64 for every linear and the embedding (the dense MLP
//         included), 8-bit g64 for router.proj, as MLX's quantizer computes it on bf16 inputs.
//   q8:   float sources only: 8-bit affine g64 for every linear and the embedding.
//   bf16: float sources only: linears and embedding rounded to bf16 (nearest even).
// A linear whose input width is not a multiple of 64 stays in its source float type (as mlx-lm
// skips such modules).
enum class QuantizeMode { kKeep, kQ4, kQ8, kBf16 };
Result<QuantizeMode> ParseQuantizeMode(const std::string& s);
const char* QuantizeModeName(QuantizeMode m);

// A source tensor as its header describes it. `file` names the shard in errors.
struct SourceTensorInfo {
  std::string name;
  StDType dtype = StDType::kU8;
  std::vector<int64_t> shape;
  std::string file;
};

// A run of rows of a source tensor viewed as 2-D [total_rows, row_bytes]: rows
// [row_begin + expert * expert_row_stride, +rows). Non-expert tensors use the whole tensor.
struct SourceSlice {
  std::string tensor;  // empty: unused
  int64_t row_begin = 0;
  int64_t rows = 0;
  int64_t expert_row_stride = 0;
  uint64_t row_bytes = 0;

  uint64_t ByteOffset(int expert) const {
    return static_cast<uint64_t>(row_begin + static_cast<int64_t>(expert < 0 ? 0 : expert) *
                                                 expert_row_stride) *
           row_bytes;
  }
  uint64_t ByteSize() const { return static_cast<uint64_t>(rows) * row_bytes; }
};

// One target tensor: a core tensor, or one part (gate/up/down) of every expert blob of a layer.
struct TensorPlan {
  TensorDesc target;  // name, type, shape (logical [rows, cols]), bits, group; ranges unset
  // Source encoding: a float dtype (BF16 or F32), or affine (U32 words + scales/biases of
  // scale_dtype) with src_bits / src_group.
  bool src_affine = false;
  StDType src_dtype = StDType::kBF16;  // float dtype, or the scales' dtype when affine
  int src_bits = 0;
  int src_group = 0;
  SourceSlice weight, scales, biases;  // scales/biases only when src_affine
};

struct ExpertLayerPlan {
  int layer = 0;
  TensorPlan gate, up, down;  // target names "gate", "up", "down"
};

struct ConvertPlan {
  SourceKind kind = SourceKind::kHf;
  QuantizeMode mode = QuantizeMode::kKeep;
  std::string prefix;        // language-model key prefix in the source ("model.language_model.")
  std::string source_dtype;  // "bfloat16" / "float32": the source's float type
  ModelConfig config;
  std::vector<TensorPlan> core;          // in write order
  std::vector<ExpertLayerPlan> experts;  // one per layer when the config enables MoE
  Json skipped = Json::array();          // [{prefix, tensors, reason}]
  Json mlx_quantization;                 // the source's base {bits, group_size}, MLX only
  std::vector<std::string> notes;        // for the log / progress output
  uint64_t source_bytes = 0;             // bytes of every tensor the plan reads
};

// Builds the plan. `config_json` is the source's config.json; `tensors` every tensor of the
// checkpoint (all shards). `what` names the source in errors (its directory).
Result<ConvertPlan> PlanConversion(const Json& config_json,
                                   const std::vector<SourceTensorInfo>& tensors, QuantizeMode mode,
                                   const std::string& what);

// The tensor list of an opened local checkpoint, for PlanConversion.
std::vector<SourceTensorInfo> ListSourceTensors(const SafetensorsCheckpoint& ck);

}  // namespace rw
