#!/usr/bin/env python3
"""Re-check committed golden fixtures without transformers.

For every fixture under --dir (default tests/fixtures/golden) this reads the
files exactly as an engine test would (safetensors headers, the MLX
`quantization` block, the raw float32 logits), re-runs the independent
float64 reference forward pass from make_fixtures.py on
  * the bf16 weights in hf/            -> compares with logits_hf.f32
  * the dequantized weights in mlx/    -> compares with logits_mlx.f32
and checks the greedy ids, the generation-step logits, file hashes
(manifest.json) and the release-style config.

Needs numpy and torch. Usage: python3 check_fixtures.py [--dir DIR] [--tol 1e-3]
"""

import argparse
import json
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_fixtures as mf  # noqa: E402


def load_f32(path, shape):
    return torch.from_numpy(np.fromfile(path, dtype="<f4").reshape(shape).copy())


def spec_from_expected(exp):
    c = exp["config"]
    return dict(name=exp["name"], vocab=c["vocab_size"], hidden=c["hidden_size"], layer_types=c["layer_types"],
                heads=c["num_attention_heads"], kv_heads=c["num_key_value_heads"], head_dim=c["head_dim"],
                global_head_dim=c["global_head_dim"], global_kv_heads=c["num_global_key_value_heads"],
                intermediate=c["intermediate_size"], experts=c["num_experts"], top_k=c["top_k_experts"],
                moe_intermediate=c["moe_intermediate_size"], window=c["sliding_window"])


def check_one(d, tol):
    with open(os.path.join(d, "expected.json")) as f:
        exp = json.load(f)
    spec = spec_from_expected(exp)
    prefix = exp["hf_key_prefix"]
    es = exp["compute"]["embed_scale"]
    prompt, n = exp["prompt_ids"], exp["n_prompt"]
    V = spec["vocab"]
    res = {}

    # hf/ weights
    blobs, where, files = mf.read_checkpoint_dir(os.path.join(d, "hf"))
    assert sorted(blobs) == sorted(k["name"] for k in exp["hf"]["keys"]), "hf key list differs"
    W = {k: mf.blob_to_f32(b) for k, b in blobs.items()}
    lg = mf.ref_forward(W, spec, prompt, es, prefix)[0]
    ref = load_f32(os.path.join(d, "logits_hf.f32"), (n, V))
    res["hf_logits_maxabs"] = float((lg - ref.double()).abs().max())

    gen = load_f32(os.path.join(d, "logits_hf_gen.f32"), (len(exp["greedy_ids"]), V))
    res["hf_gen_row0_equals_last_prompt_row"] = bool(torch.equal(gen[0], ref[-1]))
    res["hf_gen_argmax_equals_greedy_ids"] = [int(x) for x in gen.argmax(-1)] == exp["greedy_ids"]
    seq = prompt + exp["greedy_ids"][:-1]
    lg_seq = mf.ref_forward(W, spec, seq, es, prefix)[0]
    res["hf_gen_logits_maxabs"] = float((lg_seq[n - 1:] - gen.double()).abs().max())

    # mlx/
    mb, meta = mf.st_read(os.path.join(d, "mlx", "model.safetensors"))
    with open(os.path.join(d, "mlx", "config.json")) as f:
        quant = json.load(f)["quantization"]
    Wq = mf.dequant_mlx_to_hf(mb, quant, prefix)
    lgq = mf.ref_forward(Wq, spec, prompt, es, prefix)[0]
    refq = load_f32(os.path.join(d, "logits_mlx.f32"), (n, V))
    res["mlx_logits_maxabs"] = float((lgq - refq.double()).abs().max())
    genq = load_f32(os.path.join(d, "logits_mlx_gen.f32"), (len(exp["greedy_mlx"]), V))
    res["mlx_gen_argmax_equals_greedy_mlx"] = [int(x) for x in genq.argmax(-1)] == exp["greedy_mlx"]
    seqq = prompt + exp["greedy_mlx"][:-1]
    lgq_seq = mf.ref_forward(Wq, spec, seqq, es, prefix)[0]
    res["mlx_gen_logits_maxabs"] = float((lgq_seq[n - 1:] - genq.double()).abs().max())
    res["mlx_metadata_format"] = (meta or {}).get("format")

    # release-style config matches the per_layer_config one
    rel_path = os.path.join(d, "config_release_style.json")
    if os.path.exists(rel_path):
        with open(rel_path) as f:
            rel = json.load(f)["text_config"]
        with open(os.path.join(d, "hf", "config.json")) as f:
            plc = json.load(f)["text_config"].get("per_layer_config", {})
        ok = True
        for key, ov in plc.items():
            ok &= ov.get("head_dim", rel["head_dim"]) == rel["global_head_dim"]
            ok &= ov.get("num_key_value_heads", rel["num_key_value_heads"]) == rel["num_global_key_value_heads"]
            ok &= rel["layer_types"][int(key)] == "full_attention"
        res["release_config_consistent"] = bool(ok)

    passed = (res["hf_logits_maxabs"] < tol and res["mlx_logits_maxabs"] < tol and res["hf_gen_logits_maxabs"] < tol
              and res["mlx_gen_logits_maxabs"] < tol and res["hf_gen_argmax_equals_greedy_ids"]
              and res["mlx_gen_argmax_equals_greedy_mlx"] and res["hf_gen_row0_equals_last_prompt_row"]
              and res.get("release_config_consistent", True))
    return passed, res


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", default=os.path.join(here, "..", "..", "tests", "fixtures", "golden"))
    ap.add_argument("--tol", type=float, default=1e-3, help="max |logit difference| (fp32 model vs float64 ref)")
    args = ap.parse_args()
    torch.set_num_threads(1)
    with open(os.path.join(args.dir, "manifest.json")) as f:
        manifest = json.load(f)
    bad_hash = []
    for fx in manifest["fixtures"]:
        for e in fx["files"]:
            if mf.sha256(os.path.join(args.dir, e["path"])) != e["sha256"]:
                bad_hash.append(e["path"])
    print("manifest hashes:", "ok" if not bad_hash else "MISMATCH %s" % bad_hash)
    n_pass = n_fail = 0
    for fx in manifest["fixtures"]:
        ok, res = check_one(os.path.join(args.dir, fx["name"]), args.tol)
        print(fx["name"], "PASS" if ok else "FAIL", json.dumps(res))
        n_pass, n_fail = n_pass + ok, n_fail + (not ok)
    n_fail += bool(bad_hash)
    print("%d passed, %d failed" % (n_pass, n_fail))
    sys.exit(1 if n_fail else 0)


if __name__ == "__main__":
    main()
