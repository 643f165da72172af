#include "base/hash.h"

#include <openssl/evp.h>
#include <xxhash.h>

#include <vector>

#include "base/check.h"
#include "base/file.h"

namespace rw {

struct Sha256::Impl {
  EVP_MD_CTX* ctx = nullptr;
};

Sha256::Sha256() : impl_(std::make_unique<Impl>()) {
  impl_->ctx = EVP_MD_CTX_new();
  CHECK(impl_->ctx != nullptr);
  CHECK(EVP_DigestInit_ex(impl_->ctx, EVP_sha256(), nullptr) == 1);
}

Sha256::~Sha256() {
  EVP_MD_CTX_free(impl_->ctx);
}

void Sha256::Update(const void* data, size_t n) {
  CHECK(EVP_DigestUpdate(impl_->ctx, data, n) == 1);
}

std::string Sha256::FinishHex() {
  unsigned char md[32];
  unsigned int len = 0;
  CHECK(EVP_DigestFinal_ex(impl_->ctx, md, &len) == 1);
  static const char* kHex = "0123456789abcdef";
  std::string out(2 * len, '0');
  for (unsigned i = 0; i < len; ++i) {
    out[2 * i] = kHex[md[i] >> 4];
    out[2 * i + 1] = kHex[md[i] & 15];
  }
  return out;
}

std::string Sha256Hex(const void* data, size_t n) {
  Sha256 h;
  h.Update(data, n);
  return h.FinishHex();
}

Result<std::string> Sha256File(const std::string& path) {
  RW_ASSIGN_OR_RETURN(File f, File::OpenRead(path));
  RW_ASSIGN_OR_RETURN(uint64_t size, f.Size());
  Sha256 h;
  std::vector<uint8_t> buf(8 << 20);
  for (uint64_t off = 0; off < size;) {
    size_t n = static_cast<size_t>(std::min<uint64_t>(buf.size(), size - off));
    RW_RETURN_IF_ERROR(f.PreadExact(buf.data(), n, off));
    h.Update(buf.data(), n);
    off += n;
  }
  return h.FinishHex();
}

uint64_t Xxh3_64(const void* data, size_t n) {
  return XXH3_64bits(data, n);
}

std::string Hex64(uint64_t v) {
  return fmt::format("{:016x}", v);
}

Result<uint64_t> ParseHex64(const std::string& s) {
  if (s.size() != 16) return Error(ErrorCode::kCorrupt, "bad 64-bit hex value '{}'", s);
  uint64_t v = 0;
  for (char c : s) {
    int d;
    if (c >= '0' && c <= '9')
      d = c - '0';
    else if (c >= 'a' && c <= 'f')
      d = c - 'a' + 10;
    else
      return Error(ErrorCode::kCorrupt, "bad 64-bit hex value '{}'", s);
    v = (v << 4) | static_cast<uint64_t>(d);
  }
  return v;
}

}  // namespace rw
