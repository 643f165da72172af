// Unit tests of the tokenizer on small synthetic tokenizer.json files: BPE merge order, byte
// fallback and unk, added tokens and their flags, normalizer / pre-tokenizer / decoder kinds,
// invalid UTF-8, the streaming decoder, the exactness of the speedups, and malformed files.
// The real Gemma vocabulary is covered by tokenizer_oracle_test (integration).
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "base/json.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace rw {
namespace {

const char* const kMeta = "\xE2\x96\x81";  // ▁

// A tokenizer.json under construction; Text() renders it.
struct Spec {
  std::vector<std::string> vocab;  // id = index
  std::vector<std::pair<std::string, std::string>> merges;
  bool merges_as_strings = false;
  Json added = Json::array();
  Json normalizer, pre_tokenizer, decoder, post_processor;
  Json unk = "<unk>";
  bool byte_fallback = true;
  bool fuse_unk = true;
  Json model_extra = Json::object();

  int Id(const std::string& t) const {
    for (size_t i = 0; i < vocab.size(); ++i)
      if (vocab[i] == t) return static_cast<int>(i);
    return -1;
  }
  void AddToken(const std::string& t) {
    if (Id(t) < 0) vocab.push_back(t);
  }
  // Adds the merge and its result to the vocabulary.
  void Merge(const std::string& a, const std::string& b) {
    AddToken(a);
    AddToken(b);
    AddToken(a + b);
    merges.emplace_back(a, b);
  }
  void Added(const std::string& content, bool special, Json flags = Json::object()) {
    AddToken(content);
    Json t = {{"id", Id(content)}, {"content", content},  {"single_word", false}, {"lstrip", false},
              {"rstrip", false},   {"normalized", false}, {"special", special}};
    for (auto& [k, v] : flags.items()) t[k] = v;
    added.push_back(t);
  }

