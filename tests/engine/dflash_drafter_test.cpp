// The DFlash drafter in Generate on a tiny synthetic target (window 16) with a random drafter of
// the published structure (q4, as installed): speculative output is plain decoding's token for
// token (greedy, 20 sampling seeds, prompts past both windows, max_new at block boundaries), the
// drafter is fed the target's hidden state of every kept position, and a drafter that does not
// fit the model is refused with a clear error.
#include <gtest/gtest.h>
#include <unistd.h>

#include <map>
#include <string>
#include <vector>

#include "base/file.h"
#include "engine/drafter.h"
#include "engine/drafter_dflash.h"
#include "engine/engine.h"
#include "engine/generate.h"
#include "install/synth.h"
#include "install/synth_drafter.h"
#include "model/parity_util.h"

namespace rw {
namespace {

constexpr int64_t kChunk = 16, kContext = 256;
constexpr int kDraft = 15;  // a whole block: verify calls of 16 = kChunk

struct Tiny {
  std::shared_ptr<Engine> engine;
  std::string drafter_dir;
};

const Tiny& Get() {
  static Tiny t = [] {
    Tiny t;
    EngineOptions o;
    o.model_dir = test::TinySynthModel("dflash_drafter", 31);
    o.threads = 2;
    o.max_context = kContext;
    o.prefill_chunk = kChunk;
    o.load_tokenizer = false;
    auto e = Engine::Load(o);
    EXPECT_TRUE(e.ok()) << e.status().ToString();
    if (e.ok()) t.engine = *e;
    DrafterSynthOptions d;
    d.seed = 5;
    d.out_dir = JoinPath(o.model_dir, "drafter");  // where `run` finds it by default
    d.overwrite = true;
    Status st = SynthesizeDrafter(t.engine->config(), d);
    EXPECT_TRUE(st.ok()) << st.ToString();
    t.drafter_dir = d.out_dir;
    return t;
  }();
  return t;
}

std::shared_ptr<Drafter> NewDrafter() {
  auto d = MakeDFlashDrafter(Get().drafter_dir, *Get().engine);
  EXPECT_TRUE(d.ok()) << d.status().ToString();
  return d.ok() ? *d : nullptr;
}

// 42 tokens: past the target's window (16) and the drafter's (the same).
std::vector<int> Prompt(int salt = 0) {
  std::vector<int> p = {2};
  for (int i = 0; i < 41; ++i) p.push_back((i * 53 + salt * 29 + 11) % 500 + 5);
  return p;
}

GenerateOptions Options(int64_t max_new, float temperature = 0, uint64_t seed = 0) {
  GenerateOptions o;
  o.sampling.temperature = temperature;
  o.sampling.seed = seed;
  o.max_new_tokens = max_new;
  return o;
}

struct Outcome {
  GenerateResult r;
  std::vector<int> timeline;
};

Outcome Generated(const std::vector<int>& prompt, const GenerateOptions& o) {
  auto s = Get().engine->NewSession();
  SessionTimeline t(*s);
  auto r = Generate(t, nullptr, prompt, o);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return {r.ok() ? *r : GenerateResult{}, s->tokens()};
}

// Returns the drafts verified.
int64_t ExpectSameAsPlain(const std::vector<int>& prompt, GenerateOptions o,
                          const std::string& what) {
  const Outcome plain = Generated(prompt, o);
  o.drafter = NewDrafter();
  o.draft_tokens = kDraft;
  const Outcome spec = Generated(prompt, o);
  EXPECT_EQ(spec.r.ids, plain.r.ids) << what;
  EXPECT_EQ(spec.r.finish, plain.r.finish) << what;
  EXPECT_EQ(spec.timeline, plain.timeline) << what;
  EXPECT_LE(static_cast<int64_t>(spec.r.ids.size()), o.max_new_tokens) << what;
  return spec.r.drafted;
}

TEST(DFlashDrafter, GreedyOutputIsPlainDecodingsTokenForToken) {
  ASSERT_NE(Get().engine, nullptr);
  int64_t drafted = 0;
  for (int salt = 0; salt < 3; ++salt)
    drafted += ExpectSameAsPlain(Prompt(salt), Options(40), "greedy " + std::to_string(salt));
  EXPECT_GT(drafted, 0);
}

TEST(DFlashDrafter, SampledOutputIsPlainDecodingsForEverySeed) {
  ASSERT_NE(Get().engine, nullptr);
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    GenerateOptions o = Options(24, seed % 2 ? 1.0f : 0.7f, seed);
    if (seed % 3 == 1) o.sampling.top_k = 20;
    if (seed % 3 == 2) o.sampling.top_p = 0.9f;
    if (seed % 5 == 0) o.sampling.min_p = 0.05f;
    ExpectSameAsPlain(Prompt(static_cast<int>(seed)), o, "seed " + std::to_string(seed));
  }
}

TEST(DFlashDrafter, MaxNewIsNeverExceededAtBlockBoundaries) {
  ASSERT_NE(Get().engine, nullptr);
  for (const int64_t max_new : {0, 1, 2, 14, 15, 16, 17, 33})
    ExpectSameAsPlain(Prompt(), Options(max_new), "max_new " + std::to_string(max_new));
  // Sampled across a boundary too.
  ExpectSameAsPlain(Prompt(4), Options(17, 0.9f, 3), "max_new 17, sampled");
}

// What Generate hands a drafter that reads hidden states: every position of the final timeline
// exactly once in order (prefill chunks, then the last token and accepted drafts of each
// verify), each row the target's residual after the asked layers, as a plain prefill of the
// same tokens captures it. The oracle's drafts are accepted at rate 0.7, so verify steps keep
// several rows.
class RecordingDrafter final : public Drafter {
 public:
  RecordingDrafter(std::vector<int> continuation, std::vector<int> layers)
      : oracle_(std::move(continuation), 0.7, 3), layers_(std::move(layers)) {}
  std::string name() const override { return "recording"; }
  void Begin(std::span<const int> prompt) override { oracle_.Begin(prompt); }
  std::vector<int> Propose(std::span<const int> ctx, int n) override {
    return oracle_.Propose(ctx, n);
  }
  std::vector<int> layers() const override { return layers_; }
  void Context(int64_t pos0, const float* rows, int64_t n) override {
    const size_t width = static_cast<size_t>(row_width);
    for (int64_t i = 0; i < n; ++i) {
      positions.push_back(pos0 + i);
      this->rows.insert(this->rows.end(), rows + i * width, rows + (i + 1) * width);
    }
  }
  int64_t row_width = 0;
  std::vector<int64_t> positions;
  std::vector<float> rows;

