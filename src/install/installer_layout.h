// The install layout: from a ConvertPlan (convert_plan.h) and the source shards' headers, where
// every source byte goes in the staged model directory. Each source shard gets a sorted list of
// spans; a span's bytes are either copied verbatim to a fixed place in core.bin or an expert
// layer file, or converted row by row (bf16 rounding, MLX-affine quantization) by RepackTensor
// and written to their place. Bytes of a shard no span covers (safetensors header, vision and
// audio towers) are fetched only for the shard's SHA-256 and dropped.
//
// Target offsets are decided here, before any data arrives, exactly as CoreWriter and
// WritePlannedTensors would place them, so an install is byte-identical to `redwing convert` of
// the same checkpoint (tests/install compare the two).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "format/core_file.h"
#include "format/expert_file.h"
#include "install/convert_plan.h"
#include "install/safetensors.h"

namespace rw {

// Target files: kCoreFileId is core.bin; 1 + i is the expert layer file of plan.experts[i].
inline constexpr int kCoreFileId = 0;

struct SinkSpan {
  uint64_t begin = 0, end = 0;  // shard byte offsets [begin, end)
  int file = kCoreFileId;
  bool convert = false;
  // Copy: byte `begin` goes to `offset` of the file.
  uint64_t offset = 0;
  // Convert: rows of row_bytes starting at `begin` (always at a row boundary when resuming) are
  // repacked by `plan` and row r lands at data/scales/biases offset + r * row size.
  const TensorPlan* plan = nullptr;
  uint64_t row_bytes = 0;
  uint64_t data_off = 0, scales_off = 0, biases_off = 0;
  uint64_t data_row = 0, scale_row = 0;  // target bytes per row
  int unit = -1;       // expert unit fed (layer_index * num_experts + expert), or -1 for core
  std::string tensor;  // source tensor, for errors
};

struct ShardLayout {
  std::string file;
  uint64_t size = 0;
  std::string sha256;
  std::vector<SinkSpan> spans;  // sorted, non-overlapping
  uint64_t needed_bytes = 0;    // bytes covered by spans
  // The first 8 + N bytes as fetched for planning; the stream checks them against the verified
  // shard, so a plan never rests on header bytes the SHA-256 did not cover.
  std::string header;
};

// Spans point into `plan`: the layout moves but is never copied.
struct InstallLayout {
  InstallLayout() = default;
  InstallLayout(InstallLayout&&) = default;
  InstallLayout& operator=(InstallLayout&&) = default;
  InstallLayout(const InstallLayout&) = delete;
  InstallLayout& operator=(const InstallLayout&) = delete;

  ConvertPlan plan;
  std::vector<TensorDesc> core_tensors;  // with the ranges CoreWriter would assign
  std::string core_directory;            // the JSON directory CoreWriter::Finish would write
  uint64_t core_data_end = 0;
  uint64_t core_size = 0;                      // data end + directory
  std::vector<ExpertLayerInfo> expert_layers;  // file, layout (xxh3 filled at the end)
  int num_experts = 0;
  std::vector<ShardLayout> shards;
  std::vector<uint64_t> unit_source_bytes;  // per expert unit: source bytes that feed it

  uint64_t target_file_size(int file) const;
  std::string target_file_name(int file) const;
  int num_files() const { return 1 + static_cast<int>(expert_layers.size()); }
  uint64_t total_output_bytes() const;
};

// A source shard: its name, size, LFS SHA-256 and parsed header.
struct SourceShard {
  std::string file;
  uint64_t size = 0;
  std::string sha256;
  std::string header;  // length prefix + JSON, as fetched
  std::vector<StTensor> tensors;
};

// Plans the install. The plan's source tensor names must be found in `shards`.
Result<InstallLayout> BuildInstallLayout(ConvertPlan plan, const std::vector<SourceShard>& shards);

// Writes the core header page + directory (what CoreWriter::Finish writes) to an open core.bin
// whose data is complete.
Status FinishCoreFile(const InstallLayout& layout, File& core);

}  // namespace rw
