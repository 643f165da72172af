// Drives `redwing serve` with the official openai npm SDK and prints one JSON object of what it
// saw, for serve_api_test to check.
//   node openai_sdk_client.js <node_modules> <scenario> <baseURL> <apiKey> <model>
// Scenarios: "basic" (chat, chat streaming, completions, completions streaming, wrong key,
// too-long prompt), "tools" (a tool-call round trip, non-streaming and streaming).
"use strict";
const path = require("path");
const [modules, scenario, baseURL, apiKey, model] = process.argv.slice(2);
const OpenAI = require(path.join(modules, "openai"));

function errorInfo(e) {
  return {status: e.status ?? null, code: e.code ?? null, type: e.type ?? null,
          message: String(e.message ?? e)};
}

async function basic(client) {
  const out = {};
  const messages = [{role: "user", content: "Hello! Who are you?"}];
  const chat = await client.chat.completions.create(
      {model, messages, max_tokens: 12, temperature: 0});
  out.chat = {content: chat.choices[0].message.content, role: chat.choices[0].message.role,
              finish_reason: chat.choices[0].finish_reason, usage: chat.usage,
              object: chat.object, timings: chat.timings};

  const stream = await client.chat.completions.create(
      {model, messages, max_tokens: 12, temperature: 0, stream: true,
       stream_options: {include_usage: true}});
  let text = "", chunks = 0, finish = null, usage = null, role = null;
  for await (const c of stream) {
    chunks++;
    if (c.usage) usage = c.usage;
    const ch = c.choices[0];
    if (!ch) continue;
    if (ch.delta.role) role = ch.delta.role;
    if (ch.delta.content) text += ch.delta.content;
    if (ch.finish_reason) finish = ch.finish_reason;
  }
  out.chat_stream = {content: text, chunks, finish_reason: finish, usage, role};

  const comp = await client.completions.create(
      {model, prompt: "Once upon a time", max_tokens: 10, temperature: 0});
  out.completion = {text: comp.choices[0].text, finish_reason: comp.choices[0].finish_reason,
                    usage: comp.usage, object: comp.object};
  const cstream = await client.completions.create(
      {model, prompt: "Once upon a time", max_tokens: 10, temperature: 0, stream: true});
  let ctext = "";
  for await (const c of cstream) ctext += c.choices[0]?.text ?? "";
  out.completion_stream = {text: ctext};

  const ids = await client.completions.create(
      {model, prompt: [2, 9259, 1902], max_tokens: 4, temperature: 0});
  out.completion_ids = {text: ids.choices[0].text, usage: ids.usage};

  const models = await client.models.list();
  out.models = models.data.map((m) => m.id);

  const bad = new OpenAI({baseURL, apiKey: "sk-wrong", maxRetries: 0});
  try {
    await bad.chat.completions.create({model, messages, max_tokens: 2});
    out.wrong_key = {status: 200};
  } catch (e) {
    out.wrong_key = errorInfo(e);
  }

  const long = "word ".repeat(3000);
  try {
    await client.chat.completions.create(
        {model, messages: [{role: "user", content: long}], max_tokens: 2});
    out.too_long = {status: 200};
  } catch (e) {
    out.too_long = errorInfo(e);
  }

  try {
    await client.chat.completions.create({model, messages, max_tokens: 2, n: 2});
    out.n2 = {status: 200};
  } catch (e) {
    out.n2 = errorInfo(e);
  }
  return out;
}

const tools = [{
  type: "function",
  function: {
    name: "get_weather", description: "Current weather in a city",
    parameters: {type: "object", properties: {city: {type: "string"}}, required: ["city"]},
  },
}];

async function toolRoundTrip(client) {
  const out = {};
  const messages = [{role: "user", content: "What is the weather in Paris?"}];
  // The server forces replies in turn: a tool call, then an answer, then the call again.
  const first = await client.chat.completions.create(
      {model, messages, tools, max_tokens: 64, temperature: 0});
  const msg = first.choices[0].message;
  out.first = {finish_reason: first.choices[0].finish_reason, content: msg.content,
               tool_calls: msg.tool_calls ?? null};
  const call = msg.tool_calls[0];
  const followup = [
    ...messages,
    {role: "assistant", content: null, tool_calls: msg.tool_calls},
    {role: "tool", tool_call_id: call.id,
     content: JSON.stringify({city: JSON.parse(call.function.arguments).city, sky: "sunny"})},
  ];
  const second = await client.chat.completions.create(
      {model, messages: followup, tools, max_tokens: 64, temperature: 0});
  out.second = {finish_reason: second.choices[0].finish_reason,
                content: second.choices[0].message.content,
                prompt_tokens: second.usage.prompt_tokens};

  const stream = await client.chat.completions.create(
      {model, messages, tools, max_tokens: 64, temperature: 0, stream: true});
  const calls = [];
  let finish = null, content = "";
  for await (const c of stream) {
    const ch = c.choices[0];
    if (!ch) continue;
    if (ch.delta.content) content += ch.delta.content;
    for (const tc of ch.delta.tool_calls ?? []) {
      calls[tc.index] = calls[tc.index] ?? {id: "", name: "", arguments: ""};
      if (tc.id) calls[tc.index].id = tc.id;
      if (tc.function?.name) calls[tc.index].name += tc.function.name;
      if (tc.function?.arguments) calls[tc.index].arguments += tc.function.arguments;
    }
    if (ch.finish_reason) finish = ch.finish_reason;
  }
  out.stream = {finish_reason: finish, tool_calls: calls, content};
  return out;
}

(async () => {
  const client = new OpenAI({baseURL, apiKey, maxRetries: 0, timeout: 60000});
  const out = scenario === "tools" ? await toolRoundTrip(client) : await basic(client);
  process.stdout.write(JSON.stringify(out));
})().catch((e) => {
  process.stdout.write(JSON.stringify({fatal: errorInfo(e), stack: String(e.stack)}));
  process.exit(1);
});
