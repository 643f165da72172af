// Expert stores: the memory planner, the slots store's replacement policy, checksum failures
// (re-read once, then an error naming file and expert, the store still usable), early reads, and
// the rule that streaming never changes the answer: every store gives bit-identical logits.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <condition_variable>
#include <mutex>

#include <cstring>
#include <fstream>

#include "base/file.h"
#include "engine/engine.h"
#include "experts/expert_store.h"
#include "experts/memory_plan.h"
#include "experts/read_queue.h"
#include "format/model_dir.h"
#include "install/convert.h"
#include "install/synth.h"

namespace rw {
namespace {

std::string TempDir(const std::string& name) {
  return JoinPath(REDWING_BUILD_DIR, "test_tmp/experts/" + name + "." + std::to_string(getpid()));
}

// A tiny synthesized model (8 experts per layer, top-2) private to this process.
std::string TinyModel(double skew = 0) {
  static std::map<double, std::string> made;
  if (made.count(skew)) return made[skew];
  SynthOptions o;
  o.geometry = "tiny";
  o.seed = 21;
  o.routing_skew = skew;
  o.out_dir = TempDir("tiny" + std::to_string(static_cast<int>(skew * 10)));
  o.overwrite = true;
  EXPECT_TRUE(MakeDirectories(ParentPath(o.out_dir)).ok());
  Status st = SynthesizeModel(o);
  EXPECT_TRUE(st.ok()) << st.ToString();
  static std::vector<std::string>* all = new std::vector<std::string>;
  if (all->empty())
    std::atexit([] {
      for (const std::string& d : *all) (void)RemoveAll(d);
    });
  all->push_back(o.out_dir);
  return made[skew] = o.out_dir;
}

MemoryNeeds Needs() {
  MemoryNeeds n;
  n.core_bytes = 1000;
  n.kv_bytes = 200;
  n.scratch_bytes = 50;
  n.layers = 3;
  n.experts_per_layer = 16;
  n.top_k = 4;
  n.expert_stride = 4096;
  return n;
}

TEST(MemoryPlan, SlotsFromTheBudgetLeftAfterCoreKvAndScratch) {
  const MemoryNeeds n = Needs();
  const uint64_t fixed = 1250, row = 3 * 4096;
  auto p = PlanMemory(fixed + 7 * row + 100, n);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ(p->slots_per_layer, 7);
  EXPECT_EQ(p->slot_bytes, 7 * row);
  EXPECT_EQ(p->minimum_budget, fixed + 4 * row);
  EXPECT_EQ(p->full_budget, fixed + 16 * row);
  // More than every expert: capped at the expert count.
  p = PlanMemory(uint64_t{1} << 40, n);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->slots_per_layer, 16);
  // Exactly the minimum works; one byte less does not, and the error says the minimum.
  EXPECT_TRUE(PlanMemory(fixed + 4 * row, n).ok());
  auto small = PlanMemory(fixed + 4 * row - 1, n);
  ASSERT_FALSE(small.ok());
  EXPECT_EQ(small.status().code(), ErrorCode::kResourceExhausted);
  EXPECT_NE(small.status().message().find("the minimum is " + FormatBytes(fixed + 4 * row)),
            std::string::npos)
      << small.status().message();
  // Below the fixed part alone.
  EXPECT_FALSE(PlanMemory(10, n).ok());
  MemoryNeeds bad = n;
  bad.top_k = 17;
  EXPECT_FALSE(PlanMemory(uint64_t{1} << 30, bad).ok());
}

std::unique_ptr<ExpertStore> OpenStore(const ModelDir& dir, const std::string& kind, int slots,
                                       const std::string& backend = "auto") {
  ExpertStoreOptions o;
  o.kind = *ParseExpertStoreKind(kind);
  o.io_backend = *ParseIoBackend(backend);
  o.slots_per_layer = slots;
  o.io_threads = 3;
  auto s = OpenExpertStore(dir, o);
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  return s.ok() ? std::move(*s) : nullptr;
}

Status Use(ExpertStore& s, int layer, std::vector<int> experts) {
  std::vector<ExpertRef> refs(experts.size());
  Status st = s.Acquire(layer, experts, refs.data());
  if (st.ok()) s.Release(layer);
  return st;
}

TEST(SlotStore, KeepsTheFrequentExpertAndEvictsTheRarelyUsedOne) {
  auto dir = ModelDir::Open(TinyModel());
  ASSERT_TRUE(dir.ok());
  auto store = OpenStore(*dir, "slots", 2);
  ASSERT_NE(store, nullptr);
  ASSERT_TRUE(Use(*store, 0, {0, 1}).ok());  // 2 misses
  ASSERT_TRUE(Use(*store, 0, {0}).ok());     // hit
  ASSERT_TRUE(Use(*store, 0, {0}).ok());     // hit
  EXPECT_EQ(store->stats().misses, 2u);
  EXPECT_EQ(store->stats().hits, 2u);
  ASSERT_TRUE(Use(*store, 0, {2}).ok());  // miss: evicts 1 (used once), not 0 (used thrice)
  ASSERT_TRUE(Use(*store, 0, {0}).ok());  // still a hit
  EXPECT_EQ(store->stats().hits, 3u);
  ASSERT_TRUE(Use(*store, 0, {1}).ok());  // 1 was evicted: a miss
  EXPECT_EQ(store->stats().misses, 4u);
  // Other layers have their own slots.
  ASSERT_TRUE(Use(*store, 1, {0}).ok());
  EXPECT_EQ(store->stats().misses, 5u);
  // More experts than slots at once is refused, not a deadlock.
  EXPECT_FALSE(Use(*store, 0, {3, 4, 5}).ok());
  EXPECT_EQ(store->stats().bytes_read, 5 * dir->experts()->layers[0].layout.stride);
}

// Drops the page-cache pages of expert e of `layer` (the test standing in for the kernel's
// reclaim).
void EvictFromPageCache(const ModelDir& dir, int layer, int e) {
  const ExpertLayerInfo& info = dir.experts()->layers[static_cast<size_t>(layer)];
  const int fd = open(dir.FilePath(info.file).c_str(), O_RDONLY);
  ASSERT_GE(fd, 0);
  const off_t stride = static_cast<off_t>(info.layout.stride);
  ASSERT_EQ(fdatasync(fd), 0);
  ASSERT_EQ(posix_fadvise(fd, stride * e, stride, POSIX_FADV_DONTNEED), 0);
  close(fd);
}

// Once the kernel has evicted an expert the store had read, the store counts what is resident,
// aims one below, and before each later read drops the least valuable resident expert itself:
// the rarely and long-ago used ones go, the frequently used and the requested ones stay.
TEST(MmapStore, UnderPressureDropsTheLeastUsedExpertsBeforeReading) {
  auto dir = ModelDir::Open(TinyModel());
  ASSERT_TRUE(dir.ok());
  const int layers = static_cast<int>(dir->experts()->layers.size());
  for (int l = 0; l < layers; ++l)
    for (int e = 0; e < dir->experts()->num_experts; ++e) EvictFromPageCache(*dir, l, e);
  auto store = OpenStore(*dir, "mmap", 0);
  ASSERT_NE(store, nullptr);
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(Use(*store, 0, {0}).ok());
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(Use(*store, 0, {1}).ok());
  for (int e : {2, 3, 4, 5}) ASSERT_TRUE(Use(*store, 0, {e}).ok());
  EXPECT_EQ(store->stats().misses, 6u);
  EXPECT_EQ(store->stats().dropped, 0u);  // no pressure seen: the kernel decides
  EvictFromPageCache(*dir, 0, 5);
  ASSERT_TRUE(Use(*store, 0, {5}).ok());
  EXPECT_EQ(store->stats().evicted, 1u);
  // Resident: 0-4 (5 experts); the aim is 4, so two go before 5 is read: 2 and 3, used once
  // and longest ago. (A thread of the store drops them; Settle waits for it.)
  EXPECT_EQ(store->stats().dropped, 2u);
  store->Settle();
  const uint64_t misses = store->stats().misses;
  for (int e : {0, 1, 4, 5}) ASSERT_TRUE(Use(*store, 0, {e}).ok());
  EXPECT_EQ(store->stats().misses, misses);  // all still resident
  ASSERT_TRUE(Use(*store, 0, {2}).ok());
  EXPECT_EQ(store->stats().misses, misses + 1);  // dropped: read again (and one more dropped)
  EXPECT_EQ(store->stats().dropped_reread, 1u);
  EXPECT_EQ(store->stats().dropped, 3u);
  EXPECT_EQ(store->stats().evicted, 1u);  // dropped by the store, not found evicted
}

TEST(SlotStore, EarlyReadsAreUsedAndNeverEvictHeldExperts) {
  auto dir = ModelDir::Open(TinyModel());
  ASSERT_TRUE(dir.ok());
  auto store = OpenStore(*dir, "slots", 3);
  ASSERT_NE(store, nullptr);
  std::vector<ExpertRef> refs(2);
  ASSERT_TRUE(store->Acquire(0, std::vector<int>{4, 5}, refs.data()).ok());
  const std::vector<uint8_t> held(refs[0].blob, refs[0].blob + 64);
  store->Prefetch(0, std::vector<int>{6, 7});  // one free slot: only 6 fits
  // The held experts' memory is untouched by the early read.
  EXPECT_EQ(0, std::memcmp(held.data(), refs[0].blob, held.size()));
  store->Release(0);
  std::vector<uint8_t> resident(1, 0);
  ASSERT_TRUE(store->Begin(0, std::vector<int>{6}, resident.data()).ok());
  ASSERT_TRUE(store->Wait(0, 0).ok());
  store->Release(0);
  EXPECT_EQ(store->stats().prefetches, 1u);
  EXPECT_EQ(store->stats().prefetch_used, 1u);
}

// Flips one byte inside expert `e` of layer `l` of a copy of the model.
std::string DamagedCopy(const std::string& src, int l, int e) {
  const std::string dst = TempDir("damaged");
  EXPECT_TRUE(RemoveAll(dst).ok());
  EXPECT_EQ(std::system(("cp -r '" + src + "' '" + dst + "'").c_str()), 0);
  auto dir = ModelDir::Open(dst);
  EXPECT_TRUE(dir.ok());
  const ExpertLayerInfo& info = dir->experts()->layers[l];
  const std::string path = dir->FilePath(info.file);
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  const uint64_t off = info.layout.stride * e + 100;
  f.seekg(static_cast<std::streamoff>(off));
  char c;
  f.read(&c, 1);
  c ^= 0x5a;
  f.seekp(static_cast<std::streamoff>(off));
  f.write(&c, 1);
  return dst;
}

TEST(ExpertStores, AFlippedByteIsAnErrorNamingFileAndExpertAndTheStoreStaysUsable) {
  const std::string damaged = DamagedCopy(TinyModel(), 1, 3);
  for (const char* kind : {"slots", "mmap"}) {
    SCOPED_TRACE(kind);
    auto dir = ModelDir::Open(damaged);
    ASSERT_TRUE(dir.ok());
    auto store = OpenStore(*dir, kind, 4);
    ASSERT_NE(store, nullptr);
    Status st = Use(*store, 1, {2, 3});
    ASSERT_FALSE(st.ok());
    EXPECT_EQ(st.code(), ErrorCode::kCorrupt);
    EXPECT_NE(st.message().find("layer_001.bin"), std::string::npos) << st.message();
    EXPECT_NE(st.message().find("expert 3 of layer 1"), std::string::npos) << st.message();
    EXPECT_EQ(store->stats().checksum_failures, 2u) << "one re-read, then the error";
    EXPECT_TRUE(Use(*store, 1, {2, 4}).ok());
    EXPECT_TRUE(Use(*store, 0, {3}).ok());
    EXPECT_FALSE(Use(*store, 1, {3}).ok()) << "the bad blob stays an error";
  }
  (void)RemoveAll(damaged);
}

// Logits of a prompt under one store configuration.
std::vector<float> Logits(const std::string& model, const std::string& kind, uint64_t budget,
                          const std::vector<int>& ids, int64_t chunk, std::string* plan = nullptr) {
  EngineOptions o;
  o.model_dir = model;
  o.expert_store = *ParseExpertStoreKind(kind);
  o.memory_budget = budget;
  o.threads = 2;
  o.max_context = 512;
  o.prefill_chunk = chunk;
  auto engine = Engine::Load(o);
  EXPECT_TRUE(engine.ok()) << engine.status().ToString();
  if (!engine.ok()) return {};
  if (plan && (*engine)->model().memory_plan())
    *plan = (*engine)->model().memory_plan()->Describe();
  auto s = (*engine)->NewSession();
  auto all = s->Prefill(ids, true);
  EXPECT_TRUE(all.ok());
  std::vector<float> out = *all;
  // And decode a few tokens (one token at a time takes the other path).
  for (int t = 0; t < 6; ++t) {
    auto d = s->Decode((ids[t] * 7 + 3) % (*engine)->config().vocab_size);
    EXPECT_TRUE(d.ok());
    out.insert(out.end(), d->begin(), d->end());
  }
  return out;
}

TEST(ExpertStores, EveryStoreGivesBitIdenticalLogits) {
  std::vector<std::string> models = {TinyModel(), TinyModel(2.0)};
  // The golden fixtures too.
  for (const char* fx : {"moe_h128_l3_k2", "moe_h64_l12_k4_g32", "moe_h64_l4_k3"}) {
    ConvertOptions co;
    co.source_dir =
        JoinPath(REDWING_SOURCE_DIR, std::string("tests/fixtures/golden/") + fx + "/mlx");
    co.out_dir = TempDir(std::string("fx_") + fx);
    co.quantize = "keep";
    (void)RemoveAll(co.out_dir);
    ASSERT_TRUE(ConvertCheckpoint(co).ok());
    models.push_back(co.out_dir);
  }
  for (const std::string& m : models) {
    SCOPED_TRACE(m);
    auto dir = ModelDir::Open(m);
    ASSERT_TRUE(dir.ok());
    const ModelConfig& c = dir->config();
    std::vector<int> ids{2};
    for (int i = 1; i < 40; ++i) ids.push_back((i * 131 + 17) % c.vocab_size);
    const std::vector<float> ref = Logits(m, "mmap", 0, ids, 16);
    ASSERT_FALSE(ref.empty());
    // A slot for every expert, then the planner's minimum (top_k slots per layer: prefill runs
    // in batches) and a budget between.
    const std::vector<float> unlimited = Logits(m, "slots", 0, ids, 16);
    ASSERT_EQ(unlimited.size(), ref.size());
    EXPECT_EQ(0, std::memcmp(unlimited.data(), ref.data(), ref.size() * sizeof(float)));
    EngineOptions tiny_budget;
    tiny_budget.model_dir = m;
    tiny_budget.max_context = 512;
    tiny_budget.prefill_chunk = 16;
    tiny_budget.expert_store = ExpertStoreKind::kSlots;
    tiny_budget.memory_budget = 1;
    auto too_small = Engine::Load(tiny_budget);
    ASSERT_FALSE(too_small.ok());
    EXPECT_NE(too_small.status().message().find("the minimum is"), std::string::npos)
        << too_small.status().message();
    tiny_budget.memory_budget = 0;
    auto full = Engine::Load(tiny_budget);
    ASSERT_TRUE(full.ok());
    const MemoryPlan* plan = (*full)->model().memory_plan();
    ASSERT_NE(plan, nullptr);
    for (uint64_t budget : {plan->minimum_budget, (plan->minimum_budget + plan->full_budget) / 2}) {
      std::string described;
      const std::vector<float> got = Logits(m, "slots", budget, ids, 16, &described);
      SCOPED_TRACE(described);
      ASSERT_EQ(got.size(), ref.size());
      EXPECT_EQ(0, std::memcmp(got.data(), ref.data(), ref.size() * sizeof(float)));
    }
  }
  for (size_t i = 2; i < models.size(); ++i) (void)RemoveAll(models[i]);
}

TEST(ReadQueue, FallsBackToPreadWhenIoUringIsUnavailable) {
  setenv("REDWING_DISABLE_IO_URING", "1", 1);
  auto fallback = ReadQueue::Create(IoBackend::kAuto, 4);
  auto forced = ReadQueue::Create(IoBackend::kIoUring, 4);
  unsetenv("REDWING_DISABLE_IO_URING");
  ASSERT_TRUE(fallback.ok());
  EXPECT_STREQ((*fallback)->backend(), "pread");
  ASSERT_FALSE(forced.ok()) << "asking for io_uring explicitly must not silently fall back";
  EXPECT_NE(forced.status().message().find("io_uring"), std::string::npos);
  EXPECT_FALSE(ParseIoBackend("aio").ok());
}

TEST(ReadQueue, BothBackendsReadTheSameBytesWithShortFilesReported) {
  auto dir = ModelDir::Open(TinyModel());
  ASSERT_TRUE(dir.ok());
  const ExpertLayerInfo& info = dir->experts()->layers[2];
  const std::string path = dir->FilePath(info.file);
  auto want = ReadFileToString(path);
  ASSERT_TRUE(want.ok());
  const int fd = ::open(path.c_str(), O_RDONLY);
  ASSERT_GE(fd, 0);
  for (const char* backend : {"pread", "io_uring"}) {
    SCOPED_TRACE(backend);
    auto q = ReadQueue::Create(*ParseIoBackend(backend), 3);
    if (!q.ok() && std::string(backend) == "io_uring") GTEST_SKIP() << q.status().ToString();
    ASSERT_TRUE(q.ok());
    const int n = dir->config().num_experts;
    const uint64_t stride = info.layout.stride;
    std::vector<uint8_t> got(stride * n, 0);
    std::mutex mu;
    std::condition_variable cv;
    int done = 0;
    std::vector<Status> errors;
    for (int e = n - 1; e >= 0; --e) {
      ReadJob j;
      j.fd = fd;
      j.path = path;
      j.offset = stride * e;
      j.length = stride;
      j.dst = e % 2 ? &got[stride * e] : nullptr;  // half into the queue's own buffers
      j.done = [&, e](const Status& st, const uint8_t* data) {
        if (st.ok() && e % 2 == 0) std::memcpy(&got[stride * e], data, stride);
        std::lock_guard<std::mutex> lock(mu);
        if (!st.ok()) errors.push_back(st);
        ++done;
        cv.notify_all();
      };
      (*q)->Submit(std::move(j), e % 3 != 0);
    }
    // A read past the end is an error, not a hang.
    ReadJob past;
    past.fd = fd;
    past.path = path;
    past.offset = want->size() - 10;
    past.length = 100;
    Status past_status;
    past.done = [&](const Status& st, const uint8_t*) {
      std::lock_guard<std::mutex> lock(mu);
      past_status = st;
      ++done;
      cv.notify_all();
    };
    (*q)->Submit(std::move(past), true);
    std::unique_lock<std::mutex> lock(mu);
    ASSERT_TRUE(cv.wait_for(lock, std::chrono::seconds(30), [&] { return done == n + 1; }));
    EXPECT_TRUE(errors.empty());
    EXPECT_EQ(0, std::memcmp(got.data(), want->data(), got.size()));
    EXPECT_EQ(past_status.code(), ErrorCode::kCorrupt) << past_status.ToString();
  }
  close(fd);
}

TEST(ExpertStores, EarlyReadsByRouterKeepTheLogitsAndAreCounted) {
  const std::string m = TinyModel(1.0);
  std::vector<int> ids{2, 40, 7, 300, 12};
  auto run = [&](const std::string& kind, const std::string& early, ExpertStoreStats* stats) {
    EngineOptions o;
    o.model_dir = m;
    o.expert_store = *ParseExpertStoreKind(kind);
    o.early_expert_read = *ParseEarlyRead(early);
    o.threads = 2;
    o.max_context = 256;
    o.prefill_chunk = 8;
    auto engine = Engine::Load(o);
    EXPECT_TRUE(engine.ok()) << engine.status().ToString();
    auto s = (*engine)->NewSession();
    std::vector<float> out = *s->Prefill(ids, true);
    for (int t = 0; t < 12; ++t) {
      auto d = s->Decode((t * 37 + 5) % (*engine)->config().vocab_size);
      out.insert(out.end(), d->begin(), d->end());
    }
    *stats = (*engine)->expert_stats();
    return out;
  };
  ExpertStoreStats base, slots_early, mmap_early;
  const auto ref = run("mmap", "off", &base);
  const auto a = run("slots", "router", &slots_early);
  const auto b = run("mmap", "router", &mmap_early);
  EXPECT_EQ(0, std::memcmp(a.data(), ref.data(), ref.size() * sizeof(float)));
  EXPECT_EQ(0, std::memcmp(b.data(), ref.data(), ref.size() * sizeof(float)));
  EXPECT_EQ(base.prefetches, 0u);
  EXPECT_GT(slots_early.prefetches + slots_early.hits, 0u);
}

}  // namespace
}  // namespace rw
