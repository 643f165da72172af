// Reading one expert blob from its layer file, checked against the index's XXH3.
#pragma once

#include <cstdint>
#include <string>

#include "base/status.h"
#include "experts/read_queue.h"

namespace rw {

struct BlobSource {
  int fd = -1;
  std::string path;  // for messages
  uint64_t stride = 0;
};

// Opens a layer file for blob reads (fd closed by CloseBlobSource) after checking that it holds
// num_experts strides.
Result<BlobSource> OpenBlobSource(const std::string& path, uint64_t stride, int num_experts);
void CloseBlobSource(BlobSource& src);
// A read of expert e's whole stride (dst null: into the queue's buffer); done is left to fill.
ReadJob BlobJob(const BlobSource& src, int expert, uint8_t* dst);

// What to do with a finished read of expert e (attempt 0 or 1): accept it, read it once more
// (its checksum failed the first time), or fail (an I/O error, or a second mismatch).
struct BlobCheck {
  Status status;
  bool mismatch = false;  // the checksum failed on this read
  bool retry = false;     // read it again
};
BlobCheck CheckBlobRead(const BlobSource& src, int layer, int expert, int attempt, bool verify,
                        uint64_t expected_xxh3, const Status& io, const uint8_t* data);

// The error for a blob that failed its checksum on every read.
Status ExpertChecksumError(const BlobSource& src, int layer, int expert);

// Reads expert e's stride bytes into dst with pread. When expected_xxh3 is given (verify), a
// mismatch is re-read once; a second mismatch is kCorrupt naming the file and expert.
// *checksum_failures counts mismatches seen (0, 1 or 2).
// attempts: reads before giving up (2: one re-read).
Status ReadExpertBlob(const BlobSource& src, int layer, int expert, uint8_t* dst, bool verify,
                      uint64_t expected_xxh3, int* checksum_failures, int attempts = 2);

}  // namespace rw
