#include "install/synth_drafter.h"

#include <cmath>

#include <fmt/format.h>

#include "base/bf16.h"
#include "base/file.h"
#include "install/drafter_convert.h"
#include "install/safetensors_writer.h"
#include "install/synth_gen.h"

namespace rw {

DFlashConfig SynthDrafterConfig(const ModelConfig& target, const DrafterSynthOptions& o) {
  DFlashConfig c;
  c.num_layers = 5;
  c.sliding = {true, true, true, true, false};
  c.hidden = target.hidden_size;
  if (o.real_shape) {
    c.num_heads = 32;
    c.num_kv_heads = 8;
    c.head_dim = 128;
  } else {
    c.head_dim = 16;
    c.num_heads = static_cast<int>(std::max<int64_t>(4, c.hidden / 16));
    c.num_heads -= c.num_heads % 4;
    c.num_kv_heads = c.num_heads / 4;
  }
  c.intermediate = 2 * c.hidden;
  c.rms_norm_eps = 1e-6;
  c.rope_theta = 1e6;
  c.sliding_window =
      o.sliding_window > 0 ? o.sliding_window : (o.real_shape ? 2048 : target.sliding_window);
  if (c.sliding_window <= 0) c.sliding_window = 2048;
  c.use_sliding_window = true;  // the windowed path is the one worth exercising
  c.block_size = 16;
  c.mask_token_id = target.vocab_size > 4 ? 4 : 0;
  c.target_layer_ids = SpreadTargetLayers(target.num_layers, 6);
  c.final_logit_softcapping = 30;
  c.vocab_size = target.vocab_size;
  return c;
}

namespace {

// Values of one tensor as bf16: linear weights uniform with std 1/√in (so activations keep their
// scale through the layers), norm weights uniform in [0.5, 1.5). A function of (seed, name, row).
std::vector<uint16_t> RandomTensor(uint64_t seed, const DFlashTensorName& t) {
  const int64_t rows = t.shape.size() == 2 ? t.shape[0] : 1, cols = t.shape.back();
  std::vector<uint16_t> out(static_cast<size_t>(rows * cols));
  const uint64_t key = synth::TensorKey(seed, t.name);
  const float a = t.linear ? std::sqrt(3.0f / static_cast<float>(cols)) : 0.5f;
  for (int64_t r = 0; r < rows; ++r) {
    synth::Stream s(key, static_cast<uint64_t>(r), 0);
    for (int64_t c = 0; c < cols; ++c) {
      const float u = s.Uniform();
      const float v = t.linear ? (2 * u - 1) * a : 1.0f + (2 * u - 1) * a;
      out[static_cast<size_t>(r * cols + c)] = F32ToBf16(v);
    }
  }
  return out;
}

Status WriteHf(const DFlashConfig& c, uint64_t seed, const std::string& dir) {
  RW_RETURN_IF_ERROR(MakeDirectories(dir));
  RW_RETURN_IF_ERROR(WriteFileAtomic(JoinPath(dir, "config.json"), c.ToHf().dump(2) + "\n"));
  std::vector<StTensorSpec> specs;
  const std::vector<DFlashTensorName> names = DFlashTensorNames(c);
  for (const DFlashTensorName& t : names)
    specs.push_back({t.name + ".weight", StDType::kBF16, t.shape});
  RW_ASSIGN_OR_RETURN(SafetensorsWriter w,
                      SafetensorsWriter::Create(JoinPath(dir, "model.safetensors"), specs));
  for (const DFlashTensorName& t : names) {
    const std::vector<uint16_t> v = RandomTensor(seed, t);
    RW_RETURN_IF_ERROR(w.WriteTensor(t.name + ".weight", v.data(), v.size() * 2));
  }
  return w.Finish();
}

}  // namespace

Status SynthesizeDrafter(const ModelConfig& target, const DrafterSynthOptions& o) {
  if (o.out_dir.empty()) return Error(ErrorCode::kInvalidArgument, "no output directory");
  if (PathExists(o.out_dir) && !o.overwrite)
    return Error(ErrorCode::kAlreadyExists, "{} exists (pass --force to replace it)", o.out_dir);
  const DFlashConfig c = SynthDrafterConfig(target, o);
  if (o.format == "hf") {
    RW_RETURN_IF_ERROR(RemoveAll(o.out_dir));
    return WriteHf(c, o.seed, o.out_dir);
  }
  if (o.format != "drafter")
    return Error(ErrorCode::kInvalidArgument, "drafter format must be drafter or hf, not '{}'",
                 o.format);
  // The drafter form is the HF form converted, exactly as an installed drafter is.
  const std::string hf = o.out_dir + ".hf-partial";
  RW_RETURN_IF_ERROR(RemoveAll(hf));
  Status st = WriteHf(c, o.seed, hf);
  if (st.ok()) {
    DrafterConvertOptions co;
    co.source_dir = hf;
    co.out_dir = o.out_dir;
    co.quantize = o.quantize;
    co.overwrite = o.overwrite;
    co.source = {{"kind", "synthetic"}, {"seed", o.seed}, {"real_shape", o.real_shape}};
    st = ConvertDrafter(co);
  }
  (void)RemoveAll(hf);
  return st;
}

}  // namespace rw
