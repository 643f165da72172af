#include "bench/bench.h"

#include "experts/predictor.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <random>
#include <set>
#include <sstream>
#include <thread>

#include "base/file.h"
#include "base/timer.h"
#include "base/trace.h"
#include "engine/drafter_dflash.h"
#include "engine/generate.h"
#include "experts/memory_plan.h"
#include "sample/sampler.h"

namespace rw {
namespace {

namespace fs = std::filesystem;

// "~0" and other huge values mean "no limit" in cgroup v1.
constexpr uint64_t kNoLimit = uint64_t{1} << 60;

bool ReadSmallFile(const std::string& path, std::string* out) {
  std::ifstream f(path);
  if (!f) return false;
  std::ostringstream ss;
  ss << f.rdbuf();
  *out = ss.str();
  return true;
}

// A file holding one number ("max" → nullopt, missing → nullopt).
std::optional<uint64_t> ReadNumberFile(const std::string& path) {
  std::string s;
  if (!ReadSmallFile(path, &s)) return std::nullopt;
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  if (s.empty() || s == "max") return std::nullopt;
  char* end = nullptr;
  const unsigned long long v = std::strtoull(s.c_str(), &end, 10);
  if (end == s.c_str()) return std::nullopt;
  return static_cast<uint64_t>(v);
}

// "key value" lines (memory.stat) → the value of key, or 0.
uint64_t StatValue(const std::string& text, const std::string& key) {
  std::istringstream in(text);
  std::string k;
  unsigned long long v = 0;
  while (in >> k >> v)
    if (k == key) return v;
  return 0;
}

std::vector<std::string> Split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::string cur;
  for (char c : s) {
    if (c == sep) {
      out.push_back(cur);
      cur.clear();
    } else {
      cur += c;
    }
  }
  out.push_back(cur);
  return out;
}

struct CgroupMount {
  std::string root, mount_point;
};

// Mount points of the cgroup2 hierarchy and of the v1 hierarchy holding the memory controller.
void FindCgroupMounts(std::optional<CgroupMount>* v2, std::optional<CgroupMount>* v1_memory) {
  std::ifstream f("/proc/self/mountinfo");
  std::string line;
  while (std::getline(f, line)) {
    // id parent major:minor root mount-point options [optional...] - fstype source super-options
    const size_t dash = line.find(" - ");
    if (dash == std::string::npos) continue;
    std::istringstream pre(line.substr(0, dash)), post(line.substr(dash + 3));
    std::string id, parent, dev, root, mnt, fstype, source, super;
    pre >> id >> parent >> dev >> root >> mnt;
    post >> fstype >> source >> super;
    if (fstype == "cgroup2" && !v2->has_value()) {
      *v2 = CgroupMount{root, mnt};
    } else if (fstype == "cgroup" && !v1_memory->has_value()) {
      for (const std::string& o : Split(super, ','))
        if (o == "memory") *v1_memory = CgroupMount{root, mnt};
    }
  }
}

std::string CgroupDir(const CgroupMount& m, std::string path) {
  if (m.root != "/" && path.rfind(m.root, 0) == 0) path = path.substr(m.root.size());
  return m.mount_point + (path == "/" ? "" : path);
}

// The usage file of the memory cgroup (for the sampler), or "".
std::string CgroupUsageFile(const CgroupMemory& c) {
  if (c.version == 2) return JoinPath(c.path, "memory.current");
  if (c.version == 1) return JoinPath(c.path, "memory.usage_in_bytes");
  return "";
}

// Samples RssAnon, RssFile and the cgroup's usage every few milliseconds, keeping maxima.
class MemorySampler {
 public:
  explicit MemorySampler(std::string cgroup_usage_file)
      : cgroup_file_(std::move(cgroup_usage_file)) {
    Reset();
    thread_ = std::thread([this] {
      trace::SetThreadName("bench memory sampler");
      std::unique_lock<std::mutex> lock(mu_);
      while (!stop_) {
        cv_.wait_for(lock, std::chrono::milliseconds(5));
        lock.unlock();
        SampleNow();
        lock.lock();
      }
    });
  }
  ~MemorySampler() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  void SampleNow() {
    const RssBreakdown r = CurrentRss();
    Max(peak_anon_, r.anon);
    Max(peak_file_, r.file);
    if (!cgroup_file_.empty())
      if (auto v = ReadNumberFile(cgroup_file_)) Max(peak_cgroup_, *v);
  }
  void Reset() {
    peak_anon_ = peak_file_ = peak_cgroup_ = 0;
    SampleNow();
  }
  uint64_t peak_anon() const { return peak_anon_; }
  uint64_t peak_file() const { return peak_file_; }
  uint64_t peak_cgroup() const { return peak_cgroup_; }

