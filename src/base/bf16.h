// bfloat16 <-> float. bf16 is the upper half of an IEEE float; rounding is to nearest even,
// as torch and MLX do when casting.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

namespace rw {

inline float Bf16ToF32(uint16_t b) {
  uint32_t u = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

inline uint16_t F32ToBf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if (std::isnan(f)) return static_cast<uint16_t>((u >> 16) | 0x40);  // keep it a quiet NaN
  uint32_t lsb = (u >> 16) & 1u;
  u += 0x7fffu + lsb;
  return static_cast<uint16_t>(u >> 16);
}

inline float RoundToBf16(float f) {
  return Bf16ToF32(F32ToBf16(f));
}

// IEEE half, for sources that store f16 and the fp16 KV cache (storage only; never an activation
// dtype). F32ToF16 rounds to nearest even; beyond ±65504 it gives ±infinity.
float F16ToF32(uint16_t h);
uint16_t F32ToF16(float f);

}  // namespace rw
