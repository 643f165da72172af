// WeightView: a non-owning view of one weight matrix exactly as the model files store it, so
// kernels read mmap'd tensors in place (zero copy).
#pragma once

#include <cstdint>

#include "base/check.h"

namespace rw {

enum class WeightType { kF32, kBf16, kAffine };  // affine = MLX-style quantized

// Logical shape [rows (N, out), cols (K, in)]; y = W·x.
//   kF32 / kBf16: data is row-major [N, K].
//   kAffine: data is little-endian uint32 words, row-major [N, K*bits/32]; each word holds 32/bits
//     consecutive elements along K, element j in bits [j*bits, (j+1)*bits) (LSB first).
//     w[n,k] = bf16(scales[n,k/group]) * q[n,k] + bf16(biases[n,k/group]), in fp32.
// Pointers need only 4-byte alignment (2-byte for bf16 data, scales and biases).
struct WeightView {
  WeightType type = WeightType::kF32;
  int64_t rows = 0, cols = 0;  // N, K
  const void* data = nullptr;
  int bits = 0, group = 0;           // affine only: bits 4 or 8, group 32/64/128
  const uint16_t* scales = nullptr;  // affine: bf16 [N, K/group]
  const uint16_t* biases = nullptr;  // affine: bf16 [N, K/group]

  // uint32 words per row (affine only).
  int64_t RowWords() const { return cols * bits / 32; }
  // Groups per row (affine only).
  int64_t RowGroups() const { return cols / group; }
  // Bytes of weight data streamed for one row, scales and biases included.
  int64_t RowBytes() const {
    switch (type) {
      case WeightType::kF32:
        return cols * 4;
      case WeightType::kBf16:
        return cols * 2;
      case WeightType::kAffine:
        return RowWords() * 4 + RowGroups() * 4;
    }
    return 0;
  }
};

inline WeightView F32Weight(const float* data, int64_t rows, int64_t cols) {
  WeightView w;
  w.type = WeightType::kF32;
  w.rows = rows;
  w.cols = cols;
  w.data = data;
  return w;
}

inline WeightView Bf16Weight(const uint16_t* data, int64_t rows, int64_t cols) {
  WeightView w;
  w.type = WeightType::kBf16;
  w.rows = rows;
  w.cols = cols;
  w.data = data;
  return w;
}

inline WeightView AffineWeight(const uint32_t* data, int64_t rows, int64_t cols, int bits,
                               int group, const uint16_t* scales, const uint16_t* biases) {
  WeightView w;
  w.type = WeightType::kAffine;
  w.rows = rows;
  w.cols = cols;
  w.data = data;
  w.bits = bits;
  w.group = group;
  w.scales = scales;
  w.biases = biases;
  return w;
}

// CHECKs the invariants every kernel relies on (a broken view is a programming error).
inline void CheckWeightView(const WeightView& w) {
  CHECK_MSG(w.rows >= 0 && w.cols >= 0, "shape [{}, {}]", w.rows, w.cols);
  CHECK(w.data != nullptr || w.rows * w.cols == 0);
  if (w.type != WeightType::kAffine) return;
  CHECK_MSG(w.bits == 4 || w.bits == 8, "affine bits {} unsupported", w.bits);
  CHECK_MSG(w.group == 32 || w.group == 64 || w.group == 128, "affine group {}", w.group);
  CHECK_MSG(w.cols % w.group == 0, "cols {} not a multiple of group {}", w.cols, w.group);
  CHECK_MSG(w.cols % (32 / w.bits) == 0, "cols {} not whole words", w.cols);
  CHECK(w.scales != nullptr && w.biases != nullptr);
}

}  // namespace rw
