// Speculative decoding emits exactly plain decoding's tokens only if a verify's logits are the
// decode steps' logits to the bit: on the CPU, for every block of k = 1..16 tokens, on every
// kernel set this CPU runs, after a prompt longer than the sliding window (so the rings wrap and
// sliding rows see different windows), and whatever the thread counts of the two engines (1 and 2);
// with --precision exact and fast alike.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "backend/cpu/ops.h"
#include "engine/engine.h"
#include "model/parity_util.h"

namespace rw {
namespace {

constexpr int64_t kContext = 256;

std::string Model() {
  static const std::string dir = test::TinySynthModel("exact_verify", 23);
  return dir;
}

std::shared_ptr<Engine> Load(int threads, Precision precision) {
  EngineOptions o;
  o.precision = precision;
  o.model_dir = Model();
  o.threads = threads;
  o.max_context = kContext;
  o.prefill_chunk = cpu::kExactRows;
  o.backend = BackendKind::kCpu;
  o.load_tokenizer = false;
  auto e = Engine::Load(o);
  EXPECT_TRUE(e.ok()) << e.status().ToString();
  return e.ok() ? *e : nullptr;
}

std::vector<int> Ids(int n, int salt, int vocab) {
  std::vector<int> v;
  for (int i = 0; i < n; ++i) v.push_back((i * 197 + salt * 31 + 3) % vocab);
  return v;
}

struct IsaGuard {
  cpu::Isa saved = cpu::ActiveIsa();
  ~IsaGuard() { cpu::SetActiveIsa(saved); }
};

class ExactVerify : public ::testing::TestWithParam<Precision> {};

TEST_P(ExactVerify, VerifyRowsAreDecodeStepsBitForBit) {
  auto decoder = Load(1, GetParam()), verifier = Load(2, GetParam());
  ASSERT_NE(decoder, nullptr);
  ASSERT_NE(verifier, nullptr);
  const int vocab = static_cast<int>(decoder->config().vocab_size);
  const size_t V = static_cast<size_t>(vocab);
  ASSERT_GT(40, decoder->config().sliding_window);
  IsaGuard guard;
  for (cpu::Isa isa : {cpu::Isa::kScalar, cpu::Isa::kAvx2, cpu::Isa::kAvx512}) {
    if (static_cast<int>(isa) > static_cast<int>(cpu::DetectedIsa())) continue;
    cpu::SetActiveIsa(isa);
    for (int k = 1; k <= cpu::kExactRows; ++k) {
      // The portable kernels are slow: a few block sizes there.
      if (isa == cpu::Isa::kScalar && k != 1 && k != 3 && k != 8 && k != 16) continue;
      // Prompts of 40 + k tokens: the blocks start at different ring offsets.
      const std::vector<int> prompt = Ids(40 + k, k, vocab);
      const std::vector<int> block = Ids(k, 100 + k, vocab);
      auto plain = decoder->NewSession();
      ASSERT_TRUE(plain->Prefill(prompt).ok());
      std::vector<float> steps;
      for (const int id : block) {
        auto l = plain->Decode(id);
        ASSERT_TRUE(l.ok()) << l.status().ToString();
        steps.insert(steps.end(), l->begin(), l->end());
      }
      auto spec = verifier->NewSession();
      ASSERT_TRUE(spec->Prefill(prompt).ok());
      auto rows = spec->Verify(block);
      ASSERT_TRUE(rows.ok()) << rows.status().ToString();
      ASSERT_EQ(rows->size(), steps.size());
      for (int i = 0; i < k; ++i) {
        EXPECT_EQ(std::memcmp(&(*rows)[i * V], &steps[i * V], V * sizeof(float)), 0)
            << cpu::IsaName(isa) << " k " << k << " row " << i << " max |Δ| " << [&] {
                 float d = 0;
                 for (size_t j = 0; j < V; ++j)
                   d = std::max(d, std::abs((*rows)[i * V + j] - steps[i * V + j]));
                 return d;
               }();
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Precisions, ExactVerify,
                         ::testing::Values(Precision::kExact, Precision::kFast),
                         [](const ::testing::TestParamInfo<Precision>& info) {
                           return std::string(PrecisionName(info.param));
                         });

}  // namespace
}  // namespace rw
