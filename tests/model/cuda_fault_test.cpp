// --fault-policy on a synthesized tiny model, with CUDA errors injected through
// REDWING_CUDA_INJECT_FAULT=<layer>[,<call>[,sticky]] (read when a session's CUDA pass is made):
// failover-cpu must give exactly the logits of a run built by hand as "CUDA for the calls before
// and the layers before L, the CPU from layer L on" (and within 1e-4 of the CPU, with the same
// greedy tokens); with the device unreadable, exactly the CPU's; fail-closed must return the
// error and close the session. Skips (saying why) where no CUDA device is usable.
#include <gtest/gtest.h>

#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>

#include "backend/cuda_test_util.h"
#include "base/file.h"
#include "bench/bench.h"
#include "engine/engine.h"
#include "install/synth.h"
#include "model/parity_util.h"
#include "runtime/cuda_forward.h"
#include "runtime/cuda_model.h"
#include "test_prereq.h"

namespace rw {
namespace {

using test::RelErr;

constexpr int64_t kChunk = 7, kContext = 256;
constexpr int kPrompt = 45;  // longer than the window (16) and the ring (16 + 7 − 1)
constexpr int kDecode = 12;

std::string TinyModel() {
  static const std::string dir = test::TinySynthModel("cuda_fault", 3);
  return dir;
}

std::shared_ptr<Engine> Load(const std::string& backend, const std::string& policy) {
  EngineOptions o;
  o.model_dir = TinyModel();
  o.threads = 2;
  o.max_context = kContext;
  o.prefill_chunk = kChunk;
  o.backend = *ParseBackendKind(backend);
  o.fault_policy = *ParseFaultPolicy(policy);
  o.load_tokenizer = false;
  auto e = Engine::Load(o);
  EXPECT_TRUE(e.ok()) << e.status().ToString();
  return e.ok() ? *e : nullptr;
}

// A session whose CUDA pass gets the fault (the variable is read when the pass is made).
std::unique_ptr<Session> FaultySession(const Engine& e, const std::string& fault) {
  setenv("REDWING_CUDA_INJECT_FAULT", fault.c_str(), 1);
  auto s = e.NewSession();
  unsetenv("REDWING_CUDA_INJECT_FAULT");
  return s;
}

std::vector<int> Prompt(int vocab) {
  std::vector<int> ids{2};
  for (int i = 1; i < kPrompt; ++i) ids.push_back((i * 131 + 17) % vocab);
  return ids;
}

// Every row of logits (the prompt's, then one per decode step) and the greedy tokens decoded.
struct Trace {
  std::vector<std::vector<float>> rows;
  std::vector<int> tokens;
};

void AddRows(Trace& t, const std::vector<float>& logits, int64_t vocab) {
  for (size_t r = 0; r * vocab < logits.size(); ++r)
    t.rows.emplace_back(logits.begin() + r * vocab, logits.begin() + (r + 1) * vocab);
}

// Through the Session API: the prompt (all logits), then kDecode greedy steps.
Trace SessionTrace(Session& s, const std::vector<int>& prompt) {
  Trace t;
  const int64_t V = s.engine().config().vocab_size;
  auto all = s.Prefill(prompt, true);
  EXPECT_TRUE(all.ok()) << all.status().ToString();
  if (!all.ok()) return t;
  AddRows(t, *all, V);
  for (int i = 0; i < kDecode; ++i) {
    t.tokens.push_back(Argmax(t.rows.back()));
    auto l = s.Decode(t.tokens.back());
    EXPECT_TRUE(l.ok()) << l.status().ToString();
    if (!l.ok()) break;
    t.rows.push_back(*l);
  }
  t.tokens.push_back(Argmax(t.rows.back()));
  return t;
}

// The same calls built by hand: a CudaForwardPass runs the calls before `fault_call` and layers
// [0, fault_layer) of that call; its KV cache and residual go to the host; a CPU ForwardPass
// runs the rest of that call and every later one.
Trace MixedReference(const Engine& e, const std::vector<int>& prompt, uint64_t fault_call,
                     int fault_layer) {
  Trace t;
  const int64_t V = e.config().vocab_size, H = e.config().hidden_size;
  auto gpu = CudaForwardPass::Create(*CudaModelOf(e.device_model()), kContext, kChunk);
  EXPECT_TRUE(gpu.ok()) << gpu.status().ToString();
  if (!gpu.ok()) return t;
  KvCache kv(e.config(), kContext, kChunk);
  ForwardPass cpu(e.model(), kChunk);
  uint64_t call = 0;
  bool on_cpu = false;
  // One forward call: ids[0..m) at pos0, logits of the rows asked for.
  auto run = [&](const int* ids, int64_t m, int64_t pos0, LogitsRows rows, float* logits) {
    if (call == fault_call) {
      std::vector<float> x(static_cast<size_t>(m * H));
      Status st = (*gpu)->RunLayers(ids, m, pos0, fault_layer, x.data());
      if (st.ok()) st = (*gpu)->DownloadKv(kv, pos0 + m);
      if (st.ok())
        st = cpu.RunFrom(kv, x.data(), fault_layer, m, pos0, rows, logits, e.pool(), nullptr);
      on_cpu = true;
      ++call;
      return st;
    }
    ++call;
    if (on_cpu) return cpu.Run(kv, ids, m, pos0, rows, logits, e.pool(), nullptr);
    return (*gpu)->Run(ids, m, pos0, rows, logits, nullptr);
  };
  const int64_t n = static_cast<int64_t>(prompt.size());
  std::vector<float> all(static_cast<size_t>(n * V));
  for (int64_t i = 0; i < n; i += kChunk) {
    const int64_t m = std::min(kChunk, n - i);
    Status st = run(&prompt[i], m, i, LogitsRows::kAll, &all[i * V]);
    EXPECT_TRUE(st.ok()) << st.ToString();
  }
  AddRows(t, all, V);
  for (int i = 0; i < kDecode; ++i) {
    t.tokens.push_back(Argmax(t.rows.back()));
    std::vector<float> logits(static_cast<size_t>(V));
    Status st = run(&t.tokens.back(), 1, n + i, LogitsRows::kLast, logits.data());
    EXPECT_TRUE(st.ok()) << st.ToString();
    t.rows.push_back(logits);
  }
  t.tokens.push_back(Argmax(t.rows.back()));
  return t;
}

double WorstRow(const Trace& a, const Trace& b) {
  double worst = 0;
  for (size_t r = 0; r < std::min(a.rows.size(), b.rows.size()); ++r)
    worst = std::max(worst, RelErr(a.rows[r].data(), b.rows[r].data(), b.rows[r].size()));
  return worst;
}

TEST(CudaFault, FailoverFinishesOnTheCpuFromTheFailingLayer) {
  REQUIRE_CUDA();
  auto cpu = Load("cpu", "fail-closed");
  ASSERT_NE(cpu, nullptr);
  const int L = cpu->config().num_layers;
  const std::vector<int> prompt = Prompt(cpu->config().vocab_size);
  const Trace want_cpu = SessionTrace(*cpu->NewSession(), prompt);
  // Calls 0–6 are the prompt's chunks, 7.. the decode steps (the earlier ones from a graph).
  struct Case {
    uint64_t call;
    int layer;
  };
  for (const Case& c : {Case{3, 3}, Case{0, 0}, Case{11, 1}, Case{9, L}, Case{7, L - 1}}) {
    SCOPED_TRACE(fmt::format("fault at layer {} of call {}", c.layer, c.call));
    auto gpu = Load("cuda", "failover-cpu");
    ASSERT_NE(gpu, nullptr);
    auto s = FaultySession(*gpu, fmt::format("{},{}", c.layer, c.call));
    ASSERT_TRUE(s->on_gpu());
    const Trace got = SessionTrace(*s, prompt);
    EXPECT_FALSE(s->on_gpu());
    EXPECT_TRUE(gpu->gpu_dropped());
    const Trace want = MixedReference(*gpu, prompt, c.call, c.layer);
    ASSERT_EQ(got.rows.size(), want.rows.size());
    for (size_t r = 0; r < got.rows.size(); ++r)
      ASSERT_EQ(got.rows[r], want.rows[r]) << "row " << r;
    EXPECT_EQ(got.tokens, want.tokens);
    const double vs_cpu = WorstRow(got, want_cpu);
    std::printf(
        "[cuda fault] layer %d of call %llu: bit-identical to the mixed run, %.3g from "
        "the CPU\n",
        c.layer, static_cast<unsigned long long>(c.call), vs_cpu);
    EXPECT_LE(vs_cpu, 1e-4);
    EXPECT_EQ(got.tokens, want_cpu.tokens);
    // After the failover DecodeSampled draws on the host: the draw of the logits a twin
    // session (the same fault on a fresh engine) gets from Decode.
    const int tok = got.tokens.back();
    auto drawn = s->DecodeSampled(tok, 77);
    ASSERT_TRUE(drawn.ok()) << drawn.status().ToString();
    auto gpu2 = Load("cuda", "failover-cpu");
    ASSERT_NE(gpu2, nullptr);
    auto twin = FaultySession(*gpu2, fmt::format("{},{}", c.layer, c.call));
    ASSERT_EQ(SessionTrace(*twin, prompt).rows, got.rows);
    auto logits = twin->Decode(tok);
    ASSERT_TRUE(logits.ok());
    EXPECT_EQ(*drawn, SampleUnfiltered(*logits, 77, twin->position()));
    // Later sessions of the engine do not use the GPU.
    auto later = gpu->NewSession();
    EXPECT_FALSE(later->on_gpu());
    const Trace again = SessionTrace(*later, prompt);
    EXPECT_EQ(again.rows, want_cpu.rows);
  }
}

TEST(CudaFault, AnUnreadableDeviceReplaysTheSessionOnTheCpu) {
  REQUIRE_CUDA();
  auto cpu = Load("cpu", "fail-closed");
  ASSERT_NE(cpu, nullptr);
  const std::vector<int> prompt = Prompt(cpu->config().vocab_size);
  const Trace want = SessionTrace(*cpu->NewSession(), prompt);
  for (const char* fault : {"2,4,sticky", "1,10,sticky"}) {
    SCOPED_TRACE(fault);
    auto gpu = Load("cuda", "failover-cpu");
    ASSERT_NE(gpu, nullptr);
    auto s = FaultySession(*gpu, fault);
    const Trace got = SessionTrace(*s, prompt);
    EXPECT_FALSE(s->on_gpu());
    // From the failed call on, the CPU's bits: the same calls replayed, then run there.
    const size_t first = std::string(fault) == "2,4,sticky" ? 28 : kPrompt + 3;
    ASSERT_EQ(got.rows.size(), want.rows.size());
    for (size_t r = first; r < got.rows.size(); ++r)
      ASSERT_EQ(got.rows[r], want.rows[r]) << "row " << r;
    EXPECT_LE(WorstRow(got, want), 1e-4);
    EXPECT_EQ(got.tokens, want.tokens);
  }
}

TEST(CudaFault, FailClosedReturnsTheErrorAndClosesTheSession) {
  REQUIRE_CUDA();
  auto gpu = Load("cuda", "fail-closed");
  ASSERT_NE(gpu, nullptr);
  const std::vector<int> prompt = Prompt(gpu->config().vocab_size);
  auto s = FaultySession(*gpu, "2,1");
  auto r = s->Prefill(prompt);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), ErrorCode::kDevice);
  const std::string& msg = r.status().message();
  std::printf("[cuda fault] fail-closed: %s\n", msg.c_str());
  EXPECT_NE(msg.find("layer 2"), std::string::npos) << msg;
  EXPECT_NE(msg.find("injected by REDWING_CUDA_INJECT_FAULT"), std::string::npos) << msg;
  EXPECT_NE(msg.find("fail-closed"), std::string::npos) << msg;
  EXPECT_TRUE(s->closed());
  EXPECT_EQ(s->position(), kChunk);  // the first chunk completed
  EXPECT_FALSE(gpu->gpu_dropped());
  auto d = s->Decode(5);
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.status().message().find("start a new session"), std::string::npos)
      << d.status().ToString();
  EXPECT_FALSE(s->Prefill(prompt).ok());
  EXPECT_FALSE(s->DecodeSampled(5, 1).ok());
  s->Reset();
  EXPECT_FALSE(s->Prefill(prompt).ok());
  // The engine goes on: a new session uses the GPU.
  auto fresh = gpu->NewSession();
  EXPECT_TRUE(fresh->on_gpu());
  auto ok = fresh->Prefill(prompt);
  EXPECT_TRUE(ok.ok()) << ok.status().ToString();
  // A malformed injection is the session's error, not a crash.
  auto bad = FaultySession(*gpu, "2,x");
  auto b = bad->Prefill(prompt);
  ASSERT_FALSE(b.ok());
  EXPECT_NE(b.status().message().find("REDWING_CUDA_INJECT_FAULT must be"), std::string::npos)
      << b.status().ToString();
}

