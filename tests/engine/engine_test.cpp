// Engine/Session API on a synthesized tiny model: load, prefill, decode, rewind, greedy
// generation, clear errors for bad input (and the session stays usable), and the `redwing
// logits` / `redwing run` commands.
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <span>
#include <string>
#include <vector>

#include <unistd.h>

#include "base/file.h"
#include "engine/engine.h"
#include "experts/predictor.h"
#include "install/synth.h"

namespace rw {
namespace {

std::string TinyModelDir() {
  static std::string dir = [] {
    // ctest runs every case in its own process, two at a time: each process builds its own copy
    // (the tiny model takes milliseconds) so no case sees another's half-written directory.
    std::string root = JoinPath(REDWING_BUILD_DIR, "test_tmp/engine");
    std::string d = JoinPath(root, "tiny." + std::to_string(getpid()));
    EXPECT_TRUE(MakeDirectories(root).ok());
    if (!PathExists(JoinPath(d, "manifest.json"))) {
      SynthOptions o;
      o.geometry = "tiny";
      o.seed = 5;
      o.out_dir = d;
      o.overwrite = true;
      Status st = SynthesizeModel(o);
      EXPECT_TRUE(st.ok()) << st.ToString();
    }
    static const std::string* to_remove = new std::string(d);
    std::atexit([] { (void)RemoveAll(*to_remove); });
    return d;
  }();
  return dir;
}

std::shared_ptr<Engine> Load(int64_t max_context = 256, int64_t chunk = 16,
                             int64_t span = EngineOptions{}.prefill_span) {
  EngineOptions o;
  o.model_dir = TinyModelDir();
  o.threads = 2;
  o.max_context = max_context;
  o.prefill_chunk = chunk;
  o.prefill_span = span;
  auto e = Engine::Load(o);
  EXPECT_TRUE(e.ok()) << e.status().ToString();
  return e.ok() ? *e : nullptr;
}

std::vector<int> Ids(int n, int vocab) {
  std::vector<int> ids{2};
  for (int i = 1; i < n; ++i) ids.push_back((i * 37 + 11) % vocab);
  return ids;
}

double MaxRel(const float* a, const float* b, int64_t n) {
  double num = 0, den = 0;
  for (int64_t i = 0; i < n; ++i) {
    num += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    den += double(b[i]) * b[i];
  }
  return std::sqrt(num / den);
}

TEST(EngineTest, LoadPrefillDecodeMatchesFullPrefill) {
  auto engine = Load();
  ASSERT_NE(engine, nullptr);
  const int V = engine->config().vocab_size;
  const std::vector<int> ids = Ids(40, V);  // longer than the window (16) and the chunk (16)
  auto full = engine->NewSession();
  auto all = full->Prefill(ids, true);
  ASSERT_TRUE(all.ok()) << all.status().ToString();
  ASSERT_EQ(all->size(), ids.size() * V);
  EXPECT_EQ(full->position(), 40);

  auto s = engine->NewSession();
  auto last = s->Prefill(std::span<const int>(ids.data(), 20));
  ASSERT_TRUE(last.ok());
  EXPECT_LT(MaxRel(last->data(), &(*all)[19 * V], V), 1e-5);
  for (int i = 20; i < 40; ++i) {
    auto step = s->Decode(ids[i]);
    ASSERT_TRUE(step.ok());
    EXPECT_LT(MaxRel(step->data(), &(*all)[int64_t{i} * V], V), 1e-5) << "position " << i;
  }
  EXPECT_EQ(s->position(), 40);
  EXPECT_GT(s->decode_total().seconds, 0);
  EXPECT_EQ(s->decode_total().tokens, 20);
}

TEST(EngineTest, BadInputIsAnErrorAndTheSessionStaysUsable) {
  auto engine = Load(/*max_context=*/32);
  ASSERT_NE(engine, nullptr);
  const int V = engine->config().vocab_size;
  auto s = engine->NewSession();
  auto empty = s->Prefill({});
  EXPECT_FALSE(empty.ok());
  EXPECT_NE(empty.status().message().find("empty"), std::string::npos);
  std::vector<int> bad{2, V};
  auto oob = s->Prefill(bad);
  EXPECT_EQ(oob.status().code(), ErrorCode::kOutOfRange);
  EXPECT_NE(oob.status().message().find("vocabulary"), std::string::npos);
  std::vector<int> neg{2, -1};
  EXPECT_FALSE(s->Prefill(neg).ok());
  EXPECT_EQ(s->position(), 0);
  auto long_prompt = s->Prefill(Ids(33, V));
  EXPECT_EQ(long_prompt.status().code(), ErrorCode::kOutOfRange);
  EXPECT_NE(long_prompt.status().message().find("context"), std::string::npos);
  EXPECT_FALSE(s->Decode(V + 5).ok());
  // Still usable.
  auto ok = s->Prefill(Ids(32, V));
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_EQ(s->Decode(3).status().code(), ErrorCode::kOutOfRange);  // context full
  EXPECT_EQ(s->position(), 32);
  s->Reset();
  EXPECT_EQ(s->position(), 0);
  EXPECT_TRUE(s->Prefill(Ids(5, V)).ok());
}

TEST(EngineTest, ChunkSizesAgree) {
  std::vector<float> ref;
  for (int64_t chunk : {1, 7, 64}) {
    auto engine = Load(256, chunk);
    ASSERT_NE(engine, nullptr);
    auto s = engine->NewSession();
    auto all = s->Prefill(Ids(50, engine->config().vocab_size), true);
    ASSERT_TRUE(all.ok());
    if (ref.empty())
      ref = *all;
    else
      EXPECT_LT(MaxRel(all->data(), ref.data(), ref.size()), 1e-5) << "chunk " << chunk;
  }
}

// Layer-major spans (every chunk through layer L before layer L+1) compute each chunk exactly as
// chunk-by-chunk prefill does: same logits to the bit, same routing, same cache afterwards.
TEST(EngineTest, LayerMajorSpansAreBitIdenticalToChunkByChunk) {
  const std::vector<int> ids = Ids(50, 512);
  struct Run {
    std::vector<float> logits, decoded;
    RoutingTrace trace;
    int64_t span = 0;
  };
  std::vector<Run> runs;
  for (int64_t span : {0, 24, 4096}) {
    auto engine = Load(256, 8, span);
    ASSERT_NE(engine, nullptr);
    ASSERT_EQ(engine->config().vocab_size, 512);
    EXPECT_EQ(engine->prefill_span(), std::min<int64_t>(span, 256));  // capped by the context
    Run r;
    r.span = span;
    auto s = engine->NewSession();
    s->set_routing_trace(&r.trace);
    auto all = s->Prefill(ids, true);
    ASSERT_TRUE(all.ok()) << all.status().ToString();
    r.logits = *all;
    EXPECT_EQ(s->position(), 50);
    // The cache the spans left behind: decoding continues identically.
    for (int id : {7, 99, 300}) {
      auto step = s->Decode(id);
      ASSERT_TRUE(step.ok());
      r.decoded.insert(r.decoded.end(), step->begin(), step->end());
    }
    // The last-row form agrees with the all-rows form.
    auto s2 = engine->NewSession();
    auto last = s2->Prefill(ids, false);
    ASSERT_TRUE(last.ok());
    EXPECT_EQ(std::memcmp(last->data(), &r.logits[49 * 512], 512 * sizeof(float)), 0);
    runs.push_back(std::move(r));
  }
  for (size_t i = 1; i < runs.size(); ++i) {
    SCOPED_TRACE(testing::Message() << "span " << runs[i].span);
    ASSERT_EQ(runs[i].logits.size(), runs[0].logits.size());
    EXPECT_EQ(std::memcmp(runs[i].logits.data(), runs[0].logits.data(),
                          runs[0].logits.size() * sizeof(float)),
              0);
    EXPECT_EQ(std::memcmp(runs[i].decoded.data(), runs[0].decoded.data(),
                          runs[0].decoded.size() * sizeof(float)),
              0);
    EXPECT_EQ(runs[i].trace.ids, runs[0].trace.ids);
  }
  EXPECT_EQ(runs[0].trace.tokens(), 53);
}

TEST(EngineTest, PrefillChunkZeroIsTheDefault) {
  // On the CPU auto is 512 tokens, capped by the context.
  EXPECT_EQ(Load(2048, 0)->prefill_chunk(), 512);
  EXPECT_EQ(Load(256, 0)->prefill_chunk(), 256);
  EngineOptions o;
  o.model_dir = TinyModelDir();
  o.prefill_chunk = -1;
  auto e = Engine::Load(o);
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().message().find("prefill chunk must be in 1..4096"), std::string::npos)
      << e.status().message();
}

TEST(EngineTest, PrefillSpanOptionIsValidated) {
  EngineOptions o;
  o.model_dir = TinyModelDir();
  o.prefill_span = -1;
  auto e = Engine::Load(o);
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().message().find("prefill span"), std::string::npos);
  // A span no longer than a chunk is chunk-by-chunk prefill.
  auto small = Load(256, 16, 16);
  ASSERT_NE(small, nullptr);
  EXPECT_EQ(small->prefill_span(), 0);
  // A cancel flag already set stops the prefill before it starts and keeps the session.
  auto s = small->NewSession();
  ASSERT_TRUE(s->Prefill(Ids(5, 512)).ok());
  std::atomic<bool> cancel{true};
  auto c = s->Prefill(Ids(40, 512), false, &cancel);
  EXPECT_EQ(c.status().code(), ErrorCode::kCancelled);
  EXPECT_EQ(s->position(), 5);
}

