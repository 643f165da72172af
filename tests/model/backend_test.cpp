// What speculative decoding needs from every backend, checked through the ForwardBackend
// interface on each (the CUDA instance skips, saying why, without a usable GPU): a k-token
// verify gives the rows that k decode steps give, the captured hidden states do not depend on
// how a timeline was cut into calls (and agree with the CPU's), and a rejected block rolled back
// leaves the cache as if it had never run, also when the block wrapped the sliding ring. On the
// CPU all of these hold bit for bit (exact_verify_test sweeps k = 1..16 and every ISA).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "model/parity_util.h"

namespace rw {
namespace {

using test::RelErr;

constexpr int64_t kChunk = 8, kContext = 256;

std::string TinyModel() {
  static const std::string dir = test::TinySynthModel("backend", 11);
  return dir;
}

std::vector<int> Ids(int n, int salt, int vocab) {
  std::vector<int> v;
  for (int i = 0; i < n; ++i) v.push_back((i * 131 + salt * 17 + 5) % vocab);
  return v;
}

class BackendTest : public ::testing::TestWithParam<BackendKind> {
 protected:
  void SetUp() override {
    if (GetParam() != BackendKind::kCpu) {
      if (Status st = CudaBackendAvailable(); !st.ok()) GTEST_SKIP() << "CUDA: " << st.message();
    }
    engine_ = Load(GetParam());
    ASSERT_NE(engine_, nullptr);
    cpu_ = GetParam() == BackendKind::kCpu ? engine_ : Load(BackendKind::kCpu);
    ASSERT_NE(cpu_, nullptr);
    V_ = engine_->config().vocab_size;
    H_ = engine_->config().hidden_size;
  }

  static std::shared_ptr<Engine> Load(BackendKind kind) {
    EngineOptions o;
    o.model_dir = TinyModel();
    o.threads = 2;
    o.max_context = kContext;
    o.prefill_chunk = kChunk;
    o.backend = kind;
    o.load_tokenizer = false;
    auto e = Engine::Load(o);
    EXPECT_TRUE(e.ok()) << e.status().ToString();
    return e.ok() ? *e : nullptr;
  }

  // Logits of each step of decoding `next` one token at a time after `prompt`.
  std::vector<std::vector<float>> Steps(const std::vector<int>& prompt,
                                        const std::vector<int>& next) {
    auto s = engine_->NewSession();
    EXPECT_TRUE(s->Prefill(prompt).ok());
    std::vector<std::vector<float>> rows;
    for (const int id : next) {
      auto l = s->Decode(id);
      EXPECT_TRUE(l.ok()) << l.status().ToString();
      rows.push_back(l.ok() ? *l : std::vector<float>(V_));
    }
    return rows;
  }

  // On the CPU a verify's rows are bitwise the decode steps' (ops.h, kExactRows); the CUDA
  // backend's kernels round a block differently, within 1e-4.
  void ExpectSameRows(const float* got, const float* want, size_t n, const std::string& what) {
    if (GetParam() == BackendKind::kCpu) {
      EXPECT_EQ(std::memcmp(got, want, n * sizeof(float)), 0) << what;
    } else {
      EXPECT_LT(RelErr(got, want, n), 1e-4) << what;
    }
  }

