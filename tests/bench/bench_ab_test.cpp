// scripts/bench-snapshot.sh and scripts/bench-ab.sh end to end on a synthesized tiny model: two
// snapshots, 2 pairs A-B-B-A, a report.json whose figures are the bench runs' own numbers (read
// back from each run's --json here) with the ratio and verdict the statistics give, and a
// report.html that headless chromium renders with the same numbers in its tables and its SVG
// plots (tests/bench/bench_ab_browser.js).
#include <gtest/gtest.h>

#include <cmath>

#include "bench/trace_check.h"
#include "test_prereq.h"

namespace rw {
namespace {

const std::string& Scratch() {
  static const std::string d = test::ScratchDir("bench_ab_test");
  return d;
}

std::string Source(const std::string& rel) {
  return std::string(REDWING_SOURCE_DIR) + "/" + rel;
}

double Mean(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return s / static_cast<double>(v.size());
}

TEST(BenchAbTest, SnapshotsRunAbbaAndTheReportAgreesWithTheRuns) {
  const std::string model = test::TraceTinyModel(Scratch());
  const std::string snaps = JoinPath(Scratch(), "snaps");
  const std::string env = "REDWING_SNAPSHOTS='" + snaps + "' ";
  for (const char* name : {"before", "after"}) {
    auto r = test::Run(
        env + Source("scripts/bench-snapshot.sh") + " " + name + " '" + REDWING_BUILD_DIR + "'",
        Scratch());
    ASSERT_EQ(r.code, 0) << r.out << r.err;
    EXPECT_TRUE(PathExists(JoinPath(snaps, std::string(name) + "/redwing")));
  }
  auto bad = test::Run(
      env + Source("scripts/bench-snapshot.sh") + " 'no/slash' '" + REDWING_BUILD_DIR + "'",
      Scratch());
  EXPECT_EQ(bad.code, 2);
  EXPECT_NE(bad.err.find("NAME"), std::string::npos) << bad.err;
  auto missing = test::Run(
      env + Source("scripts/bench-ab.sh") + " before nosuch 1 -- --model " + model, Scratch());
  EXPECT_EQ(missing.code, 2);
  EXPECT_NE(missing.err.find("no snapshot 'nosuch'"), std::string::npos) << missing.err;

  const std::string run = JoinPath(Scratch(), "run");
  auto r = test::Run(env + Source("scripts/bench-ab.sh") + " --out '" + run +
                         "' before after 2 -- --model " + model +
                         " --threads 2 --prompt-tokens 16,24 --decode-tokens 6 --warmup 0 "
                         "--no-disk-probe --no-memory-probe",
                     Scratch());
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  const Json rep = test::ReadJsonFile(JoinPath(run, "report.json"));
  ASSERT_TRUE(rep.is_object());
  EXPECT_EQ(rep["format"], "redwing-bench-ab/1");
  EXPECT_EQ(rep["base"]["name"], "before");
  EXPECT_EQ(rep["try"]["name"], "after");
  EXPECT_EQ(rep["base"]["id"].get<std::string>().size(), 40u);  // a commit id
  EXPECT_EQ(rep["order"], Json({"base", "try", "try", "base"}));
  EXPECT_EQ(rep["failed_runs"].get<int>(), 0);
  // One uncounted warm-up run of each build, then the four counted ones.
  ASSERT_EQ(rep["commands"].size(), 6u);
  EXPECT_EQ(rep["commands"][0].get<std::string>().rfind("(warm-up, not counted) ", 0), 0u);
  EXPECT_NE(rep["commands"][0].get<std::string>().find("before/redwing bench"), std::string::npos);
  EXPECT_NE(rep["commands"][1].get<std::string>().find("after/redwing bench"), std::string::npos);
  EXPECT_NE(rep["commands"][2].get<std::string>().find("before/redwing bench"), std::string::npos);
  EXPECT_EQ(rep["commands"][2].get<std::string>().find("warm-up"), std::string::npos);
  EXPECT_FALSE(rep["machine"]["cpu"].get<std::string>().empty());
  EXPECT_GE(rep["machine"]["cores"].get<int>(), 1);
  ASSERT_EQ(rep["cases"].size(), 2u);

  // Each figure against the runs' own JSON, read here.
  std::vector<Json> runs;
  for (const Json& run_info : rep["runs"])
    runs.push_back(test::ReadJsonFile(JoinPath(run, run_info["json"].get<std::string>())));
  ASSERT_EQ(runs.size(), 4u);
  for (size_t ci = 0; ci < 2; ++ci) {
    const Json& c = rep["cases"][ci];
    const Json* decode = nullptr;
    for (const Json& f : c["figures"])
      if (f["key"] == "decode_tok_s") decode = &f;
    ASSERT_NE(decode, nullptr);
    std::vector<double> base, trial;
    for (size_t k = 0; k < 4; ++k) {
      const double v = runs[k]["cases"][ci]["decode"]["tok_s"].get<double>();
      EXPECT_EQ((*decode)["runs"][k]["value"].get<double>(), v);
      (rep["order"][k] == "base" ? base : trial).push_back(v);
    }
    EXPECT_NEAR((*decode)["ratio"].get<double>(), Mean(trial) / Mean(base), 1e-12);
    ASSERT_TRUE((*decode)["ci95"].is_array());
    EXPECT_LE((*decode)["ci95"][0].get<double>(), (*decode)["ci95"][1].get<double>());
    EXPECT_TRUE((*decode)["noise_floor"].is_number());
    const std::string v = (*decode)["verdict"];
    EXPECT_TRUE(v == "within noise" || v == "faster" || v == "slower") << v;
    for (const Json& f : c["figures"]) EXPECT_EQ(f["runs"].size(), 4u) << f["key"];
  }

  // The HTML in headless chromium.
  auto which = test::Run("command -v chromium", Scratch());
  REQUIRE_OR_SKIP(which.code == 0 && !which.out.empty(),
                  "Debian chromium (scripts/install-deps.sh installs it)");
  REQUIRE_OR_SKIP(test::Run("command -v node", Scratch()).code == 0,
                  "node (scripts/install-deps.sh installs it)");
  const std::string modules = Source("tests/node/node_modules");
  REQUIRE_OR_SKIP(IsDirectory(modules + "/playwright-core"),
                  "playwright-core under tests/node/node_modules (run scripts/install-deps.sh)");
  auto b =
      test::Run("timeout 150 node '" + Source("tests/bench/bench_ab_browser.js") + "' '" + modules +
                    "' '" + run + "' '" + which.out.substr(0, which.out.find('\n')) + "'",
                Scratch());
  Json out;
  try {
    out = Json::parse(b.out);
  } catch (...) {
    FAIL() << "browser script printed no JSON (rc " << b.code << "): " << b.out << b.err;
  }
  EXPECT_TRUE(out["ok"].get<bool>()) << out.dump(2);
  EXPECT_EQ(out["tables"].get<int>(), 2);
  EXPECT_EQ(out["ratio_plots"].get<int>(), 2);
  EXPECT_EQ(out["run_plots"].get<int>(), 2 * 6);
  EXPECT_GT(out["cells_checked"].get<int>(), 2 * 6 * 8 - 1);
  EXPECT_TRUE(out["external"].empty()) << out["external"].dump();
}

}  // namespace
}  // namespace rw