// A cancel between two layers of a chunk stops the call there; the session stays at the chunk's
// start, and running the chunk again gives exactly what an uncancelled session gives, also after
// the sliding ring (window 16) has wrapped.
TEST(EngineTest, CancelInsideAChunkKeepsTheTimeline) {
  auto engine = Load(256, 8, /*span=*/0);
  ASSERT_NE(engine, nullptr);
  const int V = engine->config().vocab_size, L = engine->config().num_layers;
  ASSERT_GE(L, 2);
  const std::vector<int> ids = Ids(45, V);
  const std::span<const int> all(ids);
  auto plain = engine->NewSession();
  ASSERT_TRUE(plain->Prefill(all.first(37)).ok());
  auto want = plain->Prefill(all.subspan(37, 8), /*all_logits=*/true);
  ASSERT_TRUE(want.ok());
  auto next = plain->Decode(7);
  ASSERT_TRUE(next.ok());

  for (int stop_at : {1, L - 1}) {
    SCOPED_TRACE(testing::Message() << "cancel before layer " << stop_at);
    auto s = engine->NewSession();
    ASSERT_TRUE(s->Prefill(all.first(37)).ok());
    std::atomic<bool> cancel{false};
    std::vector<int> seen;
    s->set_before_layer([&](int layer) {
      seen.push_back(layer);
      if (layer == stop_at) cancel = true;
    });
    auto c = s->Prefill(all.subspan(37, 8), true, &cancel);
    ASSERT_EQ(c.status().code(), ErrorCode::kCancelled);
    EXPECT_NE(c.status().message().find("layer " + std::to_string(stop_at)), std::string::npos)
        << c.status().message();
    EXPECT_EQ(seen.back(), stop_at);  // nothing ran past the cancel
    EXPECT_EQ(s->position(), 37);
    s->set_before_layer(nullptr);
    auto again = s->Prefill(all.subspan(37, 8), true);
    ASSERT_TRUE(again.ok());
    EXPECT_EQ(std::memcmp(again->data(), want->data(), want->size() * sizeof(float)), 0);
    auto step = s->Decode(7);
    ASSERT_TRUE(step.ok());
    EXPECT_EQ(std::memcmp(step->data(), next->data(), next->size() * sizeof(float)), 0);
  }
}