 private:
  static void Max(std::atomic<uint64_t>& a, uint64_t v) {
    uint64_t cur = a.load(std::memory_order_relaxed);
    while (v > cur && !a.compare_exchange_weak(cur, v, std::memory_order_relaxed)) {
    }
  }
  std::string cgroup_file_;
  std::atomic<uint64_t> peak_anon_{0}, peak_file_{0}, peak_cgroup_{0};
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;
};

ExpertStoreStats Diff(const ExpertStoreStats& a, const ExpertStoreStats& b) {
  ExpertStoreStats d;
  d.acquires = b.acquires - a.acquires;
  d.bytes_acquired = b.bytes_acquired - a.bytes_acquired;
  d.hits = b.hits - a.hits;
  d.misses = b.misses - a.misses;
  d.bytes_read = b.bytes_read - a.bytes_read;
  d.prefetches = b.prefetches - a.prefetches;
  d.prefetch_used = b.prefetch_used - a.prefetch_used;
  d.checksum_failures = b.checksum_failures - a.checksum_failures;
  d.evicted = b.evicted - a.evicted;
  d.dropped = b.dropped - a.dropped;
  d.dropped_reread = b.dropped_reread - a.dropped_reread;
  d.wait_seconds = b.wait_seconds - a.wait_seconds;
  return d;
}

ProcIo Diff(const ProcIo& a, const ProcIo& b) {
  ProcIo d;
  d.available = a.available && b.available;
  d.read_bytes = b.read_bytes - a.read_bytes;
  d.rchar = b.rchar - a.rchar;
  return d;
}

uint64_t SplitMix64(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

uint64_t DirBytes(const std::string& dir) {
  uint64_t total = 0;
  std::error_code ec;
  for (fs::recursive_directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec))
    if (it->is_regular_file(ec)) total += it->file_size(ec);
  return total;
}

void Progress(const BenchOptions& o, const std::string& line) {
  if (o.progress) o.progress(line);
}

}  // namespace

// --- Measurement helpers -----------------------------------------------------------------

ProcIo ReadProcIo() {
  ProcIo io;
  std::string text;
  if (!ReadSmallFile("/proc/self/io", &text)) return io;
  std::istringstream in(text);
  std::string key;
  unsigned long long v = 0;
  bool have_read = false;
  while (in >> key >> v) {
    if (key == "rchar:") io.rchar = v;
    if (key == "read_bytes:") {
      io.read_bytes = v;
      have_read = true;
    }
  }
  io.available = have_read;
  return io;
}

