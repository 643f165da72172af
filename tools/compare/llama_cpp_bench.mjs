// Prefill and decode speed of llama.cpp (the CPU build that the node-llama-cpp npm package
// ships) on a GGUF file, measured the way `redwing bench` measures: a warm-up first, then for
// each prompt length a fresh sequence, the prompt evaluated in batches of 512, then decoded
// tokens sampled at temperature 1 with nothing filtered, so the token stream (and the routing)
// varies from step to step.
//
// usage: node llama_cpp_bench.mjs GGUF [--prompt-tokens 128,512] [--decode-tokens 32]
//        [--threads 2] [--warmup 128]
// Needs node-llama-cpp installed in the working directory or a folder above it
// (npm install node-llama-cpp); it is looked up from there, not from this script's folder.
import fs from "node:fs";
import path from "node:path";
import {pathToFileURL} from "node:url";

function parseArgs(argv) {
  const o = {prompts: [128, 512], decode: 32, threads: 2, warmup: 128, model: null};
  const ints = (flag, s, min = 1) => {
    const v = s === undefined ? [] : s.split(",").map(Number);
    if (v.length === 0 || v.some((x) => !Number.isInteger(x) || x < min))
      throw new Error(`${flag} expects integers of at least ${min}, got '${s}'`);
    return v;
  };
  for (let i = 0; i < argv.length; ++i) {
    const a = argv[i];
    if (a === "--prompt-tokens") o.prompts = ints(a, argv[++i]);
    else if (a === "--decode-tokens") o.decode = ints(a, argv[++i])[0];
    else if (a === "--threads") o.threads = ints(a, argv[++i])[0];
    else if (a === "--warmup") o.warmup = ints(a, argv[++i], 0)[0];
    else if (a.startsWith("--")) throw new Error(`unknown flag ${a}`);
    else if (o.model === null) o.model = a;
    else throw new Error(`unexpected argument ${a}`);
  }
  if (o.model === null) throw new Error("missing the GGUF file");
  return o;
}

let opts;
try {
  opts = parseArgs(process.argv.slice(2));
} catch (e) {
  console.error(`llama_cpp_bench: ${e.message}`);
  console.error("usage: node llama_cpp_bench.mjs GGUF [--prompt-tokens 128,512] " +
                "[--decode-tokens 32] [--threads 2] [--warmup 128]");
  process.exit(2);
}

// ES modules resolve packages from the importing file's folder, so find the package by hand.
async function importFromCwd(name) {
  for (let dir = process.cwd();; dir = path.dirname(dir)) {
    const pkgDir = path.join(dir, "node_modules", name);
    if (fs.existsSync(path.join(pkgDir, "package.json"))) {
      const pkg = JSON.parse(fs.readFileSync(path.join(pkgDir, "package.json"), "utf8"));
      const dot = pkg.exports?.["."];
      const entry = (typeof dot === "string" ? dot : dot?.import ?? dot?.default) ?? pkg.main;
      return import(pathToFileURL(path.join(pkgDir, entry)).href);
    }
    if (path.dirname(dir) === dir) break;
  }
  console.error(`llama_cpp_bench: ${name} is not installed here or in a folder above ` +
                `(npm install ${name})`);
  process.exit(2);
}
const {getLlama, LlamaLogLevel} = await importFromCwd("node-llama-cpp");

const llama = await getLlama({gpu: false, build: "never", logLevel: LlamaLogLevel.warn});
let t = performance.now();
const model = await llama.loadModel({modelPath: opts.model, useMmap: true, gpuLayers: 0});
console.log(`llama.cpp: loaded ${opts.model} in ${((performance.now() - t) / 1000).toFixed(2)} s`);
const longest = Math.max(...opts.prompts, opts.warmup) + opts.decode + 8;
const ctx = await model.createContext({contextSize: longest, batchSize: 512,
                                       threads: opts.threads, sequences: 1});

// Prompt ids from a fixed LCG over ordinary pieces: past gguf_twin.py's 260 control and
// byte tokens, below Gemma 4's 262,144.
let seed = 12345;
const nextId = () => {
  seed = (seed * 1103515245 + 12345) % 2147483648;
  return 300 + (seed % 200000);
};

async function measure(promptLen, decodeLen) {
  const seq = ctx.getSequence();
  const prompt = [2];
  while (prompt.length < promptLen) prompt.push(nextId());
  let t0 = performance.now();
  await seq.evaluateWithoutGeneratingNewTokens(prompt);
  const prefillS = (performance.now() - t0) / 1000;
  // The first yielded token pays for the prompt's last-token logits; time the ones after it.
  let n = 0, first = 0;
  const ids = new Set();
  for await (const tok of seq.evaluate([nextId()],
                                       {temperature: 1, topK: 0, topP: 1, minP: 0, seed: 1})) {
    if (n === 0) first = performance.now();
    ids.add(tok);
    if (++n > decodeLen) break;
  }
  const decodeS = (performance.now() - first) / 1000;
  seq.dispose();
  return {prefillS, decodeS, distinct: ids.size};
}

if (opts.warmup > 0) {
  t = performance.now();
  await measure(opts.warmup, 4);
  console.log(`llama.cpp: warm-up of ${opts.warmup} tokens in ` +
              `${((performance.now() - t) / 1000).toFixed(2)} s (not counted)`);
}
console.log(`llama.cpp: ${opts.threads} threads, batch 512`);
console.log(" prompt   prefill    decode  distinct");
console.log(" tokens     tok/s     tok/s       ids");
for (const p of opts.prompts) {
  const r = await measure(p, opts.decode);
  console.log(`${String(p).padStart(7)} ${(p / r.prefillS).toFixed(2).padStart(9)} ` +
              `${(opts.decode / r.decodeS).toFixed(2).padStart(9)} ${String(r.distinct).padStart(9)}`);
}
await ctx.dispose();
await model.dispose();
