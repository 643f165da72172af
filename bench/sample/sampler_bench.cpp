// sampler_bench: milliseconds per Sampler::Sample call on one row of 262,144 logits shaped like a
// model's (a few hundred plausible tokens above a long tail), for the sampling settings the CLI
// and server use.
//
//   sampler_bench [--vocab 262144] [--calls 200]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "sample/sampler.h"

namespace {

struct Case {
  const char* name;
  rw::SamplingParams params;
};

}  // namespace

int main(int argc, char** argv) {
  int vocab = 262144, calls = 200;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--vocab") == 0) vocab = std::atoi(argv[i + 1]);
    if (std::strcmp(argv[i], "--calls") == 0) calls = std::atoi(argv[i + 1]);
  }
  if (vocab <= 0 || calls <= 0) {
    std::fprintf(stderr, "usage: sampler_bench [--vocab N] [--calls N]\n");
    return 2;
  }
  std::mt19937 rng(7);
  std::normal_distribution<float> tail(-4.0f, 2.0f);
  std::vector<float> logits(static_cast<size_t>(vocab));
  for (float& v : logits) v = tail(rng);
  for (int i = 0; i < 300; ++i) logits[rng() % vocab] = 8.0f + static_cast<float>(rng() % 100) / 10;
  const std::vector<Case> cases = {
      {"defaults (T 0.2, top-k 64, top-p 0.95)", rw::SamplingParams{}},
      {"T 1, top-k 40", rw::SamplingParams{.temperature = 1.0f, .top_k = 40, .top_p = 1.0f}},
      {"T 0.7, top-p 0.9 (no top-k)",
       rw::SamplingParams{.temperature = 0.7f, .top_k = 0, .top_p = 0.9f}},
      {"T 1, nothing filtered", rw::SamplingParams{.temperature = 1.0f, .top_k = 0, .top_p = 1.0f}},
      {"greedy", rw::SamplingParams{.temperature = 0.0f}},
  };
  std::vector<int32_t> context = {2, 17, 99};
  for (const Case& c : cases) {
    rw::Sampler s(c.params);
    double best = 1e30;
    long sum = 0;
    for (int rep = 0; rep < 3; ++rep) {
      const auto t0 = std::chrono::steady_clock::now();
      for (int i = 0; i < calls; ++i) sum += s.Sample(logits, i, context);
      const double ms =
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() /
          calls;
      best = std::min(best, ms);
    }
    std::printf("%-42s %8.3f ms per call  (checksum %ld)\n", c.name, best, sum % 1000);
  }
  return 0;
}
