// Checksums: SHA-256 for whole files (manifest, install), XXH3-64 for expert blobs (cheap per
// read).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "base/status.h"

namespace rw {

class Sha256 {
 public:
  Sha256();
  ~Sha256();
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;
  void Update(const void* data, size_t n);
  // Lowercase hex of the digest; the object is finished afterwards.
  std::string FinishHex();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

std::string Sha256Hex(const void* data, size_t n);
// Streams the file in bounded chunks.
Result<std::string> Sha256File(const std::string& path);

uint64_t Xxh3_64(const void* data, size_t n);
std::string Hex64(uint64_t v);  // 16 lowercase hex digits
Result<uint64_t> ParseHex64(const std::string& s);

}  // namespace rw
