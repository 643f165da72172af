// `redwing serve` end to end on a tiny model with Gemma's tokenizer: the official openai npm SDK
// (chat, streaming, completions, tool-call round trip, 401, 413), greedy answers equal to
// `redwing run`, KV-cache reuse across turns, queueing and 503, a disconnecting client freeing
// the engine, and memory over 1,000 requests.
#include <gtest/gtest.h>

#include <atomic>
#include <future>

#include "serve/serve_test_util.h"
#include "test_prereq.h"

namespace rw {
namespace {

using test::HttpClient;
using test::HttpResponse;
using test::NowMs;
using test::ServerProcess;

const test::GemmaTestModel& Model() {
  return test::SharedGemmaTinyModel();
}

#define REQUIRE_SERVER(s) ASSERT_TRUE((s).error().empty()) << (s).error()

std::string SdkDir() {
  return test::NodeModulesDir();
}

// Runs the SDK script; returns its JSON (or skips).
Json RunSdk(const std::string& scenario, int port, const std::string& key, std::string* skip) {
  int rc = 0;
  test::ShellOut("command -v node", &rc);
  if (rc != 0) {
    *skip = "node is not installed (scripts/install-deps.sh installs it)";
    return Json();
  }
  if (!IsDirectory(SdkDir() + "/openai")) {
    *skip =
        "the openai npm package is missing under tests/node/node_modules (run "
        "scripts/install-deps.sh)";
    return Json();
  }
  const std::string cmd = "timeout 120 node '" + std::string(REDWING_SOURCE_DIR) +
                          "/tests/serve/openai_sdk_client.js' '" + SdkDir() + "' " + scenario +
                          " http://127.0.0.1:" + std::to_string(port) + "/v1 '" + key +
                          "' gemma-4-26b-a4b-it 2>&1";
  const std::string out = test::ShellOut(cmd, &rc);
  try {
    Json j = Json::parse(out);
    if (rc != 0) ADD_FAILURE() << "sdk client failed: " << out;
    return j;
  } catch (...) {
    ADD_FAILURE() << "sdk client printed no JSON (rc " << rc << "): " << out;
    return Json();
  }
}

std::string Body(const Json& j) {
  return j.dump();
}

Json ChatBody(const std::string& user, int max_tokens, bool stream = false) {
  return Json{{"model", "gemma-4-26b-a4b-it"},
              {"messages", Json::array({{{"role", "user"}, {"content", user}}})},
              {"max_tokens", max_tokens},
              {"temperature", 0},
              {"stream", stream}};
}

Json Health(int port) {
  HttpClient c(port);
  return c.Request("GET", "/health", "", {}, 5000).json();
}

TEST(ServeSdk, ChatStreamingCompletionsWrongKeyAndTooLong) {
  REQUIRE_GEMMA_TINY_MODEL();
  ServerProcess server(Model().model_dir, {"--api-key", "sk-test", "--max-context", "512"});
  REQUIRE_SERVER(server);
  std::string skip;
  Json r = RunSdk("basic", server.port(), "sk-test", &skip);
  REQUIRE_OR_SKIP(skip.empty(), skip);
  ASSERT_FALSE(r.contains("fatal")) << r.dump(2);
  // Chat, whole.
  EXPECT_EQ(r["chat"]["object"], "chat.completion");
  EXPECT_EQ(r["chat"]["role"], "assistant");
  EXPECT_FALSE(r["chat"]["content"].get<std::string>().empty());
  EXPECT_EQ(r["chat"]["finish_reason"], "length");
  EXPECT_EQ(r["chat"]["usage"]["completion_tokens"], 12);
  EXPECT_GT(r["chat"]["usage"]["prompt_tokens"].get<int>(), 5);
  EXPECT_TRUE(r["chat"]["timings"].contains("decode_tokens_per_second")) << r["chat"].dump();
  // Streamed: the same greedy text, a role chunk, finish reason, usage when asked; the second
  // identical request is served from the cached prompt.
  EXPECT_EQ(r["chat_stream"]["content"], r["chat"]["content"]);
  EXPECT_EQ(r["chat_stream"]["role"], "assistant");
  EXPECT_EQ(r["chat_stream"]["finish_reason"], "length");
  EXPECT_GE(r["chat_stream"]["chunks"].get<int>(), 3);
  ASSERT_TRUE(r["chat_stream"]["usage"].is_object());
  EXPECT_EQ(r["chat_stream"]["usage"]["completion_tokens"], 12);
  EXPECT_GT(r["chat_stream"]["usage"]["prompt_tokens_details"]["cached_tokens"].get<int>(), 0);
  // Completions from text (whole and streamed) and from token ids.
  EXPECT_EQ(r["completion"]["object"], "text_completion");
  EXPECT_FALSE(r["completion"]["text"].get<std::string>().empty());
  EXPECT_EQ(r["completion_stream"]["text"], r["completion"]["text"]);
  EXPECT_EQ(r["completion_ids"]["usage"]["prompt_tokens"], 3);
  EXPECT_EQ(r["models"], Json::array({"gemma-4-26b-a4b-it"}));
  // Errors as the SDK sees them.
  EXPECT_EQ(r["wrong_key"]["status"], 401) << r["wrong_key"].dump();
  EXPECT_EQ(r["wrong_key"]["code"], "invalid_api_key");
  EXPECT_EQ(r["too_long"]["status"], 413) << r["too_long"].dump();
  EXPECT_EQ(r["too_long"]["code"], "context_length_exceeded");
  EXPECT_EQ(r["n2"]["status"], 400);
  EXPECT_TRUE(server.Alive());
}

TEST(ServeSdk, ToolCallRoundTrip) {
  REQUIRE_GEMMA_TINY_MODEL();
  // The tiny model's weights are random, so its token choices are forced (the model still runs
  // every step): a Gemma 4 tool call ending at <|tool_response>, then an answer.
  const std::string replies = test::ServeTempPath("replies.json");
  ASSERT_TRUE(WriteFileAtomic(replies, Json::array({"<|tool_call>call:get_weather{city:<|\"|>"
                                                    "Paris<|\"|>}<tool_call|><|tool_response>",
                                                    "It is sunny in Paris.<turn|>"})
                                           .dump())
                  .ok());
  ServerProcess server(Model().model_dir, {"--test-replies", replies}, "server",
                       REDWING_TESTHOOKS_BINARY);
  REQUIRE_SERVER(server);
  std::string skip;
  Json r = RunSdk("tools", server.port(), "none", &skip);
  std::remove(replies.c_str());
  REQUIRE_OR_SKIP(skip.empty(), skip);
  ASSERT_FALSE(r.contains("fatal")) << r.dump(2);
  EXPECT_EQ(r["first"]["finish_reason"], "tool_calls") << r.dump(2);
  ASSERT_EQ(r["first"]["tool_calls"].size(), 1u) << r.dump(2);
  const Json& call = r["first"]["tool_calls"][0];
  EXPECT_EQ(call["type"], "function");
  EXPECT_EQ(call["function"]["name"], "get_weather");
  EXPECT_EQ(Json::parse(call["function"]["arguments"].get<std::string>()),
            Json({{"city", "Paris"}}));
  EXPECT_FALSE(call["id"].get<std::string>().empty());
  // The tool result went back in as a tool message and the model answered.
  EXPECT_EQ(r["second"]["finish_reason"], "stop");
  EXPECT_EQ(r["second"]["content"], "It is sunny in Paris.");
  // Streamed tool call deltas.
  EXPECT_EQ(r["stream"]["finish_reason"], "tool_calls") << r.dump(2);
  ASSERT_EQ(r["stream"]["tool_calls"].size(), 1u);
  EXPECT_EQ(r["stream"]["tool_calls"][0]["name"], "get_weather");
  EXPECT_EQ(Json::parse(r["stream"]["tool_calls"][0]["arguments"].get<std::string>()),
            Json({{"city", "Paris"}}));
  EXPECT_EQ(r["stream"]["content"], "");
}

// --test-replies is a hook of the test build's redwing-testhooks only: the shipped binary
// neither lists nor takes it.
TEST(ServeCli, TestRepliesIsOnlyInTheTestBuild) {
  int rc = 0;
  std::string out = test::ShellOut(std::string(REDWING_BINARY) + " serve --help 2>&1", &rc);
  ASSERT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("--max-queue"), std::string::npos) << out;
  EXPECT_EQ(out.find("test-replies"), std::string::npos) << out;
  out = test::ShellOut(std::string(REDWING_TESTHOOKS_BINARY) + " serve --help 2>&1", &rc);
  ASSERT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("--test-replies"), std::string::npos) << out;

