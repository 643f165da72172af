// POST /v1/chat/completions and /v1/completions: request to prompt ids, a job on the engine
// loop, and the answer back as one JSON object or a stream of server-sent events. The HTTP
// thread watches the client while the engine works: a client that goes away cancels its job.
#include <fmt/format.h>

#include <ctime>

#include "base/timer.h"
#include "chat/chat_tool_call.h"
#include "engine/conversation.h"
#include "serve/server.h"

namespace rw::serve {

namespace {

constexpr int kTickMs = 50;  // how often a waiting HTTP thread checks its client

Json Usage(const JobResult& r) {
  const GenerateResult& g = r.gen;
  const int64_t completion = static_cast<int64_t>(g.ids.size()) + (g.stop_id >= 0 ? 1 : 0);
  return Json{{"prompt_tokens", g.prompt_tokens},
              {"completion_tokens", completion},
              {"total_tokens", g.prompt_tokens + completion},
              {"prompt_tokens_details", {{"cached_tokens", g.reused_tokens}}}};
}

Json Timings(const JobResult& r) {
  const GenerateResult& g = r.gen;
  const int64_t fresh = g.prompt_tokens - g.reused_tokens;
  const RssBreakdown rss = CurrentRss();
  return Json{
      {"queue_ms", r.queue_seconds * 1e3},
      {"prompt_tokens", g.prompt_tokens},
      {"prompt_cached_tokens", g.reused_tokens},
      {"prompt_new_tokens", fresh},
      {"prefill_ms", g.prefill_seconds * 1e3},
      {"prefill_tokens_per_second", g.prefill_seconds > 0 ? fresh / g.prefill_seconds : 0.0},
      {"first_token_ms", g.first_token_seconds * 1e3},
      {"completion_tokens", static_cast<int64_t>(g.ids.size()) + (g.stop_id >= 0 ? 1 : 0)},
      {"decode_ms", g.decode_seconds * 1e3},
      {"decode_tokens_per_second",
       g.decode_seconds > 0 ? static_cast<double>(g.decoded_tokens) / g.decode_seconds : 0.0},
      {"experts_run", r.experts_run},
      {"expert_ms", r.expert_seconds * 1e3},
      {"expert_cache_hit_rate", r.expert_hits + r.expert_misses > 0
                                    ? Json(static_cast<double>(r.expert_hits) /
                                           static_cast<double>(r.expert_hits + r.expert_misses))
                                    : Json()},
      {"expert_bytes_read", r.expert_bytes_read},
      {"expert_read_wait_ms", r.expert_wait_seconds * 1e3},
      {"context_tokens", r.context_tokens},
      // Speculative decoding (--drafter): the path, the drafter, the drafts verified and
      // accepted, and the accepted drafts per verify call.
      {"decode_path", r.drafter.empty() ? "plain" : "speculative"},
      {"drafter", r.drafter.empty() ? Json() : Json(r.drafter)},
      {"drafted_tokens", g.drafted},
      {"accepted_tokens", g.accepted},
      {"verify_calls", g.verify_calls},
      {"mean_accepted_length", g.mean_accepted()},
      {"rss_bytes", rss.anon + rss.file},
      {"peak_rss_bytes", PeakRssBytes()}};
}

std::string Dump(const Json& j) {
  return j.dump(-1, ' ', false, Json::error_handler_t::replace);
}

std::string NewToolCallId() {
  static std::atomic<uint64_t> counter{0};
  return fmt::format("call_{:x}{:06x}", static_cast<uint64_t>(std::time(nullptr)),
                     counter.fetch_add(1) & 0xffffff);
}

Json ToolCallJson(const ToolCall& call, int index, bool with_index) {
  Json j = {{"id", NewToolCallId()},
            {"type", "function"},
            {"function", {{"name", call.name}, {"arguments", Dump(call.arguments)}}}};
  if (with_index) j["index"] = index;
  return j;
}

// Turns model output into OpenAI message parts, as it streams.
struct ChatAssembler {
  ChatOutputParser parser;
  std::string content, reasoning;
  Json tool_calls = Json::array();
  // Stream deltas produced by the last Feed/Finish.
  std::vector<Json> Apply(std::vector<ChatOutputParser::Event> events) {
    std::vector<Json> deltas;
    for (auto& e : events) {
      using K = ChatOutputParser::Event::Kind;
      switch (e.kind) {
        case K::kContent:
        case K::kInvalidToolCall:  // a call that does not parse is shown as text
          content += e.text;
          deltas.push_back(Json{{"content", e.text}});
          break;
        case K::kReasoning:
          reasoning += e.text;
          deltas.push_back(Json{{"reasoning_content", e.text}});
          break;
        case K::kToolCallStart:
          break;
        case K::kToolCall: {
          const int index = static_cast<int>(tool_calls.size());
          Json call = ToolCallJson(e.tool_call, index, true);
          Json plain = call;
          plain.erase("index");
          tool_calls.push_back(plain);
          deltas.push_back(Json{{"tool_calls", Json::array({call})}});
          break;
        }
      }
    }
    return deltas;
  }
};

const char* FinishName(const JobResult& r, bool tool_calls) {
  if (tool_calls) return "tool_calls";
  return r.gen.finish == FinishReason::kLength ? "length" : "stop";
}

}  // namespace

bool Server::HandleCompletion(const HttpRequest& req, HttpConnection& conn, bool chat,
                              const std::string& client) {
  ApiRequest ar;
  if (auto e = ParseApiRequest(req.body, chat, options_.request_limits, options_.defaults, &ar))
    return SendError(conn, &req, *e);
  const Tokenizer* tok = engine_->tokenizer();
  if (tok == nullptr) {
    ApiError e;
    e.status = 500;
    e.type = "server_error";
    e.message = "the model has no usable tokenizer: " + engine_->text_status().message();
    return SendError(conn, &req, e);
  }
  std::vector<int> prompt;
  if (chat) {
    if (auto h = history_.PromptFor(client, *engine_, ar.messages, ar.tools, ar.thinking)) {
      prompt = std::move(*h);
    } else {
      auto ids =
          EncodeChat(*engine_, ar.messages, ar.tools, /*add_generation_prompt=*/true, ar.thinking);
      if (!ids.ok())
        return SendError(conn, &req,
                         BadRequest("the messages cannot be rendered with the model's chat "
                                    "template: " +
                                        ids.status().message(),
                                    "messages", "invalid_value"));
      prompt = std::move(*ids);
    }
  } else if (ar.prompt_is_ids) {
    const int64_t vocab = engine_->config().vocab_size;
    for (int id : ar.prompt_ids)
      if (id >= vocab)
        return SendError(
            conn, &req,
            BadRequest(fmt::format("token id {} is outside the vocabulary (0..{})", id, vocab - 1),
                       "prompt", "invalid_value"));
    prompt = ar.prompt_ids;
  } else {
    // Text is text unless the caller asks for special-token text to be parsed.
    const std::vector<int32_t> ids = ar.parse_special ? tok->Encode(ar.prompt_text, true)
                                                      : tok->EncodePlain(ar.prompt_text, true);
    prompt.assign(ids.begin(), ids.end());
  }
  const int64_t n = static_cast<int64_t>(prompt.size());
  if (n >= engine_->max_context()) {
    ApiError e = BadRequest(fmt::format("This model's maximum context length is {} tokens, "
                                        "including at least one generated token; the prompt has "
                                        "{} tokens. Shorten it.",
                                        engine_->max_context(), n),
                            chat ? "messages" : "prompt", "context_length_exceeded");
    e.status = 413;
    return SendError(conn, &req, e);
  }
  ar.gen.stop_ids = engine_->stop_ids();
  auto job = std::make_shared<Job>(prompt, ar.gen, client);
  if (!loop_.Submit(job)) {
    ApiError e;
    e.status = 503;
    e.type = "server_error";
    e.code = "server_busy";
    e.message = fmt::format("the server is busy ({} requests are waiting); retry later",
                            options_.loop.max_queue);
    return SendError(conn, &req, e, {{"Retry-After", "1"}});
  }

  const std::string id = fmt::format("{}-{:x}{:x}", chat ? "chatcmpl" : "cmpl",
                                     static_cast<uint64_t>(std::time(nullptr)), next_id_++);
  const int64_t created = static_cast<int64_t>(std::time(nullptr));
  const std::string& model = options_.model_id;
  ChatAssembler chat_out;
  std::string text_out;
  bool client_gone = false;

  // Streams: headers now, then events as text arrives.
  const bool stream = ar.stream;
  int64_t last_write = MonotonicNanos();
  auto write = [&](std::string_view s) {
    if (client_gone) return false;
    if (!conn.SendChunk(s)) {
      client_gone = true;
      loop_.Cancel(job);
      return false;
    }
    last_write = MonotonicNanos();
    return true;
  };
  auto chunk = [&](const Json& delta_or_text, const Json& finish) {
    Json c = {{"id", id}, {"created", created}, {"model", model}};
    if (chat) {
      c["object"] = "chat.completion.chunk";
      c["choices"] = Json::array({{{"index", 0},
                                   {"delta", delta_or_text},
                                   {"logprobs", nullptr},
                                   {"finish_reason", finish}}});
    } else {
      c["object"] = "text_completion";
      c["choices"] = Json::array({{{"index", 0},
                                   {"text", delta_or_text},
                                   {"logprobs", nullptr},
                                   {"finish_reason", finish}}});
    }
    return c;
  };
  auto emit = [&](const Json& c) { return write("data: " + Dump(c) + "\n\n"); };
  auto on_text = [&](std::string_view text, bool final) {
    if (chat) {
      auto deltas = chat_out.Apply(final ? chat_out.parser.Finish() : chat_out.parser.Feed(text));
      if (stream)
        for (const Json& d : deltas) emit(chunk(d, nullptr));
    } else {
      text_out.append(text);
      if (stream && !text.empty()) emit(chunk(std::string(text), nullptr));
    }
  };

  if (stream) {
    HeaderList h = CommonHeaders(&req);
    h.emplace_back("Content-Type", "text/event-stream; charset=utf-8");
    h.emplace_back("Cache-Control", "no-cache");
    h.emplace_back("X-Accel-Buffering", "no");
    if (!conn.StartChunked(200, h)) {
      loop_.Cancel(job);
      return false;
    }
    last_write = MonotonicNanos();
    if (chat) emit(chunk(Json{{"role", "assistant"}, {"content", ""}}, nullptr));
  }

  int64_t last_prefill_events = 0;
  for (;;) {
    Job::Update u = job->Wait(kTickMs);
    if (!u.text.empty()) on_text(u.text, false);
    if (u.done) break;
    if (client_gone || conn.PeerGone()) {
      client_gone = true;
      loop_.Cancel(job);
      return false;
    }
    const int64_t now = MonotonicNanos();
    if (stream && (now - last_write) / 1000000 >= options_.keepalive_ms) {
      // SSE comments keep proxies and clients from timing out during queueing and prefill.
      if (u.prefill_events != last_prefill_events && u.prefill_total > 0)
        write(fmt::format(": prefill {}/{}\n\n", u.prefill_done, u.prefill_total));
      else
        write(u.started ? ": keep-alive\n\n" : ": queued\n\n");
      last_prefill_events = u.prefill_events;
    }
  }
  if (client_gone) return false;
  const JobResult& r = job->result();
  if (!r.status.ok()) {
    ApiError e;
    e.status = r.status.code() == ErrorCode::kCancelled ? 503 : 500;
    e.type = "server_error";
    e.code = r.status.code() == ErrorCode::kCancelled ? "server_busy" : "";
    e.message = r.status.message();
    if (!stream) return SendError(conn, &req, e);
    emit(Json::parse(ApiErrorBody(e)));
    write("data: [DONE]\n\n");
    conn.EndChunked();
    return req.keep_alive && !conn.broken();
  }
  if (chat) on_text("", true);  // flush held-back text
  const bool tools = chat && !chat_out.tool_calls.empty();
  const char* finish = FinishName(r, tools);
  if (chat)
    history_.Record(client, ar.messages, ar.tools, ar.thinking, prompt, r.gen, chat_out.content);

  if (stream) {
    Json last = chunk(chat ? Json::object() : Json(""), finish);
    last["timings"] = Timings(r);
    emit(last);
    if (ar.include_usage) {
      Json u = {{"id", id},
                {"object", chat ? "chat.completion.chunk" : "text_completion"},
                {"created", created},
                {"model", model},
                {"choices", Json::array()},
                {"usage", Usage(r)},
                {"timings", Timings(r)}};
      emit(u);
    }
    write("data: [DONE]\n\n");
    if (!client_gone) conn.EndChunked();
    return req.keep_alive && !conn.broken() && !client_gone;
  }

  Json body = {{"id", id}, {"created", created}, {"model", model}};
  if (chat) {
    Json message = {
        {"role", "assistant"},
        {"content", tools && chat_out.content.empty() ? Json() : Json(chat_out.content)}};
    if (!chat_out.reasoning.empty()) message["reasoning_content"] = chat_out.reasoning;
    if (tools) message["tool_calls"] = chat_out.tool_calls;
    body["object"] = "chat.completion";
    body["choices"] = Json::array(
        {{{"index", 0}, {"message", message}, {"logprobs", nullptr}, {"finish_reason", finish}}});
  } else {
    body["object"] = "text_completion";
    body["choices"] = Json::array(
        {{{"index", 0}, {"text", text_out}, {"logprobs", nullptr}, {"finish_reason", finish}}});
  }
  body["usage"] = Usage(r);
  body["timings"] = Timings(r);
  return SendJson(conn, req, 200, body);
}

}  // namespace rw::serve
