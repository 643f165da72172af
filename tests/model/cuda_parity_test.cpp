// The CUDA forward pass against the golden fixtures (as parity_test.cpp does for the CPU: 1e-4
// relative error on every prompt position, the 24 greedy tokens identical, decode logits vs the
// fixture's) and against the CPU backend on a synthesized tiny model: prefill in chunks, decode
// after prefill, a prompt longer than the sliding window, and a VRAM budget small enough that
// experts are evicted (logits must then be bit-identical to the all-resident run, on the copy
// path, the mapped path and through the slots store's staging). Skips (saying why) where no CUDA
// device is usable.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <filesystem>
#include <functional>

#include "backend/cuda/cuda.h"
#include "backend/cuda_test_util.h"
#include "base/file.h"
#include "base/json.h"
#include "bench/bench.h"
#include "engine/engine.h"
#include "golden_fixtures.h"
#include "install/convert.h"
#include "install/synth.h"
#include "model/parity_util.h"
#include "runtime/cuda_model.h"
#include "sample/sampler.h"

namespace rw {
namespace {

using test::ReadF32;
using test::RelErr;

std::shared_ptr<Engine> Load(const std::string& dir, const std::string& backend, int64_t chunk,
                             int64_t max_context = 512, uint64_t vram_budget = 0,
                             bool graphs = true, const std::string& experts = "auto",
                             const std::string& store = "mmap", bool prefill_in_place = false) {
  EngineOptions o;
  o.model_dir = dir;
  o.threads = 2;
  o.max_context = max_context;
  o.prefill_chunk = chunk;
  o.backend = *ParseBackendKind(backend);
  o.vram_budget = vram_budget;
  o.cuda_graphs = graphs;
  o.cuda_experts = *ParseCudaExpertPath(experts);
  o.expert_store = *ParseExpertStoreKind(store);
  o.cuda_prefill_in_place = prefill_in_place;
  o.load_tokenizer = false;
  auto e = Engine::Load(o);
  EXPECT_TRUE(e.ok()) << e.status().ToString();
  return e.ok() ? *e : nullptr;
}

TEST(CudaParity, WithoutAGpuTheBackendSaysWhy) {
  if (cuda::DeviceStatus().ok()) GTEST_SKIP() << "a GPU is present";
  EngineOptions o;
  o.model_dir = JoinPath(REDWING_SOURCE_DIR, "tests/fixtures/golden");
  o.backend = BackendKind::kCuda;
  auto e = Engine::Load(o);
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().message().find("CUDA"), std::string::npos) << e.status().ToString();
}

TEST(CudaParity, GoldenFixtures) {
  REQUIRE_CUDA();
  // Every fixture the manifest lists (a missing one fails; parity_test checks the files).
  const test::GoldenManifest manifest = test::ReadGoldenManifest();
  ASSERT_TRUE(manifest.error.empty()) << manifest.error;
  for (const std::string& fixture : manifest.names) {
    const std::string fx = JoinPath(test::GoldenRoot(), fixture);
    auto text = ReadFileToString(JoinPath(fx, "expected.json"));
    ASSERT_TRUE(text.ok());
    auto expected = ParseJson(*text, "expected.json");
    ASSERT_TRUE(expected.ok());
    const std::vector<int> prompt = (*expected)["prompt_ids"].get<std::vector<int>>();
    struct Kind {
      const char *name, *logits, *gen_logits, *greedy;
    };
    for (const Kind& kind : {Kind{"hf", "logits_hf.f32", "logits_hf_gen.f32", "greedy_ids"},
                             Kind{"mlx", "logits_mlx.f32", "logits_mlx_gen.f32", "greedy_mlx"}}) {
      const std::string name = BaseName(fx) + "/" + kind.name;
      SCOPED_TRACE(name);
      const std::string out =
          JoinPath(REDWING_BUILD_DIR, "test_tmp/cuda_parity/" + BaseName(fx) + "_" + kind.name);
      ASSERT_TRUE(RemoveAll(out).ok());
      ASSERT_TRUE(MakeDirectories(ParentPath(out)).ok());
      ConvertOptions co;
      co.source_dir = JoinPath(fx, kind.name);
      co.out_dir = out;
      co.quantize = "keep";
      Status st = ConvertCheckpoint(co);
      ASSERT_TRUE(st.ok()) << st.ToString();
      for (int64_t chunk : {64, 7}) {
        auto engine = Load(out, "cuda", chunk);
        ASSERT_NE(engine, nullptr);
        const int64_t V = engine->config().vocab_size, n = static_cast<int64_t>(prompt.size());
        const std::vector<float> ref = ReadF32(JoinPath(fx, kind.logits));
        ASSERT_EQ(ref.size(), static_cast<size_t>(n * V));
        auto s = engine->NewSession();
        auto all = s->Prefill(prompt, true);
        ASSERT_TRUE(all.ok()) << all.status().ToString();
        const double err = RelErr(all->data(), ref.data(), ref.size());
        std::printf("[cuda parity] %s chunk %lld: prompt logits rel err %.3g\n", name.c_str(),
                    static_cast<long long>(chunk), err);
        EXPECT_LE(err, 1e-4);
        const std::vector<int> want = (*expected)[kind.greedy].get<std::vector<int>>();
        s->Reset();
        auto got = GenerateGreedy(*s, prompt, static_cast<int>(want.size()), {});
        ASSERT_TRUE(got.ok()) << got.status().ToString();
        EXPECT_EQ(*got, want);
        const std::vector<float> gen_ref = ReadF32(JoinPath(fx, kind.gen_logits));
        ASSERT_EQ(gen_ref.size(), want.size() * V) << kind.gen_logits;
        auto d = engine->NewSession();
        auto step = d->Prefill(prompt);
        ASSERT_TRUE(step.ok());
        double worst_gen = 0;
        for (size_t i = 0; i < want.size(); ++i) {
          if (i > 0) {
            step = d->Decode(want[i - 1]);
            ASSERT_TRUE(step.ok()) << step.status().ToString();
          }
          ASSERT_EQ(step->size(), static_cast<size_t>(V));
          worst_gen = std::max(worst_gen, RelErr(step->data(), &gen_ref[i * V], V));
        }
        std::printf("[cuda parity] %s chunk %lld: decode vs fixture %.3g\n", name.c_str(),
                    static_cast<long long>(chunk), worst_gen);
        EXPECT_LE(worst_gen, 1e-4);
      }
    }
  }
}

std::string TinyModel() {
  static const std::string dir = test::TinySynthModel("cuda_parity", 3);
  return dir;
}

std::vector<int> Prompt(int n, int vocab) {
  std::vector<int> ids{2};
  for (int i = 1; i < n; ++i) ids.push_back((i * 131 + 17) % vocab);
  return ids;
}

// Prefill (all logits) then decode steps; returns every row of logits.
std::vector<std::vector<float>> Trace(Engine& e, const std::vector<int>& prompt,
                                      const std::vector<int>& next) {
  std::vector<std::vector<float>> rows;
  auto s = e.NewSession();
  auto all = s->Prefill(prompt, true);
  EXPECT_TRUE(all.ok()) << all.status().ToString();
  if (!all.ok()) return rows;
  const int64_t V = e.config().vocab_size;
  for (size_t t = 0; t < prompt.size(); ++t)
    rows.emplace_back(all->begin() + t * V, all->begin() + (t + 1) * V);
  for (int id : next) {
    auto l = s->Decode(id);
    EXPECT_TRUE(l.ok()) << l.status().ToString();
    if (!l.ok()) break;
    rows.push_back(*l);
  }
  return rows;
}

TEST(CudaParity, MatchesTheCpuOnATinyModel) {
  REQUIRE_CUDA();
  const std::string dir = TinyModel();
  auto cpu = Load(dir, "cpu", 7, 256);
  ASSERT_NE(cpu, nullptr);
  const int vocab = cpu->config().vocab_size;
  // 45 tokens: longer than the sliding window (16) and the ring (16 + 7 − 1), in chunks of 7.
  const std::vector<int> prompt = Prompt(45, vocab);
  std::vector<int> next;
  for (int i = 0; i < 30; ++i) next.push_back((i * 53 + 5) % vocab);
  const auto want = Trace(*cpu, prompt, next);
  for (int64_t chunk : {7, 1, 64}) {
    for (bool graphs : {true, false}) {
      SCOPED_TRACE(fmt::format("chunk {} graphs {}", chunk, graphs));
      auto gpu = Load(dir, "cuda", chunk, 256, 0, graphs);
      ASSERT_NE(gpu, nullptr);
      const auto got = Trace(*gpu, prompt, next);
      ASSERT_EQ(got.size(), want.size());
      double worst = 0;
      for (size_t r = 0; r < got.size(); ++r)
        worst = std::max(worst, RelErr(got[r].data(), want[r].data(), want[r].size()));
      std::printf("[cuda vs cpu] chunk %lld graphs %d: worst row rel err %.3g\n",
                  static_cast<long long>(chunk), graphs ? 1 : 0, worst);
      EXPECT_LE(worst, 1e-4);
    }
  }
}

TEST(CudaParity, EvictionGivesTheResidentLogits) {
  REQUIRE_CUDA();
  const std::string dir = TinyModel();
  auto resident = Load(dir, "cuda", 7, 256);
  ASSERT_NE(resident, nullptr);
  const CudaModel* cm = CudaModelOf(resident->device_model());
  ASSERT_NE(cm, nullptr);
  ASSERT_NE(cm->resident_table(), nullptr);
  const ModelConfig& c = resident->config();
  // Room for 5 experts: fewer than one layer's 8, so prefill fetches them in batches and every
  // decode step evicts (the copy path; the mapped path is checked below).
  const uint64_t budget =
      cm->core_device_bytes() + CudaModel::SessionBytes(c, 256, 7) + 5 * cm->experts()->stride();
  auto small = Load(dir, "cuda", 7, 256, budget, true, "copy");
  ASSERT_NE(small, nullptr);
  ASSERT_EQ(CudaModelOf(small->device_model())->resident_table(), nullptr);
  ASSERT_EQ(CudaModelOf(small->device_model())->experts()->slots(), 5);
  const std::vector<int> prompt = Prompt(45, c.vocab_size);
  std::vector<int> next;
  for (int i = 0; i < 20; ++i) next.push_back((i * 71 + 3) % c.vocab_size);
  const auto want = Trace(*resident, prompt, next);
  const auto got = Trace(*small, prompt, next);
  ASSERT_EQ(got.size(), want.size());
  for (size_t r = 0; r < got.size(); ++r) EXPECT_EQ(got[r], want[r]) << "row " << r;
  const ExpertStoreStats st = small->expert_stats();
  std::printf("[cuda eviction] %llu hits, %llu misses, %.1f MB copied\n",
              static_cast<unsigned long long>(st.hits), static_cast<unsigned long long>(st.misses),
              st.bytes_read / 1e6);
  EXPECT_GT(st.misses, 8u);
}

// Under the same 5-slot budget: the mapped path (missing experts read in place from pinned host
// memory, promotions between calls, a decode step one graph with one host sync; prefill copying
// a chunk's experts into slots, or reading them in place too), the copy path, and the slots
// store (no fixed mappings: copies through pinned staging) all give the resident logits bit for
// bit, with graphs on and off.
TEST(CudaParity, MappedAndCopyPathsGiveTheResidentLogits) {
  REQUIRE_CUDA();
  const std::string dir = TinyModel();
  auto resident = Load(dir, "cuda", 7, 256);
  ASSERT_NE(resident, nullptr);
  const CudaModel* cm = CudaModelOf(resident->device_model());
  ASSERT_NE(cm, nullptr);
  EXPECT_EQ(resident->cuda_expert_path(), "resident");
  const ModelConfig& c = resident->config();
  const uint64_t budget =
      cm->core_device_bytes() + CudaModel::SessionBytes(c, 256, 7) + 5 * cm->experts()->stride();
  const std::vector<int> prompt = Prompt(45, c.vocab_size);
  std::vector<int> next;
  for (int i = 0; i < 24; ++i) next.push_back((i * 71 + 3) % c.vocab_size);
  const auto want = Trace(*resident, prompt, next);
  struct Variant {
    const char *experts, *store, *path;
    bool prefill_in_place;
  };
  for (const Variant& v :
       {Variant{"mapped", "mmap", "mapped", false}, Variant{"mapped", "mmap", "mapped", true},
        Variant{"copy", "mmap", "copy", false}, Variant{"auto", "slots", "copy", false}}) {
    for (bool graphs : {true, false}) {
      SCOPED_TRACE(fmt::format("{} ({} store, prefill in place {}), graphs {}", v.experts, v.store,
                               v.prefill_in_place, graphs));
      auto e = Load(dir, "cuda", 7, 256, budget, graphs, v.experts, v.store, v.prefill_in_place);
      ASSERT_NE(e, nullptr);
      ASSERT_EQ(e->cuda_expert_path(), v.path);
      ASSERT_EQ(CudaModelOf(e->device_model())->experts()->slots(), 5);
      const auto got = Trace(*e, prompt, next);
      ASSERT_EQ(got.size(), want.size());
      for (size_t r = 0; r < got.size(); ++r) EXPECT_EQ(got[r], want[r]) << "row " << r;
      // Decode steps on the mapped path wait on the GPU once each (the logits), never per layer.
      auto s = e->NewSession();
      ASSERT_TRUE(s->Prefill(prompt).ok());
      const uint64_t syncs0 = s->host_syncs();
      for (int id : next) ASSERT_TRUE(s->Decode(id).ok());
      const uint64_t per_step = (s->host_syncs() - syncs0) / next.size();
      const ExpertStoreStats st = e->expert_stats();
      std::printf(
          "[cuda %s/%s%s graphs %d] %llu hits, %llu misses, %llu promotions, %.2f MB over "
          "PCIe, %llu syncs per decode step\n",
          v.experts, v.store, v.prefill_in_place ? " in-place prefill" : "", graphs ? 1 : 0,
          static_cast<unsigned long long>(st.hits), static_cast<unsigned long long>(st.misses),
          static_cast<unsigned long long>(st.prefetches), st.bytes_read / 1e6,
          static_cast<unsigned long long>(per_step));
      EXPECT_GT(st.misses, 8u);
      if (std::string(v.path) == "mapped") {
        EXPECT_EQ(per_step, 1u);
        EXPECT_GT(st.prefetches, 0u);  // experts were promoted into slots
        EXPECT_GT(st.hits, 0u);        // and used from there
      } else {
        EXPECT_EQ(per_step, static_cast<uint64_t>(c.num_layers) + 1);
      }
    }
  }
}

// The GPU's draw (RunAndSample) is the CPU sampler's unfiltered Gumbel-max draw on the same
// logits: one session copies its logits back and samples on the CPU, its twin draws on the GPU,
// both fed the same tokens, with the decode step as a CUDA graph and kernel by kernel.
TEST(CudaParity, DrawsOnTheGpuWhatTheCpuSamplerDraws) {
  REQUIRE_CUDA();
  const std::string dir = TinyModel();
  uint64_t small_budget = 0;
  for (int variant = 0; variant < 3; ++variant) {
    SCOPED_TRACE(variant == 0   ? "resident, graphs"
                 : variant == 1 ? "no graphs"
                                : "mapped experts under a 5-slot budget, graphs");
    auto e = Load(dir, "cuda", 7, 256, variant == 2 ? small_budget : 0, variant != 1);
    ASSERT_NE(e, nullptr);
    if (variant == 0) {
      const CudaModel* cm = CudaModelOf(e->device_model());
      small_budget = cm->core_device_bytes() + CudaModel::SessionBytes(e->config(), 256, 7) +
                     5 * cm->experts()->stride();
    }
    if (variant == 2) {
      ASSERT_EQ(e->cuda_expert_path(), "mapped");
    }
    const int vocab = e->config().vocab_size;
    auto host = e->NewSession();
    auto device = e->NewSession();
    ASSERT_TRUE(device->samples_on_device());
    const std::vector<int> prompt = Prompt(20, vocab);
    ASSERT_TRUE(host->Prefill(prompt).ok());
    ASSERT_TRUE(device->Prefill(prompt).ok());
    int tok = 7, distinct_seen = 0;
    std::vector<bool> seen(static_cast<size_t>(vocab), false);
    for (int i = 0; i < 40; ++i) {
      const uint64_t seed = 1000 + static_cast<uint64_t>(i % 3);
      auto logits = host->Decode(tok);
      ASSERT_TRUE(logits.ok()) << logits.status().ToString();
      const int want = SampleUnfiltered(*logits, seed, host->position());
      auto got = device->DecodeSampled(tok, seed);
      ASSERT_TRUE(got.ok()) << got.status().ToString();
      ASSERT_EQ(*got, want) << "step " << i;
      distinct_seen += seen[static_cast<size_t>(want)] ? 0 : 1;
      seen[static_cast<size_t>(want)] = true;
      tok = want;
    }
    EXPECT_GT(distinct_seen, 10);  // a varied stream, not one token repeated
    EXPECT_EQ(device->position(), host->position());
  }
}

// What run, chat and serve do on the GPU (SessionTimeline::DecodeAndSample): the step's top-k
// candidates cut on the device are exactly the row's (every logit at or above the k-th, after
// the repetition penalty), the sampler picks from them what it picks from the whole row, and
// the unfiltered draw at a temperature other than 1 (with a penalty or not) is the CPU
// sampler's too.
TEST(CudaParity, TopKCandidatesAndTemperatureDrawsMatchTheCpuSampler) {
  REQUIRE_CUDA();
  const std::string dir = TinyModel();
  for (bool graphs : {true, false}) {
    SCOPED_TRACE(graphs ? "graphs" : "no graphs");
    auto e = Load(dir, "cuda", 7, 256, 0, graphs);
    ASSERT_NE(e, nullptr);
    const int vocab = e->config().vocab_size;
    auto host = e->NewSession();
    auto device = e->NewSession();
    const std::vector<int> prompt = Prompt(20, vocab);
    ASSERT_TRUE(host->Prefill(prompt).ok());
    ASSERT_TRUE(device->Prefill(prompt).ok());
    int tok = 7, cut_steps = 0;
    for (int i = 0; i < 36; ++i) {
      auto logits = host->Decode(tok);
      ASSERT_TRUE(logits.ok()) << logits.status().ToString();
      SamplingParams p;
      p.seed = 77 + static_cast<uint64_t>(i);
      p.repetition_penalty = i % 3 == 0 ? 1.3f : 1.0f;  // applied on the GPU
      int got = -1;
      if (i % 4 == 3) {  // the unfiltered draw at temperature 0.7
        p.temperature = 0.7f;
        p.top_k = 0;
        p.top_p = 1.0f;
        auto d = device->DecodeSampled(tok, p.seed, p.temperature, p.repetition_penalty);
        ASSERT_TRUE(d.ok()) << d.status().ToString();
        got = *d;
      } else {
        const int k = std::array<int, 3>{1, 7, Session::kMaxDeviceTopK}[i % 4];
        p.temperature = i % 2 == 0 ? 0.0f : 0.8f;
        p.top_k = k;
        p.top_p = 0.9f;
        Session::TopKStep step;
        ASSERT_TRUE(device->DecodeTopK(tok, k, p.repetition_penalty, &step).ok());
        ASSERT_TRUE(step.logits.empty());
        // The cut: every logit of the penalized row at or above its k-th largest, values bit
        // for bit.
        std::vector<float> row = *logits;
        Sampler::ApplyRepetitionPenalty(row, host->tokens(), p.repetition_penalty);
        std::vector<float> sorted = row;
        std::sort(sorted.begin(), sorted.end(), std::greater<float>());
        const float floor = sorted[static_cast<size_t>(k - 1)];
        std::vector<int> want_ids;
        for (int id = 0; id < vocab; ++id)
          if (row[static_cast<size_t>(id)] >= floor) want_ids.push_back(id);
        std::vector<int> got_ids = step.ids;
        std::sort(got_ids.begin(), got_ids.end());
        ASSERT_EQ(got_ids, want_ids) << "step " << i;
        for (size_t j = 0; j < step.ids.size(); ++j)
          EXPECT_EQ(step.values[j], row[static_cast<size_t>(step.ids[j])]);
        Sampler s(p);
        got = s.SampleCandidates(step.ids, step.values, device->position());
        ++cut_steps;
      }
      Sampler s(p);
      ASSERT_EQ(got, s.Sample(*logits, host->position(), host->tokens())) << "step " << i;
      tok = got;
    }
    EXPECT_EQ(cut_steps, 27);
    EXPECT_EQ(device->position(), host->position());
  }
}

TEST(CudaParity, CpuSessionsDoNotDrawOnTheDevice) {
  auto e = Load(TinyModel(), "cpu", 7, 256);
  ASSERT_NE(e, nullptr);
  auto s = e->NewSession();
  EXPECT_FALSE(s->samples_on_device());
  ASSERT_TRUE(s->Prefill(Prompt(5, e->config().vocab_size)).ok());
  auto r = s->DecodeSampled(3, 1);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("--backend cuda"), std::string::npos);
  EXPECT_EQ(s->position(), 5);  // nothing appended
}

}  // namespace
}  // namespace rw
