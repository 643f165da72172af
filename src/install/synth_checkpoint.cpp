// `redwing synth --format hf|mlx`: checkpoint directories in the layouts of the real sources
// (reference/gemma4-model.md §3.1, §3.2), streamed shard by shard in bounded pieces.
//
// mlx holds exactly the codes, scales and biases of the model form (same streams), so converting
// it without requantizing reproduces the model form's tensors byte for byte. hf holds those
// weights dequantized (rounded to bf16), so both forms describe nearly the same function.
#include <algorithm>
#include <map>
#include <memory>

#include "base/file.h"
#include "base/thread_pool.h"
#include "format/model_dir.h"
#include "install/safetensors_writer.h"
#include "install/synth_gen.h"
#include "model/gemma4_table.h"

namespace rw::synth {
namespace {

constexpr uint64_t kPieceBytes = 16u << 20;  // generation/append granularity

using Writer = std::function<Status(SafetensorsWriter&)>;

struct StEntry {
  StTensorSpec spec;
  uint64_t bytes = 0;
  Writer write;
};

// part: what of the matrix the tensor holds.
enum class Part { kCodes, kScales, kBiases, kBf16 };

uint64_t RowBytes(const MatrixSpec& m, Part part) {
  switch (part) {
    case Part::kCodes:
      return m.row_bytes();
    case Part::kScales:
    case Part::kBiases:
      return static_cast<uint64_t>(m.groups()) * 2;
    case Part::kBf16:
      return static_cast<uint64_t>(m.cols) * 2;
  }
  return 0;
}

void GenRows(const MatrixSpec& m, Part part, int64_t r0, int64_t r1, uint8_t* out) {
  switch (part) {
    case Part::kCodes:
      GenCodes(m, r0, r1, out);
      break;
    case Part::kScales:
      GenScales(m, r0, r1, reinterpret_cast<uint16_t*>(out), nullptr);
      break;
    case Part::kBiases:
      GenScales(m, r0, r1, nullptr, reinterpret_cast<uint16_t*>(out));
      break;
    case Part::kBf16:
      GenBf16(m, r0, r1, reinterpret_cast<uint16_t*>(out));
      break;
  }
}

// Writes a list of matrices (one per expert, or a single one) back to back as one tensor,
// each matrix's rows in order, generating ~kPieceBytes at a time across the pool.
Status StreamMatrices(SafetensorsWriter& w, ThreadPool& pool, const std::string& name,
                      const std::vector<MatrixSpec>& ms, Part part) {
  std::vector<uint8_t> buf;
  for (const MatrixSpec& m : ms) {
    const uint64_t rb = RowBytes(m, part);
    const int64_t rows_per_piece = std::max<int64_t>(1, static_cast<int64_t>(kPieceBytes / rb));
    for (int64_t r0 = 0; r0 < m.rows; r0 += rows_per_piece) {
      int64_t r1 = std::min(m.rows, r0 + rows_per_piece);
      buf.resize(static_cast<uint64_t>(r1 - r0) * rb);
      size_t grain = std::max<size_t>(1, (256u << 10) / rb);
      pool.ParallelFor(r1 - r0, grain, [&](size_t b, size_t e, int) {
        GenRows(m, part, r0 + static_cast<int64_t>(b), r0 + static_cast<int64_t>(e),
                buf.data() + b * rb);
      });
      RW_RETURN_IF_ERROR(w.Append(name, buf.data(), buf.size()));
    }
  }
  return Status::Ok();
}

void AddMatrixEntry(std::vector<StEntry>* out, ThreadPool& pool, const std::string& name,
                    std::vector<MatrixSpec> ms, Part part) {
  const MatrixSpec& m0 = ms.front();
  StEntry e;
  e.spec.name = name;
  std::vector<int64_t> shape;
  if (ms.size() > 1) shape.push_back(static_cast<int64_t>(ms.size()));
  int64_t rows = m0.rows;
  shape.push_back(rows);
  switch (part) {
    case Part::kCodes:
      e.spec.dtype = StDType::kU32;
      shape.push_back(m0.cols * m0.bits / 32);
      break;
    case Part::kScales:
    case Part::kBiases:
      e.spec.dtype = StDType::kBF16;
      shape.push_back(m0.groups());
      break;
    case Part::kBf16:
      e.spec.dtype = StDType::kBF16;
      shape.push_back(m0.cols);
      break;
  }
  e.spec.shape = shape;
  for (const MatrixSpec& m : ms) e.bytes += RowBytes(m, part) * m.rows;
  e.write = [&pool, name, ms = std::move(ms), part](SafetensorsWriter& w) {
    return StreamMatrices(w, pool, name, ms, part);
  };
  out->push_back(std::move(e));
}

std::vector<StEntry> PlanEntries(const SynthPlan& p, bool mlx, ThreadPool& pool) {
  const std::string prefix(mlx ? gemma4::kMlxPrefix : gemma4::kHfPrefix);
  const ModelConfig& c = p.config;
  constexpr size_t kParts = std::size(gemma4::kExpertTensors);
  std::vector<StEntry> out;
  auto add_experts = [&](int l) {
    const int n = c.num_experts;
    std::vector<MatrixSpec> ms[kParts];
    for (size_t k = 0; k < kParts; ++k)
      for (int e = 0; e < n; ++e) ms[k].push_back(p.Expert(l, e, static_cast<int>(k)));
    const std::string base = prefix + fmt::format("layers.{}.experts.", l);
    for (size_t k = 0; k < kParts;) {
      const gemma4::ExpertRow& row = gemma4::kExpertTensors[k];
      if (mlx) {
        std::string t = base + std::string(row.mlx_module);
        AddMatrixEntry(&out, pool, t + ".weight", ms[k], Part::kCodes);
        AddMatrixEntry(&out, pool, t + ".scales", ms[k], Part::kScales);
        AddMatrixEntry(&out, pool, t + ".biases", ms[k], Part::kBiases);
        ++k;
        continue;
      }
      // Hugging Face fuses the parts of one hf_tensor [E, parts*out, in]: expert e's rows of
      // each part in turn (gate, then up).
      std::vector<MatrixSpec> fused;
      for (int e = 0; e < n; ++e)
        for (int j = 0; j < row.hf_parts; ++j) fused.push_back(ms[k + j][e]);
      AddMatrixEntry(&out, pool, base + std::string(row.hf_tensor), fused, Part::kBf16);
      out.back().spec.shape = {n, row.hf_parts * ms[k][0].rows, ms[k][0].cols};
      k += row.hf_parts;
    }
  };
  for (size_t k = 0; k < p.core.size(); ++k) {
    const CoreEntry& ce = p.core[k];
    const std::string t = prefix + ce.source;
    if (ce.is_matrix) {
      if (mlx) {
        AddMatrixEntry(&out, pool, t + ".weight", {ce.m}, Part::kCodes);
        AddMatrixEntry(&out, pool, t + ".scales", {ce.m}, Part::kScales);
        AddMatrixEntry(&out, pool, t + ".biases", {ce.m}, Part::kBiases);
      } else {
        AddMatrixEntry(&out, pool, t + ".weight", {ce.m}, Part::kBf16);
      }
    } else {
      const VectorSpec v = ce.v;
      StEntry e;
      e.spec.name = t;
      e.spec.dtype = StDType::kBF16;
      e.spec.shape = v.shape;
      e.bytes = 2 * static_cast<uint64_t>(v.numel());
      e.write = [v, name = e.spec.name](SafetensorsWriter& w) {
        std::vector<uint16_t> buf(v.numel());
        GenVector(v, buf.data());
        return w.WriteTensor(name, buf.data(), buf.size() * 2);
      };
      out.push_back(std::move(e));
    }
    // A layer's experts follow its last core tensor.
    const bool last_of_layer = k + 1 == p.core.size() || p.core[k + 1].layer != ce.layer;
    if (c.enable_moe && ce.layer >= 0 && last_of_layer) add_experts(ce.layer);
  }
  return out;
}

Json QuantJson(const SynthQuant& q) {
  return Json{{"group_size", q.group}, {"bits", q.bits}};
}

}  // namespace

Json CheckpointConfigJson(const SynthPlan& p, bool mlx) {
  const ModelConfig& c = p.config;
  Json types = Json::array();
  for (int l = 0; l < c.num_layers; ++l)
    types.push_back(c.is_full(l) ? "full_attention" : "sliding_attention");
  Json text{{"model_type", "gemma4_text"},
            {"vocab_size", c.vocab_size},
            {"hidden_size", c.hidden_size},
            {"intermediate_size", c.intermediate_size},
            {"num_hidden_layers", c.num_layers},
            {"num_attention_heads", c.num_heads},
            {"num_key_value_heads", c.sliding.num_kv_heads},
            {"head_dim", c.sliding.head_dim},
            {"global_head_dim", c.full.head_dim},
            {"num_global_key_value_heads", c.full.num_kv_heads},
            {"attention_k_eq_v", c.full.k_eq_v},
            {"attention_bias", false},
            {"sliding_window", c.sliding_window},
            {"layer_types", types},
            {"enable_moe_block", c.enable_moe},
            {"num_experts", c.num_experts},
            {"top_k_experts", c.top_k},
            {"moe_intermediate_size", c.moe_intermediate_size},
            {"hidden_size_per_layer_input", 0},
            {"num_kv_shared_layers", 0},
            {"use_double_wide_mlp", false},
            {"final_logit_softcapping", c.final_logit_softcapping},
            {"rms_norm_eps", c.rms_norm_eps},
            {"hidden_activation", c.activation},
            {"max_position_embeddings", c.max_position_embeddings},
            {"tie_word_embeddings", c.tie_word_embeddings},
            {"bos_token_id", c.bos_token_id},
            {"pad_token_id", c.pad_token_id},
            {"eos_token_id", c.eos_token_ids},
            {"dtype", "bfloat16"},
            {"rope_parameters",
             {{"sliding_attention",
               {{"rope_type", c.sliding.rope_type}, {"rope_theta", c.sliding.rope_theta}}},
              {"full_attention",
               {{"rope_type", c.full.rope_type},
                {"partial_rotary_factor", c.full.partial_rotary_factor},
                {"rope_theta", c.full.rope_theta}}}}}};
  Json root{{"architectures", {"Gemma4ForConditionalGeneration"}},
            {"model_type", "gemma4"},
            {"text_config", text},
            {"vision_config", nullptr},
            {"audio_config", nullptr},
            {"tie_word_embeddings", c.tie_word_embeddings},
            {"torch_dtype", "bfloat16"},
            {"bos_token_id", c.bos_token_id},
            {"pad_token_id", c.pad_token_id},
            {"eos_token_id", c.eos_token_ids}};
  if (mlx) {
    // mlx-lm's layout: the default plus one entry per module whose bits differ from it.
    const SynthQuant def = p.quant.experts;
    Json q = QuantJson(def);
    q["mode"] = "affine";
    for (const CoreEntry& e : p.core) {
      if (e.is_matrix && (e.m.bits != def.bits || e.m.group != def.group))
        q[std::string(gemma4::kMlxPrefix) + e.source] = QuantJson(SynthQuant{e.m.bits, e.m.group});
    }
    root["quantization"] = q;
    root["quantization_config"] = q;
  }
  return root;
}

Status WriteSynthCheckpoint(const SynthPlan& p, const SynthOptions& o, bool mlx,
                            const SynthProgress& progress) {
  std::string out = o.out_dir;
  while (out.size() > 1 && out.back() == '/') out.pop_back();
  if (PathExists(out) && !o.overwrite)
    return Error(ErrorCode::kAlreadyExists, "{} already exists; remove it or pass --force", out);
  std::unique_ptr<ThreadPool> own_pool;
  if (o.threads > 0) own_pool = std::make_unique<ThreadPool>(o.threads);
  ThreadPool& pool = own_pool ? *own_pool : ThreadPool::Default();

  const std::string staging = out + ".partial";
  RW_RETURN_IF_ERROR(RemoveAll(staging));
  RW_RETURN_IF_ERROR(MakeDirectories(staging));
  struct Cleanup {
    std::string dir;
    bool armed = true;
    ~Cleanup() {
      if (armed) (void)RemoveAll(dir);
    }
  } cleanup{staging};

  std::vector<StEntry> entries = PlanEntries(p, mlx, pool);
  // Greedy sharding in declaration order, as mlx_lm and transformers do.
  std::vector<std::vector<size_t>> shards(1);
  uint64_t cur = 0, total = 0;
  for (size_t i = 0; i < entries.size(); ++i) {
    if (cur > 0 && cur + entries[i].bytes > o.max_shard_bytes) {
      shards.emplace_back();
      cur = 0;
    }
    shards.back().push_back(i);
    cur += entries[i].bytes;
    total += entries[i].bytes;
  }
  std::map<std::string, std::string> weight_map;
  uint64_t done = 0;
  for (size_t s = 0; s < shards.size(); ++s) {
    std::string file = shards.size() == 1 ? "model.safetensors"
                                          : fmt::format("model-{:05d}-of-{:05d}.safetensors", s + 1,
                                                        shards.size());
    std::vector<StTensorSpec> specs;
    for (size_t i : shards[s]) specs.push_back(entries[i].spec);
    RW_ASSIGN_OR_RETURN(SafetensorsWriter w,
                        SafetensorsWriter::Create(JoinPath(staging, file), specs));
    for (size_t i : shards[s]) {
      RW_RETURN_IF_ERROR(entries[i].write(w).Annotate(entries[i].spec.name));
      weight_map[entries[i].spec.name] = file;
      done += entries[i].bytes;
      if (progress && entries[i].bytes > (32u << 20)) progress(file, done, total);
    }
    RW_RETURN_IF_ERROR(w.Finish());
    if (progress) progress(file + " written", done, total);
  }
  RW_RETURN_IF_ERROR(
      WriteSafetensorsIndex(JoinPath(staging, "model.safetensors.index.json"), weight_map, total));
  RW_RETURN_IF_ERROR(WriteFileAtomic(JoinPath(staging, "config.json"),
                                     CheckpointConfigJson(p, mlx).dump(2) + "\n"));
  RW_RETURN_IF_ERROR(CopyTokenizerFiles(o.tokenizer_dir, staging));
  RW_RETURN_IF_ERROR(SyncDirectory(staging));

  if (PathExists(out)) RW_RETURN_IF_ERROR(RemoveAll(out));  // overwrite was asked for
  if (::rename(staging.c_str(), out.c_str()) != 0)
    return Error(ErrorCode::kIo, "cannot rename {} to {}", staging, out);
  cleanup.armed = false;
  return SyncDirectory(ParentPath(out));
}

}  // namespace rw::synth
