// MLX affine quantization, bit-exact with mx.quantize(w, group_size, bits) (mode "affine").
//
// Layout (reference/gemma4-model.md §3.3): w is [rows, cols] row-major; each run of `group`
// consecutive elements of a row shares a bf16 (scale, bias); element i dequantizes to
// scale * q + bias with q in [0, 2^bits - 1]. q values are packed LSB-first into little-endian
// uint32 words, 32/bits per word: q_out is [rows, cols*bits/32], scales/biases [rows, cols/group].
//
// The algorithm, per group, all in fp32 (source: ml-explore/mlx
// mlx/backend/metal/kernels/quantized.h `affine_quantize`, identical in
// mlx/backend/cuda/quantized/affine_quantize.cu; the CPU backend is
// mlx/backend/cpu/quantized.cpp `quantize`):
//   n_bins = 2^bits - 1, eps = 1e-7
//   GPU: w_min = min(FLT_MAX, w...), w_max = max(0, w...)   <- w_max starts at 0, w_min does not
//   CPU: w_min = min(w...),          w_max = max(w...)
//   scale = max((w_max - w_min) / n_bins, eps)
//   side  = |w_min| > |w_max|;  scale = side ? scale : -scale;  edge = side ? w_min : w_max
//   q0 = round(edge / scale)
//   if q0 != 0: scale = edge / q0, bias = edge    (the larger-magnitude edge, and 0, land exactly
//   else:       bias = 0                           on the grid, since -q0 is an integer step)
//   q = clamp(round((w - bias) / scale), 0, n_bins)   using the fp32 scale and bias, NOT the
//                                                     bf16-rounded ones
//   stored scale = bf16(scale), bias = bf16(bias), rounded to nearest even.
//   round: GPU = half away from zero (metal::round / CUDA round); CPU = std::rint (half to even).
// The GPU kernel is the default because mlx_lm / mlx_vlm convert on Apple GPUs, so that is what
// mlx-community checkpoints hold. The two differ only for groups with no positive element and
// for exact .5 ties. On the GPU a negative pre-round value (reachable only when every |w| < 5e-8)
// is stored as 0, as the saturating float->uint8 conversion does. Assumes IEEE fp32 division
// (MLX builds its Metal kernels with -fno-fast-math) and no denormal flushing.
#pragma once

#include <cstdint>

#include "base/status.h"

namespace rw {

enum class MlxQuantKernel {
  kGpu,  // Metal / CUDA kernel: what real MLX checkpoints were made with
  kCpu,  // MLX's CPU backend
};

// kInvalidArgument unless bits is 2, 4 or 8, group is 32, 64 or 128, cols is a positive multiple
// of group and rows >= 0.
Status CheckAffineArgs(int64_t rows, int64_t cols, int bits, int group);
inline int64_t AffinePackedCols(int64_t cols, int bits) {
  return cols * bits / 32;
}
inline int64_t AffineGroups(int64_t cols, int group) {
  return cols / group;
}

// Quantizes w (fp32 values; for bf16 weights pass them widened, or use the bf16 overload).
// kInvalidArgument for bad arguments or a non-finite weight (named by row and column).
Status QuantizeAffine(const float* w, int64_t rows, int64_t cols, int bits, int group,
                      uint32_t* q_out, uint16_t* scales_bf16, uint16_t* biases_bf16,
                      MlxQuantKernel kernel = MlxQuantKernel::kGpu);
Status QuantizeAffineBf16(const uint16_t* w_bf16, int64_t rows, int64_t cols, int bits, int group,
                          uint32_t* q_out, uint16_t* scales_bf16, uint16_t* biases_bf16,
                          MlxQuantKernel kernel = MlxQuantKernel::kGpu);

// out[r, c] = scale * q + bias in fp32 (separate multiply and add, no fused multiply-add).
Status DequantizeAffine(const uint32_t* q, const uint16_t* scales_bf16, const uint16_t* biases_bf16,
                        int64_t rows, int64_t cols, int bits, int group, float* out);

// Packs n values (each < 2^bits) LSB-first into n*bits/32 words; n must be a multiple of
// 32/bits and bits one of 1, 2, 4, 8 (checked: these are programming errors).
void PackBits(const uint8_t* values, int64_t n, int bits, uint32_t* words);
void UnpackBits(const uint32_t* words, int64_t n, int bits, uint8_t* values);

}  // namespace rw