CgroupMemory ReadCgroupMemory() {
  CgroupMemory c;
  std::optional<CgroupMount> v2, v1;
  FindCgroupMounts(&v2, &v1);
  std::ifstream f("/proc/self/cgroup");
  std::string line, v2_path, v1_path;
  bool have_v2 = false, have_v1 = false;
  while (std::getline(f, line)) {
    // hierarchy-id:controller-list:path
    const size_t a = line.find(':'), b = line.find(':', a + 1);
    if (a == std::string::npos || b == std::string::npos) continue;
    const std::string id = line.substr(0, a), ctrl = line.substr(a + 1, b - a - 1);
    const std::string path = line.substr(b + 1);
    if (id == "0" && ctrl.empty()) {
      v2_path = path;
      have_v2 = true;
    }
    for (const std::string& cn : Split(ctrl, ','))
      if (cn == "memory") {
        v1_path = path;
        have_v1 = true;
      }
  }
  std::string stat;
  if (have_v2 && v2 && PathExists(JoinPath(CgroupDir(*v2, v2_path), "memory.current"))) {
    c.version = 2;
    c.path = CgroupDir(*v2, v2_path);
    c.current = ReadNumberFile(JoinPath(c.path, "memory.current")).value_or(0);
    c.peak = ReadNumberFile(JoinPath(c.path, "memory.peak")).value_or(0);
    if (ReadSmallFile(JoinPath(c.path, "memory.stat"), &stat)) {
      c.file = StatValue(stat, "file");
      c.anon = StatValue(stat, "anon");
    }
    // The tightest memory.max of the cgroup and its ancestors below the mount point.
    std::string dir = c.path;
    while (dir.size() >= v2->mount_point.size()) {
      if (auto m = ReadNumberFile(JoinPath(dir, "memory.max")))
        if (c.limit == 0 || *m < c.limit) c.limit = *m;
      if (dir == v2->mount_point) break;
      dir = ParentPath(dir);
    }
  } else if (have_v1 && v1 &&
             PathExists(JoinPath(CgroupDir(*v1, v1_path), "memory.usage_in_bytes"))) {
    c.version = 1;
    c.path = CgroupDir(*v1, v1_path);
    c.current = ReadNumberFile(JoinPath(c.path, "memory.usage_in_bytes")).value_or(0);
    c.peak = ReadNumberFile(JoinPath(c.path, "memory.max_usage_in_bytes")).value_or(0);
    uint64_t limit = ReadNumberFile(JoinPath(c.path, "memory.limit_in_bytes")).value_or(0);
    if (ReadSmallFile(JoinPath(c.path, "memory.stat"), &stat)) {
      // hierarchical_memory_limit: the tightest limit including the ancestors'.
      if (const uint64_t h = StatValue(stat, "hierarchical_memory_limit"); h > 0)
        limit = std::min(limit == 0 ? h : limit, h);
      c.file = StatValue(stat, "total_cache");
      c.anon = StatValue(stat, "total_rss");
    }
    c.limit = limit >= kNoLimit ? 0 : limit;
  }
  return c;
}

Result<uint64_t> ResidentFileBytes(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Error(ErrorCode::kIo, "{}: cannot open: {}", path, std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    return Error(ErrorCode::kIo, "{}: fstat: {}", path, std::strerror(err));
  }
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  if (size == 0) {
    ::close(fd);
    return uint64_t{0};
  }
  void* p = ::mmap(nullptr, size, PROT_READ, MAP_SHARED, fd, 0);
  ::close(fd);
  if (p == MAP_FAILED) return Error(ErrorCode::kIo, "{}: mmap: {}", path, std::strerror(errno));
  const uint64_t page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  const uint64_t pages = (size + page - 1) / page;
  std::vector<unsigned char> vec(pages);
  const int rc = ::mincore(p, size, vec.data());
  const int err = errno;
  ::munmap(p, size);
  if (rc != 0) return Error(ErrorCode::kIo, "{}: mincore: {}", path, std::strerror(err));
  uint64_t resident = 0;
  for (uint64_t i = 0; i < pages; ++i)
    if (vec[i] & 1) resident += std::min(page, size - i * page);
  return resident;
}

Result<PageCacheDrop> DropFromPageCache(const std::string& dir) {
  if (!IsDirectory(dir)) return Error(ErrorCode::kNotFound, "{}: not a directory", dir);
  PageCacheDrop d;
  std::error_code ec;
  std::vector<std::string> files;
  for (fs::recursive_directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec))
    if (it->is_regular_file(ec)) files.push_back(it->path().string());
  if (ec) return Error(ErrorCode::kIo, "{}: cannot list: {}", dir, ec.message());
  std::sort(files.begin(), files.end());
  for (const std::string& path : files) {
    RW_ASSIGN_OR_RETURN(uint64_t before, ResidentFileBytes(path));
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return Error(ErrorCode::kIo, "{}: cannot open: {}", path, std::strerror(errno));
    struct stat st {};
    const bool sized = ::fstat(fd, &st) == 0;
    const int rc = ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    ::close(fd);
    if (rc != 0)
      return Error(ErrorCode::kIo, "{}: posix_fadvise(DONTNEED): {}", path, std::strerror(rc));
    RW_ASSIGN_OR_RETURN(uint64_t after, ResidentFileBytes(path));
    ++d.files;
    d.bytes += sized ? static_cast<uint64_t>(st.st_size) : 0;
    d.resident_before += before;
    d.resident_after += after;
  }
  return d;
}

