#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <mutex>
#include <utility>
#include <vector>

#include "base/bf16.h"
#include "base/file.h"
#include "base/hash.h"
#include "base/status.h"
#include "base/thread_pool.h"
#include "base/zeroed_floats.h"

namespace rw {
namespace {

TEST(Bf16, RoundsToNearestEven) {
  EXPECT_EQ(RoundToBf16(53.066f), 53.0f);  // the Gemma 4 embedding scale
  EXPECT_EQ(F32ToBf16(1.0f), 0x3f80);
  // 1 + 2^-8 is exactly halfway between two bf16 values: ties go to the even one (1.0).
  EXPECT_EQ(RoundToBf16(1.0f + std::ldexp(1.0f, -8)), 1.0f);
  EXPECT_EQ(RoundToBf16(1.0f + 3 * std::ldexp(1.0f, -8)), 1.0f + std::ldexp(1.0f, -6));
  EXPECT_TRUE(std::isnan(Bf16ToF32(F32ToBf16(NAN))));
  for (uint32_t b = 0; b < 0x7f80; b += 7) EXPECT_EQ(F32ToBf16(Bf16ToF32(b)), b);
}

TEST(F16, Converts) {
  EXPECT_EQ(F16ToF32(0x3c00), 1.0f);
  EXPECT_EQ(F16ToF32(0xc000), -2.0f);
  EXPECT_EQ(F16ToF32(0x0001), std::ldexp(1.0f, -24));
  EXPECT_TRUE(std::isinf(F16ToF32(0x7c00)));
}

TEST(Hash, KnownVectors) {
  EXPECT_EQ(Sha256Hex("abc", 3),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(Hex64(0x1234), "0000000000001234");
  auto v = ParseHex64("00000000000000ff");
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(*v, 255u);
  EXPECT_FALSE(ParseHex64("xyz").ok());
  EXPECT_NE(Xxh3_64("a", 1), Xxh3_64("b", 1));
}

TEST(File, AtomicWriteAndErrors) {
  std::string dir = ::testing::TempDir() + "/rw_base_file";
  ASSERT_TRUE(RemoveAll(dir).ok());
  ASSERT_TRUE(MakeDirectories(dir).ok());
  std::string p = JoinPath(dir, "x.txt");
  ASSERT_TRUE(WriteFileAtomic(p, "hello").ok());
  auto s = ReadFileToString(p);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(*s, "hello");
  auto missing = ReadFileToString(JoinPath(dir, "nope"));
  EXPECT_EQ(missing.status().code(), ErrorCode::kNotFound);
  auto f = File::OpenRead(p);
  ASSERT_TRUE(f.ok());
  char buf[10];
  Status st = f->PreadExact(buf, 10, 0);
  EXPECT_EQ(st.code(), ErrorCode::kCorrupt);
  EXPECT_NE(st.message().find("truncated"), std::string::npos);
}

TEST(ThreadPool, CoversEveryIndexOnce) {
  ThreadPool pool(3);
  for (size_t n : {1u, 2u, 7u, 100u, 1001u}) {
    std::vector<int> hits(n, 0);
    pool.ParallelFor(n, 1, [&](size_t b, size_t e, int) {
      for (size_t i = b; i < e; ++i) hits[i]++;
    });
    for (size_t i = 0; i < n; ++i) ASSERT_EQ(hits[i], 1) << n << " " << i;
  }
}

// Several chunks per thread: still every index once, chunks no smaller than the grain (but the
// last; one chunk when n ≤ grain), no more chunks than asked for, and back-to-back jobs (the
// workers still polling for the next one) see each other's writes.
TEST(ThreadPool, ChunksPerThreadSplitsFiner) {
  ThreadPool pool(2);
  for (size_t n : {1u, 5u, 8u, 9u, 64u, 1000u}) {
    for (size_t grain : {1u, 3u, 100u}) {
      std::vector<int> hits(n, 0);
      std::mutex mu;
      std::vector<std::pair<size_t, size_t>> chunks;
      pool.ParallelFor(
          n, grain,
          [&](size_t b, size_t e, int) {
            for (size_t i = b; i < e; ++i) hits[i]++;
            std::lock_guard<std::mutex> lock(mu);
            chunks.push_back({b, e});
          },
          4);
      for (size_t i = 0; i < n; ++i) ASSERT_EQ(hits[i], 1) << n << " " << i;
      EXPECT_LE(chunks.size(), 8u) << n << " " << grain;
      EXPECT_EQ(chunks.size() > 1, n > grain) << n << " " << grain;
      for (auto [b, e] : chunks) {
        if (e != n) {
          EXPECT_GE(e - b, grain) << n << " " << grain;
        }
      }
    }
  }
  std::vector<int> v(4096, 0);
  for (int round = 1; round <= 200; ++round)
    pool.ParallelFor(
        v.size(), 64,
        [&](size_t b, size_t e, int) {
          for (size_t i = b; i < e; ++i) {
            ASSERT_EQ(v[i], round - 1);
            v[i] = round;
          }
        },
        4);
  for (int x : v) ASSERT_EQ(x, 200);
}

TEST(Status, MacrosPropagate) {
  auto fails = []() -> Result<int> { return Error(ErrorCode::kCorrupt, "bad {}", 7); };
  auto outer = [&]() -> Status {
    RW_ASSIGN_OR_RETURN(int v, fails());
    (void)v;
    return Status::Ok();
  };
  Status st = outer();
  EXPECT_EQ(st.code(), ErrorCode::kCorrupt);
  EXPECT_EQ(st.ToString(), "corrupt: bad 7");
  EXPECT_EQ(st.Annotate("file").message(), "file: bad 7");
}

}  // namespace
// Resident pages of [p, p + bytes), whole pages inside the range only.
size_t ResidentPages(const void* p, size_t bytes) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  const uintptr_t b = (reinterpret_cast<uintptr_t>(p) + page - 1) & ~(page - 1);
  const uintptr_t e = (reinterpret_cast<uintptr_t>(p) + bytes) & ~(page - 1);
  if (e <= b) return 0;
  std::vector<unsigned char> v((e - b) / page);
  EXPECT_EQ(0, mincore(reinterpret_cast<void*>(b), e - b, v.data()));
  size_t n = 0;
  for (unsigned char c : v) n += c & 1;
  return n;
}

TEST(ZeroedFloatsTest, ZeroFilledGrowsKeepingContentsAndTouchesOnlyWrittenPages) {
  ZeroedFloats f(10);
  for (size_t i = 0; i < 10; ++i) EXPECT_EQ(f[i], 0.0f);
  for (size_t i = 0; i < 10; ++i) f[i] = static_cast<float>(i + 1);
  f.resize(4);  // never shrinks
  EXPECT_EQ(f.size(), 10u);
  // 64 MiB: far above the allocator's mmap threshold, so its pages start unmapped.
  const size_t n = size_t{16} << 20;
  f.resize(n);
  ASSERT_EQ(f.size(), n);
  for (size_t i = 0; i < 10; ++i) EXPECT_EQ(f[i], static_cast<float>(i + 1));
  const size_t pages = n * sizeof(float) / static_cast<size_t>(sysconf(_SC_PAGESIZE));
  EXPECT_LT(ResidentPages(f.data(), n * sizeof(float)), pages / 100);
  for (size_t i = 0; i < n / 2; ++i) f[i] += 1.0f;  // touch the first half
  EXPECT_GT(ResidentPages(f.data(), n * sizeof(float)), pages * 45 / 100);
  EXPECT_EQ(f[n - 1], 0.0f);
  EXPECT_EQ(f[n / 2 - 1], 1.0f);
  ZeroedFloats g = std::move(f);
  EXPECT_EQ(g.size(), n);
  EXPECT_EQ(f.size(), 0u);
}

}  // namespace rw
