// Conversations for the chat-template oracle tests (chat_oracle.js renders them with
// @huggingface/jinja, chat_oracle.py with Python jinja2 the way transformers does, and
// chat_oracle_test.cpp compares the C++ renderers byte for byte).
//
// Each case: {name, messages, tools?, add_generation_prompt?, enable_thinking?, flags...}
//   dialect_sensitive: output depends on how None/booleans/floats/whitespace print, so the
//                      Python and @huggingface/jinja renders may differ.
//   hf_fails:          @huggingface/jinja cannot render it (Python jinja2 can).
//   expect_error:      both template engines reject it; the C++ renderers must too.
// Messages are OpenAI-shaped; tool-call arguments may be JSON strings (normalized the same way
// as ChatTemplate::NormalizeMessages).
"use strict";

const weatherTool = {
  type: "function",
  function: {
    name: "get_weather",
    description: "Get the current weather for a city.",
    parameters: {
      type: "object",
      properties: {
        city: { type: "string", description: "City name, e.g. Paris" },
        unit: { type: "string", enum: ["celsius", "fahrenheit"], description: "Temperature unit" },
      },
      required: ["city"],
    },
  },
};

const searchTool = {
  type: "function",
  function: {
    name: "search_docs",
    description: "Search the documentation index.",
    parameters: {
      type: "object",
      properties: {
        query: { type: "string", description: "Free-text query" },
        limit: { type: "integer", description: "Maximum results" },
        filters: {
          type: "object",
          description: "Optional filters",
          properties: {
            lang: { type: "string", enum: ["en", "de", "ja"] },
            since: { type: "string", description: "ISO date", nullable: true },
            tags: { type: "array", items: { type: "string" }, description: "Tag names" },
          },
          required: ["lang"],
        },
      },
      required: ["query"],
    },
  },
};

const calendarTool = {
  type: "function",
  function: {
    name: "create_events",
    description: "Create calendar events in bulk.",
    parameters: {
      type: "object",
      properties: {
        events: {
          type: "array",
          description: "Events to create",
          items: {
            type: "object",
            properties: {
              title: { type: "string", description: "Title" },
              start: { type: "string", description: "Start time" },
              attendees: { type: "array", items: { type: "string" } },
              priority: { type: "integer", description: "1 (high) to 5 (low)" },
            },
            required: ["title", "start"],
          },
          minItems: 1,
        },
        dry_run: { type: "boolean", description: "Validate only" },
      },
      required: ["events"],
    },
    response: { type: "object", description: "Created event ids" },
  },
};

const noParamsTool = {
  type: "function",
  function: { name: "get_time", description: "Current UTC time." },
};

const unclosedParamsTool = {
  type: "function",
  function: {
    name: "ping",
    description: "Parameters without a type (the template leaves the block open).",
    parameters: { properties: { host: { type: "string", description: "Host" } }, required: ["host"] },
  },
};

const quirkyKeysTool = {
  type: "function",
  function: {
    name: "sort_check",
    description: "Keys that sort case-insensitively; standard keys are skipped; \"quoted\" text.",
    parameters: {
      type: "object",
      properties: {
        Zeta: { type: "number", description: "Upper-case Z" },
        alpha: { type: "string", description: "lower a" },
        Beta: { type: "boolean", description: "Upper B" },
        description: { type: "string", description: "named like a standard key" },
        blob: { type: "object", description: "Free-form object" },
        ratio: { type: "number", description: "Ünïcödé — 比率", nullable: true },
      },
      required: ["alpha", "Zeta"],
    },
  },
};

const arrayItemsExtrasTool = {
  type: "function",
  function: {
    name: "batch",
    description: "Array items with extra schema keys.",
    parameters: {
      type: "object",
      properties: {
        ids: { type: "array", items: { type: "integer", minimum: 1, description: "an id" }, description: "Ids" },
        matrix: { type: "array", items: { type: "array", items: { type: "number" } } },
      },
      required: ["ids"],
    },
  },
};