  const std::string missing = test::ServeTempPath("no_such_replies.json");
  const std::string args = " serve --model no_such_model --test-replies '" + missing + "' 2>&1";
  out = test::ShellOut(std::string(REDWING_BINARY) + args, &rc);
  EXPECT_EQ(rc, 2) << out;
  EXPECT_NE(out.find("unknown option --test-replies"), std::string::npos) << out;
  // The test build takes the flag and reads the file (which is missing) before loading a model.
  out = test::ShellOut(std::string(REDWING_TESTHOOKS_BINARY) + args, &rc);
  EXPECT_NE(rc, 0) << out;
  EXPECT_EQ(out.find("unknown option"), std::string::npos) << out;
  EXPECT_NE(out.find(missing), std::string::npos) << out;
}

TEST(Serve, ToolDeclarationsReachThePrompt) {
  REQUIRE_GEMMA_TINY_MODEL();
  ServerProcess server(Model().model_dir, {});
  REQUIRE_SERVER(server);
  Json body = ChatBody("Weather?", 1);
  HttpClient c(server.port());
  const int plain =
      c.Request("POST", "/v1/chat/completions", Body(body)).json()["usage"]["prompt_tokens"];
  body["tools"] = Json::parse(R"([{"type": "function", "function": {"name": "get_weather",
      "description": "Current weather", "parameters": {"type": "object",
      "properties": {"city": {"type": "string"}}}}}])");
  const int with_tools =
      c.Request("POST", "/v1/chat/completions", Body(body)).json()["usage"]["prompt_tokens"];
  EXPECT_GT(with_tools, plain + 10);
  body["tool_choice"] = "none";
  EXPECT_EQ(c.Request("POST", "/v1/chat/completions", Body(body)).json()["usage"]["prompt_tokens"],
            plain);
  body["tool_choice"] = "required";
  EXPECT_EQ(c.Request("POST", "/v1/chat/completions", Body(body)).status, 400);
}

