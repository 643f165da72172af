#include "experts/blob_read.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "base/hash.h"

namespace rw {
namespace {

Status PreadAll(const BlobSource& src, uint64_t offset, uint8_t* dst, uint64_t n) {
  uint64_t done = 0;
  while (done < n) {
    const ssize_t r = ::pread(src.fd, dst + done, n - done, static_cast<off_t>(offset + done));
    if (r < 0) {
      if (errno == EINTR) continue;
      return Error(ErrorCode::kIo, "{}: read of {} bytes at {} failed: {}", src.path, n - done,
                   offset + done, std::strerror(errno));
    }
    if (r == 0)
      return Error(ErrorCode::kCorrupt, "{}: file ends at {} (expected {} more bytes)", src.path,
                   offset + done, n - done);
    done += static_cast<uint64_t>(r);
  }
  return Status::Ok();
}

}  // namespace

Result<BlobSource> OpenBlobSource(const std::string& path, uint64_t stride, int num_experts) {
  BlobSource src;
  src.path = path;
  src.stride = stride;
  src.fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (src.fd < 0) return Error(ErrorCode::kIo, "{}: {}", path, std::strerror(errno));
  const off_t size = lseek(src.fd, 0, SEEK_END);
  if (size < static_cast<off_t>(stride * static_cast<uint64_t>(num_experts))) {
    CloseBlobSource(src);
    return Error(ErrorCode::kCorrupt, "{}: {} bytes, {} experts × stride {} expected", path, size,
                 num_experts, stride);
  }
  // Reads are whole blobs at random offsets: kernel readahead would only waste the disk.
  posix_fadvise(src.fd, 0, 0, POSIX_FADV_RANDOM);
  return src;
}

void CloseBlobSource(BlobSource& src) {
  if (src.fd >= 0) ::close(src.fd);
  src.fd = -1;
}

ReadJob BlobJob(const BlobSource& src, int expert, uint8_t* dst) {
  ReadJob job;
  job.fd = src.fd;
  job.path = src.path;
  job.offset = src.stride * static_cast<uint64_t>(expert);
  job.length = src.stride;
  job.dst = dst;
  return job;
}

BlobCheck CheckBlobRead(const BlobSource& src, int layer, int expert, int attempt, bool verify,
                        uint64_t expected_xxh3, const Status& io, const uint8_t* data) {
  BlobCheck c;
  c.status = io;
  c.mismatch = io.ok() && verify && Xxh3_64(data, src.stride) != expected_xxh3;
  if (c.mismatch && attempt == 0) c.retry = true;
  if (c.mismatch && !c.retry) c.status = ExpertChecksumError(src, layer, expert);
  return c;
}

Status ExpertChecksumError(const BlobSource& src, int layer, int expert) {
  const uint64_t offset = src.stride * static_cast<uint64_t>(expert);
  return Error(ErrorCode::kCorrupt,
               "{}: expert {} of layer {} (bytes {}..{}) fails its checksum on every read; the "
               "file is damaged (redwing verify names every bad blob; reinstall the model)",
               src.path, expert, layer, offset, offset + src.stride);
}

Status ReadExpertBlob(const BlobSource& src, int layer, int expert, uint8_t* dst, bool verify,
                      uint64_t expected_xxh3, int* checksum_failures, int attempts) {
  *checksum_failures = 0;
  const uint64_t offset = src.stride * static_cast<uint64_t>(expert);
  for (int attempt = 0; attempt < attempts; ++attempt) {
    RW_RETURN_IF_ERROR(PreadAll(src, offset, dst, src.stride));
    if (!verify || Xxh3_64(dst, src.stride) == expected_xxh3) return Status::Ok();
    ++*checksum_failures;
  }
  return ExpertChecksumError(src, layer, expert);
}

}  // namespace rw