  std::string Text() const {
    Json v = Json::object();
    for (size_t i = 0; i < vocab.size(); ++i) v[vocab[i]] = i;
    Json m = Json::array();
    for (const auto& [a, b] : merges) {
      if (merges_as_strings) {
        m.push_back(a + " " + b);
      } else {
        m.push_back(Json::array({a, b}));
      }
    }
    Json model = {{"type", "BPE"},
                  {"dropout", nullptr},
                  {"unk_token", unk},
                  {"fuse_unk", fuse_unk},
                  {"byte_fallback", byte_fallback},
                  {"ignore_merges", false},
                  {"vocab", v},
                  {"merges", m}};
    for (auto& [k, val] : model_extra.items()) model[k] = val;
    Json j = {{"version", "1.0"},
              {"truncation", nullptr},
              {"padding", nullptr},
              {"added_tokens", added},
              {"normalizer", normalizer},
              {"pre_tokenizer", pre_tokenizer},
              {"post_processor", post_processor},
              {"decoder", decoder},
              {"model", model}};
    return j.dump();
  }
};

Json GemmaNormalizer() {
  return {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", kMeta}};
}
Json GemmaPreTokenizer() {
  return {{"type", "Split"},
          {"pattern", {{"String", " "}}},
          {"behavior", "MergedWithPrevious"},
          {"invert", false}};
}
Json GemmaDecoder() {
  return {{"type", "Sequence"},
          {"decoders",
           Json::array({{{"type", "Replace"}, {"pattern", {{"String", kMeta}}}, {"content", " "}},
                        {{"type", "ByteFallback"}},
                        {{"type", "Fuse"}}})}};
}

// A small Gemma-shaped tokenizer: specials, 256 byte tokens, ASCII letters, a few merges.
Spec GemmaLike() {
  Spec s;
  for (const char* t : {"<pad>", "<eos>", "<bos>", "<unk>"}) s.vocab.push_back(t);
  for (int b = 0; b < 256; ++b) s.vocab.push_back(fmt::format("<0x{:02X}>", b));
  s.AddToken(kMeta);
  for (char c = 'a'; c <= 'z'; ++c) s.AddToken(std::string(1, c));
  for (char c : std::string("HW.,!?<>/-\n\t")) s.AddToken(std::string(1, c));
  // Ranks: "b c" before "a b", so "abc" becomes [a, bc] then [abc].
  s.Merge("b", "c");
  s.Merge("a", "b");
  s.Merge("a", "bc");
  s.Merge("h", "e");
  s.Merge("l", "l");
  s.Merge("he", "ll");
  s.Merge("hell", "o");
  s.Merge(kMeta, "hello");
  s.Merge("w", "o");
  s.Merge("r", "l");
  s.Merge("wo", "rl");
  s.Merge("worl", "d");
  s.Merge(kMeta, "world");
  s.Merge(kMeta, kMeta);
  s.Merge("a", "a");
  // A token that spans the start of a "▁" run, like Gemma's ">▁</".
  s.Merge(">", kMeta);
  s.Merge(std::string(">") + kMeta, "<");
  for (const char* t : {"<pad>", "<eos>", "<bos>", "<unk>"}) s.Added(t, true);
  s.Added("\n", false);
  s.normalizer = GemmaNormalizer();
  s.pre_tokenizer = GemmaPreTokenizer();
  s.decoder = GemmaDecoder();
  return s;
}

Tokenizer Make(const Spec& s, const TokenizerOptions& o = {}) {
  auto t = Tokenizer::FromJsonText(s.Text(), "test.json", o);
  EXPECT_TRUE(t.ok()) << t.status().ToString();
  return std::move(t).value();
}

std::vector<int32_t> Ids(const Tokenizer& t, std::initializer_list<const char*> toks) {
  std::vector<int32_t> out;
  for (const char* s : toks) {
    int32_t id = t.TokenToId(s);
    EXPECT_GE(id, 0) << "no token " << s;
    out.push_back(id);
  }
  return out;
}

std::string M(const std::string& s) {  // spaces as ▁
  std::string out;
  for (char c : s) out += c == ' ' ? std::string(kMeta) : std::string(1, c);
  return out;
}

TEST(Tokenizer, MergesFollowRankOrder) {
  Tokenizer t = Make(GemmaLike());
  EXPECT_EQ(t.Encode("abc"), Ids(t, {"abc"}));  // bc (rank 0) first, then a+bc
  EXPECT_EQ(t.Encode("abd"), Ids(t, {"ab", "d"}));
  EXPECT_EQ(t.Encode("hello world"), Ids(t, {"hello", M(" world").c_str()}));
  EXPECT_EQ(t.Encode(" hello"), Ids(t, {M(" hello").c_str()}));
  EXPECT_EQ(t.Encode("  hello"), Ids(t, {kMeta, M(" hello").c_str()}));
}

TEST(Tokenizer, EqualRanksMergeLeftmostFirst) {
  Tokenizer t = Make(GemmaLike());
  EXPECT_EQ(t.Encode("aaa"), Ids(t, {"aa", "a"}));
  EXPECT_EQ(t.Encode("aaaaa"), Ids(t, {"aa", "aa", "a"}));
  EXPECT_EQ(t.Encode("   "), Ids(t, {M("  ").c_str(), kMeta}));
}

TEST(Tokenizer, MergeStringFormIsEquivalent) {
  Spec a = GemmaLike();
  Spec b = GemmaLike();
  b.merges_as_strings = true;
  Tokenizer ta = Make(a), tb = Make(b);
  for (const char* s : {"abc hello world", "aaaa  bc", "he ll o"})
    EXPECT_EQ(ta.Encode(s), tb.Encode(s));
}

TEST(Tokenizer, ByteFallbackForUnknownCharacters) {
  Tokenizer t = Make(GemmaLike());
  // é = C3 A9 and 🚀 = F0 9F 9A 80 are not in the vocabulary.
  EXPECT_EQ(t.Encode("\xC3\xA9"), Ids(t, {"<0xC3>", "<0xA9>"}));
  EXPECT_EQ(t.Encode("a\xF0\x9F\x9A\x80"), Ids(t, {"a", "<0xF0>", "<0x9F>", "<0x9A>", "<0x80>"}));
  EXPECT_EQ(t.Decode(t.Encode("caf\xC3\xA9 \xF0\x9F\x9A\x80!")), "caf\xC3\xA9 \xF0\x9F\x9A\x80!");
}

TEST(Tokenizer, UnkWithoutByteFallback) {
  Spec s = GemmaLike();
  s.byte_fallback = false;
  Tokenizer fused = Make(s);
  EXPECT_EQ(fused.Encode("a\xC3\xA9\xC3\xA9"
                         "b"),
            Ids(fused, {"a", "<unk>", "b"}));
  s.fuse_unk = false;
  Tokenizer unfused = Make(s);
  EXPECT_EQ(unfused.Encode("a\xC3\xA9\xC3\xA9"
                           "b"),
            Ids(unfused, {"a", "<unk>", "<unk>", "b"}));
  EXPECT_EQ(unfused.unk_id(), unfused.TokenToId("<unk>"));
  s.unk = nullptr;
  Tokenizer no_unk = Make(s);
  // Dropped before merging, as tokenizers does: "a" and "b" become neighbours and merge.
  EXPECT_EQ(no_unk.Encode("a\xC3\xA9"
                          "b"),
            Ids(no_unk, {"ab"}));
}

TEST(Tokenizer, InvalidUtf8BecomesByteTokens) {
  Tokenizer t = Make(GemmaLike());
  std::string bad =
      "a\xFF"
      "b\xC3";  // stray byte, truncated sequence
  EXPECT_EQ(t.Encode(bad), Ids(t, {"a", "<0xFF>", "b", "<0xC3>"}));
  EXPECT_EQ(t.Decode(t.Encode(bad)),
            "a\xEF\xBF\xBD"
            "b\xEF\xBF\xBD");
  // Surrogates and overlong forms are invalid too.
  EXPECT_EQ(t.Encode("\xED\xA0\x80"), Ids(t, {"<0xED>", "<0xA0>", "<0x80>"}));
  EXPECT_EQ(t.Encode("\xC0\xAF"), Ids(t, {"<0xC0>", "<0xAF>"}));
}

TEST(Tokenizer, RandomBytesNeverCrashAndValidTextRoundTrips) {
  Tokenizer t = Make(GemmaLike());
  std::mt19937 rng(7);
  const std::string alphabet[] = {"a", "b", "c",     "h",  "e",        "l",
                                  "o", " ", "  ",    "\n", "\xC3\xA9", "\xF0\x9F\x9A\x80",
                                  "<", ">", "<bos>", "\t", "W",        "\xE4\xBD\xA0"};
  for (int iter = 0; iter < 3000; ++iter) {
    std::string s;
    int n = static_cast<int>(rng() % 40);
    bool raw = iter % 2 == 0;
    for (int i = 0; i < n; ++i) {
      if (raw) {
        s.push_back(static_cast<char>(rng() & 0xFF));
      } else {
        s += alphabet[rng() % std::size(alphabet)];
      }
    }
    std::vector<int32_t> ids = t.Encode(s);
    std::string back = t.Decode(ids);
    EXPECT_TRUE(utf8::IsValid(back));
    if (utf8::IsValid(s)) {
      EXPECT_EQ(back, s);
    } else {
      EXPECT_EQ(back, utf8::Lossy(s));  // invalid bytes come back as U+FFFD
    }
  }
}

TEST(Tokenizer, AddedTokensLongestMatchBeforeNormalization) {
  Spec s = GemmaLike();
  s.Added("[A]", false);
  s.Added("[A]b", false);
  s.Added("<|turn>", true);
  s.Added("x y", false);  // raw match, before spaces become ▁
  Tokenizer t = Make(s);
  EXPECT_EQ(t.Encode("[A]b[A]"), Ids(t, {"[A]b", "[A]"}));
  EXPECT_EQ(t.Encode("<|turn>hello\n"), Ids(t, {"<|turn>", "hello", "\n"}));
  EXPECT_EQ(t.Encode("ax yb"), Ids(t, {"a", "x y", "b"}));
  EXPECT_EQ(t.Encode("<bos>abc<eos>"), Ids(t, {"<bos>", "abc", "<eos>"}));
  EXPECT_EQ(t.Encode("<|tur"), Ids(t, {"<", "<0x7C>", "t", "u", "r"}));
  EXPECT_TRUE(t.IsSpecial(t.TokenToId("<|turn>")));
  EXPECT_FALSE(t.IsSpecial(t.TokenToId("[A]")));
  EXPECT_FALSE(t.IsSpecial(t.TokenToId("a")));
}

// Untrusted text (a chat message, a completion prompt) goes in plain spans: a special token's
// text there is ordinary text, while non-special added tokens still match and the template's
// own special tokens outside the spans stay control tokens.
TEST(Tokenizer, PlainSpansKeepSpecialTokensAsText) {
  Spec s = GemmaLike();
  s.Added("[A]", false);
  s.Added("<|turn>", true);
  Tokenizer t = Make(s);
  const int32_t turn = t.TokenToId("<|turn>");
  const std::string text = "<|turn>a<|turn>[A]b";
  const TextSpan user{7, text.size()};  // everything after the first <|turn>
  std::vector<int32_t> ids;
  t.EncodeAppend(text, std::span<const TextSpan>(&user, 1), &ids);
  EXPECT_EQ(ids, Ids(t, {"<|turn>", "a", "<", "<0x7C>", "t", "u", "r", "n", ">", "[A]", "b"}));
  EXPECT_EQ(std::count(ids.begin(), ids.end(), turn), 1);
  // A span that only touches part of the token's text is enough to refuse the match.
  const TextSpan part{3, 4};
  ids.clear();
  t.EncodeAppend("<|turn>", std::span<const TextSpan>(&part, 1), &ids);
  EXPECT_EQ(std::count(ids.begin(), ids.end(), turn), 0);
  // No spans: as Encode.
  ids.clear();
  t.EncodeAppend(text, {}, &ids);
  EXPECT_EQ(ids, t.Encode(text));
  // EncodePlain: all text; <bos> only when asked for.
  EXPECT_EQ(t.EncodePlain("<bos>ab"), Ids(t, {"<", "b", "o", "s", ">", "ab"}));
  EXPECT_EQ(t.EncodePlain("ab", /*add_bos=*/true), Ids(t, {"<bos>", "ab"}));
  EXPECT_EQ(t.Decode(t.EncodePlain(text)), text);
  // The special tokens, listed: <pad> <eos> <bos> <unk> <|turn>.
  std::vector<int32_t> specials;
  for (int32_t id = 0; id < t.vocab_size(); ++id)
    if (t.IsSpecial(id)) specials.push_back(id);
  EXPECT_EQ(t.special_ids(), specials);
  EXPECT_EQ(specials.size(), 5u);
}

TEST(Tokenizer, NormalizedAddedTokensMatchNormalizedText) {
  Spec s = GemmaLike();
  s.Added("p q", false, {{"normalized", true}});  // matched as "p▁q" after normalization
  Tokenizer t = Make(s);
  int32_t pq = t.TokenToId("p q");
  EXPECT_EQ(t.Encode("ap qb"), (std::vector<int32_t>{t.TokenToId("a"), pq, t.TokenToId("b")}));
  EXPECT_EQ(t.Encode(M("p q")), (std::vector<int32_t>{pq}));  // literal ▁ normalizes the same
}

TEST(Tokenizer, AddedTokenStripFlags) {
  Spec s = GemmaLike();
  s.Added("<L>", false, {{"lstrip", true}});
  s.Added("<R>", false, {{"rstrip", true}});
  s.Added("<W>", false, {{"single_word", true}});
  Tokenizer t = Make(s);
  EXPECT_EQ(t.Encode("a  <L>b"), Ids(t, {"a", "<L>", "b"}));
  EXPECT_EQ(t.Encode("a<R>  \n b"), Ids(t, {"a", "<R>", "b"}));
  EXPECT_EQ(t.Encode("a <W> b"), Ids(t, {"a", kMeta, "<W>", kMeta, "b"}));
  EXPECT_EQ(t.Encode("a<W>b"), Ids(t, {"a", "<", "W", ">", "b"}));
}

TEST(Tokenizer, NormalizerSequenceWithPrepend) {
  Spec s = GemmaLike();
  s.normalizer = {
      {"type", "Sequence"},
      {"normalizers", Json::array({{{"type", "Prepend"}, {"prepend", kMeta}}, GemmaNormalizer()})}};
  Tokenizer t = Make(s);
  EXPECT_EQ(t.Encode("hello world"), Ids(t, {M(" hello").c_str(), M(" world").c_str()}));
}

TEST(Tokenizer, SplitPreTokenizerBehaviors) {
  auto make = [](const char* behavior) {
    Spec s = GemmaLike();
    s.normalizer = nullptr;
    s.pre_tokenizer = {{"type", "Sequence"},
                       {"pretokenizers", Json::array({{{"type", "Split"},
                                                       {"pattern", {{"String", "-"}}},
                                                       {"behavior", behavior},
                                                       {"invert", false}}})}};
    s.Merge("a", "-");
    s.Merge("-", "a");
    s.Merge("-", "-");
    return Make(s);
  };
  Tokenizer removed = make("Removed"), isolated = make("Isolated"),
            prev = make("MergedWithPrevious"), next = make("MergedWithNext"),
            contiguous = make("Contiguous");
  EXPECT_EQ(removed.Encode("a-a"), Ids(removed, {"a", "a"}));
  EXPECT_EQ(isolated.Encode("a--a"), Ids(isolated, {"a", "-", "-", "a"}));
  EXPECT_EQ(prev.Encode("a-a"), Ids(prev, {"a-", "a"}));
  EXPECT_EQ(prev.Encode("a--a"), Ids(prev, {"a-", "-", "a"}));
  EXPECT_EQ(next.Encode("a--a"), Ids(next, {"a", "-", "-a"}));
  EXPECT_EQ(contiguous.Encode("a--a"), Ids(contiguous, {"a", "--", "a"}));
}

TEST(Tokenizer, DecodeSkipsSpecialAndUnknownIds) {
  Tokenizer t = Make(GemmaLike());
  std::vector<int32_t> ids = t.Encode("<bos>hello world<eos>");
  EXPECT_EQ(t.Decode(ids), "<bos>hello world<eos>");
  EXPECT_EQ(t.Decode(ids, /*skip_special=*/true), "hello world");
  ids.push_back(-5);
  ids.push_back(1 << 20);
  EXPECT_EQ(t.Decode(ids, true), "hello world");
}

TEST(Tokenizer, DecoderKinds) {
  Spec s = GemmaLike();
  // Gemma 2 style: Strip one leading space of the whole text.
  s.decoder = GemmaDecoder();
  s.decoder["decoders"].push_back({{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}});
  Tokenizer strip = Make(s);
  EXPECT_EQ(strip.Decode(strip.Encode(" hello world")), "hello world");
  s.decoder = nullptr;
  Tokenizer none = Make(s);
  EXPECT_EQ(none.Decode(none.Encode("abd")), "ab d");  // no decoder: tokens joined by spaces
}

TEST(Tokenizer, BosEosPadAndVocabSize) {
  Spec s = GemmaLike();
  s.Added("<image_soft_token>", true);
  // An added token outside the model vocabulary, with an id past its end (as Gemma 3 has).
  s.vocab.pop_back();
  s.added.back()["id"] = 5000;
  s.post_processor = {
      {"type", "TemplateProcessing"},
      {"single", Json::array({{{"SpecialToken", {{"id", "<bos>"}, {"type_id", 0}}}},
                              {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}})},
      {"special_tokens", {{"<bos>", {{"id", "<bos>"}, {"ids", {2}}, {"tokens", {"<bos>"}}}}}}};
  Tokenizer t = Make(s);
  EXPECT_EQ(t.bos_id(), 2);
  EXPECT_EQ(t.eos_id(), 1);
  EXPECT_EQ(t.pad_id(), 0);
  EXPECT_EQ(t.unk_id(), 3);
  EXPECT_EQ(t.vocab_size(), 5001);
  EXPECT_EQ(t.TokenToId("<image_soft_token>"), 5000);
  EXPECT_EQ(t.IdToToken(5000), "<image_soft_token>");
  EXPECT_EQ(t.IdToToken(4999), "");
  EXPECT_EQ(t.IdToToken(-1), "");
  EXPECT_EQ(t.TokenToId("nope"), -1);
  EXPECT_TRUE(t.IsSpecial(5000));
  EXPECT_EQ(t.Encode("<image_soft_token>"), (std::vector<int32_t>{5000}));
  EXPECT_EQ(t.Encode("abc", /*add_bos=*/true), (std::vector<int32_t>{2, t.TokenToId("abc")}));
  EXPECT_EQ(t.Encode("", true), (std::vector<int32_t>{2}));
  EXPECT_TRUE(t.Encode("").empty());
}

// A post-processor of the wrong shape used to throw out of the loader (Json::value() on a field
// of another type), and a template id past the vocabulary became bos_id. Found with
// tests/fuzz/fuzz_tokenizer_json's inputs.
TEST(Tokenizer, MalformedPostProcessorFallsBackToTheBosToken) {
  const Json single = Json::array({{{"SpecialToken", {{"id", "<bos>"}, {"type_id", 0}}}}});
  const Json bad_processors[] = {
      {{"type", 5}, {"single", single}},
      {{"type", "TemplateProcessing"}, {"single", single}, {"special_tokens", {{"<bos>", {2}}}}},
      {{"type", "TemplateProcessing"},
       {"single", single},
       {"special_tokens", {{"<bos>", {{"ids", {4000000000u}}}}}}},
  };
  for (const Json& pp : bad_processors) {
    Spec s = GemmaLike();
    s.post_processor = pp;
    auto t = Tokenizer::FromJsonText(s.Text(), "test.json");
    ASSERT_TRUE(t.ok()) << pp.dump() << ": " << t.status().ToString();
    EXPECT_EQ(t->bos_id(), t->TokenToId("<bos>")) << pp.dump();
  }
}

TEST(Tokenizer, ChunkingAndCacheChangeNothing) {
  Spec s = GemmaLike();
  TokenizerOptions plain;
  plain.enable_chunking = false;
  plain.enable_cache = false;
  Tokenizer fast = Make(s), slow = Make(s, plain);
  std::mt19937 rng(11);
  const std::string alphabet[] = {"a", "b", "c",  "h", "e", "l", "o",   "w",        "r",
                                  "d", " ", "  ", ">", "<", "/", kMeta, "\xC3\xA9", "\n"};
  for (int iter = 0; iter < 4000; ++iter) {
    std::string str;
    int n = 1 + static_cast<int>(rng() % 60);
    for (int i = 0; i < n; ++i) str += alphabet[rng() % std::size(alphabet)];
    ASSERT_EQ(fast.Encode(str), slow.Encode(str)) << str;
  }
  // The crossing token must survive chunking.
  EXPECT_EQ(fast.Encode("a> <b"), Ids(fast, {"a", M("> <").c_str(), "b"}));
}

TEST(StreamDecoder, HoldsIncompleteCharacters) {
  Tokenizer t = Make(GemmaLike());
  StreamDecoder d(t);
  EXPECT_EQ(d.Push(t.TokenToId("a")), "a");
  EXPECT_EQ(d.Push(t.TokenToId("<0xC3>")), "");
  EXPECT_EQ(d.Push(t.TokenToId("<0xA9>")), "\xC3\xA9");
  for (const char* b : {"<0xF0>", "<0x9F>", "<0x9A>"}) EXPECT_EQ(d.Push(t.TokenToId(b)), "");
  EXPECT_EQ(d.Push(t.TokenToId("<0x80>")), "\xF0\x9F\x9A\x80");
  EXPECT_EQ(d.Push(t.TokenToId(M(" world").c_str())), " world");
  // An interrupted sequence becomes U+FFFD as soon as it is known to be broken.
  EXPECT_EQ(d.Push(t.TokenToId("<0xE4>")), "");
  EXPECT_EQ(d.Push(t.TokenToId("b")),
            "\xEF\xBF\xBD"
            "b");
  EXPECT_EQ(d.Push(t.TokenToId("<0xE4>")), "");
  EXPECT_EQ(d.Flush(), "\xEF\xBF\xBD");
  EXPECT_EQ(d.Flush(), "");
}

TEST(StreamDecoder, ConcatenationEqualsDecode) {
  for (bool strip_decoder : {false, true}) {
    Spec s = GemmaLike();
    if (strip_decoder) {
      s.decoder["decoders"].push_back(
          {{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}});
    }
    Tokenizer t = Make(s);
    std::mt19937 rng(3);
    for (int iter = 0; iter < 500; ++iter) {
      std::vector<int32_t> ids;
      int n = 1 + static_cast<int>(rng() % 30);
      for (int i = 0; i < n; ++i) ids.push_back(static_cast<int32_t>(rng() % t.vocab_size()));
      for (bool skip : {false, true}) {
        StreamDecoder d(t, skip);
        std::string all;
        for (int32_t id : ids) {
          std::string piece = d.Push(id);
          if (!strip_decoder) {
            EXPECT_TRUE(utf8::IsValid(piece));
          }
          all += piece;
        }
        all += d.Flush();
        ASSERT_EQ(all, t.Decode(ids, skip)) << "iter " << iter;
      }
    }
  }
}

// ---- malformed files ----

Status LoadError(const std::string& text) {
  auto t = Tokenizer::FromJsonText(text, "bad.json");
  EXPECT_FALSE(t.ok());
  return t.ok() ? Status::Ok() : t.status();
}

void ExpectError(const std::string& text, ErrorCode code, const std::string& needle) {
  Status st = LoadError(text);
  EXPECT_EQ(st.code(), code) << st.ToString();
  EXPECT_NE(st.message().find("bad.json"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find(needle), std::string::npos) << st.message();
}

std::string Mutated(const std::function<void(Json&)>& f) {
  Json j = Json::parse(GemmaLike().Text());
  f(j);
  return j.dump();
}

TEST(TokenizerErrors, SyntaxErrorsNamePosition) {
  ExpectError("not json", ErrorCode::kCorrupt, "line 1, column 1");
  ExpectError("{\n  \"model\": {\"vocab\": {\"a\": 0}\n", ErrorCode::kCorrupt, "line 3");
  ExpectError("[]", ErrorCode::kCorrupt, "top level");
  ExpectError("{} x", ErrorCode::kCorrupt, "trailing");
  ExpectError("{\"model\": {\"vocab\": {\"a\": 0, }}}", ErrorCode::kCorrupt, "string key");
  ExpectError("{\"model\": {\"vocab\": {\"\xFF\": 0}}}", ErrorCode::kCorrupt, "UTF-8");
  ExpectError("{\"model\": {\"vocab\": {\"\\ud800\": 0}}}", ErrorCode::kCorrupt, "surrogate");
  ExpectError("{\"model\": {\"vocab\": {\"a\": 1.5}}}", ErrorCode::kCorrupt, "integer");
  ExpectError("{\"x\": " + std::string(1000, '['), ErrorCode::kCorrupt, "nesting too deep");
}

TEST(TokenizerErrors, StructuralErrors) {
  ExpectError("{}", ErrorCode::kCorrupt, "no 'model'");
  ExpectError("{\"model\": {\"type\": \"BPE\"}}", ErrorCode::kCorrupt, "model.vocab missing");
  ExpectError(Mutated([](Json& j) { j["model"]["type"] = "Unigram"; }), ErrorCode::kUnsupported,
              "only BPE");
  ExpectError(Mutated([](Json& j) { j["model"]["vocab"] = Json::array({"a"}); }),
              ErrorCode::kCorrupt, "model.vocab must be an object");
  ExpectError(Mutated([](Json& j) { j["model"]["vocab"]["zz"] = 5; }), ErrorCode::kCorrupt,
              "is used by both");
  ExpectError(Mutated([](Json& j) { j["model"]["vocab"]["zz"] = -1; }), ErrorCode::kCorrupt,
              "id out of range");
  ExpectError(Mutated([](Json& j) {
                j["model"]["merges"][0] = Json::array({"q", "QQ"});
              }),
              ErrorCode::kCorrupt, "model.merges[0]");
  ExpectError(Mutated([](Json& j) {
                j["model"]["merges"][1] = Json::array({"c", "a"});
              }),
              ErrorCode::kCorrupt, "merged token");
  ExpectError(Mutated([](Json& j) { j["model"]["merges"][0] = "bc"; }), ErrorCode::kCorrupt,
              "separated by one space");
  ExpectError(Mutated([](Json& j) {
                j["model"]["merges"][0] = Json::array({"b", "c", "d"});
              }),
              ErrorCode::kCorrupt, "exactly two");
  ExpectError(Mutated([](Json& j) { j["model"]["merges"][0] = 7; }), ErrorCode::kCorrupt,
              "string or a pair");
  ExpectError(Mutated([](Json& j) { j["model"]["unk_token"] = "<nope>"; }), ErrorCode::kCorrupt,
              "unk_token");
  ExpectError(Mutated([](Json& j) { j["model"]["dropout"] = 0.1; }), ErrorCode::kUnsupported,
              "dropout");
  ExpectError(Mutated([](Json& j) { j["model"]["byte_fallback"] = "yes"; }), ErrorCode::kCorrupt,
              "byte_fallback");
  ExpectError(Mutated([](Json& j) { j["added_tokens"][0].erase("content"); }), ErrorCode::kCorrupt,
              "added_tokens[0]");
  ExpectError(Mutated([](Json& j) { j["added_tokens"] = 3; }), ErrorCode::kCorrupt,
              "added_tokens must be an array");
}

TEST(TokenizerErrors, UnsupportedComponents) {
  ExpectError(Mutated([](Json& j) {
                j["normalizer"] = {{"type", "NFKC"}};
              }),
              ErrorCode::kUnsupported, "normalizer type 'NFKC'");
  ExpectError(Mutated([](Json& j) {
                j["pre_tokenizer"] = {{"type", "ByteLevel"}};
              }),
              ErrorCode::kUnsupported, "pre_tokenizer type 'ByteLevel'");
  ExpectError(Mutated([](Json& j) {
                j["decoder"]["decoders"][0] = {{"type", "Metaspace"}};
              }),
              ErrorCode::kUnsupported, "decoder.decoders[0]");
  ExpectError(Mutated([](Json& j) {
                j["normalizer"]["pattern"] = {{"Regex", "\\s"}};
              }),
              ErrorCode::kUnsupported, "Regex");
  ExpectError(Mutated([](Json& j) { j["pre_tokenizer"]["invert"] = true; }),
              ErrorCode::kUnsupported, "invert");
  ExpectError(Mutated([](Json& j) {
                j["normalizer"] = {{"content", "x"}};
              }),
              ErrorCode::kCorrupt, "'type'");
}

TEST(TokenizerErrors, MutatedFilesNeverCrash) {
  const std::string good = GemmaLike().Text();
  std::mt19937 rng(5);
  int loaded = 0;
  for (int iter = 0; iter < 1500; ++iter) {
    std::string text = good;
    switch (iter % 3) {
      case 0:
        text.resize(rng() % text.size());
        break;
      case 1:
        for (int k = 0; k < 3; ++k) text[rng() % text.size()] = static_cast<char>(rng() & 0xFF);
        break;
      default:
        text.insert(rng() % text.size(), 1, "{}[]\":,0\\u"[rng() % 10]);
    }
    auto t = Tokenizer::FromJsonText(text, "fuzz.json");
    if (!t.ok()) {
      EXPECT_FALSE(t.status().message().empty());
      continue;
    }
    ++loaded;
    std::string back = t->Decode(t->Encode("hello world <bos> \xC3\xA9"));
    EXPECT_TRUE(utf8::IsValid(back));
  }
  EXPECT_GT(loaded, 0);  // some mutations (inside token text) still load
}

TEST(TokenizerErrors, MissingFile) {
  auto t = Tokenizer::Load("/nonexistent-dir/tokenizer.json");
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), ErrorCode::kNotFound);
  EXPECT_NE(t.status().message().find("/nonexistent-dir/tokenizer.json"), std::string::npos);
}

TEST(Utf8, LossyMatchesWhatwgReplacement) {
  // One U+FFFD per maximal invalid subpart.
  const std::string r = "\xEF\xBF\xBD";
  EXPECT_EQ(utf8::Lossy("\xF0\x9F\x9A"), r);  // truncated 4-byte sequence
  EXPECT_EQ(utf8::Lossy("\xF0\x9F\x9A"
                        "a"),
            r + "a");
  EXPECT_EQ(utf8::Lossy("\xE0\x80\x80"), r + r + r);  // overlong: lead then two strays
  EXPECT_EQ(utf8::Lossy("\xED\xA0\x80"), r + r + r);  // surrogate
  EXPECT_EQ(utf8::Lossy("\xC3\xA9\xFF"), "\xC3\xA9" + r);
  std::string out;
  EXPECT_EQ(utf8::AppendLossy("ab\xE2\x82", /*final=*/false, &out), 2u);
  EXPECT_EQ(out, "ab");
}

}  // namespace
}  // namespace rw
