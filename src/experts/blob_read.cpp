#include "experts/blob_read.h"

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
