// Unit tests of the OpenAI request parser on its own (the server-level cases are in
// serve_hostile_test): numeric edge cases found by tests/fuzz/fuzz_chat_request.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "serve/api_request.h"

namespace rw::serve {
namespace {

std::optional<ApiError> Parse(const std::string& extra, ApiRequest* out) {
  const std::string body = R"({"messages": [{"role": "user", "content": "x"}])" +
                           (extra.empty() ? "" : ", " + extra) + "}";
  return ParseApiRequest(body, /*chat=*/true, RequestLimits(), ApiDefaults(), out);
}

// Whole numbers written as floats beyond int64 used to be converted to int64 unchecked
// (undefined behaviour; in practice a wrong "must be an integer"). They saturate like large
// unsigned integers do, then meet the field's range check.
TEST(ApiRequest, HugeWholeFloatsSaturateInsteadOfOverflowing) {
  ApiRequest req;
  auto e = Parse(R"("n": 1e30)", &req);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->param, "n");
  EXPECT_EQ(e->code, "invalid_value") << e->message;

  e = Parse(R"("max_tokens": -1e30)", &req);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->param, "max_tokens");
  EXPECT_EQ(e->code, "invalid_value") << e->message;

  e = Parse(R"("seed": 18647444073709551615)", &req);  // past uint64: parsed as a float
  ASSERT_FALSE(e.has_value()) << e->message;
  EXPECT_EQ(req.gen.sampling.seed, static_cast<uint64_t>(INT64_MAX));

  e = Parse(R"("seed": -1e300)", &req);
  ASSERT_FALSE(e.has_value()) << e->message;
  EXPECT_EQ(req.gen.sampling.seed, static_cast<uint64_t>(INT64_MIN));
}

TEST(ApiRequest, WholeFloatsAreIntegersAndFractionsAreNot) {
  ApiRequest req;
  auto e = Parse(R"("max_tokens": 7.0)", &req);
  ASSERT_FALSE(e.has_value()) << e->message;
  EXPECT_EQ(req.gen.max_new_tokens, 7);
  e = Parse(R"("max_tokens": 7.5)", &req);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->param, "max_tokens");
  EXPECT_EQ(e->code, "invalid_type");
}

// A number too large for a double made the JSON library throw out_of_range, which escaped the
// parser (the server answered 500 instead of 400). Found by fuzz_chat_request.
TEST(ApiRequest, NumbersPastDoubleAreInvalidJson) {
  ApiRequest req;
  auto e = Parse(R"("temperature": 1.5e2364)", &req);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->status, 400);
  EXPECT_EQ(e->code, "invalid_json") << e->message;
}

// The defaults /v1/models reports are request fields that reproduce them exactly: sent back
// to a server with other defaults, they give the same sampling and length (floats printed
// shortest, 0.2 rather than 0.2000000029..., still read back to the same float).
TEST(ApiRequest, DefaultsJsonSentBackGivesTheSameSettings) {
  ApiDefaults d;
  d.sampling.temperature = 0.35f;
  d.sampling.top_k = 7;
  d.sampling.top_p = 0.8f;
  d.sampling.min_p = 0.05f;
  d.sampling.repetition_penalty = 1.1f;
  d.sampling.seed = 12345;
  d.random_seed = false;
  d.max_tokens = 77;
  const Json j = ApiDefaultsJson(d);
  EXPECT_EQ(j.dump(), R"({"max_tokens":77,"min_p":0.05,"repetition_penalty":1.1,"seed":12345,)"
                      R"("temperature":0.35,"top_k":7,"top_p":0.8})");
  Json body = j;
  body["messages"] = Json::array({{{"role", "user"}, {"content", "x"}}});
  ApiRequest req;
  auto e = ParseApiRequest(body.dump(), /*chat=*/true, RequestLimits(), ApiDefaults(), &req);
  ASSERT_FALSE(e.has_value()) << e->message;
  const SamplingParams& s = req.gen.sampling;
  EXPECT_EQ(s.temperature, d.sampling.temperature);
  EXPECT_EQ(s.top_k, d.sampling.top_k);
  EXPECT_EQ(s.top_p, d.sampling.top_p);
  EXPECT_EQ(s.min_p, d.sampling.min_p);
  EXPECT_EQ(s.repetition_penalty, d.sampling.repetition_penalty);
  EXPECT_EQ(s.seed, d.sampling.seed);
  EXPECT_EQ(req.gen.max_new_tokens, d.max_tokens);
  // A random seed per request is reported as null.
  d.random_seed = true;
  EXPECT_TRUE(ApiDefaultsJson(d)["seed"].is_null());
}

}  // namespace
}  // namespace rw::serve