std::vector<int> SyntheticPrompt(int64_t n, int vocab_size, int bos_id, uint64_t seed) {
  std::vector<int> ids;
  if (n <= 0 || vocab_size <= 0) return ids;
  ids.reserve(static_cast<size_t>(n));
  ids.push_back(bos_id >= 0 && bos_id < vocab_size ? bos_id : 0);
  // Keep clear of the low ids (special and control tokens in Gemma's vocabulary) when the
  // vocabulary is large enough for that to leave plenty.
  const int lo = vocab_size >= 4096 ? 256 : 0;
  const uint64_t span = static_cast<uint64_t>(vocab_size - lo);
  uint64_t state = seed ^ 0x5EEDB0A7C0FFEEull;
  for (int64_t i = 1; i < n; ++i) ids.push_back(lo + static_cast<int>(SplitMix64(state) % span));
  return ids;
}

int SampleUnfiltered(std::span<const float> logits, uint64_t seed, int64_t position) {
  return GumbelMaxDraw(logits, 1.0, seed, position);
}

// --- The benchmark -----------------------------------------------------------------------

double PhaseStats::hit_rate() const {
  const uint64_t n = experts.hits + experts.misses;
  return n == 0 ? -1.0 : static_cast<double>(experts.hits) / static_cast<double>(n);
}

