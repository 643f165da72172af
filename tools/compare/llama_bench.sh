#!/usr/bin/env bash
# llama.cpp at its best against redwing on the same machine, in the same minutes: llama-bench at
# its defaults (repack on; the prompt at depth 0 and the decode at the prompt's depth, as redwing
# measures them) and `redwing bench`, alternated A-B-B-A, PAIRS pairs. Before each run
# that engine's model files are read once so that it starts with its model in the page cache,
# and a memory-bandwidth probe runs (redwing's own, from `redwing bench`; for the llama.cpp runs
# the same probe through `redwing bench` on a tiny synthetic model just before).
#
# usage: tools/compare/llama_bench.sh REDWING_BIN MODEL_DIR GGUF LLAMA_BUILD_DIR [PAIRS] [OUT_DIR]
#   GGUF: the twin (tools/compare/gguf_twin.py); for speed the --q4 q4_0 twin, which llama.cpp
#         repacks. LLAMA_BUILD_DIR: from build_llama_cpp.sh.
# Environment: PROMPT (128), DECODE (64), THREADS (2), REDWING_FLAGS (more `redwing bench` flags,
# e.g. "--precision fast"; several variants separated by ';', e.g. "--precision exact;--precision
# fast", each run once per pair, in reverse order in every other pair), CAP (unset: uncapped; e.g. 8G: every run
# inside scripts/with-memory-limit.sh CAP; llama-bench of this llama.cpp has no --no-repack, so
# under a cap llama.cpp runs as llama-completion --no-repack with its timings instead).
# Writes OUT_DIR/runs.log (every run's full output) and prints one line per run and a summary.
set -euo pipefail

