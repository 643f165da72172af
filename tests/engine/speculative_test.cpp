// Speculative decoding in Generate on a tiny synthetic model (window 16, chunk 8): whatever the
// drafter proposes, the output is plain decoding's token for token (greedy, sampled with and
// without filters, with a repetition penalty), stops and limits inside an accepted block end
// the output where plain decoding does, and the timeline is left as plain decoding leaves it.
// Also the drafters themselves (ngram lookup, the oracle's determinism).
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "base/json.h"
#include "engine/drafter.h"
#include "engine/engine.h"
#include "engine/generate.h"
#include "engine/vocab_tokenizer.h"
#include "model/parity_util.h"

namespace rw {
namespace {

constexpr int64_t kChunk = 8, kContext = 256;
constexpr int kDraft = 6;  // drafts per step (a verify call of 7 <= kChunk)

// The backend the current test runs on (SpeculativeTest's parameter).
BackendKind g_backend = BackendKind::kCpu;

std::shared_ptr<Engine> TinyEngine() {
  static std::map<BackendKind, std::shared_ptr<Engine>> engines;
  std::shared_ptr<Engine>& engine = engines[g_backend];
  if (engine == nullptr) {
    EngineOptions o;
    o.model_dir = test::TinySynthModel("speculative", 23);
    o.threads = 2;
    o.max_context = kContext;
    o.prefill_chunk = kChunk;
    o.backend = g_backend;
    o.load_tokenizer = false;
    auto e = Engine::Load(o);
    EXPECT_TRUE(e.ok()) << e.status().ToString();
    if (e.ok()) engine = *e;
  }
  return engine;
}

// Every Generate case on the CPU and, where this build and machine have one, on the GPU (whose
// plain decoding draws on the device, and whose verify picks on the device too).
class Speculative : public ::testing::TestWithParam<BackendKind> {
 protected:
  void SetUp() override {
    if (GetParam() == BackendKind::kCuda) {
      if (Status st = CudaBackendAvailable(); !st.ok()) GTEST_SKIP() << "CUDA: " << st.message();
    }
    g_backend = GetParam();
    ASSERT_NE(TinyEngine(), nullptr);
  }
  void TearDown() override { g_backend = BackendKind::kCpu; }
};

// 42 tokens (past the 16-token window) of a 7-token phrase repeated, so prompt lookup has
// something to find.
std::vector<int> Prompt(int salt = 0) {
  std::vector<int> p = {2};
  for (int r = 0; r < 6; ++r)
    for (int i = 0; i < 7; ++i) p.push_back((i * 37 + salt * 11 + 40) % 500 + 3);
  return p;
}

// A tokenizer for the tiny model's 512 ids: id i decodes to "<i>".
Tokenizer NumberTokens(int vocab) {
  Json v = Json::object();
  for (int i = 0; i < vocab; ++i) v["<" + std::to_string(i) + ">"] = i;
  return test::VocabTokenizer(v, Json::array(), "numbers.json");
}

struct Outcome {
  GenerateResult r;
  std::vector<int> timeline;  // the session's tokens afterwards
};

Outcome Generated(const std::vector<int>& prompt, const GenerateOptions& o,
                  const Tokenizer* tok = nullptr) {
  auto s = TinyEngine()->NewSession();
  SessionTimeline t(*s);
  auto r = Generate(t, tok, prompt, o);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return {r.ok() ? *r : GenerateResult{}, s->tokens()};
}

GenerateOptions Options(int64_t max_new, float temperature = 0, uint64_t seed = 0) {
  GenerateOptions o;
  o.sampling.temperature = temperature;
  o.sampling.seed = seed;
  o.max_new_tokens = max_new;
  return o;
}

// The drafters every identity case runs: the oracle at several acceptance rates (its
// continuation is plain decoding's output) and prompt lookup.
std::vector<std::shared_ptr<Drafter>> Drafters(const std::vector<int>& plain) {
  std::vector<std::shared_ptr<Drafter>> d;
  for (const double p : {0.0, 0.5, 0.9, 1.0})
    d.push_back(std::make_shared<OracleDrafter>(plain, p, 7));
  d.push_back(std::make_shared<NgramDrafter>());
  d.push_back(std::make_shared<NgramDrafter>(3, 1));
  return d;
}

// Speculative output (ids, text, finish, timeline) equals plain's for every drafter. Returns
// the drafts proposed by drafter name (so a case can check that drafts were in play).
std::map<std::string, int64_t> ExpectSameAsPlain(const std::vector<int>& prompt, GenerateOptions o,
                                                 const std::string& what,
                                                 const Tokenizer* tok = nullptr,
                                                 std::vector<int> continuation = {}) {
  const Outcome plain = Generated(prompt, o, tok);
  if (continuation.empty()) continuation = plain.r.ids;
  std::map<std::string, int64_t> drafted;
  for (const auto& d : Drafters(continuation)) {
    o.drafter = d;
    o.draft_tokens = kDraft;
    const Outcome spec = Generated(prompt, o, tok);
    const std::string where = what + " with " + d->name();
    EXPECT_EQ(spec.r.ids, plain.r.ids) << where;
    EXPECT_EQ(spec.r.text, plain.r.text) << where;
    EXPECT_EQ(spec.r.finish, plain.r.finish) << where;
    EXPECT_EQ(spec.r.stop_id, plain.r.stop_id) << where;
    EXPECT_EQ(spec.r.stop_string, plain.r.stop_string) << where;
    EXPECT_EQ(spec.timeline, plain.timeline) << where;
    EXPECT_LE(spec.r.accepted, spec.r.drafted) << where;
    EXPECT_LE(static_cast<int64_t>(spec.r.ids.size()), o.max_new_tokens) << where;
    // The full-acceptance oracle drafts from the first step on whenever a step may emit two
    // tokens (the first comes from the prompt's logits).
    if (d->name() == "oracle:1" && plain.r.ids.size() > 2) {
      EXPECT_GT(spec.r.accepted, 0) << where;
    }
    drafted[d->name()] += spec.r.drafted;
  }
  return drafted;
}

TEST_P(Speculative, GreedyOutputIsPlainDecodingsTokenForToken) {
  int64_t ngram = 0;
  for (int salt = 0; salt < 3; ++salt) {
    auto drafted =
        ExpectSameAsPlain(Prompt(salt), Options(40), "greedy, prompt " + std::to_string(salt));
    ngram += drafted["ngram"];
  }
  EXPECT_GT(ngram, 0) << "prompt lookup should find the repeated phrase";
}

TEST_P(Speculative, SampledOutputIsPlainDecodingsForEverySeed) {
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    GenerateOptions o = Options(32, seed % 2 ? 1.0f : 0.7f, seed);
    if (seed % 3 == 1) o.sampling.top_k = 20;
    if (seed % 3 == 2) o.sampling.top_p = 0.9f;
    if (seed % 5 == 0) o.sampling.min_p = 0.05f;
    ExpectSameAsPlain(Prompt(static_cast<int>(seed)), o, "seed " + std::to_string(seed));
  }
}

TEST_P(Speculative, RepetitionPenaltySeesTheAcceptedDraftsBeforeEachPosition) {
  for (uint64_t seed = 1; seed <= 4; ++seed) {
    GenerateOptions o = Options(40, seed == 1 ? 0.0f : 0.8f, seed);
    o.sampling.repetition_penalty = 1.5f;
    ExpectSameAsPlain(Prompt(), o, "penalty, seed " + std::to_string(seed));
  }
}

TEST_P(Speculative, MaxNewIsNeverExceededAtBlockBoundaries) {
  for (const int64_t max_new : {int64_t{0}, int64_t{1}, int64_t{2}, int64_t{kDraft},
                                int64_t{kDraft + 1}, int64_t{kDraft + 2}, int64_t{2 * kDraft + 3}})
    ExpectSameAsPlain(Prompt(), Options(max_new), "max_new " + std::to_string(max_new));
  // The context's end is a limit too: 250 of 256 positions taken.
  std::vector<int> longp = Prompt();
  while (longp.size() < 250) longp.push_back(static_cast<int>(longp.size() % 200) + 3);
  ExpectSameAsPlain(longp, Options(100), "context end");
}

TEST_P(Speculative, StopIdsAndStopStringsInsideAnAcceptedBlock) {
  const Tokenizer tok = NumberTokens(TinyEngine()->config().vocab_size);
  const Outcome plain = Generated(Prompt(), Options(30), &tok);
  ASSERT_EQ(plain.r.ids.size(), 30u);
  // A stop string across the 4th and 5th generated tokens: inside the first block of the oracle,
  // which has the whole of the unstopped output to propose.
  const std::string stop = tok.Decode(std::vector<int32_t>{plain.r.ids[3], plain.r.ids[4]});
  GenerateOptions o = Options(30);
  o.stop_strings = {stop.substr(1, stop.size() - 2)};  // "i><j" across the two tokens
  ExpectSameAsPlain(Prompt(), o, "stop string", &tok, plain.r.ids);
  EXPECT_EQ(Generated(Prompt(), o, &tok).r.finish, FinishReason::kStop);
  // A stop id: the first occurrence of the 8th generated token.
  const int id = plain.r.ids[7];
  GenerateOptions s = Options(30);
  s.stop_ids = {id};
  ExpectSameAsPlain(Prompt(), s, "stop id", &tok, plain.r.ids);
  EXPECT_EQ(Generated(Prompt(), s, &tok).r.stop_id, id);
}

TEST_P(Speculative, StatisticsAndTheStepCallback) {
  const Outcome plain = Generated(Prompt(), Options(20));
  GenerateOptions o = Options(20);
  o.drafter = std::make_shared<OracleDrafter>(plain.r.ids, 1.0, 1);
  o.draft_tokens = 4;
  auto s = TinyEngine()->NewSession();
  SessionTimeline t(*s);
  std::vector<SpeculationStep> steps;
  GenerateCallbacks cb;
  cb.on_speculation = [&](const SpeculationStep& st) { steps.push_back(st); };
  auto r = Generate(t, nullptr, Prompt(), o, cb);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->ids, plain.r.ids);
  // All accepted: each verify emits 5 tokens; the first token comes from the prompt, and the
  // last step is cut to what max_new leaves: 1 + 5 + 5 + 5 + (4: 3 drafts + 1).
  EXPECT_EQ(r->verify_calls, 4);
  EXPECT_EQ(r->accepted, r->drafted);
  EXPECT_EQ(r->drafted, 4 + 4 + 4 + 3);
  EXPECT_DOUBLE_EQ(r->mean_accepted(), 15.0 / 4);
  ASSERT_EQ(steps.size(), 4u);
  EXPECT_EQ(steps[0].position, static_cast<int64_t>(Prompt().size()) + 1);
  EXPECT_EQ(steps[1].position, steps[0].position + 5);
  EXPECT_EQ(steps[0].drafted, std::vector<int>(plain.r.ids.begin() + 1, plain.r.ids.begin() + 5));
  ASSERT_EQ(r->drafted_at.size(), 4u);
  EXPECT_EQ(r->drafted_at[0], 4);
  EXPECT_EQ(r->drafted_at[3], 3);

