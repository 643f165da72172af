// Routed-expert files: experts/layer_NNN.bin holds one fixed-stride blob per expert, each blob
// the expert's gate, up and down weights (with their scales and biases) back to back, padded to
// 4 KiB so one aligned read fetches a whole expert. experts/index.json describes the blob layout
// and holds an XXH3-64 of every blob (its full stride, padding included) so a bad read is caught
// cheaply.
#pragma once

#include <string>
#include <vector>

#include "base/file.h"
#include "format/tensor.h"

namespace rw {

inline constexpr uint64_t kExpertAlignment = 4096;
inline constexpr uint64_t kExpertPartAlignment = 64;

// Layout of one blob. Ranges in the TensorDescs are offsets within the blob.
struct ExpertLayout {
  TensorDesc gate;         // [moe_intermediate, hidden]
  TensorDesc up;           // [moe_intermediate, hidden]
  TensorDesc down;         // [hidden, moe_intermediate]
  uint64_t blob_size = 0;  // bytes used
  uint64_t stride = 0;     // blob_size rounded up to 4 KiB

  // Places the parts of gate/up/down (names, types and shapes already set) back to back.
  static ExpertLayout Make(TensorDesc gate, TensorDesc up, TensorDesc down);
  Json ToJson() const;
  static Result<ExpertLayout> FromJson(const Json& j, const std::string& what);
  Status Validate(const std::string& what) const;
  bool SameShapeAs(const ExpertLayout& o) const;
};

struct ExpertLayerInfo {
  std::string file;  // relative to the model directory
  ExpertLayout layout;
  std::vector<uint64_t> xxh3;  // one per expert
};

struct ExpertIndex {
  int num_layers = 0;
  int num_experts = 0;
  std::vector<ExpertLayerInfo> layers;

  Json ToJson() const;
  static Result<ExpertIndex> FromJson(const Json& j, const std::string& what);
};

std::string ExpertLayerFileName(int layer);  // "experts/layer_007.bin"

// Writes one layer file. Blobs may be written in any order; each exactly once.
class ExpertLayerWriter {
 public:
  static Result<ExpertLayerWriter> Create(const std::string& path, const ExpertLayout& layout,
                                          int num_experts);
  // blob holds layout.stride bytes (parts at their layout offsets, zero padding).
  Status Write(int expert, const uint8_t* blob);
  // Checks every blob was written, fsyncs, returns the checksums.
  Result<std::vector<uint64_t>> Finish();

 private:
  File file_;
  ExpertLayout layout_;
  std::vector<uint64_t> xxh3_;
  std::vector<bool> written_;
};

}  // namespace rw
