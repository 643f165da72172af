// Internals of `redwing synth`: the deterministic value generators and the tensor plan shared by
// the three output forms. Not a public API (tests use it to check the generators directly).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "install/synth.h"

namespace rw::synth {

// splitmix64's finalizer: a bijective 64-bit mix.
inline uint64_t Mix64(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  x ^= x >> 31;
  return x;
}

// Key of a named tensor under a seed: every stream derives from it.
uint64_t TensorKey(uint64_t seed, std::string_view name);

// A counter-based stream (splitmix64). One per (tensor, row, purpose), so any row range can be
// generated independently, in any order, on any thread, with the same result.
struct Stream {
  uint64_t state;
  Stream(uint64_t key, uint64_t row, uint64_t purpose)
      : state(Mix64(key ^ Mix64(row * 4 + purpose + 1))) {}
  uint64_t Next() {
    state += 0x9e3779b97f4a7c15ull;
    return Mix64(state);
  }
  // Uniform in [0, 1) with 24 bits.
  float Uniform() { return static_cast<float>(Next() >> 40) * (1.0f / 16777216.0f); }
};

// A logical weight matrix [rows, cols] (out, in), stored MLX-affine in the model and MLX forms
// and as its dequantized values (rounded to bf16) in the HF form.
//
// Values: codes q uniform over [0, 2^bits); per group a scale s = std*gain*jitter/std(q) with
// jitter ~ U(0.85, 1.15), and bias -s*(2^bits-1)/2 computed from the bf16 s, so dequantized
// weights are centred with the target std.
struct MatrixSpec {
  std::string name;  // the model-format name; keys the streams
  int64_t rows = 0;
  int64_t cols = 0;
  int bits = 4;
  int group = 64;
  float std = 0;
  std::vector<float> row_gain;  // optional per-row std multiplier (router skew)
  uint64_t key = 0;

  uint64_t row_bytes() const { return static_cast<uint64_t>(cols) * bits / 8; }
  int64_t groups() const { return cols / group; }
  uint64_t code_bytes() const { return row_bytes() * rows; }
  uint64_t scale_bytes() const { return static_cast<uint64_t>(groups()) * rows * 2; }
};

// Packed codes of rows [r0, r1): (r1 - r0) * row_bytes() bytes (uint32 words, LSB first).
void GenCodes(const MatrixSpec& m, int64_t r0, int64_t r1, uint8_t* out);
// bf16 scales and biases of rows [r0, r1); either pointer may be null.
void GenScales(const MatrixSpec& m, int64_t r0, int64_t r1, uint16_t* scales, uint16_t* biases);
// Dequantized values of rows [r0, r1) as bf16: (r1 - r0) * cols values.
void GenBf16(const MatrixSpec& m, int64_t r0, int64_t r1, uint16_t* out);

// A bf16 vector (norm weights and scales) with values uniform in [lo, hi) (or its mirror image).
struct VectorSpec {
  std::string name;
  std::vector<int64_t> shape;
  float lo = 0.5f;
  float hi = 1.5f;
  bool random_sign = false;  // each value negated with probability 1/2
  uint64_t key = 0;
  int64_t numel() const;
};
void GenVector(const VectorSpec& v, uint16_t* out);

// One tensor of core.bin, in write order.
struct CoreEntry {
  bool is_matrix = false;
  MatrixSpec m;
  VectorSpec v;
  std::string source;  // checkpoint key after the prefix (a matrix's module), from the table
  int layer = -1;      // -1: a model-level tensor
  const std::string& name() const { return is_matrix ? m.name : v.name; }
};

struct SynthPlan {
  std::string geometry;
  uint64_t seed = 0;
  double routing_skew = 0;
  ModelConfig config;
  SynthQuantTable quant;
  std::vector<CoreEntry> core;
  // which: 0 gate [I, H], 1 up [I, H], 2 down [H, I].
  MatrixSpec Expert(int layer, int expert, int which) const;
};

// vocab_size > 0 replaces the geometry's vocabulary size (to pair a small model with a real
// tokenizer).
Result<SynthPlan> MakeSynthPlan(const std::string& geometry, uint64_t seed, double routing_skew,
                                int64_t vocab_size = 0);

// Per-expert router row gains of one layer for a skew (RMS 1 over experts).
std::vector<float> RouterRowGains(uint64_t seed, int layer, int num_experts, double skew);

// The config.json of the HF (bf16) or MLX (with its quantization block) checkpoint forms.
Json CheckpointConfigJson(const SynthPlan& p, bool mlx);

// Bytes of the model directory a plan writes (core and experts), for progress.
SynthSizeEstimate EstimatePlanSize(const SynthPlan& p);

// The writers behind SynthesizeModel.
Status WriteSynthModelDir(const SynthPlan& p, const SynthOptions& o, const SynthProgress& progress);
Status WriteSynthCheckpoint(const SynthPlan& p, const SynthOptions& o, bool mlx,
                            const SynthProgress& progress);
// Copies the side files present in o.tokenizer_dir into dir.
Status CopyTokenizerFiles(const std::string& tokenizer_dir, const std::string& dir);

}  // namespace rw::synth
