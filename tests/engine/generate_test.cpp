// The generation loop against a scripted timeline (a mock decoder whose logits follow a script):
// stops, limits, prefix reuse, chunked prefill, cancellation, stop strings.
#include <gtest/gtest.h>

#include "base/json.h"
#include "engine/generate.h"
#include "engine/vocab_tokenizer.h"

namespace rw {
namespace {

constexpr int kVocab = 19;  // <pad> <eos> <bos> a..p

// Ids 3.. are the letters a, b, c, ...
Tokenizer Letters() {
  Json vocab = Json::object();
  const char* specials[] = {"<pad>", "<eos>", "<bos>"};
  for (int i = 0; i < 3; ++i) vocab[specials[i]] = i;
  for (int i = 3; i < kVocab; ++i) vocab[std::string(1, static_cast<char>('a' + i - 3))] = i;
  Json added = Json::array();
  for (int i = 0; i < 3; ++i)
    added.push_back({{"id", i},
                     {"content", specials[i]},
                     {"single_word", false},
                     {"lstrip", false},
                     {"rstrip", false},
                     {"normalized", false},
                     {"special", true}});
  return test::VocabTokenizer(vocab, added, "letters.json");
}

// Logits make script[position % size] the clear favourite at every position.
class ScriptedTimeline final : public TokenTimeline {
 public:
  ScriptedTimeline(std::vector<int> script, int64_t max_context, int64_t chunk)
      : script_(std::move(script)), max_context_(max_context), chunk_(chunk) {}
  Result<std::vector<float>> Append(std::span<const int> ids,
                                    const std::atomic<bool>* /*cancel*/) override {
    appends.push_back(static_cast<int64_t>(ids.size()));
    tokens_.insert(tokens_.end(), ids.begin(), ids.end());
    std::vector<float> logits(kVocab, 0.0f);
    logits[script_[tokens_.size() % script_.size()]] = 20.0f;
    return logits;
  }
  const std::vector<int>& tokens() const override { return tokens_; }
  bool CanRewind(int64_t pos) const override { return pos >= rewind_floor; }
  Status Rewind(int64_t pos) override {
    tokens_.resize(static_cast<size_t>(pos));
    return Status::Ok();
  }
  void Reset() override {
    tokens_.clear();
    ++resets;
  }
  int64_t max_context() const override { return max_context_; }
  int64_t chunk() const override { return chunk_; }

  std::vector<int64_t> appends;
  int resets = 0;
  int64_t rewind_floor = 0;

 private:
  std::vector<int> script_;
  std::vector<int> tokens_;
  int64_t max_context_, chunk_;
};

GenerateOptions Greedy(int64_t max_new) {
  GenerateOptions o;
  o.sampling.temperature = 0;
  o.max_new_tokens = max_new;
  o.stop_ids = {1};
  return o;
}

TEST(Generate, FollowsTheLogitsAndStopsAtAStopIdWithoutPrintingIt) {
  Tokenizer tok = Letters();
  // Position p's logits come after p+1 tokens: after the 3-token prompt, positions 3.. of the
  // script: c, a, b, <eos>.
  ScriptedTimeline t({0, 0, 0, 5, 3, 4, 1, 6}, 100, 8);
  std::string streamed;
  GenerateCallbacks cb;
  cb.on_text = [&](std::string_view s) {
    streamed += s;
    return true;
  };
  auto r = Generate(t, &tok, std::vector<int>{2, 3, 4}, Greedy(50), cb);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->ids, (std::vector<int>{5, 3, 4}));
  EXPECT_EQ(r->finish, FinishReason::kStop);
  EXPECT_EQ(r->stop_id, 1);
  EXPECT_EQ(r->text, "cab");
  EXPECT_EQ(streamed, "cab");
  // The stop id is never run through the model.
  EXPECT_EQ(t.tokens(), (std::vector<int>{2, 3, 4, 5, 3, 4}));
}

TEST(Generate, TokenLimitAndContextLimit) {
  Tokenizer tok = Letters();
  ScriptedTimeline t({3}, 100, 8);
  auto r = Generate(t, &tok, std::vector<int>{2}, Greedy(5));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->ids.size(), 5u);
  EXPECT_EQ(r->finish, FinishReason::kLength);
  EXPECT_EQ(r->text, "aaaaa");

  ScriptedTimeline small({3}, 6, 8);
  r = Generate(small, &tok, std::vector<int>{2, 3, 3, 3}, Greedy(100));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->ids.size(), 2u) << "a 6-token context leaves room for 2 after a 4-token prompt";
  EXPECT_EQ(r->finish, FinishReason::kLength);

  auto full = Generate(small, &tok, std::vector<int>{2, 3, 3, 3, 3, 3}, Greedy(1));
  ASSERT_FALSE(full.ok());
  EXPECT_EQ(full.status().code(), ErrorCode::kOutOfRange);
  EXPECT_NE(full.status().message().find("--max-context"), std::string::npos);
}

