// --draft-tokens auto on the tiny synthetic model: the policy drafts rarely when every draft is
// wrong (oracle:0) and long blocks when every draft is right (oracle:1), and the output stays
// plain decoding's token for token whatever it chooses (greedy and sampled, with costs it measures
// itself and with fixed ones).
#include <gtest/gtest.h>

#include <vector>

#include "engine/draft_policy.h"
#include "engine/drafter.h"
#include "engine/engine.h"
#include "engine/generate.h"
#include "model/parity_util.h"

namespace rw {
namespace {

constexpr int64_t kChunk = 8;  // a verify holds 8 tokens: up to 7 drafts

std::shared_ptr<Engine> TinyEngine() {
  static std::shared_ptr<Engine> engine = [] {
    EngineOptions o;
    o.model_dir = test::TinySynthModel("speculative-auto", 29);
    o.threads = 2;
    o.max_context = 512;
    o.prefill_chunk = kChunk;
    o.load_tokenizer = false;
    auto e = Engine::Load(o);
    EXPECT_TRUE(e.ok()) << e.status().ToString();
    return e.ok() ? *e : nullptr;
  }();
  return engine;
}

std::vector<int> Prompt() {
  std::vector<int> p = {2};
  for (int i = 0; i < 40; ++i) p.push_back((i * 53 + 17) % 500 + 3);
  return p;
}

GenerateResult Decode(const GenerateOptions& o, std::vector<SpeculationStep>* steps = nullptr) {
  auto s = TinyEngine()->NewSession();
  SessionTimeline t(*s);
  GenerateCallbacks cb;
  if (steps != nullptr)
    cb.on_speculation = [&](const SpeculationStep& st) { steps->push_back(st); };
  auto r = Generate(t, nullptr, Prompt(), o, cb);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return r.ok() ? *r : GenerateResult{};
}

GenerateOptions Options(float temperature, uint64_t seed) {
  GenerateOptions o;
  o.sampling.temperature = temperature;
  o.sampling.seed = seed;
  o.max_new_tokens = 120;
  return o;
}

// Fixed costs shaped like a weight-bound MoE decode (a verify of k + 1 tokens costs a plain step
// plus 5% per draft), so what the policy picks depends on acceptance alone.
std::shared_ptr<DraftPolicy> FrozenPolicy() {
  auto p = std::make_shared<DraftPolicy>();
  std::vector<double> t;
  for (int k = 0; k <= 15; ++k) t.push_back(1e-3 * (1 + 0.05 * k));
  p->SetCosts(t, /*frozen=*/true);
  return p;
}

TEST(SpeculativeAuto, RejectedDraftsAreRareAndAcceptedOnesLong) {
  for (const float temperature : {0.0f, 1.0f}) {
    GenerateOptions o = Options(temperature, 5);
    const GenerateResult plain = Decode(o);
    ASSERT_EQ(plain.ids.size(), 120u);
    o.draft_tokens = kDraftTokensAuto;

    o.drafter = std::make_shared<OracleDrafter>(plain.ids, 0.0, 3);
    o.draft_policy = FrozenPolicy();
    std::vector<SpeculationStep> steps;
    const GenerateResult never = Decode(o, &steps);
    EXPECT_EQ(never.ids, plain.ids);
    EXPECT_EQ(never.accepted, 0);
    // A few steps to learn, then a probe of one draft every 16..256 plain steps.
    EXPECT_GT(never.verify_calls, 0);
    EXPECT_LE(never.verify_calls, 12) << "of " << never.decoded_tokens << " steps";
    EXPECT_EQ(static_cast<int64_t>(steps.size()), never.verify_calls);
    for (const SpeculationStep& st : steps) {
      EXPECT_GE(st.chosen, static_cast<int>(st.drafted.size()));
      EXPECT_LE(st.chosen, static_cast<int>(kChunk) - 1);
    }

    o.drafter = std::make_shared<OracleDrafter>(plain.ids, 1.0, 3);
    o.draft_policy = FrozenPolicy();
    steps.clear();
    const GenerateResult always = Decode(o, &steps);
    EXPECT_EQ(always.ids, plain.ids);
    EXPECT_EQ(always.accepted, always.drafted);
    ASSERT_GT(always.verify_calls, 0);
    // The verify limit (7 drafts) from the second step on, but near the 120-token limit.
    const double mean = static_cast<double>(always.drafted) / always.verify_calls;
    EXPECT_GE(mean, 6.0) << always.verify_calls << " calls";
    EXPECT_LE(always.verify_calls, 120 / 8 + 3);
  }
}

// With costs it measures itself (timings on a shared machine: only what does not depend on them
// is checked) the output is still plain decoding's, and a hopeless drafter mostly stops.
TEST(SpeculativeAuto, MeasuredCostsKeepTheOutputAndFallBack) {
  for (const uint64_t seed : {1u, 2u, 3u}) {
    GenerateOptions o = Options(seed == 1 ? 0.0f : 0.8f, seed);
    o.sampling.top_k = seed == 3 ? 40 : 0;
    const GenerateResult plain = Decode(o);
    o.draft_tokens = kDraftTokensAuto;
    for (const double p : {0.0, 0.5, 0.9}) {
      o.drafter = std::make_shared<OracleDrafter>(plain.ids, p, seed);
      const GenerateResult spec = Decode(o);
      EXPECT_EQ(spec.ids, plain.ids) << "seed " << seed << " oracle:" << p;
      EXPECT_EQ(spec.finish, plain.finish);
      if (p == 0.0) {
        EXPECT_LT(spec.verify_calls, spec.decoded_tokens / 3);
      }
    }
    o.drafter = std::make_shared<NgramDrafter>();
    EXPECT_EQ(Decode(o).ids, plain.ids) << "seed " << seed << " ngram";
  }
}

// A policy kept across generations (as the server keeps one) remembers what it learned: after a
// hopeless run, the next one starts in plain steps.
TEST(SpeculativeAuto, APolicyKeptAcrossGenerationsRemembers) {
  GenerateOptions o = Options(0.0f, 1);
  const GenerateResult plain = Decode(o);
  o.draft_tokens = kDraftTokensAuto;
  o.draft_policy = FrozenPolicy();
  o.drafter = std::make_shared<OracleDrafter>(plain.ids, 0.0, 3);
  const GenerateResult first = Decode(o);
  const GenerateResult second = Decode(o);
  EXPECT_EQ(second.ids, plain.ids);
  EXPECT_LT(second.verify_calls, first.verify_calls);
}

}  // namespace
}  // namespace rw
