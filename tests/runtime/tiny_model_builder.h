// Test helper: writes a small random Gemma 4 model directory with chosen weight types, straight
// through the format writers (no dependency on `redwing synth`), and reads weights back with the
// format definition (an independent dequantizer) for the double-precision reference.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "format/model_config.h"
#include "format/tensor.h"

namespace rw::test {

// How linear weights are stored.
struct LinearType {
  TensorType type = TensorType::kF32;
  int bits = 4;
  int group = 32;
};

struct TinySpec {
  int vocab = 96;
  int hidden = 64;
  std::vector<LayerKind> layers = {LayerKind::kSliding, LayerKind::kSliding, LayerKind::kFull};
  int heads = 4;
  int sliding_head_dim = 16, sliding_kv = 2;
  int full_head_dim = 32, full_kv = 1;
  double partial_rotary = 0.25;
  int window = 8;
  int intermediate = 32;
  bool moe = true;
  int experts = 6, top_k = 2, moe_intermediate = 32;
  LinearType embed, attn, mlp, router, experts_type;
  bool bf16_vectors = true;  // norm weights and scales in bf16 (else f32)
  uint64_t seed = 1;
  int max_positions = 4096;
};

ModelConfig TinyConfig(const TinySpec& spec);
// Writes the model directory (replacing dir).
void BuildTinyModel(const TinySpec& spec, const std::string& dir);

// A fresh empty directory under the build tree (or /tmp) for one test.
std::string TestTempDir(const std::string& name);

}  // namespace rw::test