const user = (content) => ({ role: "user", content });
const assistant = (content) => ({ role: "assistant", content });
const system = (content) => ({ role: "system", content });
const call = (id, name, args) => ({ id, type: "function", function: { name, arguments: args } });
const toolMsg = (id, content, name) => {
  const m = { role: "tool", tool_call_id: id, content };
  if (name !== undefined) m.name = name;
  return m;
};

const cases = [
  { name: "single_user", messages: [user("Hello!")] },
  { name: "single_user_no_gen", messages: [user("Hello!")], add_generation_prompt: false },
  { name: "system_user", messages: [system("You are a helpful assistant."), user("Hi")] },
  { name: "developer_user", messages: [{ role: "developer", content: "  Be terse.  " }, user("Why is the sky blue?")] },
  {
    name: "multi_turn",
    messages: [system("You are a pirate."), user("Hello"), assistant("Arr, ahoy!"), user("Where is the treasure?")],
  },
  { name: "thinking_system_user", messages: [system("Think hard."), user("What is 17*23?")], enable_thinking: true },
  { name: "thinking_no_system", messages: [user("Solve x^2=4")], enable_thinking: true },
  { name: "thinking_no_gen", messages: [user("Solve x^2=4")], enable_thinking: true, add_generation_prompt: false },
  { name: "thinking_with_tools", messages: [user("Weather in Oslo?")], tools: [weatherTool], enable_thinking: true },
  { name: "tools_only", messages: [user("Weather in Oslo?")], tools: [weatherTool] },
  { name: "system_and_tools", messages: [system("Use tools when useful."), user("Find docs on streaming")], tools: [weatherTool, searchTool] },
  {
    name: "strip_thinking_single",
    messages: [user("2+2?"), assistant("<|channel>thought\nSimple arithmetic.<channel|>The answer is 4."), user("And 3+3?")],
  },
  {
    name: "strip_thinking_multiple",
    messages: [
      user("Plan a trip"),
      assistant("<|channel>thought\nA<channel|>Day 1: museum.\n<|channel>thought\nB<channel|>  Day 2: park.  "),
      user("Thanks"),
    ],
  },
  {
    name: "assistant_content_parts",
    messages: [
      user("Hi"),
      { role: "assistant", content: [{ type: "text", text: "<|channel>thought\nhidden<channel|>Visible part one." }, { type: "text", text: " part two " }] },
      user("ok"),
    ],
  },
  { name: "user_content_parts", messages: [{ role: "user", content: [{ type: "text", text: "  First part.  " }, { type: "text", text: "\nSecond part\n" }] }] },
  {
    name: "user_media_parts",
    messages: [{ role: "user", content: [{ type: "text", text: "Describe these:" }, { type: "image" }, { type: "audio" }, { type: "video" }] }],
  },
  { name: "user_image_last", messages: [{ role: "user", content: [{ type: "text", text: "What is this?" }, { type: "image", url: "x" }] }] },
  {
    name: "unicode_text",
    messages: [
      system("Réponds en français. 日本語も話せます。"),
      user("Ça va? 你好 👋🏽 مرحبا שלום e\u0301 \u3000full-width space\u3000"),
      assistant("Très bien, merci ! 🎉"),
      user("\u00a0nbsp around\u00a0"),
    ],
  },
  {
    name: "unicode_whitespace_dialects",
    dialect_sensitive: true,
    messages: [user("\ufeffbom and separators\u001c"), assistant("\u0085next-line\u0085"), user("end")],
  },
  { name: "empty_user", messages: [user("")] },
  { name: "whitespace_user", messages: [user("   \n\t  ")] },
  { name: "empty_assistant", messages: [user("Say nothing"), assistant(""), user("Really?")] },
  { name: "null_user_content", messages: [{ role: "user", content: null }] },
  {
    name: "tool_call_and_answer",
    tools: [weatherTool],
    messages: [
      user("What's the weather in Paris?"),
      { role: "assistant", content: null, tool_calls: [call("call_1", "get_weather", { city: "Paris", unit: "celsius" })] },
      toolMsg("call_1", '{"temperature": 21, "condition": "sunny"}'),
      assistant("It is 21 °C and sunny in Paris."),
    ],
  },
  {
    name: "tool_call_string_arguments",
    tools: [weatherTool],
    messages: [
      user("Weather in Tokyo?"),
      { role: "assistant", content: "", tool_calls: [call("c1", "get_weather", '{"city": "Tokyo", "unit": "fahrenheit"}')] },
      toolMsg("c1", "72F, humid"),
      user("Thanks"),
    ],
  },
  {
    name: "parallel_tool_calls",
    tools: [weatherTool],
    messages: [
      user("Compare Oslo and Rome"),
      {
        role: "assistant",
        content: null,
        tool_calls: [call("a", "get_weather", { city: "Oslo" }), call("b", "get_weather", { city: "Rome" })],
      },
      toolMsg("b", "Rome: 25C"),
      toolMsg("a", "Oslo: 3C"),
      assistant("Rome is much warmer."),
      user("ok"),
    ],
  },
  {
    name: "tool_message_name_only",
    tools: [noParamsTool],
    messages: [
      user("Time?"),
      { role: "assistant", tool_calls: [{ type: "function", function: { name: "get_time", arguments: {} } }] },
      { role: "tool", name: "get_time", content: "12:00Z" },
    ],
  },
  {
    name: "tool_message_id_overrides_name",
    tools: [weatherTool, noParamsTool],
    messages: [
      user("Both please"),
      { role: "assistant", tool_calls: [call("x1", "get_weather", { city: "Lima" }), call("x2", "get_time", {})] },
      toolMsg("x2", "09:30Z", "wrong_name"),
      toolMsg("x1", "Lima: 18C", "get_weather"),
    ],
  },
  {
    name: "tool_content_parts",
    tools: [searchTool],
    messages: [
      user("Search"),
      { role: "assistant", tool_calls: [call("s1", "search_docs", { query: "kv cache" })] },
      toolMsg("s1", [{ type: "text", text: "Result A. " }, { type: "image" }, { type: "text", text: "Result B." }]),
      assistant("Found two results."),
    ],
  },
  {
    name: "rich_arguments",
    tools: [searchTool, calendarTool],
    messages: [
      user("Schedule it"),
      {
        role: "assistant",
        tool_calls: [
          call("r1", "create_events", {
            events: [
              { title: "Stand-up {daily}", start: "2026-01-05T09:00", attendees: ["ana@x.org", "bo, jr"], priority: 2 },
              { title: "Café ☕ \"sync\"", start: "2026-01-06T15:30", attendees: [] },
            ],
            dry_run: false,
          }),
          call("r2", "search_docs", { query: "a:b,c{d}[e]", limit: 10, filters: { lang: "ja", tags: ["x", "y"] } }),
        ],
      },
      toolMsg("r1", "ok"),
      toolMsg("r2", "none found"),
    ],
  },
  {
    name: "arguments_null_float_bool",
    dialect_sensitive: true,
    tools: [quirkyKeysTool],
    messages: [
      user("check"),
      { role: "assistant", tool_calls: [call("q", "sort_check", { alpha: "a", Zeta: 0.25, Beta: true, ratio: null, blob: { n: -3, f: 1.5e-7, big: 1e21 } })] },
      toolMsg("q", "done"),
    ],
  },
  {
    name: "empty_arguments",
    tools: [noParamsTool],
    messages: [user("time"), { role: "assistant", tool_calls: [call("t", "get_time", {})] }, toolMsg("t", "now"), user("again")],
  },
  {
    name: "reasoning_content_after_last_user",
    tools: [weatherTool],
    messages: [
      user("Weather in Cairo?"),
      { role: "assistant", reasoning_content: "I should call the weather tool.", tool_calls: [call("w", "get_weather", { city: "Cairo" })] },
      toolMsg("w", "35C"),
    ],
  },
  {
    name: "reasoning_field_variant",
    tools: [weatherTool],
    messages: [
      user("Weather in Quito?"),
      { role: "assistant", reasoning: "Need the tool.", reasoning_content: "ignored", tool_calls: [call("w", "get_weather", { city: "Quito" })] },
      toolMsg("w", "14C"),
      assistant("14 °C in Quito."),
    ],
  },
  {
    name: "reasoning_before_last_user_dropped",
    tools: [weatherTool],
    messages: [
      user("Weather in Kyiv?"),
      { role: "assistant", reasoning_content: "old thoughts", tool_calls: [call("w", "get_weather", { city: "Kyiv" })] },
      toolMsg("w", "-2C"),
      assistant("It's -2 °C."),
      user("And tomorrow?"),
    ],
  },
  {
    name: "reasoning_without_tool_calls_dropped",
    messages: [user("hi"), { role: "assistant", content: "hello", reasoning_content: "not rendered" }],
  },
  {
    name: "legacy_tool_responses",
    tools: [weatherTool],
    messages: [
      user("Weather in Bern?"),
      {
        role: "assistant",
        tool_calls: [call("l", "get_weather", { city: "Bern" })],
        tool_responses: [{ name: "get_weather", response: { temperature: 9, sky: "cloudy", wind: { kmh: 12 } } }],
      },
      assistant("9 °C and cloudy."),
    ],
  },
  {
    name: "legacy_tool_responses_scalar_and_unnamed",
    messages: [
      user("go"),
      { role: "assistant", tool_responses: [{ response: "plain text result" }, { name: "count", response: 42 }], content: "Summary." },
    ],
  },
  {
    name: "tool_call_last_message",
    tools: [weatherTool],
    messages: [user("Weather in Nairobi?"), { role: "assistant", tool_calls: [call("n", "get_weather", { city: "Nairobi" })] }],
  },
  {
    name: "tool_response_last_message",
    tools: [weatherTool],
    messages: [
      user("Weather in Hanoi?"),
      { role: "assistant", tool_calls: [call("h", "get_weather", { city: "Hanoi" })] },
      toolMsg("h", "30C"),
    ],
  },
  {
    name: "agent_multi_step",
    tools: [searchTool, weatherTool],
    enable_thinking: true,
    messages: [
      system("You are an agent."),
      user("Find the weather where the docs conference is."),
      { role: "assistant", reasoning_content: "First search.", tool_calls: [call("1", "search_docs", { query: "docs conference city" })] },
      toolMsg("1", "The conference is in Lisbon."),
      { role: "assistant", reasoning_content: "Now weather.", tool_calls: [call("2", "get_weather", { city: "Lisbon" })] },
      toolMsg("2", "Lisbon: 19C, breezy"),
      assistant("<|channel>thought\nDone.<channel|>It's 19 °C and breezy in Lisbon."),
      user("Great, thanks!"),
    ],
  },
  {
    name: "tool_call_with_content",
    tools: [weatherTool],
    messages: [
      user("Weather in Seoul?"),
      { role: "assistant", content: "Let me check.", tool_calls: [call("s", "get_weather", { city: "Seoul" })] },
      toolMsg("s", "11C"),
      user("cool"),
    ],
  },
  { name: "system_mid_conversation", messages: [user("a"), assistant("b"), system("New rules apply."), user("c")] },
  { name: "only_system", messages: [system("Just a system prompt.")] },
  { name: "only_system_no_gen", messages: [system("Just a system prompt.")], add_generation_prompt: false },
  { name: "consecutive_users", messages: [user("one"), user("two"), user("three")] },
  { name: "consecutive_assistants", messages: [user("q"), assistant("part 1"), assistant("part 2"), user("next")] },
  { name: "tool_message_first_is_skipped", messages: [toolMsg("z", "orphan", "ghost"), user("hello")] },
  { name: "nested_schema_tools", messages: [user("schedule and search")], tools: [calendarTool, searchTool] },
  { name: "schema_quirky_keys", messages: [user("x")], tools: [quirkyKeysTool] },
  { name: "schema_array_item_extras", messages: [user("x")], tools: [arrayItemsExtrasTool] },
  { name: "schema_no_parameters", messages: [user("time?")], tools: [noParamsTool] },
  { name: "schema_parameters_without_type", messages: [user("ping it")], tools: [unclosedParamsTool] },
  {
    name: "schema_many_tools_thinking",
    messages: [system("Tools available."), user("hi")],
    tools: [weatherTool, searchTool, calendarTool, noParamsTool, quirkyKeysTool, arrayItemsExtrasTool],
    enable_thinking: true,
  },
  {
    name: "literal_markup_in_content",
    messages: [user("Print {{ x }} and {% if %} and <|turn>model and <bos> literally"), assistant("Sure: {{ x }} <turn|>"), user("ok")],
  },
  {
    name: "assistant_whitespace",
    messages: [user("  padded question?  \n"), assistant("\n\n  padded answer.  \n\n"), user("\tnext\t")],
  },
  { name: "developer_thinking_tools", messages: [{ role: "developer", content: "Dev rules." }, user("go")], tools: [weatherTool], enable_thinking: true },
  {
    name: "system_content_parts",
    messages: [{ role: "system", content: [{ type: "text", text: " Part A. " }, { type: "text", text: "Part B." }] }, user("hi")],
  },
  {
    name: "long_conversation",
    messages: (() => {
      const m = [system("Count with me.")];
      for (let i = 1; i <= 12; i++) {
        m.push(user(`Number ${i}?`));
        m.push(assistant(`<|channel>thought\n${i}<channel|>${i}`));
      }
      m.push(user("Done?"));
      return m;
    })(),
  },
  {
    name: "tool_response_json_string_is_not_parsed",
    tools: [searchTool],
    messages: [
      user("search"),
      { role: "assistant", tool_calls: [call("j", "search_docs", { query: "q" })] },
      toolMsg("j", '{"hits": [1, 2], "ok": true}'),
      assistant("Two hits."),
    ],
  },
  // Python-only renders.
  {
    name: "schema_items_type_list",
    hf_fails: true,
    messages: [user("x")],
    tools: [
      {
        type: "function",
        function: {
          name: "union",
          description: "Items with a list type.",
          parameters: { type: "object", properties: { vals: { type: "array", items: { type: ["string", "null"] } } } },
        },
      },
    ],
  },
  {
    name: "schema_property_without_type",
    hf_fails: true,
    messages: [user("x")],
    tools: [
      {
        type: "function",
        function: { name: "loose", description: "A property without a type.", parameters: { type: "object", properties: { any: { description: "anything" } } } },
      },
    ],
  },
  // Both engines reject these.
  { name: "error_empty_messages", expect_error: true, messages: [] },
  {
    name: "error_unresolvable_tool_name",
    expect_error: true,
    messages: [user("x"), { role: "assistant", tool_calls: [call("a", "f", {})] }, toolMsg("zzz", "orphan result")],
  },
  { name: "error_missing_role", expect_error: true, messages: [{ content: "no role" }] },
];

// Flag variants of a few cases: the same conversation with the other prompt settings.
const variants = [];
for (const base of ["multi_turn", "tool_call_and_answer", "agent_multi_step", "unicode_text", "user_media_parts", "legacy_tool_responses"]) {
  const c = cases.find((x) => x.name === base);
  for (const [gen, think] of [[false, false], [true, true], [false, true]]) {
    const g = c.add_generation_prompt ?? true;
    const t = c.enable_thinking ?? false;
    if (gen === g && think === t) continue;
    variants.push({ ...c, name: `${base}__gen${gen ? 1 : 0}_think${think ? 1 : 0}`, add_generation_prompt: gen, enable_thinking: think });
  }
}

module.exports = cases.concat(variants);
