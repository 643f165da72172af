// Safetensors reading: a hardened header parser, a file reader that never maps or slurps the
// whole file, and a checkpoint view over model.safetensors or a sharded index.
//
// Layout: u64 little-endian header length N, N bytes of UTF-8 JSON
//   {"__metadata__": {str: str}, "<name>": {"dtype": "BF16", "shape": [..], "data_offsets": [b,
//   e]}}
// then the data; offsets are relative to the first byte after the header.
//
// Validation policy (every error names the file and, where there is one, the tensor):
//   - header length capped at kMaxSafetensorsHeader (100 MB, as the reference implementation);
//   - the JSON must be an object, nesting at most 8 deep, no duplicate keys in any object;
//   - each entry has a known dtype, a shape of non-negative integers whose product does not
//     overflow, and data_offsets [begin, end] with begin <= end, end within the file, and
//     end - begin == numel * dtype size;
//   - tensors may not overlap. Gaps between tensors (and trailing bytes) are accepted: the
//     reference writer never makes them, but they are harmless to a reader that uses offsets.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "base/file.h"
#include "base/status.h"

namespace rw {

inline constexpr uint64_t kMaxSafetensorsHeader = 100'000'000;

enum class StDType {
  kBool,
  kU8,
  kI8,
  kF8E4M3,
  kF8E5M2,
  kI16,
  kU16,
  kF16,
  kBF16,
  kI32,
  kU32,
  kF32,
  kI64,
  kU64,
  kF64,
};

size_t StDTypeSize(StDType t);
const char* StDTypeName(StDType t);  // the spelling in the header: "BF16", "F8_E4M3", ...
// kUnsupported for names this reader does not know.
Result<StDType> ParseStDType(std::string_view name);

struct StTensor {
  std::string name;
  StDType dtype = StDType::kU8;
  std::vector<int64_t> shape;
  uint64_t offset = 0;  // absolute file offset of the first byte
  uint64_t size = 0;    // bytes
  int64_t numel() const;
};

class SafetensorsFile {
 public:
  SafetensorsFile() = default;

  // Reads and validates the header only (two preads); the data is read on demand.
  static Result<SafetensorsFile> Open(const std::string& path);

  // For headers fetched by other means (HTTP range requests). `prefix` is the first 8 bytes of the
  // file; returns N, checked against the cap and, when known, the file size (UINT64_MAX: unknown).
  static Result<uint64_t> ParseHeaderLength(const uint8_t prefix[8], uint64_t file_size,
                                            const std::string& what);
  // Parses and validates the JSON header. data_start = 8 + N; file_size may be UINT64_MAX when
  // unknown (then only overflow is checked). Tensors come back in file order. `what` names the
  // source in errors. metadata, if not null, receives "__metadata__".
  static Result<std::vector<StTensor>> ParseHeader(
      std::string_view json, uint64_t data_start, uint64_t file_size, const std::string& what,
      std::map<std::string, std::string>* metadata = nullptr);

  const std::vector<StTensor>& tensors() const { return tensors_; }  // in file order
  const StTensor* Find(std::string_view name) const;
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  const std::string& path() const { return file_.path(); }
  uint64_t file_size() const { return file_size_; }
  uint64_t data_start() const { return data_start_; }

  // Reads the tensor's bytes exactly (t.size bytes into dst).
  Status Read(const StTensor& t, void* dst) const;
  // Reads bytes [byte_off, byte_off + n) of the tensor; for streaming big tensors in slices.
  Status ReadRange(const StTensor& t, uint64_t byte_off, uint64_t n, void* dst) const;

 private:
  File file_;
  uint64_t file_size_ = 0;
  uint64_t data_start_ = 0;
  std::vector<StTensor> tensors_;
  std::unordered_map<std::string, size_t> index_;
  std::map<std::string, std::string> metadata_;
};

// Parses model.safetensors.index.json text into tensor -> shard file name. Shard names must be
// plain file names (no directories, no ".."): the index is untrusted input.
Result<std::map<std::string, std::string>> ParseSafetensorsIndex(std::string_view json,
                                                                 const std::string& what);

// A checkpoint directory: model.safetensors.index.json with its shards, or one model.safetensors.
class SafetensorsCheckpoint {
 public:
  struct Entry {
    const SafetensorsFile* file = nullptr;
    const StTensor* tensor = nullptr;
  };

  // Opens every shard (headers only) and checks the index against them: a tensor of the index
  // missing from its shard, a missing shard, or a tensor present in two shards is kCorrupt.
  // A tensor found in a shard but absent from the index is accepted with a warning.
  static Result<SafetensorsCheckpoint> Open(const std::string& dir);

  // nullptr file/tensor when absent.
  Entry Find(std::string_view name) const;
  // All tensor names, sorted.
  std::vector<std::string> Names() const;
  size_t num_tensors() const { return entries_.size(); }
  size_t num_files() const { return files_.size(); }
  const SafetensorsFile& file(size_t i) const { return *files_[i]; }
  const std::string& dir() const { return dir_; }

 private:
  std::string dir_;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;  // stable addresses for Entry
  std::map<std::string, Entry, std::less<>> entries_;
};

}  // namespace rw