TEST(Serve, GreedyAnswerEqualsRedwingRun) {
  REQUIRE_GEMMA_TINY_MODEL();
  ServerProcess server(Model().model_dir, {});
  REQUIRE_SERVER(server);
  const std::string model = "--model '" + Model().model_dir + "'";
  int rc = 0;
  const std::string run = test::ShellOut(std::string(REDWING_BINARY) + " run " + model +
                                             " --chat-prompt 'Tell me a story.' --system 'Be "
                                             "brief.' --temperature 0 --max-new 24 --quiet",
                                         &rc);
  ASSERT_EQ(rc, 0) << run;
  Json body = ChatBody("Tell me a story.", 24);
  body["messages"].insert(body["messages"].begin(),
                          Json{{"role", "system"}, {"content", "Be brief."}});
  HttpClient c(server.port());
  HttpResponse r = c.Request("POST", "/v1/chat/completions", Body(body));
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.json()["choices"][0]["message"]["content"].get<std::string>() + "\n", run);

  const std::string run2 =
      test::ShellOut(std::string(REDWING_BINARY) + " run " + model +
                         " --prompt 'The capital of France' --temperature 0 --max-new 20 --quiet",
                     &rc);
  ASSERT_EQ(rc, 0) << run2;
  Json comp = {{"prompt", "The capital of France"}, {"max_tokens", 20}, {"temperature", 0}};
  r = c.Request("POST", "/v1/completions", Body(comp));
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.json()["choices"][0]["text"].get<std::string>() + "\n", run2);
}