TEST(Generate, PrefillRunsInChunksAndReusesTheSharedPrefix) {
  ScriptedTimeline t({3}, 1000, 4);
  std::vector<int> prompt(10, 3);
  prompt[0] = 2;
  auto r = Generate(t, nullptr, prompt, Greedy(2));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->reused_tokens, 0);
  EXPECT_EQ(t.appends, (std::vector<int64_t>{4, 4, 2, 1}));  // 3 prefill chunks, 1 decode
  // The timeline holds the prompt and the first generated token (the second was never run).
  ASSERT_EQ(t.tokens().size(), 11u);

  // A longer prompt starting with everything so far: only the rest is prefilled.
  std::vector<int> next = t.tokens();
  next.push_back(3);
  next.push_back(4);
  next.push_back(4);
  t.appends.clear();
  r = Generate(t, nullptr, next, Greedy(1));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->reused_tokens, 11);
  EXPECT_EQ(t.appends, (std::vector<int64_t>{3}));
  EXPECT_EQ(t.resets, 0);

  // An identical prompt reruns only its last token.
  std::vector<int> same(t.tokens().begin(), t.tokens().end());
  t.appends.clear();
  r = Generate(t, nullptr, same, Greedy(1));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->reused_tokens, static_cast<int64_t>(same.size()) - 1);
  EXPECT_EQ(t.appends, (std::vector<int64_t>{1}));

  // A prompt that diverges early keeps the common part; one that cannot rewind starts over.
  std::vector<int> diverge = {2, 3, 3, 9};
  r = Generate(t, nullptr, diverge, Greedy(1));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->reused_tokens, 3);
  t.rewind_floor = 1000;
  r = Generate(t, nullptr, std::vector<int>{2, 3, 5}, Greedy(1));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->reused_tokens, 0);
  EXPECT_EQ(t.resets, 1);
}

TEST(Generate, CancellationStopsPrefillAndDecode) {
  Tokenizer tok = Letters();
  ScriptedTimeline t({3}, 1000, 2);
  std::atomic<bool> cancel{true};
  GenerateCallbacks cb;
  cb.cancel = &cancel;
  auto r = Generate(t, &tok, std::vector<int>(9, 3), Greedy(10), cb);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->finish, FinishReason::kCancelled);
  EXPECT_TRUE(r->ids.empty());
  EXPECT_TRUE(t.appends.empty());

  // on_text returning false cancels after that token.
  ScriptedTimeline t2({3}, 1000, 8);
  GenerateCallbacks cb2;
  int calls = 0;
  cb2.on_text = [&](std::string_view) { return ++calls < 3; };
  r = Generate(t2, &tok, std::vector<int>{2}, Greedy(10), cb2);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->finish, FinishReason::kCancelled);
  EXPECT_EQ(r->ids.size(), 3u);
}

TEST(Generate, StopStringsEndTheTextAcrossTokens) {
  Tokenizer tok = Letters();
  // a b c d a b c d ...: stop at "cd" which spans two tokens.
  ScriptedTimeline t({3, 4, 5, 6}, 1000, 8);
  GenerateOptions o = Greedy(20);
  o.stop_strings = {"cd"};
  std::string streamed;
  GenerateCallbacks cb;
  cb.on_text = [&](std::string_view s) {
    streamed += s;
    return true;
  };
  auto r = Generate(t, &tok, std::vector<int>{2}, o, cb);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->finish, FinishReason::kStop);
  EXPECT_EQ(r->stop_string, "cd");
  EXPECT_EQ(r->text, "b");
  EXPECT_EQ(streamed, "b");

  auto none = Generate(t, nullptr, std::vector<int>{2}, o);
  EXPECT_FALSE(none.ok()) << "stop strings without a tokenizer must be refused";
}

// A timeline without a verify of its own verifies by appending one token at a time; speculation
// over it emits what plain decoding emits, stops inside an accepted block included, and leaves
// the timeline as plain decoding does.
TEST(Generate, SpeculationOverTheDefaultVerify) {
  Tokenizer tok = Letters();
  const std::vector<int> script = {3, 4, 5, 6, 7, 3, 4, 5, 6, 7, 8, 9};
  const std::vector<int> prompt = {2, 3, 4, 5, 6, 7, 3, 4};
  for (const bool stop : {false, true}) {
    GenerateOptions o = Greedy(30);
    if (stop) o.stop_strings = {"fg"};  // ids 8, 9: late in the script
    ScriptedTimeline plain_t(script, 1000, 8);
    auto plain = Generate(plain_t, &tok, prompt, o);
    ASSERT_TRUE(plain.ok());
    EXPECT_EQ(plain->finish, stop ? FinishReason::kStop : FinishReason::kLength);
    o.drafter = std::make_shared<NgramDrafter>(3, 1);
    o.draft_tokens = 5;
    ScriptedTimeline spec_t(script, 1000, 8);
    auto spec = Generate(spec_t, &tok, prompt, o);
    ASSERT_TRUE(spec.ok()) << spec.status().ToString();
    EXPECT_EQ(spec->ids, plain->ids);
    EXPECT_EQ(spec->text, plain->text);
    EXPECT_EQ(spec->finish, plain->finish);
    EXPECT_EQ(spec_t.tokens(), plain_t.tokens());
    EXPECT_GT(spec->accepted, 0) << "the script repeats: lookup should guess right";
    EXPECT_LT(spec->verify_calls, plain->decoded_tokens);
  }
}

TEST(Generate, BadOptionsAreRefused) {
  ScriptedTimeline t({3}, 100, 8);
  GenerateOptions o = Greedy(5);
  o.sampling.top_p = 0;
  EXPECT_FALSE(Generate(t, nullptr, std::vector<int>{2}, o).ok());
  EXPECT_FALSE(Generate(t, nullptr, std::vector<int>{}, Greedy(5)).ok());
  EXPECT_FALSE(Generate(t, nullptr, std::vector<int>{2}, Greedy(-1)).ok());
}

}  // namespace
}  // namespace rw
