// Safetensors writing in bounded memory: declare every tensor first (the header is computed from
// the declarations), then stream each tensor's bytes in declared order, in pieces of any size.
// Output goes to "<path>.tmp-<pid>" and is renamed over path by Finish(), so a reader never sees
// a half-written file; a writer destroyed before Finish() removes its temporary file.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "install/safetensors.h"

namespace rw {

struct StTensorSpec {
  std::string name;
  StDType dtype = StDType::kU8;
  std::vector<int64_t> shape;
};

inline std::map<std::string, std::string> DefaultSafetensorsMetadata() {
  return {{"format", "pt"}};
}

// The JSON header for tensors laid out contiguously in the given order, padded with spaces to a
// multiple of 8 bytes as the reference implementation does (so the data starts 8-aligned).
// An empty metadata map omits "__metadata__". kInvalidArgument for a bad declaration.
Result<std::string> BuildSafetensorsHeader(const std::vector<StTensorSpec>& tensors,
                                           const std::map<std::string, std::string>& metadata);

class SafetensorsWriter {
 public:
  SafetensorsWriter(SafetensorsWriter&&) noexcept;
  SafetensorsWriter& operator=(SafetensorsWriter&&) noexcept;
  ~SafetensorsWriter();

  // Creates the temporary file and writes the header.
  static Result<SafetensorsWriter> Create(
      const std::string& path, std::vector<StTensorSpec> tensors,
      std::map<std::string, std::string> metadata = DefaultSafetensorsMetadata());

  // Appends the next piece of tensor `name`, which must be the first declared tensor not yet
  // complete (empty tensors complete themselves). A piece may not run into the next tensor.
  Status Append(std::string_view name, const void* data, size_t n);
  // Writes a whole tensor in one piece: Append that must start and complete `name`.
  Status WriteTensor(std::string_view name, const void* data, size_t n);
  // Checks every tensor is complete, flushes, fsyncs, renames into place, syncs the directory.
  Status Finish();
  // Drops the temporary file. Idempotent; implied by destruction before Finish().
  void Abort();

  const std::string& path() const;
  uint64_t file_size() const;  // of the finished file

 private:
  struct Impl;
  explicit SafetensorsWriter(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Writes model.safetensors.index.json: {"metadata": {"total_size": N}, "weight_map": {...}},
// atomically. total_size is the sum of tensor bytes, as transformers writes it.
Status WriteSafetensorsIndex(const std::string& path,
                             const std::map<std::string, std::string>& weight_map,
                             uint64_t total_size);

}  // namespace rw
