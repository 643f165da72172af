// The DFlash drafter against the reference (tests/fixtures/dflash, made by
// tools/golden/dflash_golden.py from z-lab/dflash dflash/model.py at commit
// 10129599dffb338ff38cfd235a53ca6d3667b4dd, run with transformers): a random drafter with the
// published drafter's structure scaled to the golden tiny Gemma 4 target moe_h64_l12_k4_g32,
// a 40-token prompt (longer than the target's window of 8 and the drafter's of 20).
//   - the target's hidden states at target_layer_ids (our capture), the drafter's final hidden
//     states and its draft logits within 1e-4 relative error, the drafted ids identical;
//   - the reference's dflash_generate loop (greedy, 15 drafts per step): every step's drafted
//     ids and accepted length over the first 32 generated tokens, through Generate.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <string>
#include <vector>

#include "base/file.h"
#include "base/json.h"
#include "draft/dflash_forward.h"
#include "engine/drafter_dflash.h"
#include "engine/engine.h"
#include "engine/generate.h"
#include "install/convert.h"
#include "install/drafter_convert.h"
#include "model/parity_util.h"

namespace rw {
namespace {

using test::ReadF32;
using test::RelErr;

constexpr double kTolerance = 1e-4;

std::string Fixture(const std::string& f) {
  return JoinPath(REDWING_SOURCE_DIR, "tests/fixtures/dflash/" + f);
}

struct Golden {
  Json expected;
  std::shared_ptr<Engine> engine;
  std::string drafter_dir;
};

// The golden target converted as published (bf16), and the fixture's drafter likewise.
const Golden& Get() {
  static Golden s = [] {
    Golden s;
    auto text = ReadFileToString(Fixture("expected.json"));
    EXPECT_TRUE(text.ok()) << text.status().ToString();
    auto j = ParseJson(text.ok() ? *text : "{}", "expected.json");
    EXPECT_TRUE(j.ok());
    s.expected = j.ok() ? *j : Json::object();
    const std::string work =
        JoinPath(REDWING_BUILD_DIR, "test_tmp/dflash_parity/" + std::to_string(getpid()));
    EXPECT_TRUE(RemoveAll(work).ok());
    ConvertOptions co;
    co.source_dir = JoinPath(REDWING_SOURCE_DIR,
                             "tests/fixtures/golden/" + s.expected.value("target", "") + "/hf");
    co.out_dir = JoinPath(work, "target");
    co.quantize = "keep";
    Status st = ConvertCheckpoint(co);
    EXPECT_TRUE(st.ok()) << st.ToString();
    DrafterConvertOptions dco;
    dco.source_dir = Fixture("drafter");
    dco.out_dir = JoinPath(work, "drafter");
    dco.quantize = "keep";
    st = ConvertDrafter(dco);
    EXPECT_TRUE(st.ok()) << st.ToString();
    s.drafter_dir = dco.out_dir;
    EngineOptions o;
    o.model_dir = co.out_dir;
    o.threads = 2;
    o.max_context = 256;
    o.prefill_chunk = 64;
    o.load_tokenizer = false;
    auto e = Engine::Load(o);
    EXPECT_TRUE(e.ok()) << e.status().ToString();
    if (e.ok()) s.engine = *e;
    return s;
  }();
  return s;
}

std::vector<int> Ints(const Json& j) {
  std::vector<int> v;
  for (const Json& x : j) v.push_back(x.get<int>());
  return v;
}

TEST(DFlashParity, OneBlockMatchesTheReference) {
  const Golden& s = Get();
  ASSERT_NE(s.engine, nullptr);
  const Json& single = s.expected["single"];
  const std::vector<int> prompt = Ints(s.expected["prompt_ids"]);
  auto model = DFlashModel::Open(s.drafter_dir);
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  const DFlashConfig& c = (*model)->config();
  EXPECT_EQ(c.target_layer_ids, Ints(s.expected["target_layer_ids"]));
  ASSERT_GT(static_cast<int64_t>(prompt.size()), c.sliding_window);
  ASSERT_TRUE(c.use_sliding_window);

  // The target's hidden states, captured during the prefill.
  auto session = s.engine->NewSession();
  ASSERT_TRUE(session->backend()->SetCapture(c.target_layer_ids).ok());
  auto logits = session->Prefill(prompt);
  ASSERT_TRUE(logits.ok()) << logits.status().ToString();
  const HiddenCapture& cap = session->backend()->capture();
  const std::vector<float> want_features = ReadF32(Fixture("single_features.f32"));
  ASSERT_EQ(cap.tokens, static_cast<int64_t>(prompt.size()));
  ASSERT_EQ(cap.rows.size(), want_features.size());
  const double feat_err = RelErr(cap.rows.data(), want_features.data(), want_features.size());
  std::printf("[dflash] target hidden states at %zu layers: rel err %.3g\n",
              c.target_layer_ids.size(), feat_err);
  EXPECT_LE(feat_err, kTolerance);
  EXPECT_EQ(Argmax(*logits), single["first_token"].get<int>());

  const std::vector<float> want_hidden = ReadF32(Fixture("single_hidden.f32"));
  const std::vector<float> want_logits = ReadF32(Fixture("single_logits.f32"));
  const std::vector<int> block = Ints(single["block"]);
  const std::vector<int> want_ids = Ints(single["drafted_ids"]);
  const int64_t V = s.engine->config().vocab_size, H = c.hidden;
  ASSERT_EQ(want_logits.size(), static_cast<size_t>((block.size() - 1) * V));

  // Fed the reference's features (the drafter alone) and our own capture (the whole path).
  for (const bool ours : {false, true}) {
    DFlashState st(**model, DFlashTarget{s.engine->model().embed(), s.engine->model().embed()},
                   s.engine->pool());
    st.AddContext(ours ? cap.rows.data() : want_features.data(),
                  static_cast<int64_t>(prompt.size()), 0);
    const std::vector<float> hidden = st.Block(block);
    ASSERT_EQ(hidden.size(), want_hidden.size());
    std::vector<float> lg(want_logits.size());
    st.Logits(&hidden[static_cast<size_t>(H)], static_cast<int64_t>(block.size()) - 1, {},
              lg.data());
    const double herr = RelErr(hidden.data(), want_hidden.data(), hidden.size());
    const double lerr = RelErr(lg.data(), want_logits.data(), lg.size());
    std::printf("[dflash] %s features: drafter hidden rel err %.3g, draft logits rel err %.3g\n",
                ours ? "captured" : "reference", herr, lerr);
    EXPECT_LE(herr, kTolerance);
    EXPECT_LE(lerr, kTolerance);
    EXPECT_EQ(st.Draft(block[0], static_cast<int>(block.size()) - 1), want_ids);
    // The block left the context as it was.
    EXPECT_EQ(st.context_end(), static_cast<int64_t>(prompt.size()));
  }
}

// The head over a hot list scores exactly those ids, and drafts stay inside the list.
TEST(DFlashParity, HotIdsScoreOnlyTheirRows) {
  const Golden& s = Get();
  ASSERT_NE(s.engine, nullptr);
  auto model = DFlashModel::Open(s.drafter_dir);
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  const std::vector<int> prompt = Ints(s.expected["prompt_ids"]);
  const std::vector<float> features = ReadF32(Fixture("single_features.f32"));
  const std::vector<int> block = Ints(s.expected["single"]["block"]);
  const std::vector<int> full_ids = Ints(s.expected["single"]["drafted_ids"]);
  DFlashState st(**model, DFlashTarget{s.engine->model().embed(), s.engine->model().embed()},
                 s.engine->pool());
  st.AddContext(features.data(), static_cast<int64_t>(prompt.size()), 0);
  const std::vector<float> hidden = st.Block(block);
  const int64_t V = s.engine->config().vocab_size, H = (*model)->config().hidden;
  const int rows = static_cast<int>(block.size()) - 1;
  std::vector<float> full(static_cast<size_t>(rows * V));
  st.Logits(&hidden[static_cast<size_t>(H)], rows, {}, full.data());
  // Runs and single ids, out of order, including the full drafts' first id and excluding another.
  std::vector<int> hot = {full_ids[0], 7, 8, 9, 10, 300, 301, 12, static_cast<int>(V) - 1};
  hot.erase(std::remove(hot.begin(), hot.end(), full_ids.back()), hot.end());
  std::vector<float> part(static_cast<size_t>(rows) * hot.size());
  st.Logits(&hidden[static_cast<size_t>(H)], rows, hot, part.data());
  for (int r = 0; r < rows; ++r)
    for (size_t i = 0; i < hot.size(); ++i)
      EXPECT_NEAR(part[r * hot.size() + i], full[static_cast<size_t>(r * V + hot[i])], 1e-4)
          << r << " " << i;  // one row at a time vs the batched kernel: rounding only
  const std::vector<int> drafts = st.Draft(block[0], rows, hot);
  for (size_t i = 0; i < drafts.size(); ++i) {
    EXPECT_NE(std::find(hot.begin(), hot.end(), drafts[i]), hot.end());
    // The argmax of the hot row (the first on ties), as an id.
    size_t bj = 0;
    for (size_t j = 1; j < hot.size(); ++j)
      if (part[i * hot.size() + j] > part[i * hot.size() + bj]) bj = j;
    const int best = hot[bj];
    EXPECT_EQ(drafts[i], best) << i;
  }
}

// The reference's dflash_generate (greedy, block 16) step by step, through Generate and the
// DFlashDrafter: the target's captured hidden states of every kept position feed the drafter.
// The reference drafts min(15, tokens left) at its last steps where Generate drafts one fewer
// (it never drafts a token it could not emit), so the loop ran 48 tokens and the steps that
// make the first 32 are compared, all of them full blocks in both.
TEST(DFlashParity, SpeculativeLoopMatchesTheReferenceSteps) {
  const Golden& s = Get();
  ASSERT_NE(s.engine, nullptr);
  const Json& loop = s.expected["loop"];
  const std::vector<int> prompt = Ints(s.expected["prompt_ids"]);
  auto drafter = MakeDFlashDrafter(s.drafter_dir, *s.engine);
  ASSERT_TRUE(drafter.ok()) << drafter.status().ToString();
  GenerateOptions o;
  o.sampling.temperature = 0;  // greedy
  o.max_new_tokens = loop["max_new_tokens"].get<int64_t>();
  o.drafter = *drafter;
  o.draft_tokens = loop["block_size"].get<int>() - 1;
  std::vector<SpeculationStep> steps;
  GenerateCallbacks cb;
  cb.on_speculation = [&](const SpeculationStep& st) { steps.push_back(st); };
  auto session = s.engine->NewSession();
  SessionTimeline t(*session);
  auto r = Generate(t, nullptr, prompt, o, cb);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->ids, Ints(loop["generated"]));

  const int compare = loop["compare_tokens"].get<int>();
  const int64_t n = static_cast<int64_t>(prompt.size());
  size_t i = 0;
  for (const Json& want : loop["steps"]) {
    const int64_t start = want["start"].get<int64_t>();
    if (start - n + 1 > compare - 1) break;  // a step after the first 32 tokens are emitted
    ASSERT_LT(i, steps.size()) << "step at " << start;
    EXPECT_EQ(steps[i].position, start + 1) << "step " << i;
    EXPECT_EQ(steps[i].drafted, Ints(want["drafted"])) << "step " << i << " at " << start;
    EXPECT_EQ(steps[i].accepted, want["accepted"].get<int>()) << "step " << i;
    ++i;
  }
  std::printf("[dflash] %zu reference steps compared (%lld drafted, %lld accepted in all)\n", i,
              static_cast<long long>(r->drafted), static_cast<long long>(r->accepted));
  EXPECT_GE(i, 16u);
}

}  // namespace
}  // namespace rw
