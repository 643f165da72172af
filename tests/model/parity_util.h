// Helpers shared by the parity tests (CPU and CUDA): golden fixture files and the error measure
// every parity threshold is stated in.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "base/file.h"
#include "install/synth.h"

namespace rw::test {

// A tiny synthesized model (geometry "tiny", the given seed) under the build tree, made once per
// process: ctest runs cases in parallel processes, so each gets its own directory.
inline std::string TinySynthModel(const std::string& tag, uint64_t seed) {
  const std::string d =
      JoinPath(REDWING_BUILD_DIR, "test_tmp/" + tag + "/tiny." + std::to_string(getpid()));
  SynthOptions o;
  o.geometry = "tiny";
  o.seed = seed;
  o.out_dir = d;
  o.overwrite = true;
  Status st = SynthesizeModel(o);
  EXPECT_TRUE(st.ok()) << st.ToString();
  return d;
}

// A raw little-endian float32 file (the fixtures' logits).
inline std::vector<float> ReadF32(const std::string& path) {
  auto bytes = ReadFileToString(path);
  EXPECT_TRUE(bytes.ok()) << bytes.status().ToString();
  if (!bytes.ok()) return {};
  std::vector<float> v(bytes->size() / 4);
  std::memcpy(v.data(), bytes->data(), v.size() * 4);
  return v;
}

// ‖a − b‖ / ‖b‖ over n values, in double.
inline double RelErr(const float* a, const float* b, size_t n) {
  double num = 0, den = 0;
  for (size_t i = 0; i < n; ++i) {
    num += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    den += double(b[i]) * b[i];
  }
  return std::sqrt(num / den);
}

}  // namespace rw::test
