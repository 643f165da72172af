#!/usr/bin/env node
// Oracle for tokenizer_oracle_test: encodes the test corpus (tokenizer_corpus.js) and decodes
// random id sequences with @lenml/tokenizers (the JS port of Hugging Face tokenizers), loading the
// tokenizer.json written by tokenizer_prepare.js.
//
//   node tests/tokenizer/tokenizer_oracle.js <tokenizer_dir> <out.json>
//
// out.json: {"cases": [{"text", "ids"}], "decode_cases": [{"ids", "skip_special", "text"}]}.
'use strict';

const fs = require('fs');
const path = require('path');
const { buildCorpus, mulberry32 } = require('./tokenizer_corpus.js');

function nodeModulesDir() {
  if (process.env.REDWING_NODE_MODULES) return process.env.REDWING_NODE_MODULES;
  return path.join(__dirname, '..', 'node', 'node_modules');
}

function main() {
  const [dir, outFile] = process.argv.slice(2);
  if (!dir || !outFile) {
    console.error('usage: tokenizer_oracle.js <tokenizer_dir> <out.json>');
    process.exit(2);
  }
  const { TokenizerLoader } = require(path.join(nodeModulesDir(), '@lenml', 'tokenizers'));
  const tokenizerJSON = JSON.parse(fs.readFileSync(path.join(dir, 'tokenizer.json'), 'utf8'));
  const tokenizerConfig = JSON.parse(fs.readFileSync(path.join(dir, 'tokenizer_config.json'), 'utf8'));
  const tok = TokenizerLoader.fromPreTrained({ tokenizerJSON, tokenizerConfig });

  const vocabTokens = Object.keys(tokenizerJSON.model.vocab);
  const corpus = buildCorpus(vocabTokens);
  const cases = corpus.map((text) => ({
    text,
    ids: text.length === 0 ? [] : tok.encode(text, { add_special_tokens: false }),
  }));

  // Random id sequences, rich in byte tokens (valid, truncated and invalid UTF-8) and specials.
  const rng = mulberry32(0xdec0de);
  const vocabSize = Object.keys(tokenizerJSON.model.vocab).length;
  const byteId = (b) => tokenizerJSON.model.vocab['<0x' + b.toString(16).toUpperCase().padStart(2, '0') + '>'];
  const specials = tokenizerJSON.added_tokens.filter((t) => t.special && t.id < vocabSize).map((t) => t.id);
  const utf8Of = (s) => Array.from(Buffer.from(s, 'utf8')).map(byteId);
  const decodeCases = [];
  for (let i = 0; i < 400; ++i) {
    const ids = [];
    const n = 1 + Math.floor(rng() * 30);
    for (let k = 0; k < n; ++k) {
      const r = rng();
      if (r < 0.35) {
        ids.push(Math.floor(rng() * vocabSize));
      } else if (r < 0.55) {
        ids.push(byteId(Math.floor(rng() * 256)));
      } else if (r < 0.75) {
        ids.push(...utf8Of(String.fromCodePoint(0x80 + Math.floor(rng() * 0x1f000))).slice(0, 1 + Math.floor(rng() * 4)));
      } else if (r < 0.85) {
        ids.push(specials[Math.floor(rng() * specials.length)]);
      } else {
        ids.push(...utf8Of('é🚀€'));
      }
    }
    for (const skip of [false, true]) {
      decodeCases.push({
        ids,
        skip_special: skip,
        text: tok.decode(ids, { skip_special_tokens: skip, clean_up_tokenization_spaces: false }),
      });
    }
  }

  const tmp = `${outFile}.tmp-${process.pid}`;
  fs.writeFileSync(tmp, JSON.stringify({ cases, decode_cases: decodeCases }));
  fs.renameSync(tmp, outFile);
  console.log(`wrote ${cases.length} encode cases and ${decodeCases.length} decode cases to ${outFile}`);
}

main();
