// The bench's output: the JSON report (format redwing-bench/1) and the readable table, with
// each decode case set against max(compute, disk) and the memory-bandwidth bound the probes
// measured.
#include <algorithm>
#include <optional>
#include <string>

#include "base/file.h"
#include "bench/bench.h"

namespace rw {

namespace {

std::string Mb(double bytes) {
  return fmt::format("{:.1f} MB", bytes / 1e6);
}

Json OrNull(double v, bool valid) {
  return valid ? Json(v) : Json(nullptr);
}

Json PhaseJson(const PhaseStats& p) {
  const double n = static_cast<double>(std::max<int64_t>(1, p.tokens));
  const bool any = p.tokens > 0;
  Json j;
  j["tokens"] = p.tokens;
  j["seconds"] = p.seconds;
  j["tok_s"] = OrNull(p.tok_s(), any && p.seconds > 0);
  j["forward_seconds"] = p.forward_seconds;
  j["forward_tok_s"] =
      OrNull(p.tokens / std::max(1e-12, p.forward_seconds), any && p.forward_seconds > 0);
  j["parts_seconds"] = {{"embed", p.parts.embed_s},
                        {"attention", p.parts.attention_s},
                        {"dense_mlp", p.parts.dense_s},
                        {"router_experts", p.parts.moe_s},
                        {"head", p.parts.head_s}};
  j["experts_run"] = p.parts.experts_run;
  // The early reads' guesses for the next layer against its choice (decode only).
  j["early_reads"] = {
      {"guessed", p.parts.early_guessed},
      {"right", p.parts.early_right},
      {"chosen", p.parts.early_chosen},
      {"recall", OrNull(static_cast<double>(p.parts.early_right) /
                            static_cast<double>(std::max<int64_t>(1, p.parts.early_chosen)),
                        p.parts.early_chosen > 0)},
      {"precision", OrNull(static_cast<double>(p.parts.early_right) /
                               static_cast<double>(std::max<int64_t>(1, p.parts.early_guessed)),
                           p.parts.early_guessed > 0)}};
  const double hr = p.hit_rate();
  j["experts"] = {{"acquires", p.experts.acquires},
                  {"hits", p.experts.hits},
                  {"misses", p.experts.misses},
                  {"hit_rate", OrNull(hr, hr >= 0)},
                  {"bytes_read", p.experts.bytes_read},
                  {"bytes_read_per_token", OrNull(p.experts.bytes_read / n, any)},
                  {"prefetches", p.experts.prefetches},
                  {"prefetch_used", p.experts.prefetch_used},
                  {"evicted_by_kernel", p.experts.evicted},
                  {"dropped_by_store", p.experts.dropped},
                  {"dropped_then_read_again", p.experts.dropped_reread},
                  {"checksum_failures", p.experts.checksum_failures},
                  {"wait_seconds", p.experts.wait_seconds}};
  j["storage"] = {{"source", "/proc/self/io read_bytes"},
                  {"available", p.io.available},
                  {"read_bytes", p.io.read_bytes},
                  {"read_bytes_per_token", OrNull(p.io.read_bytes / n, any && p.io.available)},
                  {"rchar", p.io.rchar}};
  j["io_wait_per_token_s"] = OrNull(p.experts.wait_seconds / n, any);
  j["stall_per_token_s"] = OrNull(p.parts.stall_s / n, any);
  // Forward time minus the stalls (see Hidden below).
  j["compute_per_token_s"] = OrNull(std::max(0.0, p.forward_seconds - p.parts.stall_s) / n, any);
  return j;
}

Json CgroupJson(const CgroupMemory& c) {
  if (c.version == 0) return nullptr;
  return {{"version", c.version},
          {"path", c.path},
          {"current_bytes", c.current},
          {"limit_bytes", c.limit > 0 ? Json(c.limit) : Json(nullptr)},
          {"peak_bytes", c.peak > 0 ? Json(c.peak) : Json(nullptr)},
          {"file_bytes", c.file},
          {"anon_bytes", c.anon}};
}

std::string Mib(uint64_t b) {
  return fmt::format("{:.0f}", static_cast<double>(b) / (1 << 20));
}

}  // namespace

namespace {
std::optional<DecodeMemoryBound> MemoryBound(const BenchReport& r, const BenchCase& c) {
  if (!r.memory || c.decode.tokens == 0) return std::nullopt;
  return MemoryBoundOfDecode(r.config, *r.memory, r.core_bytes_per_token,
                             c.decode.experts.bytes_acquired, c.prompt_tokens, c.decode.tokens,
                             c.decode.seconds, static_cast<int>(cpu::KvTypeBytes(r.kv_type)));
}

// The headline of a streaming run: decode time per token over max(compute, disk), the time it
// would take if every read were hidden behind compute or every computation behind the reads.
//   compute: the forward time minus the stalls (wall time in which a thread waited for an expert
//            read and none computed), measured in the same run on the same stream, so it
//            includes what the reads cost the cores (copies, checksums, faults);
//   disk:    bytes the kernel fetched from storage (/proc/self/io) over the disk probe's rate.
// Empty without a probe or a decode phase.
struct HiddenFigures {
  double decode_s = 0, compute_s = 0, stall_s = 0, disk_bytes = 0, disk_s = 0, ratio = 0;
  const char* bound_by() const { return disk_s > compute_s ? "disk" : "compute"; }
};
std::optional<HiddenFigures> Hidden(const BenchReport& r, const BenchCase& c) {
  if (!r.disk || r.disk->parallel_gb_s <= 0 || !c.decode.io.available || c.decode.tokens == 0 ||
      c.decode.forward_seconds <= 0)
    return std::nullopt;
  HiddenFigures h;
  const double n = static_cast<double>(c.decode.tokens);
  h.decode_s = c.decode.seconds / n;
  h.stall_s = c.decode.parts.stall_s / n;
  h.compute_s = std::max(0.0, c.decode.forward_seconds - c.decode.parts.stall_s) / n;
  h.disk_bytes = static_cast<double>(c.decode.io.read_bytes) / n;
  h.disk_s = h.disk_bytes / (r.disk->parallel_gb_s * 1e9);
  const double bound = std::max(h.compute_s, h.disk_s);
  if (bound <= 0) return std::nullopt;
  h.ratio = h.decode_s / bound;
  return h;
}
}  // namespace

std::string DraftTokensText(int draft_tokens) {
  return draft_tokens == kDraftTokensAuto ? std::string("auto")
                                          : fmt::format("up to {}", draft_tokens);
}

Json BenchReportToJson(const BenchReport& r) {
  Json j;
  j["format"] = "redwing-bench/1";
  j["model"] = r.model_dir;
  j["geometry"] = {{"layers", r.config.num_layers},   {"hidden", r.config.hidden_size},
                   {"experts", r.config.num_experts}, {"top_k", r.config.top_k},
                   {"vocab", r.config.vocab_size},    {"core_bytes", r.core_bytes},
                   {"expert_bytes", r.expert_bytes}};
  const BenchOptions& o = r.options;
  j["options"] = {{"backend", r.backend},
                  {"cuda_experts", r.cuda_experts},
                  {"vram_budget", o.engine.vram_budget},
                  {"expert_store", r.expert_store},
                  {"memory_budget", o.engine.memory_budget},
                  {"memory_plan", r.memory_plan},
                  {"io_threads", o.engine.io_threads},
                  {"io_backend", r.io_backend},
                  {"core_lock", r.core_lock},
                  {"early_expert_read", EarlyReadName(o.engine.early_expert_read)},
                  {"kv_type", KvTypeName(r.kv_type)},
                  {"precision", PrecisionName(o.engine.precision)},
                  {"threads", r.threads},
                  {"prefill_chunk", r.prefill_chunk},
                  {"prefill_span", r.prefill_span},
                  {"max_context", o.engine.max_context},
                  {"prompt_tokens", o.prompt_tokens},
                  {"decode_tokens", o.decode_tokens},
                  {"seed", o.seed},
                  {"cold", o.cold},
                  {"warmup_tokens", o.warmup_tokens}};
  j["decode_stream"] = r.decode_mode;
  if (r.cold_drop) {
    j["cold"] = {{"method", "posix_fadvise(POSIX_FADV_DONTNEED) on every file, before load"},
                 {"files", r.cold_drop->files},
                 {"bytes", r.cold_drop->bytes},
                 {"resident_before", r.cold_drop->resident_before},
                 {"resident_after", r.cold_drop->resident_after}};
  } else {
    j["cold"] = nullptr;
  }
  if (r.disk)
    j["disk_probe"] = {{"method", r.disk->method},
                       {"blob_bytes", r.disk->blob_bytes},
                       {"depth", r.disk->depth},
                       {"parallel_gb_s", r.disk->parallel_gb_s},
                       {"serial_gb_s", r.disk->serial_gb_s},
                       {"serial_ms_per_blob", r.disk->serial_ms_per_blob}};
  else
    j["disk_probe"] = {{"skipped", r.disk_note}};
  if (r.memory)
    j["memory_probe"] = {{"read_gb_s", r.memory->gb_s},
                         {"threads", r.memory->threads},
                         {"buffer_bytes", r.memory->buffer_bytes},
                         {"passes", r.memory->passes},
                         {"core_bytes_per_token", r.core_bytes_per_token}};
  else
    j["memory_probe"] = {{"skipped", r.memory_note}};
  j["load"] = {{"seconds", r.load_seconds},
               {"anon_bytes", r.load_anon},
               {"file_bytes", r.load_file},
               {"storage_read_bytes", r.load_io.read_bytes}};
  if (r.warmup_tokens > 0)
    j["warmup"] = {{"prompt_tokens", r.warmup_tokens},
                   {"decode_tokens", kWarmupDecodeTokens},
                   {"seconds", r.warmup_seconds}};
  else
    j["warmup"] = nullptr;
  Json cases = Json::array();
  for (const BenchCase& c : r.cases) {
    Json cj;
    cj["name"] = c.name;
    cj["prompt_tokens"] = c.prompt_tokens;
    cj["ttft_seconds"] = c.ttft_seconds;
    cj["prefill"] = PhaseJson(c.prefill);
    cj["prefill"]["host_syncs"] = c.prefill_host_syncs;
    cj["decode"] = PhaseJson(c.decode);
    cj["decode"]["sample_seconds"] = c.sample_seconds;
    cj["decode"]["sampled_on"] = c.sampled_on_device ? "gpu" : "cpu";
    cj["decode"]["host_syncs"] = c.decode_host_syncs;
    cj["decode"]["distinct_generated_ids"] = c.distinct_generated;
    cj["decode"]["generated_ids"] = c.generated;
    cj["decode"]["routing"] = {
        {"distinct_experts_per_layer",
         c.distinct_experts_per_layer.empty() ? Json(nullptr) : Json(c.distinct_experts_per_layer)},
        {"note", c.routing_note}};
    if (const auto h = Hidden(r, c))
      cj["decode"]["vs_compute_and_disk"] = {
          {"seconds_per_token", h->decode_s},
          {"compute_seconds_per_token", h->compute_s},
          {"stall_seconds_per_token", h->stall_s},
          {"disk_bytes_per_token", h->disk_bytes},
          {"disk_seconds_per_token", h->disk_s},
          {"bound_by", h->bound_by()},
          {"ratio", h->ratio},
          {"compute_method",
           "forward time minus stalls (a thread waiting for an expert read, none computing), "
           "same run"}};
    else
      cj["decode"]["vs_compute_and_disk"] = nullptr;
    if (const auto m = MemoryBound(r, c))
      cj["decode"]["memory_bound"] = {{"weight_bytes_per_token", m->weight_bytes_per_token},
                                      {"kv_bytes_per_token", m->kv_bytes_per_token},
                                      {"bound_seconds_per_token", m->bound_s},
                                      {"seconds_per_token", m->actual_s},
                                      {"ratio", m->ratio}};
    else
      cj["decode"]["memory_bound"] = nullptr;
    if (const auto& sp = c.speculation) {
      std::vector<double> rate;
      for (size_t i = 0; i < sp->drafted_at.size(); ++i)
        rate.push_back(sp->drafted_at[i] > 0
                           ? static_cast<double>(sp->accepted_at[i]) / sp->drafted_at[i]
                           : 0.0);
      cj["speculation"] = {
          {"drafter", sp->drafter},
          {"acceptance", sp->simulated ? "simulated" : "measured"},
          {"draft_tokens",
           sp->draft_tokens == kDraftTokensAuto ? Json("auto") : Json(sp->draft_tokens)},
          {"mean_drafted",
           sp->verify_calls > 0 ? static_cast<double>(sp->drafted) / sp->verify_calls : 0.0},
          {"tokens", sp->tokens},
          {"seconds", sp->seconds},
          {"tok_s", sp->tok_s()},
          {"plain_tok_s", sp->plain_tok_s()},
          {"identical_to_plain", sp->identical},
          {"drafted", sp->drafted},
          {"accepted", sp->accepted},
          {"verify_calls", sp->verify_calls},
          {"mean_accepted", sp->mean_accepted()},
          {"acceptance_by_position", rate}};
    } else {
      cj["speculation"] = nullptr;
    }
    cj["memory"] = {
        {"peak_private_bytes", c.memory.peak_anon},
        {"peak_file_resident_bytes", c.memory.peak_file},
        {"private_bytes_end", c.memory.anon_end},
        {"file_resident_bytes_end", c.memory.file_end},
        {"process_peak_rss_bytes", c.memory.peak_rss_process},
        {"cgroup", CgroupJson(c.memory.cgroup)},
        {"cgroup_peak_sampled_bytes",
         c.memory.cgroup.version > 0 ? Json(c.memory.cgroup_peak_sampled) : Json(nullptr)}};
    cases.push_back(std::move(cj));
  }
  j["cases"] = std::move(cases);
  if (const auto& vc = r.verify_costs) {
    Json rows = Json::array();
    for (const VerifyCost& v : vc->rows)
      rows.push_back({{"k", v.k},
                      {"ms", v.ms},
                      {"experts_per_layer",
                       v.experts_per_layer >= 0 ? Json(v.experts_per_layer) : Json(nullptr)}});
    j["verify_costs"] = {{"prompt_tokens", vc->prompt_tokens},
                         {"reps", vc->reps},
                         {"decode_ms", vc->decode_ms},
                         {"rows", rows},
                         {"note", vc->note}};
  } else {
    j["verify_costs"] = nullptr;
  }
  return j;
}

std::string BenchReportTable(const BenchReport& r) {
  std::string s;
  auto line = [&](const std::string& l) { s += l + "\n"; };
  line(fmt::format("model {} ({} layers, {} experts, top-{}; core {}, experts {})", r.model_dir,
                   r.config.num_layers, r.config.num_experts, r.config.top_k,
                   FormatBytes(r.core_bytes), FormatBytes(r.expert_bytes)));
  line(fmt::format(
      "backend {}{}", r.backend,
      r.options.engine.vram_budget > 0
          ? fmt::format(" (VRAM budget {}; store columns: the VRAM expert cache)",
                        FormatBytes(r.options.engine.vram_budget))
          : std::string(r.backend == "cuda" ? " (every expert resident in VRAM)" : "")));
  line(
      fmt::format("store {} ({}, {} reads in flight, early reads {}), {} threads, {} KV cache, {} "
                  "precision{}; load {:.2f} s",
                  r.expert_store, r.io_backend, r.options.engine.io_threads,
                  EarlyReadName(r.options.engine.early_expert_read), r.threads,
                  KvTypeName(r.kv_type), PrecisionName(r.options.engine.precision),
                  r.memory_plan.empty() ? "" : "; " + r.memory_plan, r.load_seconds));
  line(fmt::format(
      "prefill: chunks of {} tokens{}", r.prefill_chunk,
      r.prefill_span > 0
          ? fmt::format(", layer by layer over spans of up to {} tokens", r.prefill_span)
          : std::string(", one chunk through every layer at a time")));
  if (r.cold_drop)
    line(
        fmt::format("cold: {} files dropped from the page cache before load (posix_fadvise "
                    "DONTNEED); resident {} before, {} after",
                    r.cold_drop->files, FormatBytes(r.cold_drop->resident_before),
                    FormatBytes(r.cold_drop->resident_after)));
  else
    line("warm: page cache left as found");
  line(r.warmup_tokens > 0
           ? fmt::format("warm-up: a {}-token prompt and {} decoded tokens first, {:.2f} s, not "
                         "counted (first use of each expert: checksum, page mapping)",
                         r.warmup_tokens, kWarmupDecodeTokens, r.warmup_seconds)
           : std::string("warm-up: none (the first case pays the first use of each expert)"));
  line("core pages: " + r.core_lock);
  line("decode stream: " + r.decode_mode);
  line("");
  line(fmt::format(
      "{:>7} {:>9} {:>7} {:>9} {:>9} {:>9} {:>9} {:>11} {:>11} {:>11} {:>6} {:>9} {:>9}", "prompt",
      "prefill", "TTFT", "decode", "(fwd)", "private", "file-res", "cgroup", "store rd/t",
      "disk rd/t", "hit", "wait/t", "compute/t"));
  line(fmt::format(
      "{:>7} {:>9} {:>7} {:>9} {:>9} {:>9} {:>9} {:>11} {:>11} {:>11} {:>6} {:>9} {:>9}", "tokens",
      "tok/s", "s", "tok/s", "tok/s", "peak MiB", "peak MiB", "MiB/limit", "MB (dec)", "MB (dec)",
      "(dec)", "ms (dec)", "ms (dec)"));
  for (const BenchCase& c : r.cases) {
    const PhaseStats& d = c.decode;
    const double n = static_cast<double>(std::max<int64_t>(1, d.tokens));
    std::string cg = "-";
    if (c.memory.cgroup.version > 0)
      cg = Mib(c.memory.cgroup_peak_sampled) + "/" +
           (c.memory.cgroup.limit > 0 ? Mib(c.memory.cgroup.limit) : std::string("none"));
    const double hr = d.hit_rate();
    line(fmt::format(
        "{:>7} {:>9.2f} {:>7.2f} {:>9.2f} {:>9.2f} {:>9} {:>9} {:>11} {:>11.1f} {:>11} {:>6} "
        "{:>9.1f} {:>9.1f}",
        c.prompt_tokens, c.prefill.tok_s(), c.ttft_seconds, d.tok_s(),
        d.forward_seconds > 0 ? d.tokens / d.forward_seconds : 0.0, Mib(c.memory.peak_anon),
        Mib(c.memory.peak_file), cg, d.experts.bytes_read / n / 1e6,
        d.io.available ? fmt::format("{:.1f}", d.io.read_bytes / n / 1e6) : std::string("n/a"),
        hr >= 0 ? fmt::format("{:.1f}%", 100 * hr) : std::string("-"),
        1e3 * d.experts.wait_seconds / n,
        1e3 * std::max(0.0, d.forward_seconds - d.parts.stall_s) / n));
  }
  for (const BenchCase& c : r.cases) {
    const auto& sp = c.speculation;
    if (!sp) continue;
    std::string by;
    for (size_t i = 0; i < sp->drafted_at.size(); ++i)
      by += fmt::format("{}{:.0f}%", i > 0 ? " " : "",
                        sp->drafted_at[i] > 0 ? 100.0 * sp->accepted_at[i] / sp->drafted_at[i] : 0);
    line(fmt::format(
        "  {:>5}: speculative ({}{}, {} drafts): decode {:.2f} tok/s vs {:.2f} "
        "plain (the same loop); {:.2f} drafted and {:.2f} accepted per verify call ({} calls); "
        "acceptance by draft position: {}{}",
        c.prompt_tokens, sp->drafter, sp->simulated ? ", simulated acceptance" : "",
        DraftTokensText(sp->draft_tokens), sp->tok_s(), sp->plain_tok_s(),
        sp->verify_calls > 0 ? static_cast<double>(sp->drafted) / sp->verify_calls : 0.0,
        sp->mean_accepted(), sp->verify_calls, by.empty() ? "-" : by,
        sp->identical ? "" : "; OUTPUT DIFFERS FROM PLAIN DECODING"));
  }
  if (const auto& vc = r.verify_costs) {
    // t(k) against k plain steps: below 1 a verify of k tokens is cheaper than decoding them.
    line(fmt::format(
        "verify cost t(k) after a {}-token prompt, median of {}; a plain decode step {:.2f} ms; "
        "k = tokens per verify call (the last token and k-1 drafts){}",
        vc->prompt_tokens, vc->reps, vc->decode_ms, vc->note.empty() ? "" : "; " + vc->note));
    line(fmt::format("  {:>3} {:>9} {:>12} {:>13}", "k", "ms", "t(k)/k/t(0)", "experts/layer"));
    for (const VerifyCost& v : vc->rows)
      line(
          fmt::format("  {:>3} {:>9.2f} {:>12.2f} {:>13}", v.k, v.ms,
                      vc->decode_ms > 0 ? v.ms / v.k / vc->decode_ms : 0.0,
                      v.experts_per_layer >= 0 ? fmt::format("{:.1f}", v.experts_per_layer) : "-"));
  }
  line(
      "decode tok/s counts forward passes and sampling, (fwd) the forward passes alone; rd/t: "
      "bytes read per decoded token by the store and by the kernel (/proc/self/io); wait: "
      "summed over the threads that waited; compute: forward time minus the stalls (a thread "
      "waiting for a read while none computed)");
  if (r.backend == "cuda") {
    for (const BenchCase& c : r.cases)
      line(
          fmt::format("  {:>5}: host syncs per token: prefill {:.3f}, decode {:.2f}; decode "
                      "tokens drawn on the {}",
                      c.prompt_tokens,
                      static_cast<double>(c.prefill_host_syncs) /
                          static_cast<double>(std::max<int64_t>(1, c.prefill.tokens)),
                      static_cast<double>(c.decode_host_syncs) /
                          static_cast<double>(std::max<int64_t>(1, c.decode.tokens)),
                      c.sampled_on_device ? "GPU (logits stay there)" : "CPU"));
    if (r.cuda_experts == "mapped") {
      // Promotions are copies ahead of demand; their bytes are part of store rd/t.
      const double blob = static_cast<double>(r.expert_bytes) /
                          std::max(1, r.config.num_layers * r.config.num_experts);
      for (const BenchCase& c : r.cases) {
        const double n = static_cast<double>(std::max<int64_t>(1, c.decode.tokens));
        line(fmt::format("  {:>5}: decode promotions per token {:.2f} (~{:.1f} MB copied)",
                         c.prompt_tokens, c.decode.experts.prefetches / n,
                         c.decode.experts.prefetches / n * blob / 1e6));
      }
    }
    line(fmt::format(
        "cuda: experts {}; the GPU's parts are not timed apart (all under attention below); "
        "store columns count host-to-GPU expert bytes{}",
        r.cuda_experts,
        r.cuda_experts == "mapped"
            ? " (kernels' reads of missing experts from pinned host memory + promotion copies)"
            : " (copies into VRAM)"));
  }
  line("");
  line(
      "per part, ms per token (prefill | decode): embed, attention, dense MLP, router+experts, "
      "head");
  for (const BenchCase& c : r.cases) {
    auto parts = [](const PhaseStats& p) {
      const double n = static_cast<double>(std::max<int64_t>(1, p.tokens)) / 1e3;
      return fmt::format("{:.2f} {:.2f} {:.2f} {:.2f} {:.2f}", p.parts.embed_s / n,
                         p.parts.attention_s / n, p.parts.dense_s / n, p.parts.moe_s / n,
                         p.parts.head_s / n);
    };
    line(fmt::format("  {:>5}: {} | {}", c.prompt_tokens, parts(c.prefill), parts(c.decode)));
  }
  line("");
  for (const BenchCase& c : r.cases) {
    const double phr = c.prefill.hit_rate();
    line(fmt::format(
        "  {:>5}: prefill read {} from the store ({} from disk), hit {}; decode: {} distinct ids "
        "of {}; routing: {}",
        c.prompt_tokens, Mb(static_cast<double>(c.prefill.experts.bytes_read)),
        c.prefill.io.available ? Mb(static_cast<double>(c.prefill.io.read_bytes)) : "n/a",
        phr >= 0 ? fmt::format("{:.1f}%", 100 * phr) : std::string("-"), c.distinct_generated,
        c.generated.size(), c.distinct_experts_per_layer.empty() ? c.routing_note : "see JSON"));
    if (const ForwardStats& d = c.decode.parts; d.early_guessed > 0)
      line(
          fmt::format("  {:>5}: early reads guessed {} experts for next layers, {} right: recall "
                      "{:.1f}%, precision {:.1f}%",
                      c.prompt_tokens, d.early_guessed, d.early_right,
                      100.0 * d.early_right / std::max<int64_t>(1, d.early_chosen),
                      100.0 * d.early_right / d.early_guessed));
    if (const auto h = Hidden(r, c))
      line(fmt::format(
          "  {:>5}: decode {:.0f} ms per token = {:.2f}x max(compute {:.0f} ms, disk {:.0f} ms: "
          "{} at {:.2f} GB/s); stalled on reads {:.0f} ms",
          c.prompt_tokens, 1e3 * h->decode_s, h->ratio, 1e3 * h->compute_s, 1e3 * h->disk_s,
          Mb(h->disk_bytes), r.disk->parallel_gb_s, 1e3 * h->stall_s));
    if (const auto m = MemoryBound(r, c))
      line(
          fmt::format("  {:>5}: memory bound {:.0f} ms per decoded token ({} of weights + {} of "
                      "KV cache at {:.2f} GB/s); decode took {:.0f} ms, {:.2f}x the bound",
                      c.prompt_tokens, 1e3 * m->bound_s, Mb(m->weight_bytes_per_token),
                      Mb(m->kv_bytes_per_token), r.memory->gb_s, 1e3 * m->actual_s, m->ratio));
  }
  if (r.memory)
    line(fmt::format("memory probe: {:.2f} GB/s read with {} threads (best of {} passes over {})",
                     r.memory->gb_s, r.memory->threads, r.memory->passes,
                     FormatBytes(r.memory->buffer_bytes)));
  else
    line("memory probe: " + r.memory_note);
  if (r.disk)
    line(
        fmt::format("disk probe ({}): {:.2f} GB/s with {} reads in flight; one at a time "
                    "{:.2f} GB/s, {:.1f} ms per {} blob",
                    r.disk->method, r.disk->parallel_gb_s, r.disk->depth, r.disk->serial_gb_s,
                    r.disk->serial_ms_per_blob, FormatBytes(r.disk->blob_bytes)));
  else
    line("disk probe: " + r.disk_note);
  return s;
}

}  // namespace rw
