// `redwing serve --drafter ngram` end to end: a real server process and real HTTP requests. The
// answers (greedy, and sampled with a seed; whole and streamed) equal those of a server without
// the drafter, and `timings` report the decode path, the drafter, the drafted and accepted counts
// and the mean accepted length.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <string>

#include "base/json.h"
#include "serve/serve_test_util.h"

namespace rw {
namespace {

using test::HttpClient;
using test::HttpResponse;
using test::ServerProcess;

#define REQUIRE_SERVER(s) ASSERT_TRUE((s).error().empty()) << (s).error()

// A prompt that repeats itself, and a repetition "penalty" below 1 that favours its tokens: the
// tiny random model copies, so prompt lookup has matches and drafts are really verified.
Json Completion(double temperature, int64_t seed, bool stream) {
  return Json{{"prompt",
               "one two three four five six seven. one two three four five six seven. one two "
               "three four five six seven. one two three"},
              {"max_tokens", 40},
              {"temperature", temperature},
              {"seed", seed},
              {"repetition_penalty", 0.3},
              {"stream", stream}};
}

struct Answer {
  std::string text;
  Json timings;
};

Answer Ask(int port, const Json& body) {
  HttpClient c(port);
  HttpResponse r = c.Request("POST", "/v1/completions", body.dump());
  EXPECT_EQ(r.status, 200) << r.body;
  Answer a;
  if (r.status != 200) return a;
  if (!body["stream"].get<bool>()) {
    const Json j = r.json();
    a.text = j["choices"][0]["text"].get<std::string>();
    a.timings = j["timings"];
    return a;
  }
  for (const std::string& d : test::SseData(r.body)) {
    if (d == "[DONE]") continue;
    const Json j = Json::parse(d);
    if (j.contains("timings")) a.timings = j["timings"];
    if (!j.contains("choices") || j["choices"].empty()) continue;
    a.text += j["choices"][0]["text"].get<std::string>();
  }
  return a;
}

TEST(ServeSpeculative, SameAnswersAsWithoutTheDrafterAndTimingsSaySo) {
  REQUIRE_GEMMA_TINY_MODEL();
  const std::string model = test::SharedGemmaTinyModel().model_dir;
  ServerProcess plain(model, {}, "spec-plain");
  REQUIRE_SERVER(plain);
  ServerProcess spec(model, {"--drafter", "ngram"}, "spec-ngram");  // --draft-tokens auto
  REQUIRE_SERVER(spec);
  ServerProcess fixed(model, {"--drafter", "ngram", "--draft-tokens", "4"}, "spec-fixed");
  REQUIRE_SERVER(fixed);
  int64_t accepted = 0;
  for (const auto& [temperature, seed] : {std::pair{0.0, int64_t{0}}, std::pair{0.8, int64_t{7}}}) {
    for (const bool stream : {false, true}) {
      const Json body = Completion(temperature, seed, stream);
      const std::string what =
          fmt::format("temperature {} seed {}{}", temperature, seed, stream ? " streamed" : "");
      const Answer a = Ask(plain.port(), body);
      ASSERT_FALSE(a.text.empty()) << what;
      EXPECT_EQ(a.timings["decode_path"], "plain") << what;
      EXPECT_TRUE(a.timings["drafter"].is_null()) << what;
      EXPECT_EQ(a.timings["drafted_tokens"], 0) << what;
      for (ServerProcess* s : {&spec, &fixed}) {
        const Answer b = Ask(s->port(), body);
        EXPECT_EQ(b.text, a.text) << what;
        const Json& t = b.timings;
        ASSERT_TRUE(t.is_object()) << what;
        EXPECT_EQ(t["decode_path"], "speculative") << what << " " << t.dump();
        EXPECT_EQ(t["drafter"], "ngram") << what;
        const int64_t drafted = t["drafted_tokens"].get<int64_t>();
        const int64_t acc = t["accepted_tokens"].get<int64_t>();
        const int64_t calls = t["verify_calls"].get<int64_t>();
        EXPECT_LE(acc, drafted) << what;
        EXPECT_LE(calls, drafted) << what;
        EXPECT_DOUBLE_EQ(t["mean_accepted_length"].get<double>(),
                         calls > 0 ? static_cast<double>(acc) / calls : 0.0)
            << what;
        accepted += acc;
      }
    }
  }
  EXPECT_GT(accepted, 0) << "no draft was accepted: the identity checks above were vacuous";
}

TEST(ServeSpeculative, BadSpeculationFlagsAreClearErrors) {
  REQUIRE_GEMMA_TINY_MODEL();
  int rc = 0;
  const std::string out = test::ShellOut(std::string(REDWING_BINARY) + " serve --model '" +
                                             test::SharedGemmaTinyModel().model_dir +
                                             "' --port 0 --drafter oracle:0.5 2>&1",
                                         &rc);
  EXPECT_NE(rc, 0);
  EXPECT_NE(out.find("redwing bench"), std::string::npos) << out;
}

}  // namespace
}  // namespace rw
