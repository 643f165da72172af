// `redwing bench` and its helpers on a synthesized tiny model: the JSON has every field with
// sane values, the decode stream is varied, the warm-up is reported and kept apart from the
// cases, --cold with the slots store reads from storage, the --trace file is valid Chrome
// trace JSON, bad flags are clear errors.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "base/file.h"
#include "base/json.h"
#include "bench/bench.h"
#include "bench/bench_test_util.h"
#include "install/synth.h"
#include "sample/sampler.h"

namespace rw {
namespace {

const std::string& Scratch() {
  static const std::string d = test::ScratchDir("bench_test");
  return d;
}

// A tiny model of this process (synthesized in milliseconds).
const std::string& TinyModel() {
  static const std::string dir = [] {
    const std::string d = JoinPath(Scratch(), "tiny");
    SynthOptions o;
    o.geometry = "tiny";
    o.seed = 7;
    o.out_dir = d;
    o.overwrite = true;
    Status st = SynthesizeModel(o);
    EXPECT_TRUE(st.ok()) << st.ToString();
    return d;
  }();
  return dir;
}

std::string Bench(const std::string& flags) {
  return std::string(REDWING_BINARY) + " bench --model " + TinyModel() + " --threads 2 " + flags;
}

Json ParseOrFail(const std::string& text) {
  auto j = ParseJson(text, "bench output");
  EXPECT_TRUE(j.ok()) << j.status().ToString() << "\n" << text.substr(0, 2000);
  return j.ok() ? *j : Json();
}

void ExpectPhase(const Json& p, int64_t tokens, const std::string& what) {
  SCOPED_TRACE(what);
  ASSERT_TRUE(p.is_object()) << p.dump();
  EXPECT_EQ(p["tokens"].get<int64_t>(), tokens);
  EXPECT_GT(p["seconds"].get<double>(), 0);
  EXPECT_GT(p["tok_s"].get<double>(), 0);
  EXPECT_GT(p["forward_seconds"].get<double>(), 0);
  EXPECT_GE(p["forward_tok_s"].get<double>(), p["tok_s"].get<double>() * 0.999);
  EXPECT_LE(p["forward_seconds"].get<double>(), p["seconds"].get<double>() * 1.001);
  for (const char* part : {"embed", "attention", "dense_mlp", "router_experts", "head"}) {
    ASSERT_TRUE(p["parts_seconds"].contains(part)) << part;
    EXPECT_GE(p["parts_seconds"][part].get<double>(), 0) << part;
  }
  EXPECT_GT(p["parts_seconds"]["attention"].get<double>(), 0);
  EXPECT_GT(p["experts_run"].get<int64_t>(), 0);
  const Json& e = p["experts"];
  for (const char* k : {"acquires", "hits", "misses", "bytes_read", "bytes_read_per_token",
                        "prefetches", "prefetch_used", "checksum_failures", "wait_seconds"})
    EXPECT_TRUE(e.contains(k)) << k;
  ASSERT_TRUE(e["hit_rate"].is_number()) << e.dump();
  EXPECT_GE(e["hit_rate"].get<double>(), 0);
  EXPECT_LE(e["hit_rate"].get<double>(), 1);
  EXPECT_GT(e["hits"].get<uint64_t>() + e["misses"].get<uint64_t>(), 0u);
  EXPECT_EQ(e["checksum_failures"].get<uint64_t>(), 0u);
  EXPECT_GE(e["wait_seconds"].get<double>(), 0);
  const Json& s = p["storage"];
  EXPECT_TRUE(s.contains("read_bytes"));
  EXPECT_TRUE(s.contains("read_bytes_per_token"));
  EXPECT_GE(p["io_wait_per_token_s"].get<double>(), 0);
  EXPECT_GT(p["compute_per_token_s"].get<double>(), 0);
  EXPECT_GE(p["stall_per_token_s"].get<double>(), 0);
  // Stalls are part of the forward time, and compute is the rest.
  const double n = static_cast<double>(tokens);
  EXPECT_LE(p["stall_per_token_s"].get<double>() * n, p["forward_seconds"].get<double>() * 1.001);
  EXPECT_NEAR(p["compute_per_token_s"].get<double>() + p["stall_per_token_s"].get<double>(),
              p["forward_seconds"].get<double>() / n, 1e-6);
}

// Decode against max(compute, disk): present whenever the disk probe ran, and consistent with
// the phase's own figures.
void ExpectVsComputeAndDisk(const Json& j, const Json& c) {
  const Json& h = c["decode"]["vs_compute_and_disk"];
  if (j["disk_probe"].contains("skipped") || !c["decode"]["storage"]["available"].get<bool>()) {
    EXPECT_TRUE(h.is_null()) << h.dump();
    return;
  }
  ASSERT_TRUE(h.is_object()) << c["decode"].dump().substr(0, 800);
  const Json& d = c["decode"];
  const double n = d["tokens"].get<double>();
  EXPECT_NEAR(h["seconds_per_token"].get<double>(), d["seconds"].get<double>() / n, 1e-9);
  EXPECT_NEAR(h["compute_seconds_per_token"].get<double>(), d["compute_per_token_s"].get<double>(),
              1e-9);
  EXPECT_NEAR(h["disk_bytes_per_token"].get<double>(), d["storage"]["read_bytes"].get<double>() / n,
              1e-6);
  EXPECT_NEAR(h["disk_seconds_per_token"].get<double>(),
              h["disk_bytes_per_token"].get<double>() /
                  (1e9 * j["disk_probe"]["parallel_gb_s"].get<double>()),
              1e-9);
  const double bound = std::max(h["compute_seconds_per_token"].get<double>(),
                                h["disk_seconds_per_token"].get<double>());
  EXPECT_NEAR(h["ratio"].get<double>(), h["seconds_per_token"].get<double>() / bound,
              1e-9 * h["ratio"].get<double>());
  // Decode (forward + sampling) cannot beat its own compute; on a tiny model it is not far
  // above it either.
  EXPECT_GE(h["ratio"].get<double>(), 0.999);
  EXPECT_LT(h["ratio"].get<double>(), 50);
  const std::string by = h["bound_by"].get<std::string>();
  EXPECT_TRUE(by == "compute" || by == "disk") << by;
}

TEST(BenchCliTest, JsonHasEveryFieldWithSaneValues) {
  const std::string json = JoinPath(Scratch(), "warm.json");
  const std::string trace = JoinPath(Scratch(), "warm.trace.json");
  auto r = test::Run(Bench("--prompt-tokens 40,150 --decode-tokens 24 --seed 3 --json " + json +
                           " --trace " + trace),
                     Scratch());
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  // stdout is the table; progress goes to stderr.
  EXPECT_NE(r.out.find("prefill"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("decode stream: sampled: temperature 1"), std::string::npos) << r.out;
  EXPECT_NE(r.err.find("bench: prompt40: prefill"), std::string::npos) << r.err;
  auto text = ReadFileToString(json);
  ASSERT_TRUE(text.ok()) << text.status().ToString();
  const Json j = ParseOrFail(*text);
  ASSERT_TRUE(j.is_object());
  // The disk probe ran on the tiny model's expert files (or says why the filesystem refused
  // O_DIRECT), and the core lock is reported either way.
  ASSERT_TRUE(j.contains("disk_probe")) << j.dump().substr(0, 500);
  if (j["disk_probe"].contains("skipped")) {
    EXPECT_NE(j["disk_probe"]["skipped"].get<std::string>().find("O_DIRECT"), std::string::npos);
  } else {
    EXPECT_GT(j["disk_probe"]["parallel_gb_s"].get<double>(), 0);
    EXPECT_GT(j["disk_probe"]["serial_gb_s"].get<double>(), 0);
    EXPECT_GT(j["disk_probe"]["blob_bytes"].get<uint64_t>(), 0u);
    EXPECT_NE(r.out.find("disk probe (O_DIRECT"), std::string::npos) << r.out;
    // The headline per case: decode against max(compute, disk).
    EXPECT_NE(r.out.find("x max(compute "), std::string::npos) << r.out;
  }
  // The memory probe ran with the bench's threads, and each case sets decode against it.
  ASSERT_TRUE(j["memory_probe"].contains("read_gb_s")) << j["memory_probe"].dump();
  EXPECT_GT(j["memory_probe"]["read_gb_s"].get<double>(), 0);
  EXPECT_EQ(j["memory_probe"]["threads"].get<int>(), 2);
  EXPECT_GT(j["memory_probe"]["core_bytes_per_token"].get<uint64_t>(), 0u);
  EXPECT_NE(r.out.find("memory probe: "), std::string::npos) << r.out;
  const std::string lock = j["options"]["core_lock"].get<std::string>();
  EXPECT_TRUE(lock == "locked" || lock.find("ulimit -l") != std::string::npos) << lock;
  EXPECT_NE(r.out.find("core pages: " + lock), std::string::npos) << r.out;
  EXPECT_EQ(j["format"], "redwing-bench/1");
  EXPECT_EQ(j["geometry"]["experts"].get<int>(), 8);
  EXPECT_GT(j["geometry"]["expert_bytes"].get<uint64_t>(), 0u);
  EXPECT_EQ(j["options"]["expert_store"], "mmap");
  EXPECT_EQ(j["options"]["decode_tokens"].get<int>(), 24);
  EXPECT_EQ(j["options"]["seed"].get<int>(), 3);
  EXPECT_FALSE(j["options"]["cold"].get<bool>());
  EXPECT_TRUE(j["cold"].is_null());
  EXPECT_NE(j["decode_stream"].get<std::string>().find("temperature 1"), std::string::npos);
  EXPECT_GT(j["load"]["seconds"].get<double>(), 0);
  // A warm run warms up by default: a 128-token prompt and 4 tokens before the cases.
  EXPECT_EQ(j["options"]["warmup_tokens"].get<int>(), -1);
  ASSERT_TRUE(j["warmup"].is_object()) << j["warmup"].dump();
  EXPECT_EQ(j["warmup"]["prompt_tokens"].get<int>(), 128);
  EXPECT_EQ(j["warmup"]["decode_tokens"].get<int>(), 4);
  EXPECT_GT(j["warmup"]["seconds"].get<double>(), 0);
  EXPECT_NE(r.out.find("warm-up: a 128-token prompt and 4 decoded tokens first"), std::string::npos)
      << r.out;
  EXPECT_NE(r.err.find("bench: warm-up: 128-token prompt"), std::string::npos) << r.err;
  EXPECT_EQ(j["trace_file"], trace);
  ASSERT_EQ(j["cases"].size(), 2u);
  const int64_t lengths[] = {40, 150};
  for (size_t i = 0; i < 2; ++i) {
    const Json& c = j["cases"][i];
    SCOPED_TRACE(c.dump().substr(0, 400));
    EXPECT_EQ(c["prompt_tokens"].get<int64_t>(), lengths[i]);
    EXPECT_EQ(c["name"], "prompt" + std::to_string(lengths[i]));
    ExpectPhase(c["prefill"], lengths[i], "prefill");
    ExpectPhase(c["decode"], 24, "decode");
    EXPECT_GT(c["ttft_seconds"].get<double>(), 0);
    const Json& mb = c["decode"]["memory_bound"];
    ASSERT_TRUE(mb.is_object()) << mb.dump();
    EXPECT_GT(mb["weight_bytes_per_token"].get<double>(),
              j["memory_probe"]["core_bytes_per_token"].get<double>());  // plus the experts
    EXPECT_GT(mb["kv_bytes_per_token"].get<double>(), 0);
    EXPECT_GT(mb["bound_seconds_per_token"].get<double>(), 0);
    EXPECT_NEAR(mb["ratio"].get<double>(),
                mb["seconds_per_token"].get<double>() / mb["bound_seconds_per_token"].get<double>(),
                1e-9 * mb["ratio"].get<double>());
    EXPECT_GE(c["ttft_seconds"].get<double>(), c["prefill"]["seconds"].get<double>());
    ExpectVsComputeAndDisk(j, c);
    // A varied stream: 24 sampled ids from a 512-token vocabulary at temperature 1.
    const Json& d = c["decode"];
    EXPECT_GT(d["sample_seconds"].get<double>(), 0);
    ASSERT_EQ(d["generated_ids"].size(), 24u);
    EXPECT_GE(d["distinct_generated_ids"].get<int>(), 8) << d["generated_ids"].dump();
    for (const Json& id : d["generated_ids"]) {
      EXPECT_GE(id.get<int>(), 0);
      EXPECT_LT(id.get<int>(), 512);
    }
    // The tiny geometry: 6 layers, 8 experts, top-2; a varied stream uses more than 2 per layer.
    const Json& per_layer = d["routing"]["distinct_experts_per_layer"];
    ASSERT_TRUE(per_layer.is_array()) << d["routing"].dump();
    ASSERT_EQ(per_layer.size(), 6u);
    for (const Json& n : per_layer) {
      EXPECT_GT(n.get<int>(), 2);
      EXPECT_LE(n.get<int>(), 8);
    }
    EXPECT_TRUE(d["routing"].contains("note"));
    const Json& m = c["memory"];
    EXPECT_GT(m["peak_private_bytes"].get<uint64_t>(), 0u);
    EXPECT_GE(m["peak_private_bytes"].get<uint64_t>(), m["private_bytes_end"].get<uint64_t>());
    EXPECT_GT(m["peak_file_resident_bytes"].get<uint64_t>(), 0u);
    EXPECT_GE(m["process_peak_rss_bytes"].get<uint64_t>(), m["peak_private_bytes"].get<uint64_t>());
    ASSERT_TRUE(m.contains("cgroup"));
    if (!m["cgroup"].is_null()) {
      EXPECT_GT(m["cgroup"]["current_bytes"].get<uint64_t>(), 0u);
      EXPECT_TRUE(m["cgroup"]["version"] == 1 || m["cgroup"]["version"] == 2);
    }
  }
  // The same seed gives the same stream (synthetic prompts and sampling are deterministic).
  const std::string json2 = JoinPath(Scratch(), "warm2.json");
  auto r2 = test::Run(Bench("--prompt-tokens 40 --decode-tokens 24 --seed 3 --quiet --format "
                            "json --json " +
                            json2),
                      Scratch());
  ASSERT_EQ(r2.code, 0) << r2.err;
  EXPECT_TRUE(r2.err.empty()) << r2.err;
  const Json j2 = ParseOrFail(r2.out);  // --format json: stdout is the JSON
  ASSERT_TRUE(j2.contains("cases"));
  EXPECT_EQ(j2["cases"][0]["decode"]["generated_ids"], j["cases"][0]["decode"]["generated_ids"]);
}

TEST(BenchCliTest, TraceIsChromeTraceJson) {
  const std::string trace = JoinPath(Scratch(), "p.trace.json");
  auto r =
      test::Run(Bench("--prompt-tokens 33 --decode-tokens 5 --quiet --trace " + trace), Scratch());
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  auto text = ReadFileToString(trace);
  ASSERT_TRUE(text.ok()) << text.status().ToString();
  const Json t = ParseOrFail(*text);
  ASSERT_TRUE(t.is_object());
  ASSERT_TRUE(t["traceEvents"].is_array());
  std::multiset<std::string> names;
  for (const Json& e : t["traceEvents"]) {
    ASSERT_TRUE(e.contains("ph")) << e.dump();
    ASSERT_TRUE(e.contains("pid") && e.contains("tid")) << e.dump();
    const std::string ph = e["ph"];
    if (ph == "M") continue;
    ASSERT_EQ(ph, "X") << e.dump();
    EXPECT_GE(e["ts"].get<double>(), 0);
    EXPECT_GE(e["dur"].get<double>(), 0);
    EXPECT_TRUE(e["cat"].is_string());
    names.insert(e["name"].get<std::string>());
  }
  EXPECT_EQ(names.count("load"), 1u);
  EXPECT_EQ(names.count("case"), 1u);
  EXPECT_EQ(names.count("prefill"), 1u);
  EXPECT_EQ(names.count("decode"), 1u);
  EXPECT_EQ(names.count("decode token"), 5u);
  EXPECT_EQ(names.count("sample"), 6u);  // the first token and one after each decode step
  EXPECT_GE(names.count("prefill chunk"), 1u);
  EXPECT_EQ(t["otherData"]["dropped_events"].get<int>(), 0);
}

TEST(BenchCliTest, ColdSlotsRunReadsFromStorage) {
  auto r = test::Run(Bench("--expert-store slots --cold --prompt-tokens 20 --decode-tokens 12 "
                           "--format json --quiet"),
                     Scratch());
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  const Json j = ParseOrFail(r.out);
  ASSERT_TRUE(j.is_object());
  EXPECT_EQ(j["options"]["expert_store"], "slots");
  ASSERT_TRUE(j["cold"].is_object()) << j["cold"].dump();
  EXPECT_GE(j["cold"]["files"].get<int>(), 3);  // manifest, core, index, layer files
  EXPECT_GT(j["cold"]["bytes"].get<uint64_t>(), 0u);
  // A cold run measures the first use, so it does not warm up unless asked to, and it leaves
  // the page cache to the model (no memory probe).
  EXPECT_TRUE(j["warmup"].is_null()) << j["warmup"].dump();
  EXPECT_EQ(j["memory_probe"]["skipped"].get<std::string>(), "not run with --cold");
  EXPECT_TRUE(j["cases"][0]["decode"]["memory_bound"].is_null());
  const Json& c = j["cases"][0];
  // The slots store fills its slots by reading the expert files.
  EXPECT_GT(c["prefill"]["experts"]["bytes_read"].get<uint64_t>(), 0u);
  EXPECT_GT(c["prefill"]["experts"]["misses"].get<uint64_t>(), 0u);
  // Dropped pages come back from the disk: the kernel counts them (unless nothing was dropped,
  // e.g. on a filesystem that ignores the advice, such as tmpfs).
  const uint64_t dropped =
      j["cold"]["resident_before"].get<uint64_t>() - j["cold"]["resident_after"].get<uint64_t>();
  if (dropped > 0 && c["prefill"]["storage"]["available"].get<bool>()) {
    EXPECT_GT(j["load"]["storage_read_bytes"].get<uint64_t>() +
                  c["prefill"]["storage"]["read_bytes"].get<uint64_t>(),
              0u);
  }
  ExpectPhase(c["prefill"], 20, "prefill");
  ExpectPhase(c["decode"], 12, "decode");
  ExpectVsComputeAndDisk(j, c);
}

TEST(BenchCliTest, BadFlagsAreClearErrors) {
  struct Case {
    std::string flags;
    bool usage;  // a flag error (exit 2), not a failed run
    std::vector<std::string> says;
  };
  const Case cases[] = {
      {"--prompt-tokens 0", true, {"--prompt-tokens"}},
      {"--prompt-tokens -3", true, {"'-3' is not a prompt length"}},
      {"--format yaml", true, {"--format"}},
      {"--warmup -3", true, {"'-3' is not a warm-up length"}},
      {"--warmup 16,32", true, {"--warmup takes auto or one prompt length"}},
      // The case's own context check, then the warm-up's.
      {"--max-context 64 --prompt-tokens 60 --decode-tokens 8 --warmup 0 --quiet",
       false,
       {"60-token case needs a context of 68", "maximum context is 64"}},
      {"--max-context 64 --prompt-tokens 20 --decode-tokens 8 --quiet",
       false,
       {"128-token warm-up needs a context of 132", "--warmup 0"}},
  };
  for (const Case& c : cases) {
    auto r = test::Run(Bench(c.flags), Scratch());
    if (c.usage) {
      EXPECT_EQ(r.code, 2) << c.flags << "\n" << r.err;
    } else {
      EXPECT_NE(r.code, 0) << c.flags;
    }
    for (const std::string& text : c.says)
      EXPECT_NE(r.err.find(text), std::string::npos) << c.flags << "\n" << r.err;
  }
  auto r = test::Run(
      std::string(REDWING_BINARY) + " bench --model " + JoinPath(Scratch(), "missing"), Scratch());
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.err.find("missing"), std::string::npos) << r.err;
}

// ---- library helpers ----------------------------------------------------------------------

TEST(BenchLibTest, RunBenchInProcess) {
  BenchOptions o;
  o.engine.model_dir = TinyModel();
  o.engine.threads = 2;
  o.engine.prefill_chunk = 16;
  o.prompt_tokens = {50};
  o.decode_tokens = 10;
  std::vector<std::string> lines;
  o.progress = [&](const std::string& l) { lines.push_back(l); };
  auto rep = RunBench(o);
  ASSERT_TRUE(rep.ok()) << rep.status().ToString();
  ASSERT_EQ(rep->cases.size(), 1u);
  const BenchCase& c = rep->cases[0];
  EXPECT_EQ(c.prefill.tokens, 50);
  EXPECT_EQ(c.prefill.parts.tokens, 50);
  EXPECT_EQ(c.decode.parts.tokens, 10);
  EXPECT_EQ(c.generated.size(), 10u);
  EXPECT_EQ(rep->expert_store, "mmap");
  EXPECT_GE(lines.size(), 3u);  // loaded, prefill, decode
  const std::string table = BenchReportTable(*rep);
  EXPECT_NE(table.find("per part"), std::string::npos) << table;
  const Json j = BenchReportToJson(*rep);
  EXPECT_EQ(j["cases"][0]["prefill"]["tokens"].get<int>(), 50);
}

// --drafter: each case decodes its stream again, plainly and speculatively through Generate;
// both give the bench's own stream, and the oracle's acceptance follows P.
TEST(BenchLibTest, SpeculativeRunGivesThePlainStream) {
  BenchOptions o;
  o.engine.model_dir = TinyModel();
  o.engine.threads = 2;
  o.engine.prefill_chunk = 16;
  o.prompt_tokens = {40};
  o.decode_tokens = 48;
  o.disk_probe = o.memory_probe = false;
  o.warmup_tokens = 0;
  o.draft_tokens = 6;
  for (const double p : {1.0, 0.5}) {
    o.drafter = {DrafterSpec::Kind::kOracle, p};
    auto rep = RunBench(o);
    ASSERT_TRUE(rep.ok()) << rep.status().ToString();
    const auto& sp = rep->cases[0].speculation;
    ASSERT_TRUE(sp.has_value());
    EXPECT_TRUE(sp->identical) << p;
    EXPECT_TRUE(sp->simulated);
    EXPECT_EQ(sp->tokens, 48);
    EXPECT_GT(sp->verify_calls, 0);
    if (p == 1.0) {
      EXPECT_EQ(sp->accepted, sp->drafted);
      // 48 tokens after the first, 7 per call: 7 calls (the last one cut short).
      EXPECT_EQ(sp->verify_calls, 7);
    } else {
      EXPECT_LT(sp->accepted, sp->drafted);
    }
    ASSERT_EQ(sp->drafted_at.size(), 6u);
    EXPECT_GE(sp->drafted_at[0], sp->drafted_at[5]);
    const Json j = BenchReportToJson(*rep);
    EXPECT_EQ(j["cases"][0]["speculation"]["acceptance"].get<std::string>(), "simulated");
    EXPECT_TRUE(j["cases"][0]["speculation"]["identical_to_plain"].get<bool>());
    EXPECT_NE(BenchReportTable(*rep).find("simulated acceptance"), std::string::npos);
  }
  o.drafter = {DrafterSpec::Kind::kOff, 0};
  auto off = RunBench(o);
  ASSERT_TRUE(off.ok());
  EXPECT_FALSE(off->cases[0].speculation.has_value());
  EXPECT_TRUE(BenchReportToJson(*off)["cases"][0]["speculation"].is_null());
}

// The warm-up runs its own session: the cases generate the same tokens with it or without it,
// and its time is reported apart from theirs.
TEST(BenchLibTest, WarmupIsSeparateFromTheCases) {
  auto run = [](int64_t warmup) {
    BenchOptions o;
    o.engine.model_dir = TinyModel();
    o.engine.threads = 2;
    o.prompt_tokens = {30, 45};
    o.decode_tokens = 12;
    o.seed = 5;
    o.warmup_tokens = warmup;
    return RunBench(o);
  };
  auto with = run(40);
  auto without = run(0);
  ASSERT_TRUE(with.ok()) << with.status().ToString();
  ASSERT_TRUE(without.ok()) << without.status().ToString();
  EXPECT_EQ(with->warmup_tokens, 40);
  EXPECT_GT(with->warmup_seconds, 0);
  EXPECT_EQ(without->warmup_tokens, 0);
  EXPECT_EQ(without->warmup_seconds, 0);
  ASSERT_EQ(with->cases.size(), 2u);
  ASSERT_EQ(without->cases.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(with->cases[i].generated, without->cases[i].generated) << "case " << i;
    EXPECT_EQ(with->cases[i].prefill.parts.tokens, without->cases[i].prefill.parts.tokens);
  }
  EXPECT_NE(BenchReportTable(*without).find("warm-up: none"), std::string::npos);
  EXPECT_TRUE(BenchReportToJson(*without)["warmup"].is_null());
}

TEST(BenchCliTest, CoreLockAndDiskProbeCanBeTurnedOff) {
  auto r = test::Run(Bench("--prompt-tokens 12 --decode-tokens 3 --quiet --format json "
                           "--lock-core off --no-disk-probe --no-memory-probe"),
                     Scratch());
  ASSERT_EQ(r.code, 0) << r.err;
  const Json j = ParseOrFail(r.out);
  EXPECT_EQ(j["options"]["core_lock"].get<std::string>(), "core locking is off");
  EXPECT_EQ(j["disk_probe"]["skipped"].get<std::string>(), "off");
  EXPECT_EQ(j["memory_probe"]["skipped"].get<std::string>(), "off");
  EXPECT_TRUE(j["cases"][0]["decode"]["memory_bound"].is_null());
  EXPECT_TRUE(j["cases"][0]["decode"]["vs_compute_and_disk"].is_null());
  r = test::Run(Bench("--lock-core maybe"), Scratch());
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_NE(r.err.find("--lock-core must be on or off"), std::string::npos) << r.err;
}

TEST(BenchLibTest, DiskProbeReadsExpertBlobs) {
  DiskProbeOptions o;
  o.depth = 3;
  o.serial_reads = 4;
  o.parallel_reads = 9;
  auto d = ProbeExpertDisk(TinyModel(), o);
  if (!d.ok() && d.status().code() == ErrorCode::kUnsupported)
    GTEST_SKIP() << "this filesystem refuses O_DIRECT: " << d.status().ToString();
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(d->depth, 3);
  EXPECT_EQ(d->blob_bytes % 4096, 0u);
  EXPECT_GT(d->serial_gb_s, 0);
  EXPECT_GT(d->serial_ms_per_blob, 0);
  EXPECT_GT(d->parallel_gb_s, 0);
  // Bad requests are errors, not crashes.
  o.depth = 0;
  auto bad = ProbeExpertDisk(TinyModel(), o);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), ErrorCode::kInvalidArgument);
  auto missing = ProbeExpertDisk(JoinPath(Scratch(), "no-model"), DiskProbeOptions{});
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("no-model"), std::string::npos)
      << missing.status().ToString();
}