struct CmdResult {
  int code = -1;
  std::string out;
};

CmdResult Sh(const std::string& cmd) {
  CmdResult r;
  FILE* p = ::popen((cmd + " 2>&1").c_str(), "r");
  if (p == nullptr) return r;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) r.out.append(buf, n);
  const int st = ::pclose(p);
  r.code = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return r;
}

TEST(CudaFault, TheCliFailsOverOrStops) {
  REQUIRE_CUDA();
  REQUIRE_OR_SKIP(PathExists(REDWING_BINARY), std::string("the CLI at ") + REDWING_BINARY);
  const std::string base = std::string(REDWING_BINARY) + " run --model " + TinyModel() +
                           " --prompt-ids 2,17,99,4 --max-new 8 --temperature 0 --print-ids ";
  const CmdResult cpu = Sh(base + "--quiet");
  ASSERT_EQ(cpu.code, 0) << cpu.out;
  // Call 0 is the prompt, 1.. the decode steps.
  const std::string fault = "REDWING_CUDA_INJECT_FAULT=2,3 ";
  const CmdResult over = Sh(fault + base + "--backend cuda --fault-policy failover-cpu --quiet");
  EXPECT_EQ(over.code, 0) << over.out;
  EXPECT_NE(over.out.find("failover-cpu: the GPU is dropped"), std::string::npos) << over.out;
  EXPECT_NE(over.out.find(cpu.out), std::string::npos) << over.out << " vs " << cpu.out;
  const CmdResult closed = Sh(fault + base + "--backend cuda --quiet");
  EXPECT_NE(closed.code, 0) << closed.out;
  EXPECT_NE(closed.out.find("fail-closed"), std::string::npos) << closed.out;
}

}  // namespace
}  // namespace rw