TEST(EngineTest, RewindReplaysTheSameLogits) {
  auto engine = Load(256, 8);
  const int V = engine->config().vocab_size;
  auto s = engine->NewSession();
  const std::vector<int> ids = Ids(30, V);
  auto all = s->Prefill(ids, true);
  ASSERT_TRUE(all.ok());
  // Window 16 + chunk 8 − 1 = 23 ring slots: rewinding 5 tokens is possible, 20 is not.
  EXPECT_TRUE(s->CanRewind(25));
  EXPECT_FALSE(s->CanRewind(10));
  EXPECT_FALSE(s->Rewind(10).ok());
  ASSERT_TRUE(s->Rewind(25).ok());
  EXPECT_EQ(s->position(), 25);
  auto again = s->Prefill(std::span<const int>(ids.data() + 25, 5), true);
  ASSERT_TRUE(again.ok());
  EXPECT_LT(MaxRel(again->data(), &(*all)[25 * V], 5 * V), 1e-5);
}

TEST(EngineTest, FaultPolicyIsValidated) {
  EngineOptions o;
  o.model_dir = TinyModelDir();
  o.threads = 2;
  o.max_context = 64;
  auto bad = ParseFaultPolicy("sometimes");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("fail-closed or failover-cpu"), std::string::npos)
      << bad.status().ToString();
  o.fault_policy = *ParseFaultPolicy("failover-cpu");  // there is no GPU to fail over from
  auto cpu = Engine::Load(o);
  ASSERT_FALSE(cpu.ok());
  EXPECT_NE(cpu.status().message().find("--backend cuda"), std::string::npos)
      << cpu.status().ToString();
  o.fault_policy = FaultPolicy::kFailClosed;  // the default, harmless on the CPU
  auto ok = Engine::Load(o);
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_STREQ(FaultPolicyName((*ok)->fault_policy()), "fail-closed");
  auto s = (*ok)->NewSession();
  EXPECT_FALSE(s->on_gpu());
  EXPECT_FALSE(s->closed());
  EXPECT_FALSE((*ok)->gpu_dropped());
}