TEST(BenchLibTest, SyntheticPromptIsDeterministicAndVaried) {
  const auto a = SyntheticPrompt(3000, 262144, 2, 9);
  const auto b = SyntheticPrompt(3000, 262144, 2, 9);
  const auto c = SyntheticPrompt(3000, 262144, 2, 10);
  ASSERT_EQ(a.size(), 3000u);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  EXPECT_EQ(a[0], 2);
  std::set<int> distinct(a.begin() + 1, a.end());
  EXPECT_GT(distinct.size(), 2900u);
  for (size_t i = 1; i < a.size(); ++i) {
    EXPECT_GE(a[i], 256);
    EXPECT_LT(a[i], 262144);
  }
  const auto small = SyntheticPrompt(100, 512, 2, 1);
  for (int id : small) {
    EXPECT_LT(id, 512);
  }
  EXPECT_TRUE(SyntheticPrompt(0, 512, 2, 1).empty());
}

TEST(BenchLibTest, SampleUnfilteredDrawsWhatSamplerDraws) {
  SamplingParams p;
  p.temperature = 1.0f;
  p.top_k = 0;
  p.top_p = 1.0f;
  p.min_p = 0.0f;
  p.repetition_penalty = 1.0f;
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  for (uint64_t seed : {1ull, 2ull, 99ull}) {
    p.seed = seed;
    Sampler sampler(p);
    std::vector<float> logits(5000);
    std::set<int> drawn;
    for (int64_t pos = 0; pos < 40; ++pos) {
      for (float& z : logits) z = normal(rng);
      if (pos % 5 == 0) logits[17] = std::nanf("");
      if (pos % 7 == 0) std::fill(logits.begin() + 100, logits.begin() + 200, 4.0f);  // ties
      const int want = sampler.Sample(logits, pos, {});
      EXPECT_EQ(SampleUnfiltered(logits, seed, pos), want) << "seed " << seed << " pos " << pos;
      drawn.insert(want);
    }
    EXPECT_GT(drawn.size(), 20u);
  }
}

