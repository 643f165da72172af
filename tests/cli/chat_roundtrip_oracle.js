#!/usr/bin/env node
// Oracle for the chat round trip: renders each conversation with @huggingface/jinja and the
// official Gemma 4 template, then tokenizes the text with @lenml/tokenizers.
//
//   node chat_roundtrip_oracle.js <node_modules> <tokenizer_dir> <template.jinja> <cases.json> <out.json>
//
// cases.json: [{messages, tools?, enable_thinking}]; out.json: [{text, ids}] in the same order.
'use strict';

const fs = require('fs');
const path = require('path');

const [modules, tokDir, templateFile, casesFile, outFile] = process.argv.slice(2);
if (!outFile) {
  console.error('usage: chat_roundtrip_oracle.js <node_modules> <tokenizer_dir> <template> <cases> <out>');
  process.exit(2);
}
const { Template } = require(path.join(modules, '@huggingface/jinja'));
const { TokenizerLoader } = require(path.join(modules, '@lenml', 'tokenizers'));
const tokenizerJSON = JSON.parse(fs.readFileSync(path.join(tokDir, 'tokenizer.json'), 'utf8'));
const tokenizerConfig = JSON.parse(fs.readFileSync(path.join(tokDir, 'tokenizer_config.json'), 'utf8'));
const tok = TokenizerLoader.fromPreTrained({ tokenizerJSON, tokenizerConfig });
const template = new Template(fs.readFileSync(templateFile, 'utf8'));
const cases = JSON.parse(fs.readFileSync(casesFile, 'utf8'));

const out = cases.map((c) => {
  const text = template.render({
    messages: c.messages,
    tools: c.tools,
    add_generation_prompt: true,
    enable_thinking: c.enable_thinking,
    bos_token: '<bos>',
    eos_token: '<eos>',
  });
  return { text, ids: tok.encode(text, { add_special_tokens: false }) };
});
fs.writeFileSync(outFile, JSON.stringify(out));