namespace {

SamplingParams BenchSampling(uint64_t seed) {
  SamplingParams p;
  p.temperature = 1.0f;
  p.top_k = 0;
  p.top_p = 1.0f;
  p.min_p = 0.0f;
  p.repetition_penalty = 1.0f;
  p.seed = seed;
  return p;
}

// Tokens per Prefill call: a chunk, or a layer-major span, as generation appends a prompt.
int64_t PrefillCallTokens(const Engine& engine) {
  return std::max<int64_t>({1, engine.prefill_chunk(), engine.prefill_span()});
}

// The warm-up session: its own prompt (a seed no case uses), prefilled in the engine's chunks,
// then a few sampled tokens so decode's paths and scratch are warm too. Nothing is recorded.
Status RunWarmup(const Engine& engine, const BenchOptions& o, int64_t prompt_tokens) {
  const ModelConfig& cfg = engine.config();
  const std::vector<int> prompt = SyntheticPrompt(prompt_tokens, cfg.vocab_size, cfg.bos_token_id,
                                                  o.seed * 0x100000001B3ull + 0x5741524Dull);
  auto session = engine.NewSession();
  const int64_t chunk = PrefillCallTokens(engine);
  std::vector<float> logits;
  for (int64_t i = 0; i < prompt_tokens; i += chunk) {
    const int64_t m = std::min(chunk, prompt_tokens - i);
    RW_ASSIGN_OR_RETURN(logits, session->Prefill(std::span<const int>(&prompt[i], m)));
  }
  for (int64_t i = 0; i < kWarmupDecodeTokens; ++i) {
    const int tok = SampleUnfiltered(logits, o.seed, session->position());
    RW_ASSIGN_OR_RETURN(logits, session->Decode(tok));
  }
  return Status::Ok();
}

// The case's stream again through Generate, plain and then with the drafter, each on a fresh
// session with the same prompt: the bench's sampling (the Sampler draw SampleUnfiltered equals)
// and no stop ids, so both must produce the plain run's stream. Both go through the same loop so
// that their rates compare (the bench's own decode loop also records routing and samples memory).
// max_new is one more than decode_tokens because Generate's first token comes from the prefill,
// as the plain run's does.
Status RunSpeculation(const Engine& engine, const BenchOptions& o, const std::vector<int>& prompt,
                      BenchCase* c) {
  std::shared_ptr<Drafter> drafter = MakeDrafter(o.drafter, c->generated, o.seed);
  if (o.drafter.kind == DrafterSpec::Kind::kDFlash) {
    RW_ASSIGN_OR_RETURN(drafter, MakeDFlashDrafter(o.drafter.path, engine));
  }
  SpeculationRun s;
  s.drafter = drafter->name();
  s.simulated = o.drafter.kind == DrafterSpec::Kind::kOracle;
  s.draft_tokens = o.draft_tokens;
  s.tokens = o.decode_tokens;
  GenerateOptions g;
  g.sampling = BenchSampling(o.seed);
  g.max_new_tokens = o.decode_tokens + 1;
  auto run = [&](const char* what) -> Result<GenerateResult> {
    auto session = engine.NewSession();
    SessionTimeline timeline(*session);
    TraceScope ts(what, "bench", "tokens", o.decode_tokens);
    RW_ASSIGN_OR_RETURN(GenerateResult r, Generate(timeline, nullptr, prompt, g));
    r.ids.resize(std::min(r.ids.size(), c->generated.size()));
    return r;
  };
  RW_ASSIGN_OR_RETURN(GenerateResult plain, run("plain decode (generate)"));
  g.drafter = drafter;
  g.draft_tokens = o.draft_tokens;
  RW_ASSIGN_OR_RETURN(GenerateResult r, run("speculative decode"));
  s.seconds = r.decode_seconds;
  s.plain_seconds = plain.decode_seconds;
  s.identical = r.ids == c->generated && plain.ids == c->generated;
  s.drafted = r.drafted;
  s.accepted = r.accepted;
  s.verify_calls = r.verify_calls;
  s.drafted_at = r.drafted_at;
  s.accepted_at = r.accepted_at;
  Progress(o, fmt::format("{}: speculative decode ({}{}, {}) {:.2f} tok/s vs {:.2f} plain, "
                          "{:.2f} accepted per verify call{}",
                          c->name, s.drafter, s.simulated ? ": simulated acceptance" : "",
                          DraftTokensText(s.draft_tokens), s.tok_s(), s.plain_tok_s(),
                          s.mean_accepted(), s.identical ? "" : "; NOT the plain run's tokens"));
  c->speculation = std::move(s);
  return Status::Ok();
}

Status RunCase(const Engine& engine, const BenchOptions& o, int64_t prompt_tokens,
               MemorySampler& mem, BenchCase* out) {
  BenchCase& c = *out;
  c.name = fmt::format("prompt{}", prompt_tokens);
  c.prompt_tokens = prompt_tokens;
  const ModelConfig& cfg = engine.config();
  const std::vector<int> prompt =
      SyntheticPrompt(prompt_tokens, cfg.vocab_size, cfg.bos_token_id,
                      o.seed * 0x100000001B3ull + static_cast<uint64_t>(prompt_tokens));
  auto session = engine.NewSession();
  const uint64_t syncs0 = session->host_syncs();
  mem.Reset();
  TraceScope case_scope("case", "bench", "prompt_tokens", prompt_tokens);

  // Prefill, one chunk (or layer-major span) per call, as generation appends a prompt, so the
  // trace and the memory sampler see each call.
  const ExpertStoreStats es0 = engine.expert_stats();
  const ProcIo io0 = ReadProcIo();
  std::vector<float> logits;
  Stopwatch prefill_sw;
  {
    TraceScope s("prefill", "bench", "tokens", prompt_tokens);
    const int64_t chunk = PrefillCallTokens(engine);
    for (int64_t i = 0; i < prompt_tokens; i += chunk) {
      const int64_t m = std::min(chunk, prompt_tokens - i);
      TraceScope cs("prefill chunk", "bench", "pos", i);
      RW_ASSIGN_OR_RETURN(logits, session->Prefill(std::span<const int>(&prompt[i], m)));
      mem.SampleNow();
    }
  }
  c.prefill.seconds = prefill_sw.Seconds();
  c.prefill.tokens = prompt_tokens;
  c.prefill.forward_seconds = session->prefill_total().seconds;
  c.prefill.parts = session->prefill_total().parts;
  const ExpertStoreStats es1 = engine.expert_stats();
  const ProcIo io1 = ReadProcIo();
  c.prefill.experts = Diff(es0, es1);
  c.prefill.io = Diff(io0, io1);
  const uint64_t syncs1 = session->host_syncs();
  c.prefill_host_syncs = syncs1 - syncs0;

  auto sample = [&]() {
    TraceScope s("sample", "bench");
    Stopwatch sw;
    const int tok = SampleUnfiltered(logits, o.seed, session->position());
    c.sample_seconds += sw.Seconds();
    return tok;
  };
  int tok = sample();
  c.ttft_seconds = prefill_sw.Seconds();
  Progress(
      o, fmt::format("{}: prefill {} tokens in {:.2f} s ({:.2f} tok/s), first token {:.2f} s",
                     c.name, prompt_tokens, c.prefill.seconds, c.prefill.tok_s(), c.ttft_seconds));

  // Decode: each step feeds the sampled token and samples the next one; the routing of every
  // decoded token is recorded to report how varied it was.
  RoutingTrace routing;
  session->set_routing_trace(&routing);
  const bool device_sampling = session->samples_on_device() && !o.host_sampling;
  c.sampled_on_device = device_sampling;
  Stopwatch decode_sw;
  {
    TraceScope s("decode", "bench", "tokens", o.decode_tokens);
    for (int64_t i = 0; i < o.decode_tokens; ++i) {
      const int fed = tok;
      {
        TraceScope ts("decode token", "bench", "index", i);
        // On the GPU the draw happens there (the logits stay on the device).
        if (device_sampling) {
          RW_ASSIGN_OR_RETURN(tok, session->DecodeSampled(fed, o.seed));
        } else {
          RW_ASSIGN_OR_RETURN(logits, session->Decode(fed));
        }
      }
      c.generated.push_back(fed);
      mem.SampleNow();
      if (!device_sampling) tok = sample();
    }
  }
  c.decode.seconds = decode_sw.Seconds();
  c.decode.tokens = o.decode_tokens;
  c.decode.forward_seconds = session->decode_total().seconds;
  c.decode.parts = session->decode_total().parts;
  c.decode.experts = Diff(es1, engine.expert_stats());
  c.decode.io = Diff(io1, ReadProcIo());
  c.decode_host_syncs = session->host_syncs() - syncs1;
  c.distinct_generated =
      static_cast<int>(std::set<int>(c.generated.begin(), c.generated.end()).size());
  session->set_routing_trace(nullptr);
  if (routing.tokens() > 0) {
    for (int l = 0; l < routing.layers; ++l) {
      std::set<int> seen;
      for (int64_t t = 0; t < routing.tokens(); ++t)
        seen.insert(routing.token(t, l), routing.token(t, l) + routing.top_k);
      c.distinct_experts_per_layer.push_back(static_cast<int>(seen.size()));
    }
    c.routing_note = fmt::format("distinct experts per layer over {} decoded tokens (of {})",
                                 routing.tokens(), cfg.num_experts);
  } else if (engine.backend() == BackendKind::kCuda) {
    c.routing_note = "routing is not recorded on the CUDA backend";
  } else {
    c.routing_note = "no routed experts in this model";
  }

  mem.SampleNow();
  const RssBreakdown rss = CurrentRss();
  // The end reading comes after the last sample: a peak below it would be no peak.
  c.memory.peak_anon = std::max(mem.peak_anon(), rss.anon);
  c.memory.peak_file = std::max(mem.peak_file(), rss.file);
  c.memory.anon_end = rss.anon;
  c.memory.file_end = rss.file;
  c.memory.peak_rss_process = PeakRssBytes();
  c.memory.cgroup = ReadCgroupMemory();
  c.memory.cgroup_peak_sampled = mem.peak_cgroup();
  if (o.decode_tokens > 0)
    Progress(
        o, fmt::format("{}: decode {} tokens in {:.2f} s ({:.2f} tok/s), {} distinct ids", c.name,
                       o.decode_tokens, c.decode.seconds, c.decode.tok_s(), c.distinct_generated));
  if (o.drafter.kind != DrafterSpec::Kind::kOff && o.draft_tokens != 0 && o.decode_tokens > 0)
    RW_RETURN_IF_ERROR(RunSpeculation(engine, o, prompt, &c));
  return Status::Ok();
}

}  // namespace