TEST(BenchLibTest, ProcIoAndCgroupReaders) {
  const ProcIo io = ReadProcIo();
  if (io.available) {
    EXPECT_GT(io.rchar, 0u);
  }
  const CgroupMemory cg = ReadCgroupMemory();
  if (cg.version != 0) {
    EXPECT_FALSE(cg.path.empty());
    EXPECT_GT(cg.current, 0u);
  } else {
    std::printf("no memory cgroup found (fine: the fields are then null)\n");
  }
}

TEST(BenchLibTest, DropFromPageCacheEvictsAFile) {
  const std::string dir = JoinPath(Scratch(), "dropme");
  ASSERT_TRUE(MakeDirectories(dir).ok());
  const std::string path = JoinPath(dir, "data.bin");
  ASSERT_TRUE(WriteFileAtomic(path, std::string(4 << 20, 'x')).ok());
  // Read it so it is resident.
  ASSERT_TRUE(ReadFileToString(path).ok());
  auto before = ResidentFileBytes(path);
  ASSERT_TRUE(before.ok()) << before.status().ToString();
  auto d = DropFromPageCache(dir);
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(d->files, 1);
  EXPECT_EQ(d->bytes, 4u << 20);
  EXPECT_LE(d->resident_after, d->resident_before);
  if (d->resident_before == 0) std::printf("filesystem keeps no page cache here (tmpfs?)\n");
  EXPECT_FALSE(DropFromPageCache(JoinPath(dir, "nope")).ok());
  EXPECT_FALSE(ResidentFileBytes(JoinPath(dir, "nope")).ok());
}

