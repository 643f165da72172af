// The memory probe and the memory-bandwidth bound of CPU decode: the KV bytes a step reads per
// layer kind, the bound's arithmetic, and the probe itself on a small buffer.
#include <gtest/gtest.h>

#include "base/thread_pool.h"
#include "bench/memory_probe.h"

namespace rw {
namespace {

// Two layers: a sliding one (window 4, 2 KV heads of 8) and a full one (1 KV head of 16).
ModelConfig TwoLayers() {
  ModelConfig c;
  c.num_layers = 2;
  c.layer_types = {LayerKind::kSliding, LayerKind::kFull};
  c.sliding.num_kv_heads = 2;
  c.sliding.head_dim = 8;
  c.full.num_kv_heads = 1;
  c.full.head_dim = 16;
  c.sliding_window = 4;
  return c;
}

TEST(MemoryProbeTest, KvBytesFollowTheWindow) {
  const ModelConfig c = TwoLayers();
  // K and V, fp32: a sliding position is 2·8·2·4 = 128 bytes, a full one 1·16·2·4 = 128.
  EXPECT_EQ(KvBytesReadAt(c, 0), 128u + 128u);
  EXPECT_EQ(KvBytesReadAt(c, 3), 4 * 128u + 4 * 128u);
  EXPECT_EQ(KvBytesReadAt(c, 10), 4 * 128u + 11 * 128u);  // the ring holds the last 4
}

TEST(MemoryProbeTest, BoundOfADecodeRun) {
  const ModelConfig c = TwoLayers();
  MemoryProbeResult probe;
  probe.gb_s = 2.0;
  // 4 tokens at positions 10..13 in 0.01 s, 4 MB of experts acquired, 1 MB of core per token.
  const DecodeMemoryBound b = MemoryBoundOfDecode(c, probe, 1'000'000, 4'000'000, 10, 4, 0.01);
  EXPECT_DOUBLE_EQ(b.weight_bytes_per_token, 2'000'000.0);
  const double kv = (4 * 128.0) + (11 + 12 + 13 + 14) / 4.0 * 128.0;
  EXPECT_DOUBLE_EQ(b.kv_bytes_per_token, kv);
  EXPECT_DOUBLE_EQ(b.bound_s, (2'000'000.0 + kv) / 2e9);
  EXPECT_DOUBLE_EQ(b.actual_s, 0.0025);
  EXPECT_DOUBLE_EQ(b.ratio, 0.0025 / b.bound_s);
  // Nothing decoded, or no probe: no bound.
  EXPECT_EQ(MemoryBoundOfDecode(c, probe, 1, 1, 0, 0, 1.0).bound_s, 0);
  EXPECT_EQ(MemoryBoundOfDecode(c, MemoryProbeResult{}, 1, 1, 0, 4, 1.0).bound_s, 0);
}

TEST(MemoryProbeTest, ProbeReadsWithEveryThread) {
  ThreadPool pool(2);
  auto r = ProbeMemoryRead(&pool, uint64_t{8} << 20, 2);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_GT(r->gb_s, 0);
  EXPECT_EQ(r->threads, 2);
  EXPECT_EQ(r->buffer_bytes, uint64_t{8} << 20);
  EXPECT_EQ(r->passes, 2);
  auto one = ProbeMemoryRead(nullptr, uint64_t{1} << 20, 1);
  ASSERT_TRUE(one.ok()) << one.status().ToString();
  EXPECT_EQ(one->threads, 1);
  EXPECT_FALSE(ProbeMemoryRead(&pool, 4, 1).ok());  // under one word
  EXPECT_FALSE(ProbeMemoryRead(&pool, 1 << 20, 0).ok());
}

}  // namespace
}  // namespace rw