if [[ $# -lt 4 || $# -gt 6 ]]; then
  sed -n '2,13p' "$0" >&2
  exit 2
fi
redwing=$(realpath "$1")
model=$(realpath "$2")
gguf=$(realpath "$3")
lbuild=$(realpath "$4")
pairs=${5:-2}
out=${6:-$(mktemp -d)}
prompt=${PROMPT:-128}
decode=${DECODE:-64}
threads=${THREADS:-2}
IFS=';' read -r -a variants <<<"${REDWING_FLAGS:-}"
[[ ${#variants[@]} -gt 0 ]] || variants=("")
cap=${CAP:-}
here=$(dirname "$(realpath "$0")")
root=$(cd "$here/../.." && pwd)
py=/usr/bin/python3
[[ -x $py ]] || py=python3

[[ -x $redwing ]] || { echo "llama_bench.sh: $redwing is not an executable" >&2; exit 2; }
[[ -f $model/manifest.json ]] || { echo "llama_bench.sh: $model has no manifest.json" >&2; exit 2; }
[[ -f $gguf ]] || { echo "llama_bench.sh: no GGUF file at $gguf" >&2; exit 2; }
lbench=$lbuild/bin/llama-bench
lcomp=$lbuild/bin/llama-completion
[[ -x $lbench ]] || { echo "llama_bench.sh: no $lbench (run build_llama_cpp.sh)" >&2; exit 2; }
mkdir -p "$out"
log=$out/runs.log
: >"$log"

wrap=()
if [[ -n $cap ]]; then
  wrap=("$root/scripts/with-memory-limit.sh" "$cap")
  [[ -x $lcomp ]] || { echo "llama_bench.sh: no $lcomp for the capped runs" >&2; exit 2; }
fi

# The probe model: tiny, so the probe costs a second and evicts nothing that matters.
probe_model=$out/probe-model
[[ -f $probe_model/manifest.json ]] ||
  "$redwing" synth --geometry tiny --seed 1 --out "$probe_model" --quiet

{
  echo "== versions"
  echo "redwing: $("$redwing" --version 2>&1 | head -n 1)"
  echo "llama.cpp: $("$lbuild/bin/llama-completion" --version 2>&1 | tail -n 2 | tr '\n' ' ')"
  grep -E '^(CMAKE_BUILD_TYPE|GGML_NATIVE|GGML_CPU_REPACK|GGML_CUDA|BUILD_SHARED_LIBS):' \
    "$lbuild/CMakeCache.txt" | tr '\n' ' '
  echo
  echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-), $(nproc) cores"
  echo "prompt $prompt, decode $decode, threads $threads, cap ${cap:-none}, redwing flags: ${REDWING_FLAGS:-none}"
} | tee -a "$log"

json_get() { # file, python expression over j
  "$py" -c "import json,sys; j=json.load(open(sys.argv[1])); print($2)" "$1"
}

probe() {
  "$redwing" bench --model "$probe_model" --prompt-tokens 8 --decode-tokens 1 --warmup 0 \
    --no-disk-probe --threads "$threads" --format json --quiet 2>>"$log" >"$out/probe.json"
  json_get "$out/probe.json" "'%.1f' % j['memory_probe']['read_gb_s']"
}

run_llama() {
  local n=$1 mem
  cat "$gguf" >/dev/null
  mem=$(probe)
  if [[ -z $cap ]]; then
    # -d 0,PROMPT: the prompt from position 0, as redwing's prefill, and the decode at depth
    # PROMPT, as redwing's decode follows its prompt (llama-bench's tg runs alone from depth 0
    # otherwise; that figure is printed too).
    "${wrap[@]}" "$lbench" -m "$gguf" -p "$prompt" -n "$decode" -d "0,$prompt" -t "$threads" \
      -o json >"$out/llama-$n.json" 2>>"$log"
    cat "$out/llama-$n.json" >>"$log"
    "$py" - "$out/llama-$n.json" "$mem" "$prompt" <<'EOF2'
import json, sys
j, mem, depth = json.load(open(sys.argv[1])), sys.argv[2], int(sys.argv[3])
ts = {(r["n_prompt"], r["n_gen"], r["n_depth"]): r["avg_ts"] for r in j}
pp = [v for (p, g, d), v in ts.items() if p > 0 and d == 0]
tg = [v for (p, g, d), v in ts.items() if g > 0 and d == depth]
tg0 = [v for (p, g, d), v in ts.items() if g > 0 and d == 0]
print("llama.cpp  prefill %.2f tok/s  decode %.2f tok/s  memory probe %s GB/s  (decode from depth 0: %.2f)"
      % (pp[0], tg[0], mem, tg0[0]))
EOF2
  else
    # The twin's placeholder vocabulary has no letters, so each 'a' is one byte token: with BOS
    # (and a space prefix if the tokenizer adds one) about PROMPT tokens; the count llama.cpp
    # reports is printed. The timings come from llama.cpp's perf report.
    local text
    text=$(printf 'a%.0s' $(seq $((prompt - 1))))
    "${wrap[@]}" "$lcomp" -m "$gguf" -p "$text" -n "$decode" -t "$threads" --no-repack \
      --temp 0 -no-cnv --ignore-eos >"$out/llama-$n.txt" 2>&1 || true
    cat "$out/llama-$n.txt" >>"$log"
    "$py" - "$out/llama-$n.txt" "$mem" <<'EOF'
import re, sys
t = open(sys.argv[1], errors="replace").read()
p = re.search(r"prompt eval time =.*?/\s*(\d+) tokens.*?([\d.]+) tokens per second", t)
d = re.search(r"\beval time =.*?([\d.]+) tokens per second", t.split("prompt eval time")[-1])
print("llama.cpp  prefill %s tok/s (%s tokens)  decode %s tok/s  memory probe %s GB/s "
      "(llama-completion --no-repack)" % (p.group(2) if p else "?", p.group(1) if p else "?",
                                         d.group(1) if d else "?", sys.argv[2]))
EOF
  fi
}

run_redwing() {
  local n=$1 flags=$2 rflags
  read -r -a rflags <<<"$flags"
  find "$model" -name '*.bin' -exec cat {} + >/dev/null
  "${wrap[@]}" "$redwing" bench --model "$model" --prompt-tokens "$prompt" --decode-tokens "$decode" \
    --threads "$threads" --no-disk-probe ${rflags[@]+"${rflags[@]}"} --format json --quiet \
    >"$out/redwing-$n.json" 2>>"$log"
  cat "$out/redwing-$n.json" >>"$log"
  json_get "$out/redwing-$n.json" \
    "'redwing    prefill %.2f tok/s  decode %.2f tok/s  memory probe %.1f GB/s' % (j['cases'][0]['prefill']['tok_s'], j['cases'][0]['decode']['tok_s'], j['memory_probe']['read_gb_s'])" |
    sed "s/\$/  flags: ${flags:-none}/"
}

run_all_redwing() {
  local n=$1 k
  if (($2)); then
    for ((k = 0; k < ${#variants[@]}; ++k)); do run_redwing "$n.$k" "${variants[k]}" | tee -a "$log"; done
  else
    for ((k = ${#variants[@]} - 1; k >= 0; --k)); do run_redwing "$n.$k" "${variants[k]}" | tee -a "$log"; done
  fi
}

for i in $(seq "$pairs"); do
  echo "== pair $i, $(date -u +%H:%M:%S), load $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$log"
  if ((i % 2)); then
    run_llama "$i" | tee -a "$log"
    run_all_redwing "$i" 1
  else
    run_all_redwing "$i" 0
    run_llama "$i" | tee -a "$log"
  fi
done
echo "full output: $log"
