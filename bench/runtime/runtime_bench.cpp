// runtime_bench: decode and prefill speed of the CPU forward pass on a model directory (meant for
// the full-size synthetic Gemma 4 26B-A4B), with the whole model in the page cache.
//
//   runtime_bench --model <dir> [--decode 32] [--prompt 128] [--threads 0] [--no-warm]
//
// Reports prefill tok/s, decode tok/s, time per part of a decoded token, bytes touched per token,
// the measured memory read bandwidth and what that bandwidth allows, and peak RSS.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <sys/resource.h>

#include "base/file.h"
#include "base/thread_pool.h"
#include "base/timer.h"
#include "bench/memory_probe.h"
#include "engine/engine.h"

namespace rw {
namespace {

// Touches one byte per page of every model file so the first timed token does not pay for disk.
uint64_t WarmPageCache(const RuntimeModel& m) {
  std::vector<std::string> files = {m.dir().FilePath(kCoreName)};
  if (const ExpertIndex* idx = m.dir().experts())
    for (const ExpertLayerInfo& l : idx->layers) files.push_back(m.dir().FilePath(l.file));
  uint64_t sum = 0, bytes = 0;
  for (const std::string& f : files) {
    auto map = MappedFile::Open(f);
    if (!map.ok()) continue;
    for (uint64_t o = 0; o < map->size(); o += 4096) sum += map->data()[o];
    bytes += map->size();
  }
  std::fprintf(stderr, "warm: %.2f GB in %zu files (checksum %llu)\n", bytes / 1e9, files.size(),
               static_cast<unsigned long long>(sum & 0xff));
  return bytes;
}

// User + system CPU seconds of this process: on a shared machine, CPU time over the thread count
// estimates the uncontended wall time better than the wall clock does.
double CpuSeconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_utime.tv_sec + u.ru_stime.tv_sec + 1e-6 * (u.ru_utime.tv_usec + u.ru_stime.tv_usec);
}

int Main(int argc, char** argv) {
  std::string model = "build/models/g4full";
  int decode = 32, prompt = 128, threads = 0;
  bool warm = true;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> std::string { return i + 1 < argc ? argv[++i] : ""; };
    if (a == "--model")
      model = next();
    else if (a == "--decode")
      decode = std::atoi(next().c_str());
    else if (a == "--prompt")
      prompt = std::atoi(next().c_str());
    else if (a == "--threads")
      threads = std::atoi(next().c_str());
    else if (a == "--no-warm")
      warm = false;
    else {
      std::fprintf(stderr,
                   "usage: runtime_bench --model <dir> [--decode N] [--prompt N] [--threads N] "
                   "[--no-warm]\n");
      return 2;
    }
  }
  EngineOptions o;
  o.model_dir = model;
  o.threads = threads;
  o.max_context = prompt + decode + 8;
  o.prefill_chunk = std::max(1, prompt);
  auto engine = Engine::Load(o);
  if (!engine.ok()) {
    std::fprintf(stderr, "runtime_bench: %s\n", engine.status().ToString().c_str());
    return 1;
  }
  const RuntimeModel& m = (*engine)->model();
  const int V = (*engine)->config().vocab_size;
  if (warm) WarmPageCache(m);
  std::printf("model %s, %d threads, ISA %s\n", model.c_str(), (*engine)->pool()->size(),
              cpu::IsaName(cpu::ActiveIsa()));

  // A varied token stream (a fixed LCG), so routing differs from token to token.
  uint32_t state = 12345;
  auto next_id = [&] {
    state = state * 1664525u + 1013904223u;
    return static_cast<int>(3 + (state >> 8) % (V - 3));
  };
  std::vector<int> ids{2};
  while (static_cast<int>(ids.size()) < prompt) ids.push_back(next_id());

  auto s = (*engine)->NewSession();
  // Untimed warm-up token (first touches of KV pages, thread start).
  if (!s->Prefill(std::vector<int>{2}).ok()) return 1;
  s->Reset();
  const double cpu0 = CpuSeconds();
  auto p = s->Prefill(ids);
  const double pre_cpu = CpuSeconds() - cpu0;
  if (!p.ok()) {
    std::fprintf(stderr, "prefill: %s\n", p.status().ToString().c_str());
    return 1;
  }
  const CallStats pre = s->last_call();
  std::printf(
      "prefill: %d tokens in %.2f s = %.2f tok/s (attention %.2f s, dense %.2f s, router+experts "
      "%.2f s, "
      "head %.2f s)\n",
      prompt, pre.seconds, prompt / pre.seconds, pre.parts.attention_s, pre.parts.dense_s,
      pre.parts.moe_s, pre.parts.head_s);
  const int nt = (*engine)->pool()->size();
  std::printf("  prefill CPU time %.2f s over %d threads -> %.2f tok/s if uncontended\n", pre_cpu,
              nt, prompt / (pre_cpu / nt));

  const ExpertStoreStats before = m.experts() ? m.experts()->stats() : ExpertStoreStats{};
  const double cpu1 = CpuSeconds();
  for (int i = 0; i < decode; ++i)
    if (!s->Decode(next_id()).ok()) return 1;
  const double dec_cpu = CpuSeconds() - cpu1;
  const ExpertStoreStats after = m.experts() ? m.experts()->stats() : ExpertStoreStats{};
  const CallStats& d = s->decode_total();
  const double per = d.seconds / decode;
  const ForwardStats& f = d.parts;
  std::printf("decode: %d tokens in %.2f s = %.2f tok/s (%.1f ms/token)\n", decode, d.seconds,
              decode / d.seconds, 1e3 * per);
  std::printf("  decode CPU time %.1f ms/token over %d threads -> %.2f tok/s if uncontended\n",
              1e3 * dec_cpu / decode, nt, decode / (dec_cpu / nt));
  std::printf(
      "  per token: attention %.1f ms, dense MLP %.1f ms, router+experts %.1f ms, head %.1f ms, "
      "embed %.2f ms\n",
      1e3 * f.attention_s / decode, 1e3 * f.dense_s / decode, 1e3 * f.moe_s / decode,
      1e3 * f.head_s / decode, 1e3 * f.embed_s / decode);
  const double expert_bytes =
      static_cast<double>(after.bytes_acquired - before.bytes_acquired) / decode;
  const double core_bytes = static_cast<double>(m.core_bytes_per_token());
  auto probe = ProbeMemoryRead((*engine)->pool(), uint64_t{1} << 30);
  if (!probe.ok()) {
    std::fprintf(stderr, "runtime_bench: %s\n", probe.status().ToString().c_str());
    return 1;
  }
  const double bw = probe->gb_s;
  const double bytes = core_bytes + expert_bytes;
  std::printf("bytes per token: %.2f GB (core %.2f GB incl. head, experts %.2f GB)\n", bytes / 1e9,
              core_bytes / 1e9, expert_bytes / 1e9);
  std::printf(
      "memory read bandwidth (%d threads): %.2f GB/s -> bandwidth bound %.1f ms/token (%.2f "
      "tok/s); "
      "achieved %.0f%% of it\n",
      (*engine)->pool()->size(), bw, 1e3 * bytes / (bw * 1e9), bw * 1e9 / bytes,
      100.0 * (bytes / (bw * 1e9)) / per);
  std::printf("peak RSS: %.2f GB\n", PeakRssBytes() / 1e9);
  return 0;
}

}  // namespace
}  // namespace rw

int main(int argc, char** argv) {
  return rw::Main(argc, argv);
}
