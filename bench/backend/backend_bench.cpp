// backend_bench: times the CPU kernels at Gemma 4 26B-A4B shapes and compares the weight bytes
// they stream per second with a plain memory-read probe. Weights are random (speed does not
// depend on values). "cold" runs rotate over enough copies of a matrix to defeat the 32 MB L3,
// which is what decode and a prefill's experts see; "hot" repeats one copy. Times are the best
// repetition: on a shared host the median can be far slower.
//
//   backend_bench [--quick] [--isa scalar|avx2]
//                 [--only matvec|fast|matmul|attention|verify|elementwise]
// "fast" times the affine matvec at both precisions (Precision::kExact, kFast) shape by shape.
#include <fmt/format.h>
#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <ctime>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "backend/cpu/ops.h"
#include "base/bf16.h"
#include "base/thread_pool.h"
#include "base/timer.h"

namespace rw::cpu {
namespace {

bool g_quick = false;

double ThreadCpuSeconds() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

// Best CPU time of the calling thread in the last BestSeconds call: on a machine shared with
// other jobs it estimates the uncontended time of single-threaded kernels.
double g_last_cpu = 0;

// Best time of repeated calls of fn(i), repeating for about `budget` seconds (at least 3 calls).
template <typename F>
double BestSeconds(F fn, double budget = 0.6) {
  double best = 1e30, best_cpu = 1e30, total = 0;
  for (int i = 0; total < (g_quick ? budget / 4 : budget) || i < 3; ++i) {
    Stopwatch sw;
    const double c0 = ThreadCpuSeconds();
    fn(i);
    const double t = sw.Seconds();
    best_cpu = std::min(best_cpu, ThreadCpuSeconds() - c0);
    best = std::min(best, t);
    total += t;
  }
  g_last_cpu = best_cpu;
  return best;
}

// " (cpu X us)" for single-threaded runs.
std::string CpuNote(int threads, double scale = 1.0) {
  return threads == 1 ? fmt::format(" [cpu {:.1f} us]", g_last_cpu * scale * 1e6) : "";
}

// Sums 64-bit words of a buffer much larger than the L3, split over `threads` threads.
double ReadBandwidthGBs(int threads) {
  const size_t bytes = size_t{512} << 20;
  static std::vector<uint64_t> buf(bytes / 8, 1);
  std::vector<uint64_t> sums(static_cast<size_t>(threads) * 8);
  const double t = BestSeconds(
      [&](int) {
        std::vector<std::thread> ts;
        for (int th = 0; th < threads; ++th) {
          ts.emplace_back([&, th] {
            const size_t n = buf.size() / threads, b = n * th;
            uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
            for (size_t i = b; i < b + n; i += 4) {
              s0 += buf[i];
              s1 += buf[i + 1];
              s2 += buf[i + 2];
              s3 += buf[i + 3];
            }
            sums[static_cast<size_t>(th) * 8] = s0 + s1 + s2 + s3;
          });
        }
        for (auto& t : ts) t.join();
      },
      1.5);
  if (sums[0] == 42) std::printf(" ");
  return static_cast<double>(bytes) / t * 1e-9;
}

// 12 independent chains of 8-lane FMAs (enough to cover the FMA latency on two pipes): the
// most fp32 work a core does per second at this moment. On a shared VM it moves with the
// load on the other hardware threads of the same cores, so the matmul lines measure it again
// just before they run and report their share of it.
__attribute__((target("avx2,fma"))) float FmaLoop(int64_t iters) {
  __m256 acc[12];
  for (int i = 0; i < 12; ++i) acc[i] = _mm256_set1_ps(1.0f + 1e-7f * static_cast<float>(i));
  const __m256 b = _mm256_set1_ps(0.9999999f), c = _mm256_set1_ps(1e-8f);
  for (int64_t n = 0; n < iters; ++n)
    for (int i = 0; i < 12; ++i) acc[i] = _mm256_fmadd_ps(acc[i], b, c);
  float out = 0;
  for (int i = 0; i < 12; ++i) out += _mm256_cvtss_f32(acc[i]);
  return out;
}

// GFLOP/s of FmaLoop on `threads` threads at once (0 where the CPU lacks AVX2 + FMA).
double FmaPeakGFlops(int threads) {
  if (DetectedIsa() == Isa::kScalar) return 0;
  const int64_t iters = 2'000'000;
  std::vector<float> sink(static_cast<size_t>(threads));
  const double t = BestSeconds(
      [&](int) {
        std::vector<std::thread> ts;
        for (int th = 0; th < threads; ++th)
          ts.emplace_back([&, th] { sink[static_cast<size_t>(th)] = FmaLoop(iters); });
        for (auto& t : ts) t.join();
      },
      0.2);
  if (sink[0] == 42) std::printf(" ");
  return 2.0 * 8 * 12 * static_cast<double>(iters) * threads / t * 1e-9;
}

struct AffineMatrix {
  std::vector<uint32_t> words;
  std::vector<uint16_t> scales, biases;
  WeightView view;
};

std::unique_ptr<AffineMatrix> MakeAffine(int64_t n, int64_t k, int bits, int group, uint32_t seed) {
  auto m = std::make_unique<AffineMatrix>();
  std::mt19937 rng(seed);
  m->words.resize(static_cast<size_t>(n * k * bits / 32));
  for (auto& w : m->words) w = static_cast<uint32_t>(rng());
  m->scales.resize(static_cast<size_t>(n * k / group));
  m->biases.resize(m->scales.size());
  for (size_t i = 0; i < m->scales.size(); ++i) {
    m->scales[i] = F32ToBf16(0.001f * static_cast<float>(rng() % 100));
    m->biases[i] = F32ToBf16(-0.01f * static_cast<float>(rng() % 100));
  }
  m->view = AffineWeight(m->words.data(), n, k, bits, group, m->scales.data(), m->biases.data());
  return m;
}

ThreadPool* PoolOf(int threads) {
  static ThreadPool p1(1), p2(2);
  return threads == 1 ? &p1 : &p2;
}

void BenchMatVec(int64_t n, int64_t k, int bits, double read1, double read2,
                 Precision precision = Precision::kExact) {
  const int group = 64;
  const int64_t bytes = AffineWeight(nullptr, n, k, bits, group, nullptr, nullptr).RowBytes() * n;
  // Enough copies to stream ≥ 160 MB per rotation (cold), at most 1024 copies.
  const int copies = static_cast<int>(std::clamp<int64_t>((160 << 20) / bytes + 1, 1, 1024));
  std::vector<std::unique_ptr<AffineMatrix>> ms;
  for (int c = 0; c < copies; ++c) ms.push_back(MakeAffine(n, k, bits, group, 7 + c));
  std::vector<float> x(static_cast<size_t>(k), 0.5f), y(static_cast<size_t>(n));
  for (int threads : {1, 2}) {
    ThreadPool* pool = PoolOf(threads);
    const double cold = BestSeconds([&](int i) {
                          for (int c = 0; c < copies; ++c)
                            MatVec(ms[(i + c) % copies]->view, x.data(), y.data(), pool, precision);
                        }) /
                        copies;
    const std::string cold_cpu = CpuNote(threads, 1.0 / copies);
    const double hot =
        BestSeconds([&](int) { MatVec(ms[0]->view, x.data(), y.data(), pool, precision); });
    const double gbs = bytes / cold * 1e-9;
    fmt::print(
        "  {}q{} g64 [{:6} x {:4}] {:5.1f} MB  {}T: cold {:8.1f} us{} {:5.1f} GB/s ({:3.0f}% of "
        "read)  hot {:8.1f} us{} {:5.1f} GB/s\n",
        precision == Precision::kFast ? "fast " : "", bits, n, k, bytes / 1e6, threads, cold * 1e6,
        cold_cpu, gbs, 100 * gbs / (threads == 1 ? read1 : read2), hot * 1e6, CpuNote(threads),
        bytes / hot * 1e-9);
  }
}

void BenchMatMul(int64_t n, int64_t k, int64_t m, int bits = 4) {
  // "cold" rotates over ≥ 64 MB of copies (past the L3), as a prefill's weights arrive.
  const int64_t bytes = AffineWeight(nullptr, n, k, bits, 64, nullptr, nullptr).RowBytes() * n;
  const int copies = static_cast<int>(std::clamp<int64_t>((64 << 20) / bytes + 1, 1, 1024));
  std::vector<std::unique_ptr<AffineMatrix>> ms;
  for (int c = 0; c < copies; ++c) ms.push_back(MakeAffine(n, k, bits, 64, 99 + c));
  const AffineMatrix* w = ms[0].get();
  std::vector<float> x(static_cast<size_t>(m * k)), y(static_cast<size_t>(m * n));
  std::mt19937 rng(5);
  for (auto& v : x) v = static_cast<float>(rng() % 1000) * 1e-3f - 0.5f;
  const double flops = 2.0 * m * n * k;
  for (int threads : {1, 2}) {
    ThreadPool* pool = PoolOf(threads);
    const double peak = FmaPeakGFlops(threads);
    const double t = BestSeconds([&](int) { MatMul(w->view, x.data(), m, y.data(), pool); });
    const std::string cpu = CpuNote(threads);
    const std::string share = peak > 0 ? fmt::format(" ({:.0f}% of the FMA probe's {:.0f})",
                                                     flops / t * 1e-9 / peak * 100, peak)
                                       : "";
    const double cold = BestSeconds([&](int i) {
                          for (int c = 0; c < copies; ++c)
                            MatMul(ms[(i + c) % copies]->view, x.data(), m, y.data(), pool);
                        }) /
                        copies;
    const double tv = BestSeconds([&](int) {
      for (int64_t i = 0; i < m; ++i) MatVec(w->view, x.data() + i * k, y.data() + i * n, pool);
    });
    fmt::print(
        "  MatMul q{} g64 M={} [{} x {}] {}T: {:8.2f} ms{}  {:6.1f} GFLOP/s{}  ({:.1f}x faster"
        " than {} MatVecs: {:.2f} ms); cold {:.1f} GFLOP/s\n",
        bits, m, n, k, threads, t * 1e3, cpu, flops / t * 1e-9, share, tv / t, m, tv * 1e3,
        flops / cold * 1e-9);
  }
}

void BenchSmallM(int64_t n, int64_t k) {
  auto w = MakeAffine(n, k, 4, 64, 98);
  for (int64_t m : {2, 4, 8}) {
    std::vector<float> x(static_cast<size_t>(m * k), 0.25f), y(static_cast<size_t>(m * n));
    const double t =
        BestSeconds([&](int) { MatMul(w->view, x.data(), m, y.data(), nullptr); }, 0.3);
    const std::string cpu = CpuNote(1);
    const double tv = BestSeconds(
        [&](int) {
          for (int64_t i = 0; i < m; ++i)
            MatVec(w->view, x.data() + i * k, y.data() + i * n, nullptr);
        },
        0.3);
    fmt::print("  MatMul q4 M={} [{} x {}] 1T: {:7.1f} us{} vs {} MatVecs {:7.1f} us{}\n", m, n, k,
               t * 1e6, cpu, m, tv * 1e6, CpuNote(1));
  }
}

void BenchAttention(const char* name, int n_heads, int n_kv, int hd, int64_t capacity,
                    int64_t ctx) {
  std::vector<float> k(static_cast<size_t>(n_kv * capacity * hd)), v(k.size());
  std::mt19937 rng(3);
  for (auto& f : k) f = static_cast<float>(rng() % 1000) * 1e-3f - 0.5f;
  for (auto& f : v) f = static_cast<float>(rng() % 1000) * 1e-3f - 0.5f;
  std::vector<float> q(static_cast<size_t>(n_heads * hd), 0.1f), out(q.size());
  const KvCacheView kv{k.data(), v.data(), n_kv, hd, capacity};
  const int64_t pos = ctx - 1, lo = std::max<int64_t>(0, pos - capacity + 1);
  const double kv_bytes = 2.0 * n_kv * (pos + 1 - lo) * hd * 4;
  for (int threads : {1, 2}) {
    ThreadPool* pool = PoolOf(threads);
    const double t = BestSeconds(
        [&](int) { AttendOne(q.data(), n_heads, kv, lo, pos + 1, 1.0f, out.data(), pool); }, 0.4);
    fmt::print(
        "  AttendOne {} ctx {} ({}x{} heads, hd {}, {} keys) {}T: {:8.1f} us{}  {:5.1f} GB/s of "
        "K+V\n",
        name, ctx, n_heads, n_kv, hd, pos + 1 - lo, threads, t * 1e6, CpuNote(threads),
        kv_bytes / t * 1e-9);
  }
}

void BenchPrefillAttention(int n_heads, int n_kv, int hd, int64_t window, int64_t m, int64_t p0) {
  const int64_t capacity = window > 0 ? window + m : p0 + m;
  std::vector<float> k(static_cast<size_t>(n_kv * capacity * hd), 0.01f), v(k.size(), 0.02f);
  std::vector<float> q(static_cast<size_t>(m * n_heads * hd), 0.1f), out(q.size());
  const KvCacheView kv{k.data(), v.data(), n_kv, hd, capacity};
  for (int threads : {1, 2}) {
    const double t = BestSeconds(
        [&](int) {
          AttendBlock(q.data(), m, p0, n_heads, kv, window, 1.0f, out.data(), PoolOf(threads));
        },
        0.4);
    fmt::print("  AttendBlock M={} at pos {} window {} ({}x{} heads, hd {}) {}T: {:8.2f} ms{}\n", m,
               p0, window, n_heads, n_kv, hd, threads, t * 1e3, CpuNote(threads));
  }
}

// A speculative verify of k tokens: Linear over k rows (MatVec at k = 1) on the model's
// per-layer shapes, cold (rotating over > L3 of copies, as a verify's weights arrive), and
// AttendBlock of k rows at a 4096-token context (AttendOne at k = 1). One thread, reported as
// its best CPU time, which a busy shared host disturbs least. Only public calls, so the same
// source times an older tree's Linear (the packed MatMul it used from 9 rows on) for an A-B.
void BenchVerify() {
  const int64_t ks[] = {1, 2, 3, 4, 6, 8, 10, 12, 14, 16};
  struct Shape {
    int64_t n, k;
    int bits;
  };
  const Shape shapes[] = {{4096, 2816, 4}, {2112, 2816, 8}, {704, 2816, 4}, {2816, 704, 4}};
  for (const Shape& s : shapes) {
    const int64_t bytes =
        AffineWeight(nullptr, s.n, s.k, s.bits, 64, nullptr, nullptr).RowBytes() * s.n;
    const int copies = static_cast<int>(std::clamp<int64_t>((96 << 20) / bytes + 1, 1, 1024));
    std::vector<std::unique_ptr<AffineMatrix>> ms;
    for (int c = 0; c < copies; ++c) ms.push_back(MakeAffine(s.n, s.k, s.bits, 64, 41 + c));
    std::vector<float> x(static_cast<size_t>(16 * s.k)), y(static_cast<size_t>(16 * s.n));
    std::mt19937 rng(9);
    for (auto& v : x) v = static_cast<float>(rng() % 1000) * 1e-3f - 0.5f;
    fmt::print("  Linear q{} [{} x {}] 1T cold, cpu us per call by k:", s.bits, s.n, s.k);
    for (const int64_t m : ks) {
      BestSeconds(
          [&](int i) {
            for (int c = 0; c < copies; ++c)
              Linear(ms[(i + c) % copies]->view, x.data(), m, y.data(), nullptr);
          },
          0.3);
      fmt::print(" {}:{:.0f}", m, g_last_cpu / copies * 1e6);
    }
    fmt::print("\n");
  }
  struct Att {
    const char* name;
    int n_heads, n_kv, hd;
    int64_t window;
  };
  for (const Att& a : {Att{"sliding", 16, 8, 256, 1024}, Att{"full", 16, 2, 512, 0}}) {
    const int64_t ctx = 4096, capacity = a.window > 0 ? a.window + 16 : ctx + 16;
    std::vector<float> k(static_cast<size_t>(a.n_kv * capacity * a.hd)), v(k.size());
    std::mt19937 rng(3);
    for (auto& f : k) f = static_cast<float>(rng() % 1000) * 1e-3f - 0.5f;
    for (auto& f : v) f = static_cast<float>(rng() % 1000) * 1e-3f - 0.5f;
    std::vector<float> q(static_cast<size_t>(16 * a.n_heads * a.hd), 0.1f), out(q.size());
    const KvCacheView kv{k.data(), v.data(), a.n_kv, a.hd, capacity};
    fmt::print("  AttendBlock {} ctx {} 1T, cpu us per call by k:", a.name, ctx);
    for (const int64_t m : ks) {
      const int64_t lo = a.window > 0 ? ctx - a.window : 0;
      BestSeconds(
          [&](int) {
            if (m == 1)
              AttendOne(q.data(), a.n_heads, kv, lo, ctx, 1.0f, out.data(), nullptr);
            else
              AttendBlock(q.data(), m, ctx - m, a.n_heads, kv, a.window, 1.0f, out.data(), nullptr);
          },
          0.2);
      fmt::print(" {}:{:.0f}", m, g_last_cpu * 1e6);
    }
    fmt::print("\n");
  }
}

void BenchElementwise() {
  const int64_t vocab = 262144;
  std::vector<float> logits(static_cast<size_t>(vocab), 3.0f), g(2816, 0.3f), u(2816, 0.2f);
  const double tc = BestSeconds([&](int) { Softcap(logits.data(), vocab, 30.0f); }, 0.2);
  const double ts = BestSeconds([&](int) { Softmax(logits.data(), vocab); }, 0.2);
  const double tg = BestSeconds([&](int) { GegluInPlace(g.data(), u.data(), 2816); }, 0.2);
  std::vector<float> h(2816, 1.0f), w(2816, 1.0f);
  const WeightView wv = F32Weight(w.data(), 1, 2816);
  const double tr = BestSeconds([&](int) { RmsNorm(h.data(), h.data(), 2816, &wv, 1e-6f); }, 0.2);
  std::vector<int> idx(8);
  std::vector<float> router(128);
  for (int i = 0; i < 128; ++i) router[i] = static_cast<float>((i * 37) % 128);
  const double tk = BestSeconds([&](int) { TopK(router.data(), 128, 8, idx.data()); }, 0.2);
  fmt::print(
      "  Softcap 262144: {:.1f} us  Softmax 262144: {:.1f} us  Geglu 2816: {:.2f} us  "
      "RmsNorm 2816: {:.2f} us  TopK 8/128: {:.2f} us\n",
      tc * 1e6, ts * 1e6, tg * 1e6, tr * 1e6, tk * 1e6);
}

int Main(int argc, char** argv) {
  std::string only;  // a section name, or empty for all
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--quick") == 0) g_quick = true;
    if (std::strcmp(argv[i], "--only") == 0 && i + 1 < argc) only = argv[i + 1];
    if (std::strcmp(argv[i], "--isa") == 0 && i + 1 < argc &&
        std::strcmp(argv[i + 1], "scalar") == 0)
      SetActiveIsa(Isa::kScalar);
    if (std::strcmp(argv[i], "--isa") == 0 && i + 1 < argc &&
        std::strcmp(argv[i + 1], "avx2") == 0 && DetectedIsa() != Isa::kScalar)
      SetActiveIsa(Isa::kAvx2);
  }
  fmt::print("backend_bench: isa {} (detected {}), {} hardware threads\n", IsaName(ActiveIsa()),
             IsaName(DetectedIsa()), std::thread::hardware_concurrency());
  const double read1 = ReadBandwidthGBs(1), read2 = ReadBandwidthGBs(2);
  fmt::print("memory read probe (512 MB): 1T {:.1f} GB/s, 2T {:.1f} GB/s\n", read1, read2);
  fmt::print("fp32 FMA probe: 1T {:.0f} GFLOP/s, 2T {:.0f} GFLOP/s\n", FmaPeakGFlops(1),
             FmaPeakGFlops(2));