TEST(Serve, NextTurnPrefillsOnlyTheNewMessages) {
  REQUIRE_GEMMA_TINY_MODEL();
  ServerProcess server(Model().model_dir, {});
  REQUIRE_SERVER(server);
  HttpClient c(server.port());
  Json body = ChatBody("Hello there, how are you today?", 8);
  HttpResponse r1 = c.Request("POST", "/v1/chat/completions", Body(body));
  ASSERT_EQ(r1.status, 200) << r1.body;
  const Json j1 = r1.json();
  const int p1 = j1["usage"]["prompt_tokens"], g1 = j1["usage"]["completion_tokens"];
  body["messages"].push_back(
      {{"role", "assistant"}, {"content", j1["choices"][0]["message"]["content"]}});
  body["messages"].push_back({{"role", "user"}, {"content", "And then?"}});
  HttpResponse r2 = c.Request("POST", "/v1/chat/completions", Body(body));
  ASSERT_EQ(r2.status, 200) << r2.body;
  const Json t = r2.json()["timings"];
  // Everything the model saw and wrote in turn 1 is reused.
  EXPECT_GE(t["prompt_cached_tokens"].get<int>(), p1 + g1 - 1) << t.dump();
  EXPECT_LE(t["prompt_new_tokens"].get<int>(), 24) << t.dump();  // the new turn's ~18 tokens
}