TEST(EngineTest, GreedyGenerationIsDeterministicAndStops) {
  auto engine = Load();
  auto s = engine->NewSession();
  const std::vector<int> prompt = Ids(10, engine->config().vocab_size);
  auto a = GenerateGreedy(*s, prompt, 12, {});
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->size(), 12u);
  s->Reset();
  // Stopping on the first generated token keeps it and stops.
  const int first = (*a)[0];
  auto b = GenerateGreedy(*s, prompt, 12, std::vector<int>{first});
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(*b, std::vector<int>{first});
  // Greedy from a fresh session equals argmax of a full prefill of prompt + generated prefix.
  auto s2 = engine->NewSession();
  std::vector<int> seq = prompt;
  seq.insert(seq.end(), a->begin(), a->end() - 1);
  auto all = s2->Prefill(seq, true);
  ASSERT_TRUE(all.ok());
  const int V = engine->config().vocab_size;
  for (size_t i = 0; i < a->size(); ++i) {
    const float* row = &(*all)[(prompt.size() - 1 + i) * V];
    EXPECT_EQ(Argmax(std::span<const float>(row, V)), (*a)[i]) << i;
  }
}

// ---- CLI --------------------------------------------------------------------------------------

struct CmdResult {
  int code;
  std::string out;
};

CmdResult Sh(const std::string& cmd) {
  CmdResult r{-1, ""};
  std::FILE* p = ::popen((cmd + " 2>&1").c_str(), "r");
  if (p == nullptr) return r;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) r.out.append(buf, n);
  int st = ::pclose(p);
  r.code = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return r;
}

TEST(CliTest, LogitsWritesRawFloat32Rows) {
  auto engine = Load();
  const int V = engine->config().vocab_size;
  const std::string out =
      JoinPath(REDWING_BUILD_DIR, "test_tmp/engine/logits." + std::to_string(getpid()) + ".f32");
  // The reference fp32 KV cache, as the library and the command line default to.
  CmdResult r = Sh(std::string(REDWING_BINARY) + " logits --model " + TinyModelDir() +
                   " --kv-type f32 --ids 2,17,99 --out " + out);
  ASSERT_EQ(r.code, 0) << r.out;
  auto bytes = ReadFileToString(out);
  ASSERT_TRUE(bytes.ok());
  std::remove(out.c_str());
  ASSERT_EQ(bytes->size(), size_t{3} * V * 4);
  auto s = engine->NewSession();
  auto all = s->Prefill(std::vector<int>{2, 17, 99}, true);
  ASSERT_TRUE(all.ok());
  EXPECT_LT(MaxRel(reinterpret_cast<const float*>(bytes->data()), all->data(), 3 * V), 1e-6);
  CmdResult top =
      Sh(std::string(REDWING_BINARY) + " logits --model " + TinyModelDir() + " --ids 2,17");
  ASSERT_EQ(top.code, 0) << top.out;
  EXPECT_NE(top.out.find("pos 1 (id 17):"), std::string::npos) << top.out;
}

