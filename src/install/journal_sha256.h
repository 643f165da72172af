// A SHA-256 whose running state can be written into the install journal and restored later, so
// a shard's hash resumes exactly where an interrupted install stopped instead of refetching the
// shard from its first byte (base/hash.h's Sha256 wraps OpenSSL and cannot export its state).
// Implemented from FIPS 180-4.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "base/status.h"

namespace rw {

class ResumableSha256 {
 public:
  ResumableSha256() { Reset(); }
  void Reset();
  void Update(const void* data, size_t n);
  // Lowercase hex of the digest of everything so far; the object is unchanged.
  std::string DigestHex() const;
  uint64_t length() const { return len_; }

  // "<8 words hex>:<length>:<pending bytes hex>"; Load accepts only what Save wrote.
  std::string Save() const;
  static Result<ResumableSha256> Load(const std::string& text);

 private:
  void Block(const uint8_t* p);

  uint32_t h_[8];
  uint8_t buf_[64];
  size_t buf_len_ = 0;
  uint64_t len_ = 0;
};

}  // namespace rw
