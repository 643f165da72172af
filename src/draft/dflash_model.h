// A DFlash drafter directory loaded for the CPU forward pass: the config and the weights bound to
// kernel views (norm weights widened to fp32). Immutable after Open; shared by sessions.
//
// A drafter directory (what `redwing install` of a DFlash repository, `redwing synth --drafter`
// and the drafter conversion write; see docs/SPECULATIVE.md):
//   config.json    the Hugging Face config, as published (DFlashConfig reads it)
//   core.bin       the weights in redwing's core file format (docs/FORMAT.md), named as the
//                  checkpoint's keys without ".weight"; linear weights 4-bit affine g64 (q4, the
//                  default), 8-bit (q8) or as published (keep, bf16); norms as published
//   drafter.json   written last: {"format": "redwing-drafter", "format_version": 1, "quantize",
//                  "source", "files": {name: {size, sha256}}}; without it the directory is not
//                  a drafter
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "backend/weight_view.h"
#include "base/status.h"
#include "draft/dflash_config.h"
#include "format/core_file.h"

namespace rw {

inline constexpr const char* kDrafterManifest = "drafter.json";
inline constexpr const char* kDrafterFormat = "redwing-drafter";

struct DFlashLayer {
  WeightView q, k, v, o, gate, up, down;
  std::vector<float> input_ln, post_attn_ln, q_norm, k_norm;
};

class DFlashModel {
 public:
  // Reads dir's drafter.json, config.json and core.bin, checking every tensor's shape.
  static Result<std::unique_ptr<DFlashModel>> Open(const std::string& dir);
  // Whether dir looks like a drafter directory (has drafter.json).
  static bool IsDrafterDir(const std::string& dir);

  const DFlashConfig& config() const { return config_; }
  const std::string& dir() const { return dir_; }
  const std::string& quantize() const { return quantize_; }
  const WeightView& fc() const { return fc_; }
  const std::vector<float>& hidden_norm() const { return hidden_norm_; }
  const std::vector<float>& norm() const { return norm_; }
  const DFlashLayer& layer(int i) const { return layers_[static_cast<size_t>(i)]; }
  // RoPE inverse frequencies (head_dim/2), as transformers computes them in fp32.
  const std::vector<float>& inv_freq() const { return inv_freq_; }
  uint64_t weight_bytes() const { return core_.size(); }

 private:
  DFlashModel() = default;
  std::string dir_, quantize_;
  DFlashConfig config_;
  CoreFile core_;
  WeightView fc_;
  std::vector<float> hidden_norm_, norm_;
  std::vector<DFlashLayer> layers_;
  std::vector<float> inv_freq_;
};

}  // namespace rw
