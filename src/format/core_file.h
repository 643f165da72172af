// The resident core file (core.bin): every tensor that is not a routed expert, each part
// page-aligned so the file can be mapped and used in place.
//
// Layout: a 4 KiB header page {magic "RWCORE01", u64 directory offset, u64 directory size,
// u64 data end}, tensor data from 4 KiB on, then the JSON tensor directory. The header is written
// last, so a file cut short never parses.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "base/file.h"
#include "format/tensor.h"

namespace rw {

inline constexpr uint64_t kCoreAlignment = 4096;
inline constexpr char kCoreMagic[8] = {'R', 'W', 'C', 'O', 'R', 'E', '0', '1'};

class CoreWriter {
 public:
  static Result<CoreWriter> Create(const std::string& path);

  // Appends one tensor; `desc` supplies name/type/shape/bits/group (ranges are filled here).
  // data/scales/biases must hold exactly the sizes the shape implies.
  Status Add(TensorDesc desc, const void* data, const void* scales = nullptr,
             const void* biases = nullptr);
  // Streaming alternative to Add, for tensors too large to hold in memory: reserves aligned space
  // for every part of `desc` and returns it with its ranges set; the caller then fills the parts
  // with WriteAt, in any order and chunking, before Finish.
  Result<TensorDesc> Reserve(TensorDesc desc);
  // Writes bytes at an absolute file offset, which must lie inside a reserved part.
  Status WriteAt(uint64_t offset, const void* data, size_t n);
  // Writes the directory and header, fsyncs, closes.
  Status Finish();
  uint64_t bytes_written() const { return end_; }

 private:
  Status AppendPart(const void* p, uint64_t n, ByteRange* out);
  ByteRange ReservePart(uint64_t n);

  File file_;
  uint64_t end_ = kCoreAlignment;
  std::vector<TensorDesc> tensors_;
  std::map<std::string, size_t> names_;
};

class CoreFile {
 public:
  // Maps the file and validates header and directory against its size.
  static Result<CoreFile> Open(const std::string& path);

  const TensorDesc* Find(const std::string& name) const;
  const std::vector<TensorDesc>& tensors() const { return tensors_; }
  const uint8_t* base() const { return map_.data(); }
  uint64_t size() const { return map_.size(); }
  const std::string& path() const { return map_.path(); }

  template <typename T>
  const T* Ptr(const ByteRange& r) const {
    return reinterpret_cast<const T*>(map_.data() + r.offset);
  }

 private:
  MappedFile map_;
  std::vector<TensorDesc> tensors_;
  std::map<std::string, size_t> names_;
};

}  // namespace rw
