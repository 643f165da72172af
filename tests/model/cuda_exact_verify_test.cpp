// On CUDA, as exact_verify_test.cpp checks on the CPU: a speculative verify's logits are the
// decode steps' logits to the bit, for every block of k = 1..16 tokens, after a prompt longer
// than the sliding window. A verify's rows take decode's products (up to 8 rows sharing each
// block of the integer matvec), decode's split attention and the experts as decode slots, so
// speculative decoding on the GPU emits plain decoding's tokens exactly. Resident, and with a
// VRAM budget that leaves experts in host memory; with REDWING_CUDA_MATVEC_ROWS at 8 and 1.
// Skips (saying why) where no CUDA device is usable.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "backend/cuda/tuning.h"
#include "engine/engine.h"
#include "model/parity_util.h"
#include "runtime/cuda_model.h"

namespace rw {
namespace {

std::string Model() {
  static const std::string dir = test::TinySynthModel("cuda_exact_verify", 29);
  return dir;
}

std::shared_ptr<Engine> Load(uint64_t vram_budget) {
  EngineOptions o;
  o.model_dir = Model();
  o.threads = 2;
  o.max_context = 256;
  o.prefill_chunk = 64;
  o.backend = BackendKind::kCuda;
  o.vram_budget = vram_budget;
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

void CheckBlocks(Engine& engine) {
  const int vocab = static_cast<int>(engine.config().vocab_size);
  const size_t V = static_cast<size_t>(vocab);
  ASSERT_GT(40, engine.config().sliding_window);
  for (int k = 1; k <= 16; ++k) {
    // Prompts of 40 + k tokens: the blocks start at different ring offsets.
    const std::vector<int> prompt = Ids(40 + k, k, vocab);
    const std::vector<int> block = Ids(k, 100 + k, vocab);
    auto plain = engine.NewSession();
    ASSERT_TRUE(plain->Prefill(prompt).ok());
    std::vector<float> steps;
    for (const int id : block) {
      auto l = plain->Decode(id);
      ASSERT_TRUE(l.ok()) << l.status().ToString();
      steps.insert(steps.end(), l->begin(), l->end());
    }
    auto spec = engine.NewSession();
    ASSERT_TRUE(spec->Prefill(prompt).ok());
    auto rows = spec->Verify(block);
    ASSERT_TRUE(rows.ok()) << rows.status().ToString();
    ASSERT_EQ(rows->size(), steps.size());
    for (int i = 0; i < k; ++i) {
      EXPECT_EQ(std::memcmp(&(*rows)[i * V], &steps[i * V], V * sizeof(float)), 0)
          << "k " << k << " row " << i << " max |Δ| " << [&] {
               float d = 0;
               for (size_t j = 0; j < V; ++j)
                 d = std::max(d, std::abs((*rows)[i * V + j] - steps[i * V + j]));
               return d;
             }();
    }
  }
}

TEST(CudaExactVerify, VerifyRowsAreDecodeStepsBitForBit) {
  if (Status st = CudaBackendAvailable(); !st.ok()) GTEST_SKIP() << "CUDA: " << st.message();
  for (const int rows : {8, 1}) {
    SCOPED_TRACE("REDWING_CUDA_MATVEC_ROWS=" + std::to_string(rows));
    cuda::Tuning t = cuda::CurrentTuning();
    t.matvec_rows = rows;
    cuda::ScopedTuning scoped(t);
    auto resident = Load(0);
    ASSERT_NE(resident, nullptr);
    CheckBlocks(*resident);
  }
}

TEST(CudaExactVerify, WithExpertsInHostMemory) {
  if (Status st = CudaBackendAvailable(); !st.ok()) GTEST_SKIP() << "CUDA: " << st.message();
  // Room for 5 experts, fewer than one layer's 8: the rest are read in place from host memory.
  auto resident = Load(0);
  ASSERT_NE(resident, nullptr);
  const CudaModel* cm = CudaModelOf(resident->device_model());
  ASSERT_NE(cm, nullptr);
  const uint64_t budget = cm->core_device_bytes() +
                          CudaModel::SessionBytes(resident->config(), 256, 64) +
                          5 * cm->experts()->stride();
  resident.reset();
  auto budgeted = Load(budget);
  ASSERT_NE(budgeted, nullptr);
  ASSERT_EQ(budgeted->cuda_expert_path(), "mapped");
  CheckBlocks(*budgeted);
}

}  // namespace
}  // namespace rw
