// Renders chat_conversations.js through every *.jinja template in a directory with
// @huggingface/jinja (the reference chat_oracle_test.cpp compares against).
//
// usage: node chat_oracle.js <node_modules dir> <templates dir> <output.json>
//
// Output: {engine, cases: [{name, flags, messages, template_messages, tools, ...}],
//          renders: {<template file>: [{output} | {error}] (one per case)},
//          jinja_cases: [{name, py_only, template, context}], jinja_renders: [{output} | {error}]}
// Object keys are sorted before rendering, as the C++ side holds JSON in sorted maps.
"use strict";

const fs = require("fs");
const path = require("path");

const [nodeModules, templatesDir, outPath] = process.argv.slice(2);
if (!nodeModules || !templatesDir || !outPath) {
  console.error("usage: node chat_oracle.js <node_modules> <templates dir> <output.json>");
  process.exit(2);
}
const { Template } = require(path.join(nodeModules, "@huggingface/jinja"));
const pkg = require(path.join(nodeModules, "@huggingface/jinja/package.json"));
const cases = require("./chat_conversations.js");
const jinjaCases = require("./chat_jinja_cases.js");

function sortKeys(v) {
  if (Array.isArray(v)) return v.map(sortKeys);
  if (v !== null && typeof v === "object") {
    const out = {};
    for (const k of Object.keys(v).sort()) out[k] = sortKeys(v[k]);
    return out;
  }
  return v;
}

// Mirrors ChatTemplate::NormalizeMessages (chat_template.cpp).
function normalize(messages) {
  return messages.map((m, i) => {
    const out = JSON.parse(JSON.stringify(m));
    if (i === 0 && Array.isArray(out.content) && (out.role === "system" || out.role === "developer")) {
      out.content = out.content
        .filter((p) => p && p.type === "text" && typeof p.text === "string")
        .map((p) => p.text.trim())
        .join("");
    }
    if (Array.isArray(out.tool_calls)) {
      for (const c of out.tool_calls) {
        if (c && c.function && typeof c.function.arguments === "string") {
          try {
            const parsed = JSON.parse(c.function.arguments);
            if (parsed !== null && typeof parsed === "object" && !Array.isArray(parsed)) c.function.arguments = parsed;
          } catch (e) {
            // Not JSON: rendered verbatim.
          }
        }
      }
    }
    return out;
  });
}

// Without the reference templates, only the generic interpreter cases are rendered.
const templates = fs.existsSync(templatesDir)
  ? fs
      .readdirSync(templatesDir)
      .filter((f) => f.endsWith(".jinja"))
      .sort()
  : [];

const result = { engine: `@huggingface/jinja ${pkg.version}`, cases: [], renders: {} };
for (const c of cases) {
  result.cases.push({
    name: c.name,
    dialect_sensitive: !!c.dialect_sensitive,
    hf_fails: !!c.hf_fails,
    expect_error: !!c.expect_error,
    messages: sortKeys(c.messages),
    template_messages: sortKeys(normalize(c.messages)),
    tools: c.tools ? sortKeys(c.tools) : null,
    add_generation_prompt: c.add_generation_prompt ?? true,
    enable_thinking: c.enable_thinking ?? false,
  });
}
for (const file of templates) {
  const template = new Template(fs.readFileSync(path.join(templatesDir, file), "utf8"));
  result.renders[file] = result.cases.map((c) => {
    try {
      const output = template.render({
        messages: c.template_messages,
        tools: c.tools,
        add_generation_prompt: c.add_generation_prompt,
        enable_thinking: c.enable_thinking,
        bos_token: "<bos>",
        eos_token: "<eos>",
        pad_token: "<pad>",
        unk_token: "<unk>",
      });
      return { output };
    } catch (e) {
      return { error: String(e && e.message ? e.message : e) };
    }
  });
}
// Generic interpreter conformance cases.
result.jinja_cases = jinjaCases.map((c) => ({ name: c.name, py_only: !!c.py_only, template: c.template, context: sortKeys(c.context) }));
result.jinja_renders = result.jinja_cases.map((c) => {
  try {
    return { output: new Template(c.template).render(c.context) };
  } catch (e) {
    return { error: String(e && e.message ? e.message : e) };
  }
});
fs.mkdirSync(path.dirname(outPath), { recursive: true });
fs.writeFileSync(outPath, JSON.stringify(result, null, 1));
console.log(`rendered ${result.cases.length} cases x ${templates.length} templates and ${jinjaCases.length} jinja cases -> ${outPath}`);
