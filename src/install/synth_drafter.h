// `redwing synth --drafter`: random DFlash drafters with the published drafter's structure
// (z-lab/gemma-4-26B-A4B-it-DFlash: qwen3-style layers, 4 sliding then 1 full, 4 query heads per
// KV head, SiLU MLP at twice the hidden size, block 16, mask id 4, soft cap 30) scaled to a
// target: hidden = the target's hidden size (the drafter reads the target's embedding rows and
// LM head), target_layer_ids spread over the target's layers as the reference does. For tests and
// the bench: random weights draft garbage, which only costs speed.
#pragma once

#include <cstdint>
#include <string>

#include "base/status.h"
#include "draft/dflash_config.h"
#include "format/model_config.h"

namespace rw {

struct DrafterSynthOptions {
  uint64_t seed = 0;
  std::string out_dir;
  std::string format = "drafter";  // drafter (a drafter directory) | hf (config.json + safetensors)
  std::string quantize = "q4";     // drafter form: q4 | q8 | keep
  bool overwrite = false;
  // The real shape (hidden 2816, 32 heads of 128, 8 KV heads, intermediate 5632) with the
  // target's hidden size; else scaled down: head_dim 16, hidden/16 query heads (at least 4).
  bool real_shape = false;
  int64_t sliding_window = 0;  // 0: the target's sliding window (2048 for the real shape)
};

// The drafter config synth makes for a target.
DFlashConfig SynthDrafterConfig(const ModelConfig& target, const DrafterSynthOptions& o);

// Writes a random drafter for `target` to o.out_dir.
Status SynthesizeDrafter(const ModelConfig& target, const DrafterSynthOptions& o);

}  // namespace rw
