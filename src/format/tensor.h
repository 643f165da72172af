// Tensor descriptions shared by the core file and the expert blobs.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/json.h"
#include "base/status.h"

namespace rw {

enum class TensorType {
  kF32,
  kBf16,
  kAffine,  // MLX affine: uint32 words (LSB-first), bf16 scales and biases per group
};

const char* TensorTypeName(TensorType t);
Result<TensorType> ParseTensorType(const std::string& s);

struct ByteRange {
  uint64_t offset = 0;  // within the file (core) or within the blob (experts)
  uint64_t size = 0;
  uint64_t end() const { return offset + size; }
};

// One logical tensor. Shapes are logical (dequantized): a linear weight is [out, in].
struct TensorDesc {
  std::string name;
  TensorType type = TensorType::kF32;
  std::vector<int64_t> shape;
  int bits = 0;        // affine only
  int group_size = 0;  // affine only
  ByteRange data;      // f32/bf16 values, or packed words for affine
  ByteRange scales;    // affine only
  ByteRange biases;    // affine only

  int64_t numel() const;
  int64_t rows() const { return shape.size() >= 2 ? shape[shape.size() - 2] : 1; }
  int64_t cols() const { return shape.empty() ? 1 : shape.back(); }
  // Byte sizes implied by type and shape (what data/scales/biases must hold).
  uint64_t ExpectedDataBytes() const;
  uint64_t ExpectedScaleBytes() const;  // same for biases

  Json ToJson() const;
  static Result<TensorDesc> FromJson(const Json& j, const std::string& what);
  // Checks sizes against type/shape and that parts lie within [0, limit).
  Status Validate(uint64_t limit, const std::string& what) const;
};

}  // namespace rw
