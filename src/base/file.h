// Files: RAII descriptors, exact reads/writes, read-only mappings, atomic replacement.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "base/status.h"

namespace rw {

// An owned file descriptor.
class File {
 public:
  File() = default;
  explicit File(int fd, std::string path) : fd_(fd), path_(std::move(path)) {}
  File(File&& o) noexcept : fd_(o.fd_), path_(std::move(o.path_)) { o.fd_ = -1; }
  File& operator=(File&& o) noexcept;
  File(const File&) = delete;
  File& operator=(const File&) = delete;
  ~File();

  static Result<File> OpenRead(const std::string& path);
  // Creates or truncates.
  static Result<File> Create(const std::string& path);
  static Result<File> OpenReadWrite(const std::string& path);

  int fd() const { return fd_; }
  const std::string& path() const { return path_; }
  bool valid() const { return fd_ >= 0; }
  Result<uint64_t> Size() const;

  // Reads exactly n bytes at offset; a short read is kCorrupt ("truncated").
  Status PreadExact(void* buf, size_t n, uint64_t offset) const;
  Status PwriteAll(const void* buf, size_t n, uint64_t offset);
  Status WriteAll(const void* buf, size_t n);
  Status Truncate(uint64_t size);
  Status Sync();
  Status Close();

 private:
  int fd_ = -1;
  std::string path_;
};

// A read-only mapping of a whole file. Empty files map to nullptr/0.
class MappedFile {
 public:
  MappedFile() = default;
  MappedFile(MappedFile&& o) noexcept;
  MappedFile& operator=(MappedFile&& o) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  ~MappedFile();

  static Result<MappedFile> Open(const std::string& path);

  const uint8_t* data() const { return data_; }
  uint64_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  uint8_t* data_ = nullptr;
  uint64_t size_ = 0;
  std::string path_;
};

Result<std::string> ReadFileToString(const std::string& path);
// The same for files whose size is not ours to trust (a model directory's JSON side files): a
// file larger than max_bytes is kCorrupt, naming the limit, before anything is allocated.
Result<std::string> ReadFileToString(const std::string& path, uint64_t max_bytes);
// Writes to "<path>.tmp-<pid>", fsyncs, renames over path, fsyncs the directory.
Status WriteFileAtomic(const std::string& path, std::string_view contents);
Status SyncDirectory(const std::string& dir);
bool PathExists(const std::string& path);
bool IsDirectory(const std::string& path);
Status MakeDirectories(const std::string& path);
// rm -rf; missing is fine.
Status RemoveAll(const std::string& path);
std::string JoinPath(const std::string& a, const std::string& b);
std::string ParentPath(const std::string& path);
std::string BaseName(const std::string& path);
// Free bytes available to unprivileged users on the filesystem holding path.
Result<uint64_t> FreeDiskBytes(const std::string& path);

inline uint64_t AlignUp(uint64_t v, uint64_t a) {
  return (v + a - 1) / a * a;
}

}  // namespace rw