  // Nothing accepted: every step emits the target's own token only.
  o.drafter = std::make_shared<OracleDrafter>(plain.r.ids, 0.0, 1);
  steps.clear();
  r = Generate(t, nullptr, Prompt(), o, cb);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->ids, plain.r.ids);
  EXPECT_EQ(r->accepted, 0);
  // 19 steps after the first token; the last has room for no draft and is a plain step.
  EXPECT_EQ(r->verify_calls, 18);
  EXPECT_EQ(r->decoded_tokens, 19);
  for (const SpeculationStep& st : steps) EXPECT_EQ(st.accepted, 0);
}

INSTANTIATE_TEST_SUITE_P(Backends, Speculative,
                         ::testing::Values(BackendKind::kCpu, BackendKind::kCuda),
                         [](const ::testing::TestParamInfo<BackendKind>& i) {
                           return std::string(BackendName(i.param));
                         });

TEST(Drafter, NgramProposesWhatFollowedTheLatestMatch) {
  NgramDrafter d;  // trigram, then bigram
  // ... 1 2 3 [4 5] ... 1 2 3 [7 8 9] ... 1 2 3: the latest trigram match is followed by 7 8 9.
  const std::vector<int> ctx = {1, 2, 3, 4, 5, 1, 2, 3, 7, 8, 9, 1, 2, 3};
  EXPECT_EQ(d.Propose(ctx, 2), (std::vector<int>{7, 8}));
  EXPECT_EQ(d.Propose(ctx, 10), (std::vector<int>{7, 8, 9, 1, 2, 3}));
  // No trigram matches, the bigram 9 5 does.
  const std::vector<int> bi = {6, 9, 5, 1, 4, 9, 5};
  EXPECT_EQ(d.Propose(bi, 3), (std::vector<int>{1, 4, 9}));
  // A single token does not match by default, but does with min_ngram 1.
  const std::vector<int> uni = {4, 8, 6, 1, 4};
  EXPECT_TRUE(d.Propose(uni, 3).empty());
  EXPECT_EQ(NgramDrafter(3, 1).Propose(uni, 3), (std::vector<int>{8, 6, 1}));
  // A repeating run proposes more of it.
  EXPECT_EQ(d.Propose(std::vector<int>{5, 5, 5, 5}, 3), (std::vector<int>{5}));
  EXPECT_TRUE(d.Propose(std::vector<int>{1, 2}, 3).empty());
  EXPECT_TRUE(d.Propose(ctx, 0).empty());
}