Result<BenchReport> RunBench(const BenchOptions& options) {
  BenchReport rep;
  rep.options = options;
  rep.options.progress = nullptr;
  const BenchOptions& o = options;
  if (o.prompt_tokens.empty())
    return Error(ErrorCode::kInvalidArgument, "no prompt lengths given (e.g. 128,3000)");
  for (int64_t p : o.prompt_tokens)
    if (p < 1) return Error(ErrorCode::kInvalidArgument, "prompt length must be >= 1, not {}", p);
  if (o.decode_tokens < 0)
    return Error(ErrorCode::kInvalidArgument, "decode tokens must be >= 0, not {}",
                 o.decode_tokens);
  RW_RETURN_IF_ERROR(BenchSampling(o.seed).Validate());
  rep.model_dir = o.engine.model_dir;
  rep.decode_mode = fmt::format(
      "sampled: temperature 1, top-k off, top-p off, seed {} (Sampler's Gumbel-max draw; stop ids "
      "do not end the run)",
      o.seed);
  if (!IsDirectory(o.engine.model_dir))
    return Error(ErrorCode::kNotFound, "{}: no such model directory", o.engine.model_dir);

  if (o.cold) {
    TraceScope s("drop page cache", "bench");
    RW_ASSIGN_OR_RETURN(PageCacheDrop d, DropFromPageCache(o.engine.model_dir));
    rep.cold_drop = d;
    Progress(o, fmt::format("cold: dropped {} files ({}) from the page cache; resident before {}, "
                            "after {}",
                            d.files, FormatBytes(d.bytes), FormatBytes(d.resident_before),
                            FormatBytes(d.resident_after)));
  }

  EngineOptions eo = o.engine;
  eo.load_tokenizer = false;
  const ProcIo io0 = ReadProcIo();
  Stopwatch load_sw;
  std::shared_ptr<Engine> engine;
  {
    TraceScope s("load", "bench");
    RW_ASSIGN_OR_RETURN(engine, Engine::Load(eo));
  }
  rep.load_seconds = load_sw.Seconds();
  rep.load_io = Diff(io0, ReadProcIo());
  if (!o.disk_probe) {
    rep.disk_note = "off";
  } else if (engine->model().experts() == nullptr) {
    rep.disk_note = "the model has no routed experts";
  } else {
    TraceScope s("disk probe", "bench");
    DiskProbeOptions po;
    po.depth = std::max(1, o.engine.io_threads);
    // Fresh blobs every run: ones read by an earlier run may still sit in a host-side cache.
    po.seed = std::random_device{}();
    Result<DiskProbeResult> d = ProbeExpertDisk(o.engine.model_dir, po);
    if (d.ok()) {
      rep.disk = *d;
      Progress(o, fmt::format("disk probe: {:.2f} GB/s with {} reads in flight, {:.2f} GB/s "
                              "({:.1f} ms per blob) one at a time",
                              d->parallel_gb_s, d->depth, d->serial_gb_s, d->serial_ms_per_blob));
    } else {
      rep.disk_note = d.status().message();
    }
  }
  rep.core_bytes_per_token = engine->model().core_bytes_per_token();
  if (!o.memory_probe) {
    rep.memory_note = "off";
  } else if (engine->backend() != BackendKind::kCpu) {
    rep.memory_note = "not run: the weights are in GPU memory";
  } else if (o.cold) {
    // Its 256 MB would crowd the page cache a cold run (often under a memory cap) measures.
    rep.memory_note = "not run with --cold";
  } else {
    TraceScope s("memory probe", "bench");
    Result<MemoryProbeResult> m = ProbeMemoryRead(engine->pool());
    if (m.ok()) {
      rep.memory = *m;
      Progress(o,
               fmt::format("memory probe: {:.2f} GB/s read with {} threads", m->gb_s, m->threads));
    } else {
      rep.memory_note = m.status().message();
    }
  }
  const RssBreakdown rss = CurrentRss();
  rep.load_anon = rss.anon;
  rep.load_file = rss.file;
  rep.config = engine->config();
  rep.threads = engine->pool() != nullptr ? engine->pool()->size() : 1;
  rep.prefill_chunk = engine->prefill_chunk();
  rep.prefill_span = engine->prefill_span();
  rep.backend = BackendName(engine->backend());
  rep.kv_type = engine->kv_type();
  rep.cuda_experts = engine->cuda_expert_path();
  const ExpertStore* store = engine->model().experts();
  rep.expert_store = store != nullptr ? store->kind() : "none";
  rep.io_backend = store != nullptr ? store->io_backend() : "none";
  const Status& lock = engine->model().core_lock_status();
  rep.core_lock = lock.ok() ? "locked" : lock.message();
  if (const MemoryPlan* plan = engine->model().memory_plan()) rep.memory_plan = plan->Describe();
  rep.core_bytes = DirBytes(o.engine.model_dir) - DirBytes(JoinPath(o.engine.model_dir, "experts"));
  rep.expert_bytes = DirBytes(JoinPath(o.engine.model_dir, "experts"));
  Progress(o, fmt::format("loaded {} in {:.2f} s ({} store, {} threads){}", o.engine.model_dir,
                          rep.load_seconds, rep.expert_store, rep.threads,
                          rep.memory_plan.empty() ? "" : "; " + rep.memory_plan));

  rep.warmup_tokens = o.warmup_tokens >= 0 ? o.warmup_tokens : (o.cold ? 0 : 128);
  if (rep.warmup_tokens + kWarmupDecodeTokens > engine->max_context())
    return Error(ErrorCode::kOutOfRange,
                 "the {}-token warm-up needs a context of {} tokens, but the maximum context is "
                 "{} (--warmup 0 turns it off)",
                 rep.warmup_tokens, rep.warmup_tokens + kWarmupDecodeTokens, engine->max_context());
  for (int64_t p : o.prompt_tokens)
    if (p + o.decode_tokens > engine->max_context())
      return Error(ErrorCode::kOutOfRange,
                   "the {}-token case needs a context of {} tokens ({} + {} decoded), but the "
                   "maximum context is {} (--max-context, capped by the model's {})",
                   p, p + o.decode_tokens, p, o.decode_tokens, engine->max_context(),
                   engine->config().max_position_embeddings);

  if (rep.warmup_tokens > 0) {
    TraceScope s("warm-up", "bench", "tokens", rep.warmup_tokens);
    Stopwatch sw;
    Status st = RunWarmup(*engine, o, rep.warmup_tokens);
    if (!st.ok()) return st.Annotate("bench warm-up");
    rep.warmup_seconds = sw.Seconds();
    Progress(o, fmt::format("warm-up: {}-token prompt and {} decoded tokens in {:.2f} s (not "
                            "counted)",
                            rep.warmup_tokens, kWarmupDecodeTokens, rep.warmup_seconds));
  }

  MemorySampler mem(CgroupUsageFile(ReadCgroupMemory()));
  for (int64_t p : o.prompt_tokens) {
    BenchCase c;
    Status st = RunCase(*engine, o, p, mem, &c);
    if (!st.ok()) return st.Annotate(fmt::format("bench case prompt{}", p));
    rep.cases.push_back(std::move(c));
  }
  if (o.verify_costs || o.drafter.kind != DrafterSpec::Kind::kOff) {
    Result<VerifyCostTable> t =
        MeasureVerifyCosts(*engine, o.prompt_tokens.front(), o.verify_cost_reps, o.seed);
    if (!t.ok()) return t.status().Annotate("bench verify costs");
    std::string line;
    for (const VerifyCost& v : t->rows) line += fmt::format(" {}:{:.1f}", v.k, v.ms);
    Progress(o, fmt::format("verify costs (ms, k tokens per call; decode step {:.1f}):{}",
                            t->decode_ms, line));
    rep.verify_costs = std::move(*t);
  }
  return rep;
}

}  // namespace rw