  std::shared_ptr<Engine> engine_, cpu_;
  int64_t V_ = 0, H_ = 0;
};

TEST_P(BackendTest, VerifyGivesTheRowsOfStepByStepDecoding) {
  // A prompt past the 16-token window, so the sliding layers' ring is in use.
  const std::vector<int> prompt = Ids(21, 1, static_cast<int>(V_));
  for (const int k : {1, 2, 5, 8}) {
    const std::vector<int> block = Ids(k, 7 + k, static_cast<int>(V_));
    const auto steps = Steps(prompt, block);
    auto s = engine_->NewSession();
    ASSERT_TRUE(s->Prefill(prompt).ok());
    auto rows = s->Verify(block);
    ASSERT_TRUE(rows.ok()) << rows.status().ToString();
    ASSERT_EQ(rows->size(), static_cast<size_t>(k * V_));
    EXPECT_EQ(s->position(), static_cast<int64_t>(prompt.size() + k));
    for (int i = 0; i < k; ++i)
      ExpectSameRows(&(*rows)[i * V_], steps[i].data(), V_, fmt::format("k {} row {}", k, i));
  }
  // More than one call holds is refused, and the session is unchanged.
  auto s = engine_->NewSession();
  ASSERT_TRUE(s->Prefill(prompt).ok());
  auto big = s->Verify(Ids(kChunk + 1, 3, static_cast<int>(V_)));
  ASSERT_FALSE(big.ok());
  EXPECT_EQ(s->position(), static_cast<int64_t>(prompt.size()));
}

TEST_P(BackendTest, CapturedHiddenStatesDoNotDependOnHowCallsAreCut) {
  const std::vector<int> layers = {1, 4};
  const std::vector<int> ids = Ids(20, 2, static_cast<int>(V_));
  const size_t L = layers.size();
  // One prefill of 8 (a whole chunk), then the rest one decode step at a time.
  auto whole = engine_->NewSession();
  ASSERT_TRUE(whole->backend()->SetCapture(layers).ok());
  std::vector<float> a;
  ASSERT_TRUE(whole->Prefill(std::span<const int>(ids.data(), kChunk)).ok());
  const HiddenCapture& ca = whole->backend()->capture();
  ASSERT_EQ(ca.tokens, kChunk);
  ASSERT_EQ(ca.rows.size(), static_cast<size_t>(kChunk) * L * H_);
  a = ca.rows;
  for (size_t i = kChunk; i < ids.size(); ++i) {
    ASSERT_TRUE(whole->Decode(ids[i]).ok());
    ASSERT_EQ(ca.tokens, 1);
    a.insert(a.end(), ca.rows.begin(), ca.rows.end());
  }
  // The same tokens as verify blocks of 5, 5 and 2 after the first chunk.
  auto cut = engine_->NewSession();
  ASSERT_TRUE(cut->backend()->SetCapture(layers).ok());
  ASSERT_TRUE(cut->Prefill(std::span<const int>(ids.data(), kChunk)).ok());
  std::vector<float> b = cut->backend()->capture().rows;
  for (const size_t n : {5, 5, 2}) {
    const size_t at = static_cast<size_t>(cut->position());
    ASSERT_TRUE(cut->Verify(std::span<const int>(ids.data() + at, n)).ok());
    const HiddenCapture& cb = cut->backend()->capture();
    ASSERT_EQ(cb.tokens, static_cast<int64_t>(n));
    b.insert(b.end(), cb.rows.begin(), cb.rows.end());
  }
  ASSERT_EQ(a.size(), ids.size() * L * H_);
  ASSERT_EQ(b.size(), a.size());
  for (size_t t = 0; t < ids.size(); ++t)
    for (size_t l = 0; l < L; ++l) {
      const size_t at = (t * L + l) * H_;
      ExpectSameRows(&b[at], &a[at], H_, fmt::format("token {} layer {}", t, layers[l]));
    }
  // The CPU's capture of the same tokens agrees (the same pass when this is the CPU).
  auto cpu = cpu_->NewSession();
  ASSERT_TRUE(cpu->backend()->SetCapture(layers).ok());
  ASSERT_TRUE(cpu->Prefill(std::span<const int>(ids.data(), kChunk)).ok());
  const std::vector<float>& cc = cpu->backend()->capture().rows;
  EXPECT_LT(RelErr(a.data(), cc.data(), cc.size()), 1e-4);
  // Bad layers are refused; an empty list stops capturing.
  EXPECT_FALSE(whole->backend()->SetCapture({engine_->config().num_layers}).ok());
  EXPECT_FALSE(whole->backend()->SetCapture({-1}).ok());
}

TEST_P(BackendTest, RollingBackARejectedBlockLeavesPlainDecoding) {
  // The ring of the sliding layers holds window + chunk − 1 = 23 positions: a block of 6 at
  // position 20 wraps it (slots 20, 21, 22, 0, 1, 2).
  const int vocab = static_cast<int>(V_);
  const std::vector<int> prompt = Ids(20, 3, vocab);
  const std::vector<int> block = Ids(6, 4, vocab);
  const std::vector<int> after = Ids(7, 5, vocab);
  for (const int accepted : {0, 1, 3, 6}) {
    auto s = engine_->NewSession();
    ASSERT_TRUE(s->Prefill(prompt).ok());
    ASSERT_TRUE(s->Verify(block).ok());
    const int64_t keep = static_cast<int64_t>(prompt.size()) + accepted;
    ASSERT_TRUE(s->CanRewind(keep));
    ASSERT_TRUE(s->Rewind(keep).ok());
    // Plain decoding of the same accepted tokens, then both continue.
    std::vector<int> plain_ids(block.begin(), block.begin() + accepted);
    plain_ids.insert(plain_ids.end(), after.begin(), after.end());
    const auto plain = Steps(prompt, plain_ids);
    for (size_t i = 0; i < after.size(); ++i) {
      auto l = s->Decode(after[i]);
      ASSERT_TRUE(l.ok()) << l.status().ToString();
      ExpectSameRows(l->data(), plain[accepted + i].data(), V_,
                     fmt::format("accepted {} step {}", accepted, i));
    }
  }
  // Far back past the ring's overwritten slots: refused, and the session is unchanged.
  auto s = engine_->NewSession();
  ASSERT_TRUE(s->Prefill(Ids(60, 6, vocab)).ok());
  EXPECT_FALSE(s->CanRewind(30));
  EXPECT_FALSE(s->Rewind(30).ok());
  EXPECT_EQ(s->position(), 60);
  EXPECT_TRUE(s->CanRewind(55));
}

// Decode steps (on CUDA: replayed from a captured graph), then a verify of more rows than a
// step has, then decode steps again: the later steps must not read the verify's rows (a graph
// captured before the verify's larger logits buffer kept writing to the old one).
TEST_P(BackendTest, DecodeStepsAfterAVerifyAreStillPlainDecoding) {
  const int vocab = static_cast<int>(V_);
  const std::vector<int> prompt = Ids(12, 8, vocab);
  const std::vector<int> next = Ids(12, 9, vocab);
  const auto plain = Steps(prompt, next);
  auto s = engine_->NewSession();
  ASSERT_TRUE(s->Prefill(prompt).ok());
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(s->Decode(next[i]).ok());
  ASSERT_TRUE(s->Verify(std::span<const int>(next.data() + 3, 5)).ok());
  ASSERT_TRUE(s->Rewind(static_cast<int64_t>(prompt.size()) + 4).ok());
  for (size_t i = 4; i < next.size(); ++i) {
    auto l = s->Decode(next[i]);
    ASSERT_TRUE(l.ok()) << l.status().ToString();
    ExpectSameRows(l->data(), plain[i].data(), V_, fmt::format("step {}", i));
  }
}

// A verify whose picks are made on the device picks, row by row, what decode steps that draw on
// the device pick: the unfiltered draw at each row's position, or the top-k candidates. The CPU
// has no device picks and says so, leaving the session as it was.
TEST_P(BackendTest, VerifyWithDevicePicksPicksAsDecodeStepsDo) {
  const int vocab = static_cast<int>(V_);
  const std::vector<int> prompt = Ids(21, 2, vocab);
  const std::vector<int> block = Ids(6, 5, vocab);
  if (!engine_->NewSession()->samples_on_device()) {
    auto s = engine_->NewSession();
    ASSERT_TRUE(s->Prefill(prompt).ok());
    EXPECT_EQ(s->VerifyPicks(block, 1, 1.0, 0).status().code(), ErrorCode::kUnsupported);
    EXPECT_EQ(s->position(), static_cast<int64_t>(prompt.size()));
    return;
  }
  for (const int top_k : {0, 1, 20}) {
    for (const uint64_t seed : {1u, 2u, 3u}) {
      const std::string where = "top_k " + std::to_string(top_k) + " seed " + std::to_string(seed);
      auto v = engine_->NewSession();
      ASSERT_TRUE(v->Prefill(prompt).ok());
      auto picks = v->VerifyPicks(block, seed, 0.8, top_k);
      ASSERT_TRUE(picks.ok()) << picks.status().ToString();
      ASSERT_EQ(picks->size(), block.size());
      EXPECT_EQ(v->position(), static_cast<int64_t>(prompt.size() + block.size()));
      auto d = engine_->NewSession();
      ASSERT_TRUE(d->Prefill(prompt).ok());
      for (size_t i = 0; i < block.size(); ++i) {
        const RowPick& p = (*picks)[i];
        if (top_k == 0) {
          auto t = d->DecodeSampled(block[i], seed, 0.8, 1.0f);
          ASSERT_TRUE(t.ok()) << t.status().ToString();
          EXPECT_EQ(p.token, *t) << where << " row " << i;
          continue;
        }
        Session::TopKStep st;
        ASSERT_TRUE(d->DecodeTopK(block[i], top_k, 1.0f, &st).ok());
        std::vector<int> a = p.ids, b = st.ids;
        std::sort(a.begin(), a.end());
        std::sort(b.begin(), b.end());
        EXPECT_EQ(a, b) << where << " row " << i;
        EXPECT_EQ(static_cast<int>(p.ids.size()), top_k) << where << " row " << i;
      }
    }
  }
  // More tokens than the device picks take: refused, nothing appended.
  auto s = engine_->NewSession();
  ASSERT_TRUE(s->Prefill(prompt).ok());
  const int64_t too_many = s->max_verify_picks() + 1;
  if (too_many <= kChunk) {
    EXPECT_FALSE(s->VerifyPicks(Ids(static_cast<int>(too_many), 3, vocab), 1, 1.0, 0).ok());
    EXPECT_EQ(s->position(), static_cast<int64_t>(prompt.size()));
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, BackendTest,
                         ::testing::Values(BackendKind::kCpu, BackendKind::kCuda),
                         [](const auto& info) { return std::string(BackendName(info.param)); });

}  // namespace
}  // namespace rw