TEST(Drafter, OracleIsDeterministicAndRightAtRateP) {
  std::vector<int> cont;
  for (int i = 0; i < 4000; ++i) cont.push_back(i % 300);
  const std::vector<int> prompt = {2, 3};
  OracleDrafter half(cont, 0.5, 9), again(cont, 0.5, 9), other(cont, 0.5, 10);
  half.Begin(prompt);
  again.Begin(prompt);
  other.Begin(prompt);
  std::vector<int> ctx = prompt;
  const std::vector<int> a = half.Propose(ctx, 4000);
  ASSERT_EQ(a.size(), cont.size());
  EXPECT_EQ(again.Propose(ctx, 4000), a);
  EXPECT_NE(other.Propose(ctx, 4000), a);
  int right = 0;
  for (size_t i = 0; i < a.size(); ++i) right += a[i] == cont[i];
  EXPECT_NEAR(right / 4000.0, 0.5, 0.05);
  // Cut into blocks, the same tokens: the decision is per generated index.
  ctx.insert(ctx.end(), cont.begin(), cont.begin() + 10);
  EXPECT_EQ(half.Propose(ctx, 3), std::vector<int>(a.begin() + 10, a.begin() + 13));
  OracleDrafter all(cont, 1.0), none(cont, 0.0);
  all.Begin(prompt);
  none.Begin(prompt);
  EXPECT_EQ(all.Propose(prompt, 5), std::vector<int>(cont.begin(), cont.begin() + 5));
  const std::vector<int> wrong = none.Propose(prompt, 5);
  for (size_t i = 0; i < wrong.size(); ++i) EXPECT_NE(wrong[i], cont[i]);
  // Past the recorded continuation: nothing.
  std::vector<int> end = prompt;
  end.insert(end.end(), cont.begin(), cont.end());
  EXPECT_TRUE(all.Propose(end, 5).empty());
}

TEST(Drafter, SpecsParse) {
  EXPECT_EQ(ParseDrafterSpec("off")->kind, DrafterSpec::Kind::kOff);
  EXPECT_EQ(ParseDrafterSpec("ngram")->kind, DrafterSpec::Kind::kNgram);
  auto o = ParseDrafterSpec("oracle:0.8");
  ASSERT_TRUE(o.ok());
  EXPECT_EQ(o->kind, DrafterSpec::Kind::kOracle);
  EXPECT_DOUBLE_EQ(o->p, 0.8);
  for (const char* bad : {"oracle:", "oracle:1.5", "oracle:x", "oracle:-0.1", "dflash", "ngram2"})
    EXPECT_FALSE(ParseDrafterSpec(bad).ok()) << bad;
  EXPECT_EQ(MakeDrafter(*ParseDrafterSpec("off")), nullptr);
  EXPECT_EQ(MakeDrafter(*ParseDrafterSpec("ngram"))->name(), "ngram");
  EXPECT_EQ(MakeDrafter(*o, {1, 2})->name(), "oracle:0.8");
}

}  // namespace
}  // namespace rw
