// Jinja conformance cases for the interpreter: feature snippets and chat templates in the
// styles other model directories ship (written for these tests). chat_oracle.js and
// chat_oracle.py render them; chat_oracle_test.cpp compares.
//
// Each case: {name, template, context, py_only?}
//   py_only: @huggingface/jinja's semantics differ from jinja2 here beyond value printing
//            (scoping, missing features, errors), so only the Python oracle is compared.
"use strict";

const conversation = [
  { role: "system", content: "You are helpful." },
  { role: "user", content: "Hi there" },
  { role: "assistant", content: "Hello! How can I help?" },
  { role: "user", content: "What's 2+2?" },
];
const tools = [
  {
    type: "function",
    function: {
      name: "add",
      description: "Add numbers",
      parameters: { type: "object", properties: { a: { type: "number" }, b: { type: "number" } }, required: ["a", "b"] },
    },
  },
];

const chatml = `{%- if tools %}
    {{- '<|im_start|>system\\n' }}
    {%- if messages[0].role == 'system' %}
        {{- messages[0].content + '\\n\\n' }}
    {%- endif %}
    {{- "# Tools\\n<tools>" }}
    {%- for tool in tools %}
        {{- "\\n" }}
        {{- tool | tojson }}
    {%- endfor %}
    {{- "\\n</tools><|im_end|>\\n" }}
{%- elif messages[0].role == 'system' %}
    {{- '<|im_start|>system\\n' + messages[0].content + '<|im_end|>\\n' }}
{%- endif %}
{%- for message in messages %}
    {%- if (message.role == "user") or (message.role == "system" and not loop.first) or (message.role == "assistant" and not message.tool_calls) %}
        {{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}
    {%- elif message.role == "assistant" %}
        {{- '<|im_start|>' + message.role }}
        {%- for tool_call in message.tool_calls %}
            {{- '\\n<tool_call>\\n{"name": "' }}{{- tool_call.function.name }}{{- '", "arguments": ' }}{{- tool_call.function.arguments | tojson }}{{- '}\\n</tool_call>' }}
        {%- endfor %}
        {{- '<|im_end|>\\n' }}
    {%- elif message.role == "tool" %}
        {%- if loop.index0 == 0 or messages[loop.index0 - 1].role != "tool" %}{{- '<|im_start|>user' }}{%- endif %}
        {{- '\\n<tool_response>\\n' + message.content + '\\n</tool_response>' }}
        {%- if loop.last or messages[loop.index0 + 1].role != "tool" %}{{- '<|im_end|>\\n' }}{%- endif %}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}
`;

const llamaStyle = `{{- bos_token }}
{%- if messages[0]['role'] == 'system' %}
    {%- set system_message = messages[0]['content']|trim %}
    {%- set messages = messages[1:] %}
{%- else %}
    {%- set system_message = "" %}
{%- endif %}
{{- "<|start_header_id|>system<|end_header_id|>\\n\\n" }}
{{- "Cutting Knowledge Date: December 2023\\n" }}
{%- if tools is not none %}
    {{- "Environment: ipython\\n" }}
    {%- for t in tools %}
        {{- t | tojson(indent=4) }}
        {{- "\\n\\n" }}
    {%- endfor %}
{%- endif %}
{{- system_message }}
{{- "<|eot_id|>" }}
{%- for message in messages %}
    {{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'+ message['content'] | trim + '<|eot_id|>' }}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}
{%- endif %}
`;

const mistralStyle = `{%- if messages[0]['role'] == 'system' %}
    {%- set system_message = messages[0]['content'] %}
    {%- set loop_messages = messages[1:] %}
{%- else %}
    {%- set loop_messages = messages %}
{%- endif %}
{{- bos_token }}
{%- for message in loop_messages %}
    {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}
        {{- raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}
    {%- endif %}
    {%- if message['role'] == 'user' %}
        {%- if loop.first and system_message is defined %}
            {{- ' [INST] ' + system_message + '\\n\\n' + message['content'] + ' [/INST]' }}
        {%- else %}
            {{- ' [INST] ' + message['content'] + ' [/INST]' }}
        {%- endif %}
    {%- elif message['role'] == 'assistant' %}
        {{- ' ' + message['content'] + eos_token}}
    {%- else %}
        {{- raise_exception('Only user and assistant roles are supported, with the exception of an initial optional system message!') }}
    {%- endif %}
{%- endfor %}
`;

