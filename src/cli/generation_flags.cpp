#include "cli/generation_flags.h"

#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <random>

#include "base/timer.h"
#include "engine/draft_policy.h"
#include "engine/drafter_dflash.h"

namespace rw::cli {

void AddEngineFlags(Flags& flags) {
  flags.String("model", "", "model directory (required)");
  flags.Int("threads", 0, "worker threads (0: REDWING_THREADS or all cores)");
  flags.Int("max-context", 8192, "maximum context length in tokens");
  flags.Int("prefill-chunk", 0,
            "tokens per forward call during prefill (0: 512, or 128 with --vram-budget)");
  flags.Int("prefill-span", 4096,
            "cpu: prompts longer than a chunk run layer by layer over spans of up to this many "
            "tokens, so each routed expert is read once per span instead of once per chunk "
            "(0: chunk by chunk)");
  flags.String("expert-store", "mmap",
               "where routed experts live: mmap (the page cache) or slots (private slots within "
               "--memory-budget)");
  flags.String("memory-budget", "0",
               "slots: bytes for the core, KV cache, scratch and expert slots, e.g. 2G (0: a slot "
               "for every expert)");
  flags.Int("io-threads", 8, "expert reads in flight");
  flags.String("io-backend", "auto",
               "expert reads: auto (io_uring where the kernel allows it, else pread), io_uring, "
               "pread");
  flags.String("early-expert-read", "router",
               "read the next layer's likely experts early: off, router (its router on the "
               "current hidden state) or fitted (a predictor made by redwing fit-predictor)");
  flags.String("kv-type", "f32",
               "cpu: the KV cache's element type: f32 (the reference), bf16 or f16 (half the "
               "bytes, at ~1% logits error); CUDA: f32 only");
  flags.String("precision", "exact",
               "cpu: the quantized matvecs of decode: exact (fp32 activations, the reference) or "
               "fast (activations as two int8 planes per block of 32, integer dot products; "
               "prefill stays fp32); CUDA: exact only");
  flags.String("lock-core", "on",
               "on: lock the core weights in memory (mlock) so memory pressure evicts only "
               "expert pages; off: leave them to the page cache");
  flags.String("backend", "cpu", "where the forward pass runs: cpu or cuda");
  flags.String("vram-budget", "0",
               "cuda: GPU bytes for the core, KV cache, scratch and the VRAM expert cache, e.g. 4G "
               "(0: every expert resident)");
  flags.String("fault-policy", "fail-closed",
               "cuda: what a CUDA error in a request does: fail-closed (the request fails with "
               "the error and the session stops) or failover-cpu (the request finishes on the "
               "CPU from the layer that failed, and the GPU is not used again); only with "
               "--backend cuda");
}

namespace {
// A string flag parsed into its enum where the CLI meets the engine; the error names the flag.
template <typename Parse>
auto Flag(Parse parse, const Flags& flags, const char* name) -> decltype(parse("")) {
  auto r = parse(flags.GetString(name));
  if (r.ok()) return r;
  // "expert store must be mmap or slots, not 'x'" → "--expert-store must be mmap or slots, ..."
  const std::string& msg = r.status().message();
  const size_t must = msg.find(" must be ");
  if (must == std::string::npos) return Error(r.status().code(), "--{}: {}", name, msg);
  return Error(r.status().code(), "--{}{}", name, msg.substr(must));
}
}  // namespace

Result<EngineOptions> EngineOptionsFromFlags(const Flags& flags) {
  EngineOptions o;
  o.model_dir = flags.GetString("model");
  if (o.model_dir.empty()) return Error(ErrorCode::kInvalidArgument, "--model is required");
  o.threads = static_cast<int>(flags.GetInt("threads"));
  o.max_context = flags.GetInt("max-context");
  o.prefill_chunk = flags.GetInt("prefill-chunk");
  o.prefill_span = flags.GetInt("prefill-span");
  if (o.prefill_span < 0)
    return Error(ErrorCode::kInvalidArgument, "--prefill-span must be >= 0, not {}",
                 o.prefill_span);
  RW_ASSIGN_OR_RETURN(o.expert_store, Flag(ParseExpertStoreKind, flags, "expert-store"));
  RW_ASSIGN_OR_RETURN(unsigned long long budget,
                      ParseByteSize(flags.GetString("memory-budget"), "--memory-budget"));
  if (budget > 0 && o.expert_store != ExpertStoreKind::kSlots)
    return Error(ErrorCode::kInvalidArgument,
                 "--memory-budget applies to --expert-store slots (mmap leaves memory to the "
                 "kernel; run it in a memory cgroup with scripts/with-memory-limit.sh)");
  o.memory_budget = budget;
  const long long io = flags.GetInt("io-threads");
  if (io < 1 || io > 256)
    return Error(ErrorCode::kInvalidArgument, "--io-threads must be in 1..256, not {}", io);
  o.io_threads = static_cast<int>(io);
  RW_ASSIGN_OR_RETURN(o.io_backend, Flag(ParseIoBackend, flags, "io-backend"));
  RW_ASSIGN_OR_RETURN(o.early_expert_read, Flag(ParseEarlyRead, flags, "early-expert-read"));
  const std::string lock = flags.GetString("lock-core");
  if (lock != "on" && lock != "off")
    return Error(ErrorCode::kInvalidArgument, "--lock-core must be on or off, not '{}'", lock);
  o.lock_core = lock == "on";
  RW_ASSIGN_OR_RETURN(o.backend, Flag(ParseBackendKind, flags, "backend"));
  const bool cuda = o.backend == BackendKind::kCuda;
  RW_ASSIGN_OR_RETURN(o.kv_type, Flag(ParseKvType, flags, "kv-type"));
  RW_ASSIGN_OR_RETURN(o.precision, Flag(ParsePrecision, flags, "precision"));
  RW_ASSIGN_OR_RETURN(unsigned long long vram,
                      ParseByteSize(flags.GetString("vram-budget"), "--vram-budget"));
  if (vram > 0 && !cuda)
    return Error(ErrorCode::kInvalidArgument, "--vram-budget applies to --backend cuda");
  o.vram_budget = vram;
  RW_ASSIGN_OR_RETURN(o.fault_policy, Flag(ParseFaultPolicy, flags, "fault-policy"));
  if (o.fault_policy == FaultPolicy::kFailoverCpu && !cuda)
    return Error(ErrorCode::kInvalidArgument,
                 "--fault-policy failover-cpu applies to --backend cuda");
  return o;
}

void AddSamplingFlags(Flags& flags) {
  const SamplingParams d;
  flags.Double("temperature", d.temperature, "sampling temperature (0: greedy)");
  flags.Int("top-k", d.top_k, "keep the k most likely tokens (0: off)");
  flags.Double("top-p", d.top_p, "keep the smallest set with this much probability (1: off)");
  flags.Double("min-p", d.min_p, "drop tokens below this fraction of the top probability (0: off)");
  flags.Double("repetition-penalty", d.repetition_penalty,
               "divide the logits of tokens already in the context by this (1: off)");
  flags.Int("seed", -1, "sampling seed (-1: random; the stats line prints the one used)");
  flags.StringList("stop", "stop when the text contains this string (may be repeated)");
  flags.Int("max-new", 1024, "maximum number of tokens to generate");
}

Result<GenerateOptions> GenerateOptionsFromFlags(const Flags& flags) {
  GenerateOptions o;
  o.sampling.temperature = static_cast<float>(flags.GetDouble("temperature"));
  const long long top_k = flags.GetInt("top-k");
  if (top_k < 0 || top_k > (1 << 30))
    return Error(ErrorCode::kInvalidArgument, "--top-k must be >= 0, not {}", top_k);
  o.sampling.top_k = static_cast<int>(top_k);
  o.sampling.top_p = static_cast<float>(flags.GetDouble("top-p"));
  o.sampling.min_p = static_cast<float>(flags.GetDouble("min-p"));
  o.sampling.repetition_penalty = static_cast<float>(flags.GetDouble("repetition-penalty"));
  const long long seed = flags.GetInt("seed");
  if (seed < -1) return Error(ErrorCode::kInvalidArgument, "--seed must be >= 0 (or -1: random)");
  o.sampling.seed = seed >= 0 ? static_cast<uint64_t>(seed) : (std::random_device{}() >> 1);
  if (Status st = o.sampling.Validate(); !st.ok())
    return Error(ErrorCode::kInvalidArgument, "bad sampling flag: {}", st.message());
  o.max_new_tokens = flags.GetInt("max-new");
  if (o.max_new_tokens < 0)
    return Error(ErrorCode::kInvalidArgument, "--max-new must be >= 0, not {}", o.max_new_tokens);
  for (const std::string& s : flags.GetList("stop")) {
    if (s.empty()) return Error(ErrorCode::kInvalidArgument, "--stop needs a non-empty string");
    o.stop_strings.push_back(s);
  }
  return o;
}

void AddSpeculationFlags(Flags& flags) {
  flags.String("drafter", "off",
               "speculative decoding: a DFlash drafter directory (redwing install "
               "z-lab/gemma-4-26B-A4B-it-DFlash --model M puts one in M/drafter, used by "
               "default when present), ngram (prompt lookup: drafts what followed the latest "
               "earlier occurrence of the last few tokens), oracle:P (bench only: simulated "
               "acceptance P) or off. The output is the same token for token; only the speed "
               "changes");
  flags.String("draft-tokens", "auto",
               "with --drafter: auto (each step drafts 0..15 tokens, whichever maximizes the "
               "expected tokens per second from the step costs measured as it runs and the recent "
               "acceptance by position; 0 is a plain step) or N, a fixed most per step (0..64)");
}

// --draft-tokens: "auto" (kDraftTokensAuto) or 0..64.
Result<int> ParseDraftTokens(const std::string& text) {
  if (text == "auto") return kDraftTokensAuto;
  char* end = nullptr;
  const long long n = std::strtoll(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || n < 0 || n > 64)
    return Error(ErrorCode::kInvalidArgument, "--draft-tokens must be auto or in 0..64, not '{}'",
                 text);
  return static_cast<int>(n);
}

Status SpeculationFromFlags(const Flags& flags, bool allow_oracle, DrafterSpec* spec,
                            int* draft_tokens) {
  auto parsed = ParseDrafterSpec(flags.GetString("drafter"));
  if (!parsed.ok())
    return Error(ErrorCode::kInvalidArgument, "--drafter: {}", parsed.status().message());
  if (parsed->kind == DrafterSpec::Kind::kOracle && !allow_oracle)
    return Error(ErrorCode::kInvalidArgument,
                 "--drafter oracle:P simulates acceptance from a recorded plain run; it is for "
                 "redwing bench (use ngram here)");
  RW_ASSIGN_OR_RETURN(const int n, ParseDraftTokens(flags.GetString("draft-tokens")));
  // Off: --drafter off, or no --drafter and no drafter installed at <model>/drafter (which
  // DrafterFromFlags would load).
  const bool off = parsed->kind == DrafterSpec::Kind::kOff &&
                   (flags.IsSet("drafter") || DefaultDrafterDir(flags.GetString("model")).empty());
  if (flags.IsSet("draft-tokens") && off && n != 0)
    return Error(ErrorCode::kInvalidArgument, "--draft-tokens needs a --drafter");
  *spec = *parsed;
  *draft_tokens = off ? 0 : n;
  return Status::Ok();
}

Result<std::shared_ptr<Drafter>> DrafterFromFlags(const Flags& flags, const DrafterSpec& spec,
                                                  const Engine& engine,
                                                  const std::string& model_dir, int* draft_tokens) {
  std::string dir;
  if (spec.kind == DrafterSpec::Kind::kDFlash) {
    dir = spec.path;
  } else if (!flags.IsSet("drafter")) {
    dir = DefaultDrafterDir(model_dir);
  }
  if (dir.empty()) return MakeDrafter(spec);
  auto d = MakeDFlashDrafter(dir, engine);
  if (!d.ok()) return Status(d.status().code(), "--drafter " + d.status().message());
  return std::shared_ptr<Drafter>(*d);
}

Result<bool> ThinkingFromFlags(const Flags& flags) {
  const std::string t = flags.GetString("thinking");
  if (t == "on") return true;
  if (t == "off") return false;
  return Error(ErrorCode::kInvalidArgument, "--thinking must be on or off, not '{}'", t);
}

std::string ExpertStatsText(const ExpertStoreStats& before, const ExpertStoreStats& after,
                            int64_t tokens) {
  const uint64_t hits = after.hits - before.hits, misses = after.misses - before.misses;
  if (hits + misses == 0) return "";
  const double read = static_cast<double>(after.bytes_read - before.bytes_read);
  std::string s = fmt::format("experts: {:.1f}% resident", 100.0 * hits / (hits + misses));
  if (tokens > 0) s += fmt::format(", {:.1f} MB read per token", read / tokens / 1e6);
  s += fmt::format(", {:.2f} s waiting for reads", after.wait_seconds - before.wait_seconds);
  const uint64_t early = after.prefetches - before.prefetches;
  if (early > 0)
    s += fmt::format(
        ", {} early reads ({:.1f}% then requested)", early,
        100.0 * static_cast<double>(after.prefetch_used - before.prefetch_used) / early);
  return s;
}

std::string StatsLine(const GenerateResult& r, const GenerateOptions& o) {
  const int64_t fresh = r.prompt_tokens - r.reused_tokens;
  std::string s = fmt::format("prompt {} tokens ({} new, {} reused from the cache)",
                              r.prompt_tokens, fresh, r.reused_tokens);
  if (fresh > 0 && r.prefill_seconds > 0)
    s += fmt::format(", prefill {:.2f} tok/s", fresh / r.prefill_seconds);
  if (!r.ids.empty()) s += fmt::format(", first token {:.2f} s", r.first_token_seconds);
  s += fmt::format("; generated {} tokens", r.ids.size() + (r.stop_id >= 0 ? 1 : 0));
  if (r.decoded_tokens > 0 && r.decode_seconds > 0)
    s += fmt::format(", decode {:.2f} tok/s", r.decoded_tokens / r.decode_seconds);
  if (o.drafter != nullptr && o.draft_tokens != 0) {
    s += fmt::format("; speculation ({}, {}): {} drafted, {} accepted", o.drafter->name(),
                     o.draft_tokens == kDraftTokensAuto ? std::string("auto")
                                                        : fmt::format("up to {}", o.draft_tokens),
                     r.drafted, r.accepted);
    if (r.drafted > 0) s += fmt::format(" ({:.1f}%)", 100.0 * r.accepted / r.drafted);
    s += fmt::format(", {} verify calls, {:.2f} accepted per call", r.verify_calls,
                     r.mean_accepted());
  }
  s += fmt::format(" ({}); seed {}; peak RSS {:.0f} MiB", FinishReasonName(r.finish),
                   o.sampling.seed, static_cast<double>(PeakRssBytes()) / (1 << 20));
  return s;
}

Result<std::string> ReadAllStdin() {
  std::string out;
  char buf[65536];
  for (;;) {
    const ssize_t n = ::read(0, buf, sizeof buf);
    if (n == 0) break;
    if (n < 0) {
      if (errno == EINTR) continue;
      return Error(ErrorCode::kIo, "reading standard input: {}", std::strerror(errno));
    }
    out.append(buf, static_cast<size_t>(n));
  }
  return out;
}

}  // namespace rw::cli
