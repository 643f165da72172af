// libFuzzer target: a safetensors file's 8-byte length prefix and JSON header (untrusted: it comes
// from a downloaded checkpoint), and the same bytes as a model.safetensors.index.json.
// Beyond "no crash", it checks what the parser promises its callers: every accepted tensor lies
// inside the data area, its size matches its shape and dtype, and tensors do not overlap.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "install/safetensors.h"

namespace {

void Require(bool ok, const char* what) {
  if (!ok) {
    fprintf(stderr, "fuzz_safetensors: broken promise: %s\n", what);
    abort();
  }
}

void CheckTensors(const std::vector<rw::StTensor>& tensors, uint64_t data_start,
                  uint64_t file_size) {
  uint64_t prev_end = data_start;
  for (const rw::StTensor& t : tensors) {
    Require(t.offset >= data_start, "tensor starts before the data area");
    Require(t.offset >= prev_end, "tensors overlap or are out of file order");
    Require(t.offset <= file_size && t.size <= file_size - t.offset, "tensor ends past the file");
    Require(static_cast<uint64_t>(t.numel()) * rw::StDTypeSize(t.dtype) == t.size,
            "tensor size does not match its shape and dtype");
    prev_end = t.offset + t.size;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  // As a whole file: the prefix, the header, and whatever data bytes follow.
  if (size >= 8) {
    auto n = rw::SafetensorsFile::ParseHeaderLength(data, size, "fuzz.safetensors");
    if (n.ok()) {
      Require(*n <= size - 8, "header length past the end of the file");
      const std::string_view header = bytes.substr(8, *n);
      for (uint64_t file_size : {uint64_t{size}, UINT64_MAX}) {
        std::map<std::string, std::string> metadata;
        auto tensors = rw::SafetensorsFile::ParseHeader(header, 8 + *n, file_size,
                                                        "fuzz.safetensors", &metadata);
        if (tensors.ok()) CheckTensors(*tensors, 8 + *n, file_size);
      }
    }
  }
  // As a sharded checkpoint's index: shard names must stay plain file names.
  auto index = rw::ParseSafetensorsIndex(bytes, "fuzz.index.json");
  if (index.ok()) {
    for (const auto& [tensor, shard] : *index) {
      Require(!shard.empty() && shard != "." && shard != "..", "shard name is a directory");
      Require(shard.find('/') == std::string::npos && shard.find('\0') == std::string::npos,
              "shard name is a path");
    }
  }
  return 0;
}
