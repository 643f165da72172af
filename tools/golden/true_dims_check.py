#!/usr/bin/env python3
"""Opt-in parity check at the true Gemma 4 26B-A4B layer dimensions.

Builds a two-layer random Gemma 4 MoE model with transformers at the real
geometry of one sliding and one full-attention layer (hidden 2816, 16 heads,
head dims 256/512, 8/2 KV heads, dense MLP 2112, 128 experts of 704, top-8,
window 1024), with the same seeded, bf16-representable weights as the golden
fixtures (make_fixtures.py). The vocabulary is cut to 8192 ids: it is not a
layer dimension, and the full 262,144 would only make the tied head bigger.

It saves the model as a bf16 Hugging Face checkpoint, records transformers'
fp32 logits for a 48-token prompt (eager attention and experts) and an
8-token greedy continuation, then runs redwing on the same checkpoint:

  redwing convert <hf> <model> --quantize keep
  redwing logits --model <model> --ids ... --out logits.f32
  redwing run --model <model> --prompt-ids ... --max-new 8 --temperature 0 --print-ids

and compares: relative error ||ours - ref|| / ||ref|| <= 1e-4 over all logits,
and identical greedy tokens. Needs torch, numpy and transformers (>= 5.5) and
~20 GB of RAM; about two minutes on a 16-core host.

Usage:
  python3 tools/golden/true_dims_check.py --redwing build/release/bin/redwing --work <dir> [--report r.json]
"""
import argparse
import copy
import json
import os
import subprocess
import sys
import time

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_fixtures as mf  # noqa: E402

SPEC = dict(
    name="true_dims_s_f",
    seed=7001,
    vocab=8192,
    hidden=2816,
    layer_types=[mf.S, mf.F],
    heads=16,
    kv_heads=8,
    head_dim=256,
    global_head_dim=512,
    global_kv_heads=2,
    intermediate=2112,
    experts=128,
    top_k=8,
    moe_intermediate=704,
    window=1024,
    prompt_len=48,
    group_size=64,
    dense_mlp_bits=8,
    shard=True,
    std_embed=0.05,
    std_router=1.0,
    std_weight=0.02,
    final_norm=(3.0, 6.0),
)
N_GEN = 8
TOLERANCE = 1e-4


def run(cmd):
    t = time.time()
    p = subprocess.run(cmd, capture_output=True, text=True)
    mf.log("  $ %s  (%.1f s, rc %d)" % (" ".join(cmd), time.time() - t, p.returncode))
    if p.returncode != 0:
        raise RuntimeError("command failed:\n%s\n%s" % (p.stdout, p.stderr))
    return p.stdout


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--redwing", required=True, help="path of the redwing executable")
    ap.add_argument("--work", required=True, help="scratch folder (~10 GB)")
    ap.add_argument("--report", default=None, help="write the result as JSON here")
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    os.makedirs(args.work, exist_ok=True)
    t0 = time.time()
    report = dict(spec=SPEC, transformers=None)

    hf = mf.HF()
    report["transformers"] = hf.version
    model, prefix, errs = hf.build(SPEC)
    W, skipped = mf.fill_model(model, SPEC, SPEC["seed"], prefix)
    report["embed_scale"] = mf.set_embed_scale(model, prefix, mf.embed_scale_bf16(SPEC["hidden"]))
    report["implementations"] = mf.impl_report(model)
    del W
    prompt = mf.make_prompt(SPEC, SPEC["seed"])
    mf.log("prompt %s" % prompt)
    ref = mf.hf_logits(model, prompt, "cpu")
    greedy_ref, _ = mf.hf_greedy(model, prompt, N_GEN, "cpu")
    top2 = torch.topk(ref, 2, dim=-1).values
    report["ref_min_top2_gap"] = float((top2[:, 0] - top2[:, 1]).min())
    mf.log("transformers: %d positions, greedy %s (%.1f s)" % (ref.shape[0], greedy_ref, time.time() - t0))

    hf_dir = os.path.join(args.work, "hf")
    mb = copy.deepcopy(model).to(torch.bfloat16)
    del model
    mb.save_pretrained(hf_dir, max_shard_size="2GB")
    del mb

    out_dir = os.path.join(args.work, "model")
    logits_path = os.path.join(args.work, "logits.f32")
    ids = ",".join(str(i) for i in prompt)
    run([args.redwing, "convert", hf_dir, out_dir, "--quantize", "keep", "--force"])
    run([args.redwing, "logits", "--model", out_dir, "--ids", ids, "--out", logits_path])
    ours = torch.from_numpy(np.fromfile(logits_path, dtype="<f4").reshape(ref.shape))
    rel = float(torch.linalg.norm((ours - ref).double()) / torch.linalg.norm(ref.double()))
    gen = run([args.redwing, "run", "--model", out_dir, "--prompt-ids", ids, "--max-new", str(N_GEN),
               "--temperature", "0", "--print-ids", "--quiet"])
    greedy_ours = [int(x) for x in gen.split()]
    worst_row = max(float(torch.linalg.norm((ours[i] - ref[i]).double()) / torch.linalg.norm(ref[i].double()))
                    for i in range(ref.shape[0]))
    report.update(
        rel_error=rel,
        worst_position_rel_error=worst_row,
        max_abs_diff=float((ours - ref).abs().max()),
        greedy_ref=greedy_ref,
        greedy_redwing=greedy_ours,
        tolerance=TOLERANCE,
        seconds=time.time() - t0,
    )
    # redwing stops at an end-of-turn id (transformers' manual loop does not): compare up to it.
    same_greedy = greedy_ours == greedy_ref[:len(greedy_ours)] and (
        len(greedy_ours) == N_GEN or greedy_ours[-1] in (1, 50, 106))
    report["greedy_identical"] = same_greedy
    report["pass"] = rel <= TOLERANCE and same_greedy
    text = json.dumps(report, indent=1, default=str)
    print(text)
    if args.report:
        with open(args.report, "w") as f:
            f.write(text)
    sys.exit(0 if report["pass"] else 1)


if __name__ == "__main__":
    main()
