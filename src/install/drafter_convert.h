// Drafter directories (src/draft/dflash_model.h) from a Hugging Face DFlash checkpoint
// (config.json + model.safetensors or a sharded index, bf16 or f32): the same quantization as the
// target's conversion (MLX affine, GPU kernel, group 64) on every linear weight; norms as
// published. Output is staged in "<out>.partial" and renamed into place once drafter.json is
// written, as a model directory is (docs/FORMAT.md, Atomicity).
#pragma once

#include <string>

#include "base/json.h"
#include "base/status.h"

namespace rw {

struct DrafterConvertOptions {
  std::string source_dir;
  std::string out_dir;
  std::string quantize = "q4";  // q4 | q8 | keep
  bool overwrite = false;
  Json source = Json::object();  // recorded in drafter.json ("kind", "repo_id", ...)
};

// kInvalidArgument for a bad quantize mode or config; kNotFound for a missing tensor;
// kAlreadyExists when out_dir exists and overwrite is false.
Status ConvertDrafter(const DrafterConvertOptions& o);

}  // namespace rw
