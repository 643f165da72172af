// The CUDA forward pass's overrides (backend/cuda/tuning.h: REDWING_CUDA_FUSE, _OVERLAP,
// _GPU_PLAN, _SPLIT_KEYS, _TIMING), set in-process with cuda::ScopedTuning around a session as
// the environment would set them, on the synthesized tiny model (45-token prompt in chunks of 7,
// longer than the sliding window, then 20 decode steps): the launch counts (cuda::PathCount)
// show that the override took its path, and the logits stay within the CUDA-vs-CPU bound of
// cuda_parity_test (1e-4 relative per row), bit-identical to the default's where the same
// kernels run in another arrangement. And a bad value refuses the CUDA pass with a message
// naming the variable, through the CLI. Skips without a GPU.
#include <gtest/gtest.h>

#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "backend/cuda/cuda.h"
#include "backend/cuda/tuning.h"
#include "backend/cuda_test_util.h"
#include "base/file.h"
#include "engine/engine.h"
#include "model/parity_util.h"
#include "run_cli.h"

namespace rw {
namespace {

using cuda::Path;
using cuda::Tuning;

const std::string& TinyModel() {
  static const std::string dir = test::TinySynthModel("cuda_tuning_forward", 5);
  return dir;
}

std::shared_ptr<Engine> Load(const std::string& backend) {
  EngineOptions o;
  o.model_dir = TinyModel();
  o.threads = 2;
  o.max_context = 256;
  o.prefill_chunk = 7;
  o.backend = *ParseBackendKind(backend);
  o.load_tokenizer = false;
  auto e = Engine::Load(o);
  EXPECT_TRUE(e.ok()) << e.status().ToString();
  return e.ok() ? *e : nullptr;
}

// Every row of logits: the prompt's, then 20 decode steps'.
using Rows = std::vector<std::vector<float>>;

Rows Run(const Engine& e) {
  const int64_t V = e.config().vocab_size;
  std::vector<int> prompt{2};
  for (int i = 1; i < 45; ++i) prompt.push_back((i * 131 + 17) % V);
  Rows rows;
  auto s = e.NewSession();
  auto all = s->Prefill(prompt, true);
  EXPECT_TRUE(all.ok()) << all.status().ToString();
  if (!all.ok()) return rows;
  for (size_t t = 0; t < prompt.size(); ++t)
    rows.emplace_back(all->begin() + t * V, all->begin() + (t + 1) * V);
  for (int i = 0; i < 20; ++i) {
    auto l = s->Decode(static_cast<int>((i * 53 + 5) % V));
    EXPECT_TRUE(l.ok()) << l.status().ToString();
    if (!l.ok()) break;
    rows.push_back(*l);
  }
  return rows;
}

// The CUDA run under t (the pass reads the settings when the session makes it, the launchers
// at each launch), and how many launches took path p in it.
Rows RunWith(const Engine& gpu, const Tuning& t, Path p, uint64_t* taken) {
  cuda::ScopedTuning scope(t);
  const uint64_t before = cuda::PathCount(p);
  Rows rows = Run(gpu);
  *taken = cuda::PathCount(p) - before;
  return rows;
}

Rows RunWith(const Engine& gpu, const Tuning& t) {
  cuda::ScopedTuning scope(t);
  return Run(gpu);
}

double WorstRowErr(const Rows& got, const Rows& want) {
  EXPECT_EQ(got.size(), want.size());
  double worst = 0;
  for (size_t r = 0; r < got.size() && r < want.size(); ++r)
    worst = std::max(worst, test::RelErr(got[r].data(), want[r].data(), want[r].size()));
  return worst;
}

struct Fixture {
  std::shared_ptr<Engine> cpu, gpu;
  Rows want;  // the CPU's
  Rows base;  // the CUDA default's
};

const Fixture& Engines() {
  static const Fixture f = [] {
    Fixture f;
    f.cpu = Load("cpu");
    f.gpu = Load("cuda");
    if (f.cpu != nullptr) f.want = Run(*f.cpu);
    if (f.gpu != nullptr) {
      f.base = RunWith(*f.gpu, Tuning{});  // the defaults, whatever the environment says
    }
    return f;
  }();
  return f;
}

// The default takes path p and the override does not (or the reverse when `adds`), and the
// override's logits are within the parity bound of the CPU's (and equal to the default's when
// `same_bits`).
void Check(const Tuning& t, Path p, bool adds, bool same_bits) {
  const Fixture& f = Engines();
  ASSERT_NE(f.gpu, nullptr);
  ASSERT_NE(f.cpu, nullptr);
  uint64_t with_default = 0, with_override = 0;
  const Rows base = RunWith(*f.gpu, Tuning{}, p, &with_default);
  const Rows got = RunWith(*f.gpu, t, p, &with_override);
  if (adds) {
    EXPECT_EQ(with_default, 0u);
    EXPECT_GT(with_override, 0u);
  } else {
    EXPECT_GT(with_default, 0u);
    EXPECT_EQ(with_override, 0u);
  }
  EXPECT_EQ(base, f.base) << "the default is deterministic";
  const double err = WorstRowErr(got, f.want);
  std::printf("[cuda tuning] worst row rel err against the CPU %.3g\n", err);
  EXPECT_LE(err, 1e-4);
  if (same_bits) {
    ASSERT_EQ(got.size(), base.size());
    for (size_t r = 0; r < got.size(); ++r) EXPECT_EQ(got[r], base[r]) << "row " << r;
  }
}

TEST(CudaForwardTuning, FusedRows) {
  REQUIRE_CUDA();
  Tuning t;
  t.fuse_rows = false;  // REDWING_CUDA_FUSE=0: bit-identical separate kernels
  Check(t, Path::kFusedRows, false, true);
}

// The tiny model's experts are resident, so decode reads them from the table, beside the dense
// MLP by default.
TEST(CudaForwardTuning, ExpertsBesideTheDenseMlp) {
  REQUIRE_CUDA();
  Tuning t;
  t.overlap = false;  // REDWING_CUDA_OVERLAP=0: the same kernels on one stream
  Check(t, Path::kExpertsBeside, false, true);
}

TEST(CudaForwardTuning, GpuPlan) {
  REQUIRE_CUDA();
  Tuning t;
  t.gpu_plan = false;  // REDWING_CUDA_GPU_PLAN=0: the host groups the chunk's tokens
  Check(t, Path::kExpertPlanGpu, false, false);
}

TEST(CudaForwardTuning, SplitKeys) {
  REQUIRE_CUDA();
  // REDWING_CUDA_SPLIT_KEYS=32: a 256-key cache in 8 decode splits instead of 4
  // (CudaTuningParse.DecodeSplitsFollowTheKeysPerSplit); the merge sums in another order.
  Tuning t;
  t.split_keys = 32;
  const Fixture& f = Engines();
  ASSERT_NE(f.gpu, nullptr);
  const Rows got = RunWith(*f.gpu, t);
  EXPECT_LE(WorstRowErr(got, f.want), 1e-4);
  // Prefill does not split: the prompt's rows are the default's.
  for (size_t r = 0; r < 45 && r < got.size(); ++r) EXPECT_EQ(got[r], f.base[r]) << "row " << r;
}

TEST(CudaForwardTuning, Timing) {
  REQUIRE_CUDA();
  Tuning t;
  t.timing = true;  // REDWING_CUDA_TIMING=1: an event after each op; the same kernels
  Check(t, Path::kTimingMark, true, true);
}

TEST(CudaForwardTuning, ABadValueRefusesTheCudaPass) {
  REQUIRE_CUDA();
  if (!PathExists(REDWING_BINARY)) GTEST_SKIP() << "no " << REDWING_BINARY;
  cuda::CurrentTuning();  // this process's settings are read before the variable is set
  setenv("REDWING_CUDA_MATVEC", "tc", 1);
  std::string out;
  const int code = test::RunCli("run --model " + TinyModel() +
                                    " --prompt-ids 2,17,99,4 --max-new 2 --temperature 0 "
                                    "--print-ids --backend cuda --quiet",
                                &out);
  unsetenv("REDWING_CUDA_MATVEC");
  EXPECT_NE(code, 0) << out;
  EXPECT_NE(out.find("REDWING_CUDA_MATVEC must be i8, simt or generic, not 'tc'"),
            std::string::npos)
      << out;
}

}  // namespace
}  // namespace rw