 private:
  OracleDrafter oracle_;
  std::vector<int> layers_;
};

TEST(DFlashDrafter, GenerateFeedsTheHiddenStatesOfEveryKeptPosition) {
  const std::shared_ptr<Engine>& e = Get().engine;
  ASSERT_NE(e, nullptr);
  const std::vector<int> layers = {1, 4};
  const Outcome plain = Generated(Prompt(), Options(40, 0.8f, 9));
  auto d = std::make_shared<RecordingDrafter>(plain.r.ids, layers);
  d->row_width = static_cast<int64_t>(layers.size()) * e->config().hidden_size;
  GenerateOptions o = Options(40, 0.8f, 9);
  o.drafter = d;
  o.draft_tokens = 6;
  const Outcome spec = Generated(Prompt(), o);
  ASSERT_EQ(spec.r.ids, plain.r.ids);
  ASSERT_GT(spec.r.accepted, 3) << "verify steps should keep several rows";
  // Every position that was run and kept: the timeline as Generate left it, plus positions a
  // final block ran past (fed before the cut). In order, each once.
  ASSERT_GE(d->positions.size(), spec.timeline.size());
  for (size_t i = 0; i < d->positions.size(); ++i) ASSERT_EQ(d->positions[i], int64_t(i));

  // The same rows from one plain prefill of those tokens.
  std::vector<int> tokens = Prompt();
  tokens.insert(tokens.end(), spec.r.ids.begin(), spec.r.ids.end());
  tokens.resize(d->positions.size());
  auto s = e->NewSession();
  ASSERT_TRUE(s->backend()->SetCapture(layers).ok());
  ASSERT_TRUE(s->Prefill(tokens).ok());
  const HiddenCapture& cap = s->backend()->capture();
  ASSERT_EQ(cap.rows.size(), d->rows.size());
  for (size_t p = 0; p < tokens.size(); ++p) {
    const size_t w = static_cast<size_t>(d->row_width);
    EXPECT_LE(test::RelErr(&d->rows[p * w], &cap.rows[p * w], w), 1e-4) << "position " << p;
  }
}

TEST(DFlashDrafter, ItsContextFollowsTheTimeline) {
  ASSERT_NE(Get().engine, nullptr);
  auto d = MakeDFlashDrafter(Get().drafter_dir, *Get().engine);
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  // Short enough that the sliding ring still holds the prompt's last window afterwards.
  GenerateOptions o = Options(8);
  o.drafter = *d;
  o.draft_tokens = kDraft;
  auto s = Get().engine->NewSession();
  SessionTimeline t(*s);
  auto r = Generate(t, nullptr, Prompt(), o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_GT(r->verify_calls, 0);
  // The context reaches the last position run (at most the timeline, which may have been cut
  // back past a final block's rows: the next Propose truncates to it).
  EXPECT_GE((*d)->state().context_end(), static_cast<int64_t>(s->tokens().size()));
  // A second generation on the same session reuses the prompt's cached prefix: the drafter
  // drops what came after it and goes on from there.
  std::vector<int> longer = Prompt();
  longer.push_back(77);
  r = Generate(t, nullptr, longer, o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->reused_tokens, static_cast<int64_t>(Prompt().size()));
  const Outcome plain = Generated(longer, Options(8));
  EXPECT_EQ(r->ids, plain.r.ids);
}

TEST(DFlashDrafter, SpecNamesADirectoryAndAMisfitIsRefused) {
  ASSERT_NE(Get().engine, nullptr);
  auto spec = ParseDrafterSpec(Get().drafter_dir);
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  EXPECT_EQ(spec->kind, DrafterSpec::Kind::kDFlash);
  EXPECT_EQ(spec->path, Get().drafter_dir);
  EXPECT_EQ(MakeDrafter(*spec), nullptr);
  auto bad = ParseDrafterSpec("no-such-dir-for-a-drafter");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("drafter directory"), std::string::npos);
  EXPECT_EQ(DefaultDrafterDir(ParentPath(Get().drafter_dir)), Get().drafter_dir);

  // A drafter made for the small geometry (hidden 512) does not fit the tiny model (128).
  const std::string other =
      JoinPath(REDWING_BUILD_DIR, "test_tmp/dflash_drafter/misfit." + std::to_string(getpid()));
  auto small = SynthGeometry("small");
  ASSERT_TRUE(small.ok());
  DrafterSynthOptions d;
  d.seed = 1;
  d.out_dir = other;
  d.overwrite = true;
  d.quantize = "q8";
  ASSERT_TRUE(SynthesizeDrafter(*small, d).ok());
  auto m = MakeDFlashDrafter(other, *Get().engine);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("hidden size 512 differs from the model's 128"),
            std::string::npos)
      << m.status().ToString();
  // Not a drafter directory at all.
  auto none = MakeDFlashDrafter(ParentPath(Get().drafter_dir), *Get().engine);
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.status().message().find("not a drafter directory"), std::string::npos);
  (void)RemoveAll(other);
}

}  // namespace
}  // namespace rw