// The verify cost table: one row per k up to the prefill chunk, the k = 1 block touching exactly
// top_k experts per layer and a block of k tokens at most k * top_k; on with --verify-costs (and
// with a drafter), absent otherwise.
TEST(BenchLibTest, VerifyCostTable) {
  BenchOptions o;
  o.engine.model_dir = TinyModel();
  o.engine.threads = 2;
  o.engine.prefill_chunk = 12;
  o.prompt_tokens = {20};
  o.decode_tokens = 2;
  o.disk_probe = o.memory_probe = false;
  o.warmup_tokens = 0;
  o.verify_costs = true;
  o.verify_cost_reps = 2;
  auto rep = RunBench(o);
  ASSERT_TRUE(rep.ok()) << rep.status().ToString();
  ASSERT_TRUE(rep->verify_costs.has_value());
  const VerifyCostTable& t = *rep->verify_costs;
  ASSERT_EQ(t.rows.size(), 12u);  // capped by the chunk: a verify holds one
  EXPECT_GT(t.decode_ms, 0);
  const int top_k = rep->config.top_k, experts = rep->config.num_experts;
  for (size_t i = 0; i < t.rows.size(); ++i) {
    const VerifyCost& v = t.rows[i];
    EXPECT_EQ(v.k, static_cast<int>(i) + 1);
    EXPECT_GT(v.ms, 0);
    EXPECT_GE(v.experts_per_layer, top_k);
    EXPECT_LE(v.experts_per_layer, std::min(v.k * top_k, experts));
  }
  EXPECT_EQ(t.rows[0].experts_per_layer, top_k);
  const Json j = BenchReportToJson(*rep);
  ASSERT_EQ(j["verify_costs"]["rows"].size(), 12u);
  EXPECT_EQ(j["verify_costs"]["rows"][3]["k"].get<int>(), 4);
  EXPECT_GT(j["verify_costs"]["rows"][3]["experts_per_layer"].get<double>(), 0);
  EXPECT_NE(BenchReportTable(*rep).find("verify cost t(k)"), std::string::npos);

  o.verify_costs = false;
  auto off = RunBench(o);
  ASSERT_TRUE(off.ok());
  EXPECT_FALSE(off->verify_costs.has_value());
  EXPECT_TRUE(BenchReportToJson(*off)["verify_costs"].is_null());
}

}  // namespace
}  // namespace rw
