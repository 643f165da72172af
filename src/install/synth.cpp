// `redwing synth`: geometries, the model-directory writer, and the entry point.
#include "install/synth.h"

#include <algorithm>
#include <mutex>

#include "base/file.h"
#include "base/log.h"
#include "base/thread_pool.h"
#include "format/model_dir.h"
#include "install/synth_gen.h"
#include "model/gemma4_table.h"

namespace rw {
namespace {

ModelConfig BaseConfig() {
  ModelConfig c;
  c.sliding.rope_type = "default";
  c.sliding.rope_theta = 1e4;
  c.full.rope_type = "proportional";
  c.full.rope_theta = 1e6;
  c.full.partial_rotary_factor = 0.25;
  c.full.k_eq_v = true;
  c.enable_moe = true;
  c.rms_norm_eps = 1e-6;
  c.final_logit_softcapping = 30.0;
  c.bos_token_id = 2;
  c.pad_token_id = 0;
  c.eos_token_ids = {1, 106};
  return c;
}

// Layer kinds from the indices of the full-attention layers.
std::vector<LayerKind> Layers(int n, std::initializer_list<int> full) {
  std::vector<LayerKind> t(n, LayerKind::kSliding);
  for (int i : full) t[i] = LayerKind::kFull;
  return t;
}

}  // namespace

const std::vector<std::string>& SynthGeometryNames() {
  static const std::vector<std::string> kNames = {"tiny", "small", "gemma4-26b-a4b"};
  return kNames;
}

Result<ModelConfig> SynthGeometry(const std::string& name) {
  ModelConfig c = BaseConfig();
  if (name == "tiny") {
    // CI-sized; every input dimension a multiple of 64 so affine g64 applies everywhere.
    c.vocab_size = 512;
    c.hidden_size = 128;
    c.num_layers = 6;
    c.layer_types = Layers(6, {2, 5});
    c.num_heads = 4;
    c.sliding.head_dim = 32;
    c.sliding.num_kv_heads = 2;
    c.full.head_dim = 64;
    c.full.num_kv_heads = 1;
    c.sliding_window = 16;
    c.intermediate_size = 128;
    c.num_experts = 8;
    c.top_k = 2;
    c.moe_intermediate_size = 64;
    c.max_position_embeddings = 4096;
  } else if (name == "small") {
    c.vocab_size = 8192;
    c.hidden_size = 512;
    c.num_layers = 8;
    c.layer_types = Layers(8, {3, 7});
    c.num_heads = 8;
    c.sliding.head_dim = 64;
    c.sliding.num_kv_heads = 4;
    c.full.head_dim = 128;
    c.full.num_kv_heads = 2;
    c.sliding_window = 64;
    c.intermediate_size = 384;
    c.num_experts = 32;
    c.top_k = 4;
    c.moe_intermediate_size = 128;
    c.max_position_embeddings = 8192;
  } else if (name == "gemma4-26b-a4b") {
    // google/gemma-4-26B-A4B-it text_config (reference/gemma4-model.md §1).
    c.vocab_size = 262144;
    c.hidden_size = 2816;
    c.num_layers = 30;
    c.layer_types = Layers(30, {5, 11, 17, 23, 29});
    c.num_heads = 16;
    c.sliding.head_dim = 256;
    c.sliding.num_kv_heads = 8;
    c.full.head_dim = 512;
    c.full.num_kv_heads = 2;
    c.sliding_window = 1024;
    c.intermediate_size = 2112;
    c.num_experts = 128;
    c.top_k = 8;
    c.moe_intermediate_size = 704;
    c.max_position_embeddings = 262144;
  } else {
    std::string names;
    for (const std::string& n : SynthGeometryNames()) names += (names.empty() ? "" : ", ") + n;
    return Error(ErrorCode::kInvalidArgument, "unknown geometry '{}' (known: {})", name, names);
  }
  c.embed_scale = EmbedScaleFor(c.hidden_size, "bfloat16");
  RW_RETURN_IF_ERROR(c.Validate().Annotate("geometry " + name));
  return c;
}

SynthQuantTable SynthQuantFor(const std::string& geometry) {
  // One table for every geometry today, mirroring the real 4-bit checkpoint: the mlx-vlm
  // predicate of 2026-04-03..06-05 made router and dense MLP 8-bit g64, everything else 4-bit
  // g64; norms and scales stay bf16.
  (void)geometry;
  SynthQuantTable t;
  t.embed = {4, 64};
  t.attn = {4, 64};
  t.mlp = {8, 64};
  t.router = {8, 64};
  t.experts = {4, 64};
  return t;
}

namespace synth {
namespace {

// Output bytes (codes, scales and biases) of one row block of a core matrix.
constexpr uint64_t kCoreBlockBytes = 16u << 20;

TensorDesc AffineDesc(const MatrixSpec& m, std::string name) {
  TensorDesc d;
  d.name = std::move(name);
  d.type = TensorType::kAffine;
  d.shape = {m.rows, m.cols};
  d.bits = m.bits;
  d.group_size = m.group;
  return d;
}

ExpertLayout MakeExpertLayout(const SynthPlan& p) {
  auto part = [&](int k) {
    return AffineDesc(p.Expert(0, 0, k), std::string(gemma4::kExpertTensors[k].name));
  };
  return ExpertLayout::Make(part(0), part(1), part(2));
}

// First error wins; safe to call from pool workers.
class ErrorSlot {
 public:
  void Set(const Status& st) {
    if (st.ok()) return;
    std::lock_guard<std::mutex> lock(mu_);
    if (st_.ok()) st_ = st;
  }
  Status Get() {
    std::lock_guard<std::mutex> lock(mu_);
    return st_;
  }