TEST(CliTest, RunPrintsIdsOnOneLine) {
  auto engine = Load();
  auto s = engine->NewSession();
  auto want = GenerateGreedy(*s, std::vector<int>{2, 17, 99}, 6, engine->config().eos_token_ids);
  ASSERT_TRUE(want.ok());
  std::string line;
  for (size_t i = 0; i < want->size(); ++i) {
    if (i > 0) line += ' ';
    line += std::to_string((*want)[i]);
  }
  CmdResult r = Sh(std::string(REDWING_BINARY) + " run --model " + TinyModelDir() +
                   " --kv-type f32 --prompt-ids 2,17,99 --max-new 6 --temperature 0 --print-ids "
                   "--quiet");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_EQ(r.out, line + "\n");
  CmdResult stats = Sh(std::string(REDWING_BINARY) + " run --model " + TinyModelDir() +
                       " --prompt-ids 2,17,99 --max-new 3 --temperature 0 --print-ids");
  EXPECT_EQ(stats.code, 0);
  EXPECT_NE(stats.out.find("decode"), std::string::npos) << stats.out;
  EXPECT_NE(stats.out.find("peak RSS"), std::string::npos) << stats.out;
}

TEST(CliTest, BadInputFailsClearly) {
  const std::string base =
      std::string(REDWING_BINARY) + " run --model " + TinyModelDir() + " --max-new 2 ";
  CmdResult temp = Sh(base + "--prompt-ids 2,3 --temperature 0.7 --top-p 0");
  EXPECT_EQ(temp.code, 2);
  EXPECT_NE(temp.out.find("top_p must be in (0, 1]"), std::string::npos) << temp.out;
  CmdResult sampled = Sh(base + "--prompt-ids 2,3 --temperature 0.7 --seed 3 --quiet");
  EXPECT_EQ(sampled.code, 0) << sampled.out;
  EXPECT_EQ(sampled.out, Sh(base + "--prompt-ids 2,3 --temperature 0.7 --seed 3 --quiet").out);
  CmdResult oob = Sh(base + "--prompt-ids 2,999999");
  EXPECT_NE(oob.code, 0);
  EXPECT_NE(oob.out.find("vocabulary"), std::string::npos) << oob.out;
  CmdResult empty = Sh(base + "--prompt-ids ''");
  EXPECT_NE(empty.code, 0);
  EXPECT_NE(empty.out.find("empty"), std::string::npos) << empty.out;
  CmdResult ctx = Sh(base + "--prompt-ids 2,3,4,5 --max-context 3");
  EXPECT_NE(ctx.code, 0);
  EXPECT_NE(ctx.out.find("context"), std::string::npos) << ctx.out;
  CmdResult lg =
      Sh(std::string(REDWING_BINARY) + " logits --model " + TinyModelDir() + " --ids 2,-4");
  EXPECT_NE(lg.code, 0);
}

TEST(CliTest, FaultPolicyFlagIsValidated) {
  const std::string base = std::string(REDWING_BINARY) + " run --model " + TinyModelDir() +
                           " --max-new 2 --prompt-ids 2,3 --quiet ";
  CmdResult bad = Sh(base + "--fault-policy sometimes");
  EXPECT_NE(bad.code, 0);
  EXPECT_NE(bad.out.find("--fault-policy must be fail-closed or failover-cpu, not 'sometimes'"),
            std::string::npos)
      << bad.out;
  CmdResult cpu = Sh(base + "--fault-policy failover-cpu");
  EXPECT_NE(cpu.code, 0);
  EXPECT_NE(cpu.out.find("--fault-policy failover-cpu applies to --backend cuda"),
            std::string::npos)
      << cpu.out;
  EXPECT_EQ(Sh(base + "--fault-policy fail-closed").code, 0);
  for (const char* cmd : {"run", "chat", "serve", "bench", "trace"}) {
    CmdResult help = Sh(std::string(REDWING_BINARY) + " " + cmd + " --help");
    EXPECT_NE(help.out.find("--fault-policy"), std::string::npos) << cmd << ": " << help.out;
  }
  CmdResult help = Sh(std::string(REDWING_BINARY) + " run --help");
  EXPECT_NE(help.out.find("failover-cpu"), std::string::npos) << help.out;
}

}  // namespace
}  // namespace rw