TEST(Serve, QueueServesInOrderAndRefusesBeyondIt) {
  REQUIRE_GEMMA_TINY_MODEL();
  ServerProcess server(Model().model_dir, {"--max-queue", "2"});
  REQUIRE_SERVER(server);
  // A: a long streamed answer holds the engine.
  HttpClient a(server.port());
  ASSERT_TRUE(a.SendRaw(
      HttpClient::Format("POST", "/v1/chat/completions", Body(ChatBody("long", 3000, true)))));
  ASSERT_NE(a.ReadUntil("data: ", 5000).find("data: "), std::string::npos);
  // B and C wait in order.
  std::vector<int64_t> done(2, 0), sent(2, 0);
  std::vector<std::string> bodies(2);
  std::vector<std::thread> waiters;
  for (int i = 0; i < 2; ++i) {
    waiters.emplace_back([&, i] {
      HttpClient c(server.port());
      sent[i] = NowMs();
      HttpResponse r = c.Request("POST", "/v1/chat/completions",
                                 Body(ChatBody(i == 0 ? "first" : "second", 4)), {}, 60000);
      bodies[i] = r.body;
      done[i] = r.status == 200 ? NowMs() : -1;
    });
    const int64_t deadline = NowMs() + 5000;
    while (Health(server.port())["queued"] != i + 1 && NowMs() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    ASSERT_EQ(Health(server.port())["queued"], i + 1);
  }
  const int64_t both_queued = NowMs();
  // D: beyond the queue.
  HttpClient d(server.port());
  HttpResponse busy = d.Request("POST", "/v1/chat/completions", Body(ChatBody("third", 4)));
  EXPECT_EQ(busy.status, 503) << busy.body;
  EXPECT_FALSE(busy.headers["retry-after"].empty());
  EXPECT_EQ(busy.json()["error"]["code"], "server_busy");
  // A leaves; B then C are served.
  a.Reset();
  for (auto& w : waiters) w.join();
  ASSERT_GT(done[0], 0) << bodies[0];
  ASSERT_GT(done[1], 0) << bodies[1];
  EXPECT_LE(done[0], done[1]);
  // Both waited for A, and C left the queue after B did. B started no earlier than it was sent
  // plus its wait, C no later than the moment both were queued plus its wait (1 ms for the
  // clock's rounding). C's own wait can still be the shorter one, when B runs for less time
  // than the gap between their arrivals.
  const double queued[2] = {Json::parse(bodies[0])["timings"]["queue_ms"].get<double>(),
                            Json::parse(bodies[1])["timings"]["queue_ms"].get<double>()};
  EXPECT_GT(queued[0], 0.0);
  EXPECT_GT(queued[1], 0.0);
  EXPECT_LE(static_cast<double>(sent[0]) + queued[0],
            static_cast<double>(both_queued) + queued[1] + 1.0)
      << "B sent at " << sent[0] << " and waited " << queued[0] << " ms; C queued by "
      << both_queued << " and waited " << queued[1] << " ms";
}

TEST(Serve, DisconnectingClientFreesTheEngine) {
  REQUIRE_GEMMA_TINY_MODEL();
  ServerProcess server(Model().model_dir, {});
  REQUIRE_SERVER(server);
  for (bool stream : {true, false}) {
    HttpClient a(server.port());
    ASSERT_TRUE(a.SendRaw(
        HttpClient::Format("POST", "/v1/chat/completions", Body(ChatBody("go on", 3000, stream)))));
    if (stream) {
      ASSERT_NE(a.ReadUntil("data: ", 3000).find("data: "), std::string::npos);
    } else {
      const int64_t deadline = NowMs() + 5000;
      while (!Health(server.port())["busy"].get<bool>() && NowMs() < deadline)
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    // A queued client that leaves frees its place too.
    HttpClient b(server.port());
    ASSERT_TRUE(
        b.SendRaw(HttpClient::Format("POST", "/v1/chat/completions", Body(ChatBody("b", 5)))));
    int64_t deadline = NowMs() + 5000;
    while (Health(server.port())["queued"] != 1 && NowMs() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    b.Close();
    deadline = NowMs() + 2000;
    while (Health(server.port())["queued"] != 0 && NowMs() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    EXPECT_EQ(Health(server.port())["queued"], 0);

    EXPECT_TRUE(Health(server.port())["busy"].get<bool>());
    const int64_t t0 = NowMs();
    a.Close();
    while (Health(server.port())["busy"].get<bool>() && NowMs() < t0 + 5000)
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    const int64_t freed_ms = NowMs() - t0;
    EXPECT_LT(freed_ms, 500) << "stream " << stream;
    std::printf("engine freed %lld ms after the client left (stream %d)\n",
                static_cast<long long>(freed_ms), stream);
  }
  // And it serves the next request.
  HttpClient c(server.port());
  EXPECT_EQ(c.Request("POST", "/v1/chat/completions", Body(ChatBody("hi", 2))).status, 200);
}

TEST(Serve, StreamSendsCommentsDuringALongPrefill) {
  REQUIRE_GEMMA_TINY_MODEL();
  ServerProcess server(Model().model_dir, {"--sse-keepalive", "0.05", "--prefill-chunk", "4"});
  REQUIRE_SERVER(server);
  std::string words;
  for (int i = 0; i < 300; ++i) words += "word" + std::to_string(i) + " ";
  HttpClient c(server.port());
  HttpResponse r = c.Request("POST", "/v1/chat/completions", Body(ChatBody(words, 1, true)));
  ASSERT_EQ(r.status, 200);
  EXPECT_NE(r.body.find("\n: prefill "), std::string::npos) << r.body.substr(0, 400);
  EXPECT_EQ(test::SseData(r.body).back(), "[DONE]");
}

TEST(Serve, ReasoningAndStopStrings) {
  REQUIRE_GEMMA_TINY_MODEL();
  // Forced output: a thinking channel, then an answer that contains a stop string.
  const std::string replies = test::ServeTempPath("think.json");
  ASSERT_TRUE(
      WriteFileAtomic(replies,
                      Json::array({"<|channel>thought\nLet me think.<channel|>The answer is 4. "
                                   "STOP here<turn|>"})
                          .dump())
          .ok());
  ServerProcess server(Model().model_dir, {"--test-replies", replies}, "server",
                       REDWING_TESTHOOKS_BINARY);
  REQUIRE_SERVER(server);
  std::remove(replies.c_str());
  HttpClient c(server.port());
  Json body = ChatBody("2+2?", 64);
  body["chat_template_kwargs"] = {{"enable_thinking", true}};
  HttpResponse r = c.Request("POST", "/v1/chat/completions", Body(body));
  ASSERT_EQ(r.status, 200) << r.body;
  Json m = r.json()["choices"][0]["message"];
  EXPECT_EQ(m["reasoning_content"], "Let me think.") << r.body;
  EXPECT_EQ(m["content"], "The answer is 4. STOP here");
  EXPECT_EQ(r.json()["choices"][0]["finish_reason"], "stop");
  // Streamed, with a stop string: reasoning deltas, content up to the stop string.
  body["stream"] = true;
  body["stop"] = Json::array({"STOP"});
  r = c.Request("POST", "/v1/chat/completions", Body(body));
  ASSERT_EQ(r.status, 200);
  std::string reasoning, content, finish;
  for (const std::string& d : test::SseData(r.body)) {
    if (d == "[DONE]") continue;
    const Json j = Json::parse(d);
    if (j["choices"].empty()) continue;
    const Json& delta = j["choices"][0]["delta"];
    if (delta.contains("reasoning_content")) reasoning += delta["reasoning_content"];
    if (delta.contains("content")) content += delta["content"];
    if (!j["choices"][0]["finish_reason"].is_null()) finish = j["choices"][0]["finish_reason"];
  }
  EXPECT_EQ(reasoning, "Let me think.");
  EXPECT_EQ(content, "The answer is 4. ");
  EXPECT_EQ(finish, "stop");
}

TEST(Serve, SigtermStopsCleanlyMidStream) {
  REQUIRE_GEMMA_TINY_MODEL();
  ServerProcess server(Model().model_dir, {});
  REQUIRE_SERVER(server);
  HttpClient a(server.port());
  ASSERT_TRUE(a.SendRaw(
      HttpClient::Format("POST", "/v1/chat/completions", Body(ChatBody("long", 3000, true)))));
  ASSERT_NE(a.ReadUntil("data: ", 5000).find("data: "), std::string::npos);
  const int64_t t0 = NowMs();
  const int st = server.Kill();
  EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << "wait status " << st;
  EXPECT_LT(NowMs() - t0, 3000);
}

#if defined(__SANITIZE_ADDRESS__)
constexpr bool kSanitized = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
constexpr bool kSanitized = true;
#else
constexpr bool kSanitized = false;
#endif
#else
constexpr bool kSanitized = false;
#endif

TEST(Serve, ThousandRequestsLeaveMemoryFlat) {
  REQUIRE_GEMMA_TINY_MODEL();
  ServerProcess server(Model().model_dir, {});
  REQUIRE_SERVER(server);
  HttpClient c(server.port());
  const std::string chat = Body(ChatBody("Count to three.", 2));
  const std::string comp = Body(Json{{"prompt", "abc"}, {"max_tokens", 2}});
  int64_t rss_warm = 0;
  const int64_t t0 = NowMs();
  // Under AddressSanitizer a request costs ~20x and freed memory sits in its quarantine, so the
  // RSS figure means nothing there: 200 requests check that many in a row are served cleanly.
  const int requests = kSanitized ? 200 : 1000;
  for (int i = 0; i < requests; ++i) {
    // Chat and completions in runs, so each request reuses the cached prompt of the last.
    const bool use_chat = (i / 50) % 2 == 0;
    HttpResponse r = c.Request("POST", use_chat ? "/v1/chat/completions" : "/v1/completions",
                               use_chat ? chat : comp, {}, 10000);
    ASSERT_EQ(r.status, 200) << i << ": " << r.body;
    if (i == 99) rss_warm = Health(server.port())["rss_bytes"];
  }
  const int64_t rss_end = Health(server.port())["rss_bytes"];
  std::printf("%d requests in %lld ms; RSS after 100: %.1f MiB, after %d: %.1f MiB\n", requests,
              static_cast<long long>(NowMs() - t0), rss_warm / 1048576.0, requests,
              rss_end / 1048576.0);
  if (kSanitized) {
    std::printf("AddressSanitizer build: the RSS bound is checked in the release build only\n");
    return;
  }
  EXPECT_LT(rss_end - rss_warm, 8 << 20);
}

TEST(Serve, ChatPageIsSelfContained) {
  REQUIRE_GEMMA_TINY_MODEL();
  ServerProcess server(Model().model_dir, {"--api-key", "k"});
  REQUIRE_SERVER(server);
  HttpClient c(server.port());
  HttpResponse r = c.Request("GET", "/");
  ASSERT_EQ(r.status, 200);
  EXPECT_NE(r.headers["content-type"].find("text/html"), std::string::npos);
  EXPECT_NE(r.body.find("/v1/chat/completions"), std::string::npos);
  EXPECT_EQ(r.body.find("http://"), std::string::npos);
  EXPECT_EQ(r.body.find("https://"), std::string::npos);
  EXPECT_EQ(r.body.find("src="), std::string::npos);
  // The page is served as it is in the source tree (compiled in from that file).
  auto page = ReadFileToString(std::string(REDWING_SOURCE_DIR) + "/src/serve/chat_page.html");
  ASSERT_TRUE(page.ok()) << page.status().ToString();
  EXPECT_TRUE(r.body == *page) << "GET / serves " << r.body.size() << " bytes, chat_page.html has "
                               << page->size();
}

// /v1/models reports the defaults a request without its own sampling fields gets (the chat page
// shows them): the flags of `redwing serve`, as request fields.
TEST(Serve, ModelsReportTheServersDefaults) {
  REQUIRE_GEMMA_TINY_MODEL();
  ServerProcess server(Model().model_dir,
                       {"--temperature", "0.35", "--top-p", "0.8", "--top-k", "7", "--min-p",
                        "0.05", "--repetition-penalty", "1.1", "--max-new", "77", "--seed", "5"});
  REQUIRE_SERVER(server);
  HttpClient c(server.port());
  HttpResponse r = c.Request("GET", "/v1/models");
  ASSERT_EQ(r.status, 200) << r.body;
  const Json expected = Json::parse(R"({"temperature": 0.35, "top_p": 0.8, "top_k": 7,
      "min_p": 0.05, "repetition_penalty": 1.1, "max_tokens": 77, "seed": 5})");
  const Json model = r.json()["data"][0];
  EXPECT_EQ(model["id"], "gemma-4-26b-a4b-it");
  EXPECT_EQ(model["object"], "model");
  EXPECT_EQ(model["defaults"], expected) << r.body;
  r = c.Request("GET", "/v1/models/gemma-4-26b-a4b-it");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.json()["defaults"], expected) << r.body;
  // Those defaults are the ones a request without the fields gets: greedy here (--temperature 0)
  // equals a request that asks for greedy itself, and max_tokens is the server's.
  server.Kill();
  ServerProcess greedy(Model().model_dir, {"--temperature", "0", "--max-new", "5"}, "greedy");
  REQUIRE_SERVER(greedy);
  HttpClient g(greedy.port());
  r = g.Request("GET", "/v1/models");
  ASSERT_EQ(r.status, 200) << r.body;
  const Json d = r.json()["data"][0]["defaults"];
  EXPECT_EQ(d["temperature"], 0) << r.body;
  EXPECT_EQ(d["max_tokens"], 5) << r.body;
  EXPECT_TRUE(d["seed"].is_null()) << r.body;  // no --seed: each request draws its own
  Json plain = {{"messages", Json::array({{{"role", "user"}, {"content", "Hi"}}})}};
  r = g.Request("POST", "/v1/chat/completions", Body(plain));
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.json()["usage"]["completion_tokens"], d["max_tokens"]) << r.body;
  const std::string text = r.json()["choices"][0]["message"]["content"];
  for (const auto& [k, v] : d.items())
    if (!v.is_null()) plain[k] = v;
  r = g.Request("POST", "/v1/chat/completions", Body(plain));
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.json()["choices"][0]["message"]["content"], text);
}

