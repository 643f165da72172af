// Tiny Gemma 4 source checkpoints for the convert tests, written with the safetensors writer:
// Hugging Face layouts (model.language_model.* or model.*, bf16 or f32, single file or sharded)
// and the MLX affine layout (language_model.model.*, 4/8-bit, per-module overrides).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "base/json.h"
#include "base/status.h"
#include "install/convert.h"
#include "install/safetensors.h"

namespace rw::test {

struct TinyGeometry {
  int vocab = 256;
  int hidden = 128;
  int layers = 3;  // the last one full attention, the rest sliding
  int heads = 2;
  int kv_heads = 2;
  int head_dim = 32;
  int full_kv_heads = 1;
  int full_head_dim = 64;
  int intermediate = 128;
  int experts = 4;
  int top_k = 2;
  int moe_intermediate = 64;
  bool k_eq_v = true;
};

enum class Layout {
  kHfConditional,  // model.language_model.*, nested text_config
  kHfCausal,       // model.*, flat config
  kMlx,            // language_model.model.*, affine
};

struct FixtureOptions {
  Layout layout = Layout::kHfConditional;
  StDType dtype = StDType::kBF16;  // HF weights (MLX: always bf16 scales and norms)
  int shards = 1;                  // > 1 writes model.safetensors.index.json
  int mlx_bits = 4;
  int mlx_group = 64;
  int mlx_router_bits = 8;  // listed as a per-module override in config.json
  bool multimodal = true;   // vision tensors that conversion skips
  bool lm_head = false;     // a (tied) lm_head.weight
  bool side_files = true;
  // Extra BF16 tensors by full name and shape (e.g. an unknown language-model tensor).
  std::vector<std::pair<std::string, std::vector<int64_t>>> extra;
  uint32_t seed = 1;
};

// The source's language-model key prefix for a layout.
std::string LayoutPrefix(Layout l);
Json TinyConfigJson(const TinyGeometry& g, const FixtureOptions& o);
// Writes config.json, the safetensors file(s) and side files into dir (created).
Status WriteTinyCheckpoint(const std::string& dir, const TinyGeometry& g, const FixtureOptions& o);

inline ConvertOptions ConvertOpts(std::string src, std::string out, std::string quantize = "keep",
                                  bool overwrite = false) {
  ConvertOptions o;
  o.source_dir = std::move(src);
  o.out_dir = std::move(out);
  o.quantize = std::move(quantize);
  o.overwrite = overwrite;
  return o;
}

// Test helpers for damaging a written checkpoint.
// Rewrites a safetensors file's JSON header through fn (data bytes are kept as they are).
Status RewriteHeader(const std::string& path, const std::function<void(Json&)>& fn);
Result<std::string> ReadAll(const std::string& path);
Status WriteAll(const std::string& path, const std::string& bytes);

}  // namespace rw::test
