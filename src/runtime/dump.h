// Debug dumps of named intermediates. With REDWING_DUMP=<dir>, the forward pass appends every
// named tensor as raw little-endian fp32 rows to <dir>/<name>.f32 (per layer:
// <dir>/L<layer>.<name>.f32), one row per token in position order across calls, so a parity
// failure can be bisected against the same names dumped from transformers.
#pragma once

#include <cstdint>
#include <string>

namespace rw {

class Dumper {
 public:
  // Reads REDWING_DUMP; off when unset or empty.
  static Dumper FromEnv();
  explicit Dumper(std::string dir = "") : dir_(std::move(dir)) {}

  bool on() const { return !dir_.empty(); }
  // layer < 0: a model-level tensor. Failures to write are logged once, never fatal.
  void Write(const char* name, int layer, const float* x, int64_t rows, int64_t cols) const {
    if (on()) WriteImpl(name, layer, x, rows, cols);
  }

 private:
  void WriteImpl(const char* name, int layer, const float* x, int64_t rows, int64_t cols) const;
  std::string dir_;
};

}  // namespace rw