const gemma3Style = `{{ bos_token }}
{%- if messages[0]['role'] == 'system' -%}
    {%- if messages[0]['content'] is string -%}
        {%- set first_user_prefix = messages[0]['content'] + '\n\n' -%}
    {%- else -%}
        {%- set first_user_prefix = messages[0]['content'][0]['text'] + '\n\n' -%}
    {%- endif -%}
    {%- set loop_messages = messages[1:] -%}
{%- else -%}
    {%- set first_user_prefix = "" -%}
    {%- set loop_messages = messages -%}
{%- endif -%}
{%- for message in loop_messages -%}
    {%- if (message['role'] == 'assistant') -%}
        {%- set role = "model" -%}
    {%- else -%}
        {%- set role = message['role'] -%}
    {%- endif -%}
    {{ '<start_of_turn>' + role + '\n' + (first_user_prefix if loop.first else "") }}
    {%- if message['content'] is string -%}
        {{ message['content'] | trim }}
    {%- elif message['content'] is iterable -%}
        {%- for item in message['content'] -%}
            {%- if item['type'] == 'image' -%}
                {{ '<start_of_image>' }}
            {%- elif item['type'] == 'text' -%}
                {{ item['text'] | trim }}
            {%- endif -%}
        {%- endfor -%}
    {%- endif -%}
    {{ '<end_of_turn>\n' }}
{%- endfor -%}
{%- if add_generation_prompt -%}
    {{'<start_of_turn>model\n'}}
{%- endif -%}
`;

const reasoningStyle = `{% set ns = namespace(system_prompt='', is_first=true) %}
{%- for message in messages %}{% if message['role'] == 'system' %}{% set ns.system_prompt = ns.system_prompt + message['content'] %}{% endif %}{% endfor %}
{{- bos_token }}{{ ns.system_prompt }}
{%- for message in messages %}
  {%- if message['role'] == 'user' %}<｜User｜>{{ message['content'] }}
  {%- elif message['role'] == 'assistant' %}
    {%- set content = message['content'] %}
    {%- if '</think>' in content %}{% set content = content.split('</think>')[-1].lstrip('\\n') %}{% endif %}<｜Assistant｜>{{ content }}<｜end▁of▁sentence｜>
  {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}<｜Assistant｜><think>\n{% endif %}`;

