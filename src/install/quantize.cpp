#include "install/quantize.h"

#include <algorithm>
#include <cfloat>
#include <cmath>

#include "base/bf16.h"
#include "base/check.h"

namespace rw {
namespace {

constexpr float kEps = 1e-7f;

struct GroupParams {
  float scale;  // fp32, used to compute q
  float bias;
};

// See quantize.h for the algorithm and its source. Kept literal (same operations in the same
// order) so that every fp32 rounding matches MLX's kernels.
template <MlxQuantKernel K>
GroupParams ComputeParams(const float* g, int n, float n_bins) {
  float w_min, w_max;
  if constexpr (K == MlxQuantKernel::kGpu) {
    w_min = FLT_MAX;
    w_max = 0.0f;
  } else {
    w_min = INFINITY;
    w_max = -INFINITY;
  }
  for (int i = 0; i < n; ++i) {
    w_min = std::min(w_min, g[i]);
    w_max = std::max(w_max, g[i]);
  }
  float scale = std::max((w_max - w_min) / n_bins, kEps);
  bool side = std::abs(w_min) > std::abs(w_max);
  scale = side ? scale : -scale;
  float edge = side ? w_min : w_max;
  float q0 = K == MlxQuantKernel::kGpu ? std::round(edge / scale) : std::rint(edge / scale);
  float bias = 0.0f;
  if (q0 != 0.0f) {
    scale = edge / q0;
    bias = edge;
  }
  return {scale, bias};
}

template <MlxQuantKernel K>
uint8_t QuantizeOne(float w, GroupParams p, float n_bins) {
  float v = (w - p.bias) / p.scale;
  v = K == MlxQuantKernel::kGpu ? std::round(v) : std::rint(v);
  v = std::min(std::max(v, 0.0f), n_bins);
  return static_cast<uint8_t>(v);
}

template <MlxQuantKernel K, typename Load>
Status QuantizeImpl(Load load, int64_t rows, int64_t cols, int bits, int group, uint32_t* q_out,
                    uint16_t* scales, uint16_t* biases) {
  RW_RETURN_IF_ERROR(CheckAffineArgs(rows, cols, bits, group));
  const float n_bins = static_cast<float>((1 << bits) - 1);
  const int per_word = 32 / bits;
  const int64_t groups_per_row = cols / group;
  float g[128];
  uint8_t q[128];
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t gi = 0; gi < groups_per_row; ++gi) {
      const int64_t base = r * cols + gi * group;
      for (int i = 0; i < group; ++i) {
        g[i] = load(base + i);
        if (!std::isfinite(g[i]))
          return Error(ErrorCode::kInvalidArgument, "non-finite weight {} at row {}, column {}",
                       g[i], r, gi * group + i);
      }
      GroupParams p = ComputeParams<K>(g, group, n_bins);
      for (int i = 0; i < group; ++i) q[i] = QuantizeOne<K>(g[i], p, n_bins);
      PackBits(q, group, bits, q_out + base / per_word);
      scales[r * groups_per_row + gi] = F32ToBf16(p.scale);
      biases[r * groups_per_row + gi] = F32ToBf16(p.bias);
    }
  }
  return Status::Ok();
}

template <typename Load>
Status Dispatch(Load load, int64_t rows, int64_t cols, int bits, int group, uint32_t* q_out,
                uint16_t* scales, uint16_t* biases, MlxQuantKernel kernel) {
  if (kernel == MlxQuantKernel::kGpu)
    return QuantizeImpl<MlxQuantKernel::kGpu>(load, rows, cols, bits, group, q_out, scales, biases);
  return QuantizeImpl<MlxQuantKernel::kCpu>(load, rows, cols, bits, group, q_out, scales, biases);
}

}  // namespace

Status CheckAffineArgs(int64_t rows, int64_t cols, int bits, int group) {
  if (bits != 2 && bits != 4 && bits != 8)
    return Error(ErrorCode::kInvalidArgument, "affine quantization: bits {} not in {{2, 4, 8}}",
                 bits);
  if (group != 32 && group != 64 && group != 128)
    return Error(ErrorCode::kInvalidArgument,
                 "affine quantization: group size {} not in {{32, 64, 128}}", group);
  if (rows < 0 || cols <= 0 || cols % group != 0)
    return Error(ErrorCode::kInvalidArgument,
                 "affine quantization: shape [{}, {}] does not split into groups of {}", rows, cols,
                 group);
  return Status::Ok();
}

Status QuantizeAffine(const float* w, int64_t rows, int64_t cols, int bits, int group,
                      uint32_t* q_out, uint16_t* scales_bf16, uint16_t* biases_bf16,
                      MlxQuantKernel kernel) {
  return Dispatch([w](int64_t i) { return w[i]; }, rows, cols, bits, group, q_out, scales_bf16,
                  biases_bf16, kernel);
}

Status QuantizeAffineBf16(const uint16_t* w_bf16, int64_t rows, int64_t cols, int bits, int group,
                          uint32_t* q_out, uint16_t* scales_bf16, uint16_t* biases_bf16,
                          MlxQuantKernel kernel) {
  return Dispatch([w_bf16](int64_t i) { return Bf16ToF32(w_bf16[i]); }, rows, cols, bits, group,
                  q_out, scales_bf16, biases_bf16, kernel);
}

Status DequantizeAffine(const uint32_t* q, const uint16_t* scales_bf16, const uint16_t* biases_bf16,
                        int64_t rows, int64_t cols, int bits, int group, float* out) {
  RW_RETURN_IF_ERROR(CheckAffineArgs(rows, cols, bits, group));
  const int per_word = 32 / bits;
  const int64_t groups_per_row = cols / group;
  uint8_t vals[128];
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t gi = 0; gi < groups_per_row; ++gi) {
      const int64_t base = r * cols + gi * group;
      const float s = Bf16ToF32(scales_bf16[r * groups_per_row + gi]);
      const float b = Bf16ToF32(biases_bf16[r * groups_per_row + gi]);
      UnpackBits(q + base / per_word, group, bits, vals);
      for (int i = 0; i < group; ++i) {
        float scaled = s * static_cast<float>(vals[i]);
        out[base + i] = scaled + b;
      }
    }
  }
  return Status::Ok();
}

void PackBits(const uint8_t* values, int64_t n, int bits, uint32_t* words) {
  CHECK_MSG(bits == 1 || bits == 2 || bits == 4 || bits == 8, "bits {}", bits);
  const int per_word = 32 / bits;
  CHECK_MSG(n % per_word == 0, "n {} not a multiple of {}", n, per_word);
  const uint32_t mask = (1u << bits) - 1;
  for (int64_t w = 0; w < n / per_word; ++w) {
    uint32_t word = 0;
    for (int j = 0; j < per_word; ++j) {
      uint32_t v = values[w * per_word + j];
      CHECK_MSG(v <= mask, "value {} does not fit in {} bits", v, bits);
      word |= v << (j * bits);
    }
    words[w] = word;
  }
}

void UnpackBits(const uint32_t* words, int64_t n, int bits, uint8_t* values) {
  CHECK_MSG(bits == 1 || bits == 2 || bits == 4 || bits == 8, "bits {}", bits);
  const int per_word = 32 / bits;
  CHECK_MSG(n % per_word == 0, "n {} not a multiple of {}", n, per_word);
  const uint32_t mask = (1u << bits) - 1;
  for (int64_t w = 0; w < n / per_word; ++w) {
    uint32_t word = words[w];
    for (int j = 0; j < per_word; ++j) values[w * per_word + j] = (word >> (j * bits)) & mask;
  }
}

}  // namespace rw
