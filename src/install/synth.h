// `redwing synth`: deterministic random-weight Gemma 4 models for tests and benchmarks, in any of
// the three forms the project reads: a redwing model directory, an MLX 4-bit checkpoint (the same
// quantized values, so converting it gives the same bytes), or a bf16 Hugging Face checkpoint.
//
// Every value is a function of (seed, tensor name, row): the same seed gives byte-identical
// output whatever the thread count, and tensors are generated and written in bounded pieces.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "base/status.h"
#include "format/model_config.h"

namespace rw {

struct SynthOptions {
  std::string geometry;  // tiny | small | gemma4-26b-a4b
  uint64_t seed = 0;
  std::string out_dir;
  std::string format = "model";  // model | hf | mlx
  // >= 0. 0: experts equally popular in expectation; larger values skew popularity (Zipf-like).
  double routing_skew = 0;
  bool overwrite = false;
  // Copies SideFileNames() found in this directory (tokenizer.json, ...) into the output.
  std::string tokenizer_dir;
  // > 0: this vocabulary size instead of the geometry's (e.g. 262144 to pair a tiny model with
  // Gemma's tokenizer).
  int64_t vocab_size = 0;
  // hf/mlx: largest safetensors shard (tensors are never split; a bigger one gets its own shard).
  uint64_t max_shard_bytes = 5'000'000'000ull;
  int threads = 0;  // 0: the default pool
};

// Names accepted by SynthGeometry.
const std::vector<std::string>& SynthGeometryNames();
// The normalized config of a named geometry; kInvalidArgument for an unknown name.
Result<ModelConfig> SynthGeometry(const std::string& name);

// How one weight matrix is stored: MLX affine with these bits and group size.
struct SynthQuant {
  int bits = 4;
  int group = 64;
};
// The per-geometry quantization table (matches mlx-community/gemma-4-26b-a4b-it-4bit as far as
// it is known: 4-bit g64 embedding, attention and experts; 8-bit g64 router and dense MLP).
struct SynthQuantTable {
  SynthQuant embed, attn, mlp, router, experts;
};
SynthQuantTable SynthQuantFor(const std::string& geometry);

// Bytes the model format will take (core tensors + expert blobs, before page alignment of core).
struct SynthSizeEstimate {
  uint64_t core_bytes = 0;
  uint64_t expert_bytes = 0;  // expert strides × experts × layers
  uint64_t expert_stride = 0;
};
Result<SynthSizeEstimate> EstimateSynthSize(const std::string& geometry);

// progress(stage, done, total): stage names the work; done/total count bytes or steps.
using SynthProgress = std::function<void(const std::string& stage, uint64_t done, uint64_t total)>;

// Writes the model to o.out_dir (staged in "<out>.partial" and renamed into place when complete).
Status SynthesizeModel(const SynthOptions& o, const SynthProgress& progress = {});

// Routing popularity of a synthesized model directory, measured with a proxy: hidden states
// drawn as independent Gaussian vectors, routed through each layer's router exactly as the model
// does (RMS_0(h) * scale * H^-1/2, dequantized router.proj, top-k). Popularity is per layer.
struct RoutingPopularity {
  int num_layers = 0;
  int num_experts = 0;
  int top_k = 0;
  int tokens = 0;
  // Share of all top-k picks that go to the 10% most-picked experts of each layer
  // (round(0.1 * experts), at least one), averaged over layers.
  double top10_share = 0;
  double top10_uniform = 0;  // the same share under perfectly even routing
  // Largest expert's share of picks / uniform share, averaged over layers.
  double max_over_uniform = 0;
  std::vector<std::vector<int64_t>> counts;  // [layer][expert]
};
Result<RoutingPopularity> MeasureRoutingPopularity(const std::string& model_dir, int tokens,
                                                   uint64_t seed);

}  // namespace rw