 private:
  std::mutex mu_;
  Status st_;
};

}  // namespace

Status CopyTokenizerFiles(const std::string& tokenizer_dir, const std::string& dir) {
  if (tokenizer_dir.empty()) return Status::Ok();
  if (!IsDirectory(tokenizer_dir))
    return Error(ErrorCode::kNotFound, "tokenizer directory {} does not exist", tokenizer_dir);
  int copied = 0;
  for (const std::string& name : SideFileNames()) {
    std::string src = JoinPath(tokenizer_dir, name);
    if (!PathExists(src)) continue;
    RW_ASSIGN_OR_RETURN(std::string text, ReadFileToString(src));
    RW_RETURN_IF_ERROR(WriteFileAtomic(JoinPath(dir, name), text));
    ++copied;
  }
  if (copied == 0 || !PathExists(JoinPath(tokenizer_dir, "tokenizer.json")))
    return Error(ErrorCode::kNotFound, "{} has no tokenizer.json", tokenizer_dir);
  return Status::Ok();
}

Status WriteSynthModelDir(const SynthPlan& p, const SynthOptions& o,
                          const SynthProgress& progress) {
  std::unique_ptr<ThreadPool> own_pool;
  if (o.threads > 0) own_pool = std::make_unique<ThreadPool>(o.threads);
  ThreadPool& pool = own_pool ? *own_pool : ThreadPool::Default();
  // The plan's own size: its vocabulary may be --vocab's, not the geometry's.
  const SynthSizeEstimate est = EstimatePlanSize(p);
  const uint64_t total = est.core_bytes + est.expert_bytes;
  uint64_t done = 0;
  auto report = [&](const std::string& stage) {
    if (progress) progress(stage, done, total);
  };

  RW_ASSIGN_OR_RETURN(ModelDirWriter w, ModelDirWriter::Create(o.out_dir, o.overwrite));
  RW_ASSIGN_OR_RETURN(CoreWriter core, CoreWriter::Create(w.Path(kCoreName)));
  for (const CoreEntry& e : p.core) {
    if (e.is_matrix) {
      const MatrixSpec& m = e.m;
      // Reserved, then generated and written in row blocks of at most kCoreBlockBytes (the
      // embedding alone is ~415 MB at full size); rows are independent, so the bytes are those
      // of the whole tensor generated at once.
      RW_ASSIGN_OR_RETURN(TensorDesc d, core.Reserve(AffineDesc(m, m.name)));
      const uint64_t row_bytes = m.row_bytes(), scale_row = 2 * static_cast<uint64_t>(m.groups());
      const int64_t block_rows = std::max<int64_t>(
          1, std::min<int64_t>(kCoreBlockBytes / (row_bytes + 2 * scale_row), m.rows));
      std::vector<uint8_t> codes(block_rows * row_bytes);
      std::vector<uint16_t> scales(block_rows * m.groups()), biases(block_rows * m.groups());
      for (int64_t r0 = 0; r0 < m.rows; r0 += block_rows) {
        const int64_t n = std::min(block_rows, m.rows - r0);
        size_t grain = std::max<size_t>(1, (1u << 20) / row_bytes);
        pool.ParallelFor(n, grain, [&](size_t b, size_t end, int) {
          GenCodes(m, r0 + b, r0 + end, codes.data() + b * row_bytes);
          GenScales(m, r0 + b, r0 + end, scales.data() + b * m.groups(),
                    biases.data() + b * m.groups());
        });
        RW_RETURN_IF_ERROR(
            core.WriteAt(d.data.offset + r0 * row_bytes, codes.data(), n * row_bytes));
        RW_RETURN_IF_ERROR(
            core.WriteAt(d.scales.offset + r0 * scale_row, scales.data(), n * scale_row));
        RW_RETURN_IF_ERROR(
            core.WriteAt(d.biases.offset + r0 * scale_row, biases.data(), n * scale_row));
      }
      done += m.code_bytes() + 2 * m.scale_bytes();
      if (m.code_bytes() > (64u << 20)) report("core " + m.name);
    } else {
      std::vector<uint16_t> v(e.v.numel());
      GenVector(e.v, v.data());
      TensorDesc d;
      d.name = e.v.name;
      d.type = TensorType::kBf16;
      d.shape = e.v.shape;
      RW_RETURN_IF_ERROR(core.Add(d, v.data()));
      done += 2 * v.size();
    }
  }
  RW_RETURN_IF_ERROR(core.Finish());
  report("core.bin written");

  const ModelConfig& c = p.config;
  if (c.enable_moe) {
    ExpertIndex idx;
    idx.num_layers = c.num_layers;
    idx.num_experts = c.num_experts;
    const ExpertLayout layout = MakeExpertLayout(p);
    for (int l = 0; l < c.num_layers; ++l) {
      ExpertLayerInfo info;
      info.file = ExpertLayerFileName(l);
      info.layout = layout;
      RW_ASSIGN_OR_RETURN(ExpertLayerWriter lw,
                          ExpertLayerWriter::Create(w.Path(info.file), layout, c.num_experts));
      std::mutex write_mu;
      ErrorSlot err;
      pool.ParallelFor(c.num_experts, 1, [&](size_t b, size_t end, int) {
        std::vector<uint8_t> blob(layout.stride);
        for (size_t x = b; x < end; ++x) {
          std::fill(blob.begin(), blob.end(), 0);
          const TensorDesc* parts[] = {&layout.gate, &layout.up, &layout.down};
          for (int which = 0; which < 3; ++which) {
            MatrixSpec m = p.Expert(l, static_cast<int>(x), which);
            const TensorDesc& d = *parts[which];
            GenCodes(m, 0, m.rows, blob.data() + d.data.offset);
            GenScales(m, 0, m.rows, reinterpret_cast<uint16_t*>(blob.data() + d.scales.offset),
                      reinterpret_cast<uint16_t*>(blob.data() + d.biases.offset));
          }
          std::lock_guard<std::mutex> lock(write_mu);
          err.Set(lw.Write(static_cast<int>(x), blob.data()));
        }
      });
      RW_RETURN_IF_ERROR(err.Get());
      RW_ASSIGN_OR_RETURN(info.xxh3, lw.Finish());
      idx.layers.push_back(std::move(info));
      done += layout.stride * static_cast<uint64_t>(c.num_experts);
      report(fmt::format("experts layer {}/{}", l + 1, c.num_layers));
    }
    RW_RETURN_IF_ERROR(WriteFileAtomic(w.Path(kExpertIndexName), idx.ToJson().dump(1) + "\n"));
  }
  RW_RETURN_IF_ERROR(CopyTokenizerFiles(o.tokenizer_dir, w.staging_dir()));

  Manifest m;
  m.created_by = "redwing synth";
  m.config = c;
  m.source = Json{{"kind", "synthetic"},
                  {"geometry", p.geometry},
                  {"seed", p.seed},
                  {"routing_skew", p.routing_skew}};
  m.quantization["default"] = Json{
      {"type", "affine"}, {"bits", p.quant.experts.bits}, {"group_size", p.quant.experts.group}};
  return w.Commit(std::move(m), [&](const std::string& what) {
    if (progress) progress(what, done, total);
  });
}

}  // namespace synth

Result<SynthSizeEstimate> EstimateSynthSize(const std::string& geometry) {
  RW_ASSIGN_OR_RETURN(synth::SynthPlan p, synth::MakeSynthPlan(geometry, 0, 0));
  return synth::EstimatePlanSize(p);
}

namespace synth {

SynthSizeEstimate EstimatePlanSize(const SynthPlan& p) {
  SynthSizeEstimate est;
  est.core_bytes = kCoreAlignment;
  for (const CoreEntry& e : p.core) {
    if (e.is_matrix) {
      est.core_bytes += AlignUp(e.m.code_bytes(), kCoreAlignment) +
                        2 * AlignUp(e.m.scale_bytes(), kCoreAlignment);
    } else {
      est.core_bytes += AlignUp(2 * e.v.numel(), kCoreAlignment);
    }
  }
  if (p.config.enable_moe) {
    est.expert_stride = MakeExpertLayout(p).stride;
    est.expert_bytes = est.expert_stride * p.config.num_experts * p.config.num_layers;
  }
  return est;
}

}  // namespace synth

Status SynthesizeModel(const SynthOptions& o, const SynthProgress& progress) {
  if (o.out_dir.empty()) return Error(ErrorCode::kInvalidArgument, "no output directory");
  if (o.format != "model" && o.format != "hf" && o.format != "mlx")
    return Error(ErrorCode::kInvalidArgument, "unknown format '{}' (model, hf or mlx)", o.format);
  RW_ASSIGN_OR_RETURN(synth::SynthPlan p,
                      synth::MakeSynthPlan(o.geometry, o.seed, o.routing_skew, o.vocab_size));
  if (!o.tokenizer_dir.empty() && !PathExists(JoinPath(o.tokenizer_dir, "tokenizer.json")))
    return Error(ErrorCode::kNotFound, "{} has no tokenizer.json", o.tokenizer_dir);
  if (o.format == "model") return synth::WriteSynthModelDir(p, o, progress);
  return synth::WriteSynthCheckpoint(p, o, o.format == "mlx", progress);
}

}  // namespace rw