const cases = [
  { name: "chatml_tools", template: chatml, context: { messages: conversation, tools, add_generation_prompt: true } },
  {
    name: "chatml_tool_calls",
    template: chatml,
    context: {
      tools,
      add_generation_prompt: true,
      messages: [
        { role: "user", content: "add 2 and 3" },
        { role: "assistant", content: "", tool_calls: [{ function: { name: "add", arguments: { a: 2, b: 3.5 } } }] },
        { role: "tool", content: "5.5" },
        { role: "tool", content: "(again)" },
        { role: "assistant", content: "It is 5.5." },
      ],
    },
  },
  { name: "chatml_no_tools", template: chatml, context: { messages: conversation, tools: null, add_generation_prompt: false } },
  { name: "llama_style", template: llamaStyle, context: { messages: conversation, tools, bos_token: "<s>", add_generation_prompt: true } },
  { name: "llama_style_no_tools", template: llamaStyle, context: { messages: conversation.slice(1), tools: null, bos_token: "<s>" } },
  { name: "mistral_style", template: mistralStyle, context: { messages: conversation, bos_token: "<s>", eos_token: "</s>" } },
  {
    name: "mistral_style_raises",
    template: mistralStyle,
    context: { messages: [{ role: "user", content: "a" }, { role: "user", content: "b" }], bos_token: "<s>", eos_token: "</s>" },
  },
  { name: "gemma3_style", template: gemma3Style, context: { messages: conversation, bos_token: "<bos>", add_generation_prompt: true } },
  {
    name: "gemma3_style_parts",
    template: gemma3Style,
    context: {
      bos_token: "<bos>",
      messages: [
        { role: "system", content: [{ type: "text", text: "Sys" }] },
        { role: "user", content: [{ type: "image" }, { type: "text", text: " Describe " }] },
      ],
    },
  },
  {
    name: "reasoning_style",
    template: reasoningStyle,
    context: {
      bos_token: "<s>",
      add_generation_prompt: true,
      messages: [
        { role: "system", content: "S1." },
        { role: "user", content: "q1" },
        { role: "assistant", content: "<think>\nhmm\n</think>\n\nanswer one" },
        { role: "system", content: "S2." },
        { role: "user", content: "q2" },
      ],
    },
  },
  // Feature snippets.
  { name: "whitespace_control", template: "a  {%- if x -%}  b  {%- endif -%}  c\n  {% if x %}\n  d\n  {% endif %}\n{# c #}\ne {{- ' f ' -}} g\n", context: { x: true } },
  { name: "lstrip_trim_blocks", template: "<ul>\n  {% for i in items %}\n    <li>{{ i }}</li>\n  {% endfor %}\n</ul>\n", context: { items: [1, 2] } },
  { name: "loop_vars", template: "{% for x in xs %}{{ loop.index }}/{{ loop.length }}{{ '!' if loop.first }}{{ '.' if loop.last else ',' }}{{ loop.revindex }}{% endfor %}", context: { xs: ["a", "b", "c"] } },
  { name: "loop_filter_else", template: "{% for x in xs if x > 1 %}{{ x }}{% else %}none{% endfor %}|{% for x in [] %}{% else %}empty{% endfor %}", context: { xs: [1, 2, 3] } },
  { name: "dict_items_and_dictsort", template: "{% for k, v in d.items() %}{{ k }}={{ v }} {% endfor %}|{% for k, v in d | dictsort %}{{ k }}{% endfor %}|{{ d | length }}", context: { d: { b: 2, a: 1, C: 3 } } },
  { name: "namespace_accumulate", template: "{% set ns = namespace(total=0, names='') %}{% for m in ms %}{% set ns.total = ns.total + m.n %}{% set ns.names = ns.names ~ m.name ~ ';' %}{% endfor %}{{ ns.total }} {{ ns.names }}", context: { ms: [{ name: "x", n: 2 }, { name: "y", n: 5 }] } },
  { name: "macro_defaults_kwargs", template: "{% macro tag(name, attrs={}, close=true) -%}<{{ name }}{% for k, v in attrs | dictsort %} {{ k }}=\"{{ v }}\"{% endfor %}>{% if close %}</{{ name }}>{% endif %}{%- endmacro %}{{ tag('a', {'href': 'x', 'id': 1}) }}{{ tag('br', close=false) }}", context: {} },
  { name: "recursive_macro", template: "{% macro dump(v) %}{% if v is mapping %}{{ '{' }}{% for k, x in v | dictsort %}{{ k }}:{{ dump(x) }}{{ ',' if not loop.last }}{% endfor %}{{ '}' }}{% elif v is string %}'{{ v }}'{% elif v is iterable %}[{% for x in v %}{{ dump(x) }}{{ ',' if not loop.last }}{% endfor %}]{% else %}{{ v }}{% endif %}{% endmacro %}{{ dump(data) }}", context: { data: { list: [1, "two", { three: 3 }], s: "str", n: 5 } } },
  { name: "string_methods", template: "{{ s.strip() }}|{{ s.split(',') | join('/') }}|{{ s.upper() }}|{{ s.startswith('  a') }}|{{ s.replace(',', ';') }}|{{ s.rstrip() ~ '|' ~ s.lstrip() }}|{{ s.strip().title() }}", context: { s: "  ab, cd ,ef  " } },
  { name: "filters_mix", py_only: true, template: "{{ xs | map(attribute='n') | sum }}|{{ xs | selectattr('ok') | map(attribute='n') | list | length }}|{{ xs | sort(attribute='n', reverse=true) | map(attribute='n') | join(',') }}|{{ xs | map(attribute='missing', default='-') | join }}|{{ names | unique | list | length }}|{{ names | first }}{{ names | last }}", context: { xs: [{ n: 3, ok: true }, { n: 1, ok: false }, { n: 2, ok: true }], names: ["b", "a", "b"] } },
  { name: "tojson_variants", template: "{{ d | tojson }}|{{ d | tojson(indent=2) }}|{{ 'é\"<' | tojson }}|{{ [] | tojson(indent=2) }}", context: { d: { k: [1, "v", null, true, { x: 1.5 }] } } },
  { name: "tests", template: "{{ [x is defined, y is undefined, n is none, s is string, l is sequence, d is mapping, 3 is odd, 4 is even, 1 is number, l is iterable] | join(',') }}", context: { x: 1, n: null, s: "s", l: [1], d: { a: 1 } } },
  { name: "in_operators", template: "{{ 'a' in 'cat' }}{{ 2 in [1, 2] }}{{ 'k' in d }}{{ 'z' not in d }}{{ 'x' not in ['x'] }}", context: { d: { k: 1 } } },
  { name: "slicing", template: "{{ s[1:4] }}|{{ s[-3:] }}|{{ s[::2] }}|{{ l[1:] }}|{{ l[:-1] | length }}|{{ l[::-1] | first }}", context: { s: "abcdefg", l: [1, 2, 3, 4] } },
  { name: "arithmetic", template: "{{ 7 // 2 }} {{ 7 / 2 }} {{ 2 ** 8 }} {{ 10 - 3 * 2 }} {{ (1 + 2) * 3 }} {{ 'ab' ~ 1 ~ 2 }} {{ 5 % 3 }}", context: {} },
  { name: "set_block_and_filter_block", template: "{% set greeting %}Hello {{ name }}!{% endset %}{{ greeting | upper }}|{% filter trim %}   padded   {% endfilter %}|{% set a, b = 1, 2 %}{{ a + b }}", context: { name: "Ann" } },
  { name: "conditional_expressions", template: "{{ 'yes' if flag else 'no' }}|{{ 'a' if false else 'b' if true else 'c' }}|{{ x or 'default' }}|{{ y and 'both' }}", context: { flag: true, x: "", y: "set" } },
  { name: "default_filter", template: "{{ missing | default('d') }}|{{ empty | default('e', true) }}|{{ present | default('p') }}|{{ (missing or 'o') }}", context: { empty: "", present: "here" } },
  { name: "unicode_strings", py_only: true, template: "{{ s | length }}|{{ s | upper }}|{{ s[0] }}{{ s[-1] }}|{{ s | reverse }}|{{ s.split(' ') | length }}", context: { s: "héllo wörld 日本" } },
  { name: "raise_exception", template: "{% if messages | length > 1 %}{{ raise_exception('too many: ' ~ messages | length) }}{% endif %}ok", context: { messages: [1, 2] } },
  { name: "loop_controls", template: "{% for i in range(10) %}{% if i is even %}{% continue %}{% endif %}{% if i > 6 %}{% break %}{% endif %}{{ i }}{% endfor %}", context: {} },
  { name: "comments_everywhere", template: "{#- leading -#}\nA{# mid #}B\n{#- trailing #}\nC", context: {} },
  // jinja2 and @huggingface/jinja genuinely differ here.
  { name: "py_loop_scope", py_only: true, template: "{% set x = 1 %}{% for i in range(3) %}{{ x }}{% set x = x + 1 %}{% endfor %}|{{ x }}", context: {} },
  { name: "py_none_printing", py_only: true, template: "{{ none }}|{{ true }}|{{ [1.0, none] }}|{{ {'a': false} }}|{{ 0.1 + 0.2 }}", context: {} },
  { name: "py_map_filter", py_only: true, template: "{{ ['a', 'b'] | map('upper') | join }}", context: {} },
  { name: "py_modulo", py_only: true, template: "{{ -7 % 3 }} {{ '%s and %d' % ('x', 3) }}", context: {} },
];

module.exports = cases;
