// The chat page served at GET /: one self-contained HTML document (inline CSS and script, no
// external resources) that talks to /v1/chat/completions with streaming, keeps the conversation
// in the page, stops an answer on request, and shows tokens/s and memory.
#include "serve/server.h"

namespace rw::serve {

const std::string& ChatPageHtml() {
  static const std::string kPage = R"HTML(<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>redwing chat</title>
<link rel="icon" href="/favicon.ico" type="image/svg+xml">
<style>
  :root { color-scheme: light dark; --accent: #b3261e; }
  body { font: 15px/1.45 system-ui, sans-serif; margin: 0; display: flex; height: 100vh; }
  aside { width: 250px; padding: 12px; border-right: 1px solid #8884; overflow: auto; }
  aside label { display: block; margin: 10px 0 2px; font-size: 13px; opacity: .8; }
  aside textarea, aside input { width: 100%; box-sizing: border-box; font: inherit; }
  main { flex: 1; display: flex; flex-direction: column; min-width: 0; }
  #log { flex: 1; overflow: auto; padding: 12px 18px; }
  .msg { margin: 8px 0; padding: 8px 12px; border-radius: 8px; white-space: pre-wrap;
         word-wrap: break-word; max-width: 80ch; }
  .user { background: #8882; margin-left: auto; }
  .assistant { border: 1px solid #8884; }
  .error { color: var(--accent); }
  .think { opacity: .6; font-style: italic; }
  form { display: flex; gap: 8px; padding: 10px; border-top: 1px solid #8884; }
  #input { flex: 1; font: inherit; min-height: 2.5em; }
  button { font: inherit; padding: 4px 14px; }
  #stats { font-size: 12px; opacity: .75; padding: 0 12px 6px; min-height: 1.2em; }
</style>
</head>
<body>
<aside>
  <strong>redwing</strong> <span id="model"></span>
  <label for="system">System prompt</label>
  <textarea id="system" rows="5"></textarea>
  <label for="temperature">Temperature</label>
  <input id="temperature" type="number" min="0" max="2" step="0.1" value="0.7">
  <label for="maxtokens">Max tokens</label>
  <input id="maxtokens" type="number" min="1" step="1" value="512">
  <label for="apikey">API key (if the server needs one)</label>
  <input id="apikey" type="password" autocomplete="off">
  <p><button id="clear" type="button">New chat</button></p>
  <div id="memory"></div>
</aside>
<main>
  <div id="log" aria-live="polite"></div>
  <div id="stats"></div>
  <form id="form">
    <textarea id="input" placeholder="Message (Enter sends, Shift+Enter for a new line)"></textarea>
    <button id="send" type="submit">Send</button>
    <button id="stop" type="button" disabled>Stop</button>
  </form>
</main>
<script>
"use strict";
const $ = (id) => document.getElementById(id);
const conversation = [];  // {role, content}
let controller = null;

function headers() {
  const h = {"Content-Type": "application/json"};
  const key = $("apikey").value.trim();
  if (key) h["Authorization"] = "Bearer " + key;
  return h;
}

function addMessage(role, text) {
  const div = document.createElement("div");
  div.className = "msg " + role;
  div.textContent = text;
  $("log").appendChild(div);
  $("log").scrollTop = $("log").scrollHeight;
  return div;
}

function setBusy(busy) {
  $("send").disabled = busy;
  $("stop").disabled = !busy;
}

function showTimings(t) {
  if (!t) return;
  $("stats").textContent =
    `prompt ${t.prompt_tokens} tokens (${t.prompt_cached_tokens} cached), prefill ` +
    `${t.prefill_tokens_per_second.toFixed(1)} tok/s, first token ${t.first_token_ms.toFixed(0)} ms; ` +
    `${t.completion_tokens} tokens at ${t.decode_tokens_per_second.toFixed(1)} tok/s; ` +
    `memory ${(t.rss_bytes / 1048576).toFixed(0)} MiB`;
}

async function refreshHealth() {
  try {
    const r = await fetch("/health");
    const h = await r.json();
    $("model").textContent = h.model;
    $("memory").textContent = `memory ${(h.rss_bytes / 1048576).toFixed(0)} MiB, ` +
      `context ${h.context_tokens}/${h.max_context}` + (h.busy ? ", busy" : "");
  } catch (e) { /* the server may be restarting */ }
}

// A new chat starts a new epoch: an answer still streaming for an older one is not recorded.
let epoch = 0;

async function send(text) {
  const myEpoch = epoch;
  conversation.push({role: "user", content: text});
  addMessage("user", text);
  const div = addMessage("assistant", "");
  div.dataset.state = "streaming";
  const messages = [];
  const system = $("system").value.trim();
  if (system) messages.push({role: "system", content: system});
  messages.push(...conversation);
  const body = {
    messages, stream: true, stream_options: {include_usage: true},
    temperature: Number($("temperature").value),
    max_tokens: Number($("maxtokens").value) || 512,
  };
  controller = new AbortController();
  setBusy(true);
  let answer = "", started = performance.now(), tokens = 0;
  try {
    const r = await fetch("/v1/chat/completions", {
      method: "POST", headers: headers(), body: JSON.stringify(body), signal: controller.signal});
    if (!r.ok) {
      let msg = r.status + " " + r.statusText;
      try { msg = (await r.json()).error.message; } catch (e) {}
      throw new Error(msg);
    }
    const reader = r.body.getReader();
    const decoder = new TextDecoder();
    let buf = "";
    for (;;) {
      const {value, done} = await reader.read();
      if (done) break;
      buf += decoder.decode(value, {stream: true});
      let cut;
      while ((cut = buf.indexOf("\n\n")) >= 0) {
        const event = buf.slice(0, cut);
        buf = buf.slice(cut + 2);
        for (const line of event.split("\n")) {
          if (!line.startsWith("data: ")) continue;
          const data = line.slice(6);
          if (data === "[DONE]") continue;
          const c = JSON.parse(data);
          if (c.error) throw new Error(c.error.message);
          if (c.timings) showTimings(c.timings);
          const d = c.choices && c.choices[0] && c.choices[0].delta;
          if (d && d.content) {
            answer += d.content;
            tokens++;
            div.textContent = answer;
            const s = (performance.now() - started) / 1000;
            $("stats").textContent = `${tokens} chunks, ${(tokens / s).toFixed(1)} /s`;
            $("log").scrollTop = $("log").scrollHeight;
          }
        }
      }
    }
    div.dataset.state = "done";
  } catch (e) {
    if (e.name === "AbortError") {
      div.dataset.state = "stopped";
      div.appendChild(Object.assign(document.createElement("span"),
                                    {className: "think", textContent: " [stopped]"}));
    } else {
      div.dataset.state = "error";
      div.classList.add("error");
      div.textContent = (answer ? answer + "\n" : "") + "Error: " + e.message;
    }
  } finally {
    // Only a turn that got an answer stays in the conversation: a failed request (401, ...) or
    // one stopped before any text must not leave an empty answer to be sent again.
    if (myEpoch === epoch) {
      if (answer) conversation.push({role: "assistant", content: answer});
      else conversation.pop();
    }
    controller = null;
    setBusy(false);
    refreshHealth();
  }
}

$("form").addEventListener("submit", (ev) => {
  ev.preventDefault();
  const text = $("input").value;
  if (!text.trim() || controller) return;
  $("input").value = "";
  send(text);
});
$("input").addEventListener("keydown", (ev) => {
  if (ev.key === "Enter" && !ev.shiftKey) {
    ev.preventDefault();
    $("form").requestSubmit();
  }
});
$("stop").addEventListener("click", () => { if (controller) controller.abort(); });
$("clear").addEventListener("click", () => {
  epoch++;
  if (controller) controller.abort();
  conversation.length = 0;
  $("log").textContent = "";
  $("stats").textContent = "";
});
refreshHealth();
setInterval(refreshHealth, 5000);
</script>
</body>
</html>
)HTML";
  return kPage;
}

const std::string& FaviconSvg() {
  // A red wing on a rounded square; small enough to inline.
  static const std::string kIcon =
      R"SVG(<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 32 32">)SVG"
      R"SVG(<rect width="32" height="32" rx="7" fill="#b3261e"/>)SVG"
      R"SVG(<path d="M5 22c6-1 10-5 13-12 1 5 0 9-3 12 4-1 7-4 9-8 1 6-3 11-9 12-4 1-7 )SVG"
      R"SVG(0-10-4z" fill="#fff"/></svg>)SVG";
  return kIcon;
}

}  // namespace rw::serve