  auto run = [&](const char* section) { return only.empty() || only == section; };
  if (run("matvec")) {
    fmt::print("matvec (decode):\n");
    BenchMatVec(2816, 2816, 4, read1, read2);
    BenchMatVec(704, 2816, 4, read1, read2);
    BenchMatVec(2816, 704, 4, read1, read2);
    BenchMatVec(128, 2816, 8, read1, read2);
    BenchMatVec(128, 2816, 4, read1, read2);  // 0.2 MB: hot fits L2, the kernel's compute rate
    BenchMatVec(262144, 2816, 4, read1, read2);
  }
  if (only == "fast") {
    // Exact then fast, shape by shape (x = 0.5 everywhere: speed does not depend on values).
    fmt::print("matvec, exact vs fast precision:\n");
    for (const auto& [n, k, bits] : {std::tuple<int64_t, int64_t, int>{2816, 2816, 4},
                                     {704, 2816, 4},
                                     {2816, 704, 4},
                                     {2112, 2816, 8},
                                     {128, 2816, 4},
                                     {128, 2816, 8},
                                     {262144, 2816, 4}}) {
      BenchMatVec(n, k, bits, read1, read2, Precision::kExact);
      BenchMatVec(n, k, bits, read1, read2, Precision::kFast);
    }
  }
  if (run("matmul")) {
    fmt::print("matmul (prefill):\n");
    BenchMatMul(2816, 2816, 64);
    // The model's prefill shapes at a 512-token chunk: the q projection, an 8-bit dense MLP
    // projection, and an expert's gate and down for its ~32 rows.
    BenchMatMul(4096, 2816, 512);
    BenchMatMul(2112, 2816, 512, 8);
    BenchMatMul(704, 2816, 32);
    BenchMatMul(2816, 704, 32);
    BenchSmallM(704, 2816);
  }
  if (run("attention")) {
    fmt::print("attention:\n");
    BenchAttention("sliding", 16, 8, 256, 1024, 4096);
    BenchAttention("full", 16, 2, 512, 4096, 4096);
    BenchPrefillAttention(16, 8, 256, 1024, 64, 1024);
    BenchPrefillAttention(16, 2, 512, 0, 64, 4032);
  }
  if (run("verify")) {
    fmt::print("verify (k rows):\n");
    BenchVerify();
  }
  if (run("elementwise")) {
    fmt::print("elementwise (1T):\n");
    BenchElementwise();
  }
  return 0;
}

}  // namespace
}  // namespace rw::cpu

int main(int argc, char** argv) {
  return rw::cpu::Main(argc, argv);
}
