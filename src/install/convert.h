// `redwing convert`: a local Hugging Face (bf16/f32) or MLX affine Gemma 4 checkpoint becomes a
// redwing model directory. The work is split so the installer can reuse it:
//   convert_plan.h   source tensors -> target tensors (headers and config only, no data)
//   convert_repack.h executing a plan into a staged model directory (bounded memory)
//   convert.h        the local-directory driver: open, plan, stage, copy side files, commit.
// Output is atomic: everything is staged in "<out>.partial" and renamed into place only after the
// manifest is written; on any error nothing is left at <out> or <out>.partial.
#pragma once

#include <functional>
#include <string>

#include "base/status.h"

namespace rw {

struct ConvertOptions {
  std::string source_dir;
  std::string out_dir;
  std::string quantize = "keep";  // keep | q4 | q8 | bf16 (see QuantizeMode in convert_plan.h)
  bool overwrite = false;         // replace an existing out_dir (only once the new one is complete)
  std::string repo_id;            // recorded in manifest.source when given
  std::string revision;
};

// progress (optional) receives human-readable lines: the plan, per-layer counts, hashing.
Status ConvertCheckpoint(const ConvertOptions& opts,
                         const std::function<void(const std::string&)>& progress = {});

}  // namespace rw
