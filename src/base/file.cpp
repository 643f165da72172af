#include "base/file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

namespace rw {
namespace {
Status Errno(const std::string& what, const std::string& path) {
  return Error(ErrorCode::kIo, "{}: {}: {}", path, what, std::strerror(errno));
}
}  // namespace

File& File::operator=(File&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = o.fd_;
    path_ = std::move(o.path_);
    o.fd_ = -1;
  }
  return *this;
}

File::~File() {
  if (fd_ >= 0) ::close(fd_);
}

Result<File> File::OpenRead(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return Error(ErrorCode::kNotFound, "{}: no such file", path);
    return Errno("open", path);
  }
  return File(fd, path);
}

Result<File> File::Create(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return Errno("create", path);
  return File(fd, path);
}

Result<File> File::OpenReadWrite(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return Error(ErrorCode::kNotFound, "{}: no such file", path);
    return Errno("open", path);
  }
  return File(fd, path);
}

Result<uint64_t> File::Size() const {
  struct stat st;
  if (::fstat(fd_, &st) != 0) return Errno("stat", path_);
  return static_cast<uint64_t>(st.st_size);
}

Status File::PreadExact(void* buf, size_t n, uint64_t offset) const {
  auto* p = static_cast<uint8_t*>(buf);
  size_t done = 0;
  while (done < n) {
    ssize_t r = ::pread(fd_, p + done, n - done, static_cast<off_t>(offset + done));
    if (r < 0) {
      if (errno == EINTR) continue;
      return Errno("read", path_);
    }
    if (r == 0) {
      return Error(ErrorCode::kCorrupt,
                   "{}: truncated: wanted {} bytes at offset {}, file ends after {}", path_, n,
                   offset, offset + done);
    }
    done += static_cast<size_t>(r);
  }
  return Status::Ok();
}

Status File::PwriteAll(const void* buf, size_t n, uint64_t offset) {
  const auto* p = static_cast<const uint8_t*>(buf);
  size_t done = 0;
  while (done < n) {
    ssize_t r = ::pwrite(fd_, p + done, n - done, static_cast<off_t>(offset + done));
    if (r < 0) {
      if (errno == EINTR) continue;
      return Errno("write", path_);
    }
    done += static_cast<size_t>(r);
  }
  return Status::Ok();
}

Status File::WriteAll(const void* buf, size_t n) {
  const auto* p = static_cast<const uint8_t*>(buf);
  size_t done = 0;
  while (done < n) {
    ssize_t r = ::write(fd_, p + done, n - done);
    if (r < 0) {
      if (errno == EINTR) continue;
      return Errno("write", path_);
    }
    done += static_cast<size_t>(r);
  }
  return Status::Ok();
}

Status File::Truncate(uint64_t size) {
  if (::ftruncate(fd_, static_cast<off_t>(size)) != 0) return Errno("truncate", path_);
  return Status::Ok();
}

Status File::Sync() {
  if (::fsync(fd_) != 0) return Errno("fsync", path_);
  return Status::Ok();
}

Status File::Close() {
  if (fd_ < 0) return Status::Ok();
  int r = ::close(fd_);
  fd_ = -1;
  if (r != 0) return Errno("close", path_);
  return Status::Ok();
}

MappedFile::MappedFile(MappedFile&& o) noexcept
    : data_(o.data_), size_(o.size_), path_(std::move(o.path_)) {
  o.data_ = nullptr;
  o.size_ = 0;
}

MappedFile& MappedFile::operator=(MappedFile&& o) noexcept {
  if (this != &o) {
    if (data_ != nullptr) ::munmap(data_, size_);
    data_ = o.data_;
    size_ = o.size_;
    path_ = std::move(o.path_);
    o.data_ = nullptr;
    o.size_ = 0;
  }
  return *this;
}

MappedFile::~MappedFile() {
  if (data_ != nullptr) ::munmap(data_, size_);
}

Result<MappedFile> MappedFile::Open(const std::string& path) {
  RW_ASSIGN_OR_RETURN(File f, File::OpenRead(path));
  RW_ASSIGN_OR_RETURN(uint64_t size, f.Size());
  MappedFile m;
  m.path_ = path;
  m.size_ = size;
  if (size == 0) return m;
  void* p = ::mmap(nullptr, size, PROT_READ, MAP_SHARED, f.fd(), 0);
  if (p == MAP_FAILED) return Errno("mmap", path);
  m.data_ = static_cast<uint8_t*>(p);
  return m;
}

Result<std::string> ReadFileToString(const std::string& path) {
  RW_ASSIGN_OR_RETURN(File f, File::OpenRead(path));
  RW_ASSIGN_OR_RETURN(uint64_t size, f.Size());
  std::string s(size, '\0');
  RW_RETURN_IF_ERROR(f.PreadExact(s.data(), size, 0));
  return s;
}

Result<std::string> ReadFileToString(const std::string& path, uint64_t max_bytes) {
  RW_ASSIGN_OR_RETURN(File f, File::OpenRead(path));
  RW_ASSIGN_OR_RETURN(uint64_t size, f.Size());
  if (size > max_bytes)
    return Error(ErrorCode::kCorrupt, "{}: {} bytes, more than the {} bytes such a file may have",
                 path, size, max_bytes);
  std::string s(size, '\0');
  RW_RETURN_IF_ERROR(f.PreadExact(s.data(), size, 0));
  return s;
}

Status SyncDirectory(const std::string& dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return Errno("open directory", dir);
  int r = ::fsync(fd);
  ::close(fd);
  if (r != 0) return Errno("fsync directory", dir);
  return Status::Ok();
}

Status WriteFileAtomic(const std::string& path, std::string_view contents) {
  std::string tmp = fmt::format("{}.tmp-{}", path, ::getpid());
  {
    RW_ASSIGN_OR_RETURN(File f, File::Create(tmp));
    Status st = f.WriteAll(contents.data(), contents.size());
    if (st.ok()) st = f.Sync();
    if (st.ok()) st = f.Close();
    if (!st.ok()) {
      ::unlink(tmp.c_str());
      return st;
    }
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    Status st = Errno("rename", path);
    ::unlink(tmp.c_str());
    return st;
  }
  return SyncDirectory(ParentPath(path));
}

bool PathExists(const std::string& path) {
  struct stat st;
  return ::lstat(path.c_str(), &st) == 0;
}

bool IsDirectory(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

Status MakeDirectories(const std::string& path) {
  std::error_code ec;
  std::filesystem::create_directories(path, ec);
  if (ec) return Error(ErrorCode::kIo, "{}: cannot create directory: {}", path, ec.message());
  return Status::Ok();
}

Status RemoveAll(const std::string& path) {
  std::error_code ec;
  std::filesystem::remove_all(path, ec);
  if (ec) return Error(ErrorCode::kIo, "{}: cannot remove: {}", path, ec.message());
  return Status::Ok();
}

std::string JoinPath(const std::string& a, const std::string& b) {
  if (a.empty()) return b;
  if (a.back() == '/') return a + b;
  return a + "/" + b;
}

std::string ParentPath(const std::string& path) {
  std::string p = std::filesystem::path(path).parent_path().string();
  return p.empty() ? "." : p;
}

std::string BaseName(const std::string& path) {
  return std::filesystem::path(path).filename().string();
}

Result<uint64_t> FreeDiskBytes(const std::string& path) {
  struct statvfs vfs;
  if (::statvfs(path.c_str(), &vfs) != 0) return Errno("statvfs", path);
  return static_cast<uint64_t>(vfs.f_bavail) * vfs.f_frsize;
}

}  // namespace rw