TEST(ServePage, BrowserChatsStreamsAndStops) {
  REQUIRE_GEMMA_TINY_MODEL();
  int rc = 0;
  const std::string chromium = test::ShellOut("command -v chromium", &rc);
  REQUIRE_OR_SKIP(rc == 0 && !chromium.empty(),
                  "Debian chromium (scripts/install-deps.sh installs it)");
  test::ShellOut("command -v node", &rc);
  REQUIRE_OR_SKIP(rc == 0, "node (scripts/install-deps.sh installs it)");
  REQUIRE_OR_SKIP(IsDirectory(SdkDir() + "/playwright-core"),
                  "playwright-core under tests/node/node_modules (run scripts/install-deps.sh)");
  // Sampling defaults that are not redwing's: the page must take them from the server. Greedy
  // (temperature 0), so that the page's answer can be compared with the API's.
  ServerProcess server(Model().model_dir, {"--api-key", "sk-page", "--temperature", "0", "--top-p",
                                           "0.85", "--max-new", "8"});
  REQUIRE_SERVER(server);
  const std::string url = "http://127.0.0.1:" + std::to_string(server.port()) + "/";
  const std::string out =
      test::ShellOut("timeout 150 node '" + std::string(REDWING_SOURCE_DIR) +
                         "/tests/serve/chat_page_browser.js' '" + SdkDir() + "' '" + url + "' '" +
                         chromium.substr(0, chromium.find('\n')) + "' sk-page 2>&1",
                     &rc);
  Json r;
  try {
    r = Json::parse(out);
  } catch (...) {
    FAIL() << "browser script printed no JSON (rc " << rc << "): " << out;
  }
  ASSERT_FALSE(r.contains("fatal")) << r["fatal"].get<std::string>();
  EXPECT_EQ(r["user"], "Hello!");
  EXPECT_EQ(r["icon"], url + "favicon.ico");
  // No numbers of the page's own: empty until the server's defaults arrive (which needs the key),
  // then the server's, sent with the message.
  EXPECT_EQ(r["fields_without_key"],
            Json::parse(R"({"temperature": "", "top_p": "", "max_tokens": ""})"));
  EXPECT_EQ(r["fields"], Json::parse(R"({"temperature": "0", "top_p": "0.85", "max_tokens": "8"})"))
      << r.dump();
  EXPECT_EQ(r["sent_settings"],
            Json::parse(R"({"temperature": 0, "top_p": 0.85, "max_tokens": 8})"))
      << r.dump();
  // A failed request (401) is shown, and neither it nor an empty answer is sent again.
  EXPECT_NE(r["error_text"].get<std::string>().find("API key"), std::string::npos) << r.dump();
  EXPECT_EQ(r["after_error_messages"], Json::parse(R"([{"role": "user", "content": "Hello!"}])"));
  // "New chat" during a streamed answer: the new conversation holds only its own message.
  EXPECT_EQ(r["after_new_chat_messages"],
            Json::parse(R"([{"role": "user", "content": "Hi again"}])"));
  // The page's greedy answer is the API's.
  HttpClient c(server.port());
  Json body = ChatBody("Hello!", 8);
  body["stream"] = true;
  std::string api;
  for (const std::string& d : test::SseData(
           c.Request("POST", "/v1/chat/completions", Body(body), {"Authorization: Bearer sk-page"})
               .body)) {
    if (d == "[DONE]") continue;
    const Json j = Json::parse(d);
    if (!j["choices"].empty() && j["choices"][0]["delta"].contains("content"))
      api += j["choices"][0]["delta"]["content"].get<std::string>();
  }
  EXPECT_EQ(r["first"], api);
  EXPECT_NE(r["stats"].get<std::string>().find("tok/s"), std::string::npos) << r.dump();
  EXPECT_NE(r["memory"].get<std::string>().find("MiB"), std::string::npos) << r.dump();
  EXPECT_TRUE(r["busy_before_stop"].get<bool>());
  EXPECT_FALSE(r["busy_after_stop"].get<bool>());
  EXPECT_LT(r["freed_ms"].get<int>(), 1000);
  EXPECT_NE(r["stopped_text"].get<std::string>().find("[stopped]"), std::string::npos);
  EXPECT_TRUE(r["send_enabled"].get<bool>());
  EXPECT_TRUE(r["external"].empty()) << r["external"].dump();
  std::printf("browser: stop freed the engine in %d ms\n", r["freed_ms"].get<int>());
}

}  // namespace
}  // namespace rw
