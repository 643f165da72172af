#!/usr/bin/env python3
"""Checks a GGUF twin (gguf_twin.py) against its redwing model: runs the same prompt of token ids
through llama.cpp (llama_logits, built by build_llama_cpp.sh) and `redwing logits`, and compares
the logits of every position.

  twin_check.py --redwing BIN --llama-logits BIN MODEL_DIR TWIN.gguf [--tokens 64] [--seed 1]
                [--threads 2] [--kv f16|f32] [--sqrt-embed-scale] [--keep DIR]

Per position: the max relative error max_v |llama - redwing| / max_v |redwing|, and whether the
top-1 ids agree (where they do not, the gap between redwing's top two logits says whether it
was a near tie). --sqrt-embed-scale runs redwing with embed_scale = fp32 √hidden, the constant
llama.cpp's gemma4 graph uses, instead of the manifest's (√hidden rounded to bf16, as the
reference model computes it), to take that known difference out of the comparison.
Exit status 0 whatever the numbers: it reports, the reader judges.
(needs numpy: apt install python3-numpy)
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

try:
    import numpy as np
except ImportError:
    sys.exit("twin_check.py: needs numpy (apt install python3-numpy)")


def prompt_ids(cfg, n, seed):
    """BOS, then ids drawn uniformly from the vocabulary (special ids 0..3 left out)."""
    rng = np.random.default_rng(seed)
    return [cfg["bos_token_id"]] + [int(x) for x in rng.integers(4, cfg["vocab_size"], n - 1)]


def sqrt_scale_copy(model_dir, tmp):
    """The model with embed_scale = fp32 √hidden: every file linked, the manifest rewritten."""
    d = os.path.join(tmp, "model")
    os.mkdir(d)
    for name in os.listdir(model_dir):
        if name != "manifest.json":
            os.symlink(os.path.abspath(os.path.join(model_dir, name)), os.path.join(d, name))
    with open(os.path.join(model_dir, "manifest.json")) as f:
        man = json.load(f)
    man["config"]["embed_scale"] = float(np.float32(np.sqrt(np.float32(man["config"]["hidden_size"]))))
    with open(os.path.join(d, "manifest.json"), "w") as f:
        json.dump(man, f)
    return d, man["config"]["embed_scale"]


def run(cmd):
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if r.returncode != 0:
        sys.exit(f"twin_check.py: {' '.join(cmd[:2])} failed ({r.returncode}):\n{r.stderr[-3000:]}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model_dir")
    ap.add_argument("gguf")
    ap.add_argument("--redwing", required=True)
    ap.add_argument("--llama-logits", required=True)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--kv", choices=["f16", "f32"], default="f16")
    ap.add_argument("--sqrt-embed-scale", action="store_true")
    ap.add_argument("--keep", help="directory to keep both logits files in")
    a = ap.parse_args()

    with open(os.path.join(a.model_dir, "manifest.json")) as f:
        cfg = json.load(f)["config"]
    ids = prompt_ids(cfg, a.tokens, a.seed)
    vocab = cfg["vocab_size"]
    with tempfile.TemporaryDirectory() as tmp:
        out = a.keep or tmp
        os.makedirs(out, exist_ok=True)
        model = a.model_dir
        if a.sqrt_embed_scale:
            model, es = sqrt_scale_copy(a.model_dir, tmp)
            print(f"redwing runs with embed_scale {es!r} (manifest: {cfg['embed_scale']})")
        rw, ll = os.path.join(out, "redwing.f32"), os.path.join(out, "llama.f32")
        id_list = ",".join(map(str, ids))
        run([a.redwing, "logits", "--model", model, "--ids", id_list, "--out", rw,
             "--threads", str(a.threads)])
        run([a.llama_logits, a.gguf, id_list, ll, "--threads", str(a.threads), "--kv", a.kv])
        r = np.fromfile(rw, dtype="<f4").reshape(len(ids), vocab)
        g = np.fromfile(ll, dtype="<f4").reshape(len(ids), vocab)

    rel = np.abs(g - r).max(axis=1) / np.abs(r).max(axis=1)
    top_r, top_g = r.argmax(axis=1), g.argmax(axis=1)
    agree = top_r == top_g
    srt = np.sort(r, axis=1)
    gap = srt[:, -1] - srt[:, -2]
    print(f"{len(ids)} positions, vocab {vocab}, llama.cpp KV cache {a.kv}")
    print(f"max relative error per position: max {rel.max():.3g} (position {int(rel.argmax())}), "
          f"median {np.median(rel):.3g}, first {rel[0]:.3g}")
    print(f"top-1 agreement: {int(agree.sum())}/{len(ids)}")
    for p in np.nonzero(~agree)[0]:
        print(f"  position {p}: redwing {top_r[p]} (gap to its 2nd {gap[p]:.3g}), "
              f"llama.cpp {top_g[p]} (redwing logit {r[p, top_g[p]]:.4g} vs {r[p, top_r[p]]:.4g})")
    print("per position: " + " ".join(f"{x:.2g}" for x in rel))


if __name__ == "__main__":
    main()
