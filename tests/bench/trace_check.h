// Shared by the trace tests: runs the CLI on a synthesized tiny model and checks a file against
// the Chrome trace event format (the subset Perfetto and chrome://tracing read) and the
// profile's format.
#pragma once

#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "base/file.h"
#include "base/json.h"
#include "bench/bench_test_util.h"
#include "install/synth.h"

namespace rw::test {

// A tiny model (6 layers, 8 experts, top-2) in dir, synthesized once per process.
inline std::string TraceTinyModel(const std::string& scratch) {
  static const std::string dir = [&] {
    const std::string d = JoinPath(scratch, "tiny");
    SynthOptions o;
    o.geometry = "tiny";
    o.seed = 5;
    o.out_dir = d;
    o.overwrite = true;
    Status st = SynthesizeModel(o);
    EXPECT_TRUE(st.ok()) << st.ToString();
    return d;
  }();
  return dir;
}

inline Json ReadJsonFile(const std::string& path) {
  auto text = ReadFileToString(path);
  EXPECT_TRUE(text.ok()) << text.status().ToString();
  if (!text.ok()) return Json();
  auto j = ParseJson(*text, path);
  EXPECT_TRUE(j.ok()) << j.status().ToString();
  return j.ok() ? *j : Json();
}

// The format: an object with a traceEvents array; every event has a phase among M (metadata),
// X (complete) and i (instant), integer pid/tid, a string name; X has a category and ts/dur
// >= 0 in microseconds, i a ts and a scope; args, where present, an object; each thread has a
// name; the X events of one thread nest (no partial overlaps, which the viewers draw wrongly).
// Fills *xs with the X events.
inline void CheckChromeTrace(const Json& t, std::vector<Json>* xs) {
  ASSERT_TRUE(t.is_object());
  ASSERT_TRUE(t.contains("traceEvents") && t["traceEvents"].is_array()) << "no traceEvents array";
  EXPECT_EQ(t.value("displayTimeUnit", ""), "ms");
  std::map<int, std::string> names;
  std::map<int, std::vector<std::pair<double, double>>> spans;
  for (const Json& e : t["traceEvents"]) {
    ASSERT_TRUE(e.is_object()) << e.dump();
    ASSERT_TRUE(e.contains("ph") && e["ph"].is_string()) << e.dump();
    ASSERT_TRUE(e.contains("pid") && e["pid"].is_number_integer()) << e.dump();
    ASSERT_TRUE(e.contains("tid") && e["tid"].is_number_integer()) << e.dump();
    ASSERT_TRUE(e.contains("name") && e["name"].is_string()) << e.dump();
    if (e.contains("args")) {
      EXPECT_TRUE(e["args"].is_object()) << e.dump();
    }
    const std::string ph = e["ph"];
    if (ph == "M") {
      if (e["name"] == "thread_name") names[e["tid"].get<int>()] = e["args"]["name"];
      continue;
    }
    ASSERT_TRUE(ph == "X" || ph == "i") << e.dump();
    ASSERT_TRUE(e.contains("cat") && e["cat"].is_string()) << e.dump();
    ASSERT_TRUE(e["ts"].is_number()) << e.dump();
    EXPECT_GE(e["ts"].get<double>(), 0) << e.dump();
    if (ph == "i") {
      EXPECT_EQ(e.value("s", ""), "t") << e.dump();
      continue;
    }
    ASSERT_TRUE(e["dur"].is_number()) << e.dump();
    EXPECT_GE(e["dur"].get<double>(), 0) << e.dump();
    spans[e["tid"].get<int>()].push_back(
        {e["ts"].get<double>(), e["ts"].get<double>() + e["dur"].get<double>()});
    xs->push_back(e);
  }
  for (auto& [tid, v] : spans) {
    EXPECT_TRUE(names.count(tid)) << "thread " << tid << " has no name";
    if (names[tid].rfind("GPU ", 0) == 0) continue;  // kernels of one stream may overlap (PDL)
    // Sorted by start (longest first), each span must end inside the span that holds it.
    std::sort(v.begin(), v.end(), [](auto& a, auto& b) {
      return a.first != b.first ? a.first < b.first : a.second > b.second;
    });
    std::vector<double> open_ends;
    for (auto& [b, e] : v) {
      while (!open_ends.empty() && open_ends.back() <= b + 0.0015) open_ends.pop_back();
      if (!open_ends.empty()) {
        EXPECT_LE(e, open_ends.back() + 0.0015)
            << "thread " << names[tid] << ": span [" << b << ", " << e << "] overlaps its parent";
      }
      open_ends.push_back(e);
    }
  }
}

// The profile: format, wall time, the summary's parts, and per-layer rows.
inline void CheckProfile(const Json& p, int layers) {
  ASSERT_TRUE(p.is_object());
  EXPECT_EQ(p["format"], "redwing-profile/1");
  EXPECT_GT(p["wall_seconds"].get<double>(), 0);
  EXPECT_TRUE(p["command"].is_string());
  for (const char* k : {"embed", "attention", "router", "dense_mlp", "experts", "expert_compute",
                        "expert_waits", "expert_reads", "head", "sampling", "forward_calls",
                        "layer_launches", "host_syncs", "gpu_kernels", "gpu_copies", "gpu_ops"}) {
    ASSERT_TRUE(p["summary"].contains(k)) << k;
    const Json& s = p["summary"][k];
    EXPECT_GE(s["count"].get<int64_t>(), 0);
    EXPECT_GE(s["total_ms"].get<double>(), 0);
    EXPECT_LE(s["total_ms"].get<double>(), p["wall_seconds"].get<double>() * 1e3 * 64) << k;
  }
  ASSERT_TRUE(p["layers"].is_array());
  EXPECT_EQ(p["layers"].size(), static_cast<size_t>(layers));
  ASSERT_TRUE(p["spans"].is_array());
  EXPECT_FALSE(p["spans"].empty());
}

}  // namespace rw::test
