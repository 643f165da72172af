#!/usr/bin/env python3
"""Make parity fixtures for redwing's DFlash drafter (issue 26).

The reference is z-lab/dflash `dflash/model.py` at commit
10129599dffb338ff38cfd235a53ca6d3667b4dd (the version with Gemma targets: the
block's input is the target's raw embedding rows times `input_embedding_scale`,
and `compute_logits` applies `output_multiplier` and `final_logit_softcapping`).
Its modules are re-implemented here in torch from transformers' own Qwen3
building blocks (Qwen3RMSNorm, Qwen3RotaryEmbedding, Qwen3MLP, rotate_half, the
sdpa attention function); no file of the reference is imported or copied.

This script
  1. loads the tiny random Gemma 4 target of tests/fixtures/golden/<target>/hf
     with transformers (fp32, eager, bf16 embed scale as make_fixtures.py does);
  2. makes a random drafter with the published drafter's structure scaled to
     that target (5 layers: 4 sliding + 1 full, 4 query heads per KV head,
     SiLU MLP, block 16, mask id 4, soft cap 30, rope theta 1e6,
     target_layer_ids spread as the reference's build_target_layer_ids, a
     sliding window shorter than the prompt) with bf16-representable values,
     and saves it as a Hugging Face checkpoint (`drafter/`);
  3. records one draft block after the prompt (`single`): the target's hidden
     states at target_layer_ids, the drafter's final hidden states, the draft
     logits of rows 1..15 and the drafted ids;
  4. runs the reference's dflash_generate loop greedily (block 16, i.e. 15
     drafts per step) and records every step's drafted ids and accepted
     length. The target runs on the whole sequence at each step (no KV cache):
     that is what a correct cache computes, and it keeps transformers' sliding
     cache rules for Gemma out of the reference. The drafter's cache is the
     reference's (context rows kept, cropped back to the context after each
     block); it is computed both with an explicit cache and with transformers'
     DynamicCache(config) + crop as the reference calls it, and both results
     are recorded with whether they agree.

Usage (needs torch, numpy and transformers >= 5.5 with Gemma 4; 5.17 was used):
  python3 tools/golden/dflash_golden.py --out tests/fixtures/dflash
"""

import argparse
import hashlib
import json
import math
import os
import platform
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_fixtures as mf  # noqa: E402

REF_COMMIT = "10129599dffb338ff38cfd235a53ca6d3667b4dd"
TARGET = "moe_h64_l12_k4_g32"
PROMPT_LEN = 40
LOOP_NEW = 48  # the loop runs 48 new tokens; the C++ test compares the steps of the first 32
BLOCK = 16
MASK_ID = 4
WINDOW = 20  # the drafter's sliding window: shorter than the prompt, longer than a block
SEED = 2026


def build_target_layer_ids(num_target_layers, count):
    # The reference's rule: `count` ids spread over [1, num_target_layers - 3].
    if count == 1:
        return [num_target_layers // 2]
    start, end = 1, num_target_layers - 3
    return [int(round(start + (i * (end - start)) / (count - 1))) for i in range(count)]


def drafter_config(tc):
    hidden = tc["hidden_size"]
    heads = max(4, hidden // 16)
    return {
        "architectures": ["DFlashDraftModel"],
        "model_type": "qwen3",
        "num_hidden_layers": 5,
        "hidden_size": hidden,
        "num_attention_heads": heads,
        "num_key_value_heads": heads // 4,
        "head_dim": 16,
        "intermediate_size": 2 * hidden,
        "hidden_act": "silu",
        "rms_norm_eps": 1e-6,
        "rope_theta": 1000000.0,
        "rope_scaling": None,
        "attention_bias": False,
        "attention_dropout": 0.0,
        "sliding_window": WINDOW,
        "use_sliding_window": True,
        "max_window_layers": 0,
        "layer_types": ["sliding_attention"] * 4 + ["full_attention"],
        "block_size": BLOCK,
        "vocab_size": tc["vocab_size"],
        "max_position_embeddings": 4096,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
        "num_target_layers": tc["num_hidden_layers"],
        "dflash_config": {
            "mask_token_id": MASK_ID,
            "target_layer_ids": build_target_layer_ids(tc["num_hidden_layers"], 6),
        },
        "final_logit_softcapping": 30.0,
    }


def drafter_names(cfg):
    H, hd = cfg["hidden_size"], cfg["head_dim"]
    q, kv, inter = cfg["num_attention_heads"] * hd, cfg["num_key_value_heads"] * hd, cfg["intermediate_size"]
    n_ctx = len(cfg["dflash_config"]["target_layer_ids"])
    out = [("fc.weight", (H, n_ctx * H)), ("hidden_norm.weight", (H,))]
    for l in range(cfg["num_hidden_layers"]):
        p = "layers.%d." % l
        out += [(p + "input_layernorm.weight", (H,)), (p + "self_attn.q_proj.weight", (q, H)),
                (p + "self_attn.k_proj.weight", (kv, H)), (p + "self_attn.v_proj.weight", (kv, H)),
                (p + "self_attn.o_proj.weight", (H, q)), (p + "self_attn.q_norm.weight", (hd,)),
                (p + "self_attn.k_norm.weight", (hd,)), (p + "post_attention_layernorm.weight", (H,)),
                (p + "mlp.gate_proj.weight", (inter, H)), (p + "mlp.up_proj.weight", (inter, H)),
                (p + "mlp.down_proj.weight", (H, inter))]
    out.append(("norm.weight", (H,)))
    return out


def make_drafter_weights(cfg, seed):
    rs = np.random.RandomState(seed)
    W = {}
    for name, shape in drafter_names(cfg):
        if len(shape) == 2:  # linear: uniform with std 1/sqrt(in)
            a = math.sqrt(3.0 / shape[1])
            v = rs.uniform(-a, a, size=shape)
        else:  # norm weight around 1
            v = rs.uniform(0.5, 1.5, size=shape)
        W[name] = mf.bf16_round(torch.from_numpy(v.astype(np.float32)))
    return W


# ---------------------------------------------------------------------------
# The reference modules, re-implemented (dflash/model.py at REF_COMMIT)
# ---------------------------------------------------------------------------
class ExplicitCache:
    """The draft cache as the reference uses it: per layer, every K/V row appended by update();
    crop(-n) drops the last n rows; get_seq_length() is the rows held."""

    def __init__(self, n_layers):
        self.k = [None] * n_layers
        self.v = [None] * n_layers

    def update(self, k, v, li, *args, **kwargs):
        if self.k[li] is not None:
            k = torch.cat([self.k[li], k], dim=-2)
            v = torch.cat([self.v[li], v], dim=-2)
        self.k[li], self.v[li] = k, v
        return k, v

    def get_seq_length(self, layer_idx=0):
        return 0 if self.k[0] is None else self.k[0].shape[-2]

    def crop(self, n):
        assert n <= 0
        if n == 0:
            return
        for li in range(len(self.k)):
            if self.k[li] is not None:
                self.k[li] = self.k[li][..., :n, :]
                self.v[li] = self.v[li][..., :n, :]


def crop_to(cache, length):
    # The reference's _crop_to.
    remove = cache.get_seq_length() - length
    cache.crop(-remove)


def attention_mask(q, k, is_causal, sliding_window):
    # The reference's _attention_mask: queries are the last rows of the key sequence.
    qpos = k.shape[-2] - q.shape[-2] + torch.arange(q.shape[-2])[:, None]
    kpos = torch.arange(k.shape[-2])[None, :]
    visible = torch.ones((q.shape[-2], k.shape[-2]), dtype=torch.bool)
    if is_causal:
        visible &= kpos <= qpos
    if sliding_window is not None:
        visible &= qpos - kpos < sliding_window
        if not is_causal:
            visible &= kpos - qpos < sliding_window
    return visible[None, None]


class RefDrafter:
    def __init__(self, cfg, W):
        from transformers import Qwen3Config
        from transformers.models.qwen3 import modeling_qwen3 as mq
        self.mq = mq
        # transformers 5 may want rope_theta inside rope_parameters: take the first spelling whose
        # rotary embedding has the frequencies the config means (1 / theta^(2k/d)).
        want = 1.0 / (cfg["rope_theta"] ** (torch.arange(0, cfg["head_dim"], 2, dtype=torch.int64).float()
                                            / cfg["head_dim"]))
        base = {k: v for k, v in cfg.items() if k not in ("architectures",)}
        alt = {k: v for k, v in base.items() if k not in ("rope_theta", "rope_scaling")}
        alt["rope_parameters"] = {"rope_type": "default", "rope_theta": cfg["rope_theta"]}
        self.config = None
        for kw in (base, alt):
            try:
                c = Qwen3Config(**kw)
                rot = mq.Qwen3RotaryEmbedding(c)
            except Exception as e:  # noqa
                mf.log("  Qwen3Config variant failed: %r" % (e,))
                continue
            if torch.allclose(rot.inv_freq.float(), want) and float(getattr(rot, "attention_scaling", 1.0)) == 1.0:
                self.config, self.rotary = c, rot
                break
        assert self.config is not None, "no Qwen3Config spelling gives the intended RoPE"
        self.config._attn_implementation = "sdpa"
        assert self.config.sliding_window == WINDOW and list(self.config.layer_types) == cfg["layer_types"]
        c = self.config
        self.cfg = cfg
        self.hd = cfg["head_dim"]
        self.W = W
        eps = cfg["rms_norm_eps"]

        def norm(name, n):
            m = mq.Qwen3RMSNorm(n, eps=eps)
            m.weight.data.copy_(W[name])
            return m

        self.norm = norm("norm.weight", cfg["hidden_size"])
        self.hidden_norm = norm("hidden_norm.weight", cfg["hidden_size"])
        self.layers = []
        for l in range(cfg["num_hidden_layers"]):
            p = "layers.%d." % l
            mlp = mq.Qwen3MLP(c)
            for part in ("gate_proj", "up_proj", "down_proj"):
                getattr(mlp, part).weight.data.copy_(W[p + "mlp.%s.weight" % part])
            layer_type = c.layer_types[l]
            is_causal = getattr(c, "is_causal", None)
            self.layers.append({
                "p": p, "mlp": mlp,
                "input_ln": norm(p + "input_layernorm.weight", cfg["hidden_size"]),
                "post_ln": norm(p + "post_attention_layernorm.weight", cfg["hidden_size"]),
                "q_norm": norm(p + "self_attn.q_norm.weight", self.hd),
                "k_norm": norm(p + "self_attn.k_norm.weight", self.hd),
                # Qwen3DFlashAttention.__init__: causal on sliding layers unless the config says.
                "is_causal": (layer_type == "sliding_attention") if is_causal is None else bool(is_causal),
                "sliding_window": c.sliding_window if layer_type == "sliding_attention" else None,
            })
        self.fc = W["fc.weight"]

    def lin(self, name, x):
        return x @ self.W[name].t()

    def attention(self, li, L, hidden, target_hidden, cos, sin, cache):
        # Qwen3DFlashAttention.forward
        mq = self.mq
        bsz, q_len = hidden.shape[:-1]
        ctx_len = target_hidden.shape[1]
        p = L["p"] + "self_attn."
        q = self.lin(p + "q_proj.weight", hidden).view(bsz, q_len, -1, self.hd)
        q = L["q_norm"](q).transpose(1, 2)
        k_ctx = self.lin(p + "k_proj.weight", target_hidden)
        k_noise = self.lin(p + "k_proj.weight", hidden)
        v_ctx = self.lin(p + "v_proj.weight", target_hidden)
        v_noise = self.lin(p + "v_proj.weight", hidden)
        k = torch.cat([k_ctx, k_noise], dim=1).view(bsz, ctx_len + q_len, -1, self.hd)
        v = torch.cat([v_ctx, v_noise], dim=1).view(bsz, ctx_len + q_len, -1, self.hd)
        k = L["k_norm"](k).transpose(1, 2)
        v = v.transpose(1, 2)
        # apply_rotary_pos_emb: q takes the last q_len rows of cos/sin, k all of them.
        c1, s1 = cos.unsqueeze(1), sin.unsqueeze(1)
        q = q * c1[..., -q_len:, :] + mq.rotate_half(q) * s1[..., -q_len:, :]
        k = k * c1 + mq.rotate_half(k) * s1
        if cache is not None:
            k, v = cache.update(k, v, li, {"sin": sin, "cos": cos, "cache_position": None})
        mask = None
        if L["is_causal"] or L["sliding_window"] is not None:
            mask = attention_mask(q, k, L["is_causal"], L["sliding_window"])

        class M:  # what the attention function reads from the module
            pass

        mod = M()
        mod.is_causal = L["is_causal"]
        mod.num_key_value_groups = self.cfg["num_attention_heads"] // self.cfg["num_key_value_heads"]
        mod.training = False
        mod.config = self.config
        out, _ = mq.ALL_ATTENTION_FUNCTIONS["sdpa"](
            mod, q, k, v, mask, dropout=0.0, scaling=self.hd ** -0.5,
            sliding_window=L["sliding_window"])
        out = out.reshape(bsz, q_len, -1)
        return self.lin(p + "o_proj.weight", out)

    @torch.no_grad()
    def forward(self, position_ids, noise_embedding, target_hidden, cache):
        # DFlashDraftModel.forward
        hidden = noise_embedding
        target_hidden = self.hidden_norm(target_hidden @ self.fc.t())
        cos, sin = self.rotary(hidden, position_ids)
        for li, L in enumerate(self.layers):
            residual = hidden
            h = L["input_ln"](hidden)
            h = self.attention(li, L, h, target_hidden, cos, sin, cache)
            hidden = residual + h
            residual = hidden
            hidden = residual + L["mlp"](L["post_ln"](hidden))
        return self.norm(hidden)

    def compute_logits(self, hidden, head_weight):
        logits = hidden @ head_weight.t()
        logits = logits * float(self.cfg.get("output_multiplier", 1.0))
        cap = self.cfg.get("final_logit_softcapping")
        if cap is not None and float(cap) > 0:
            logits = torch.tanh(logits / float(cap)) * float(cap)
        return logits


# ---------------------------------------------------------------------------
# The target
# ---------------------------------------------------------------------------
def load_target(hf_dir):
    hf = mf.HF()
    from transformers import Gemma4ForConditionalGeneration
    hf.cls = Gemma4ForConditionalGeneration
    model = hf.load(hf_dir)
    tc = json.load(open(os.path.join(hf_dir, "config.json")))["text_config"]
    info = mf.set_embed_scale(model, "model.language_model.", mf.embed_scale_bf16(tc["hidden_size"]))
    return model, tc, info, hf.version


@torch.no_grad()
def target_forward(model, ids, layer_ids):
    """Logits [T, V] and the context features [T, len(layer_ids) * H] of the whole sequence."""
    out = model(input_ids=torch.tensor([ids]), use_cache=False, output_hidden_states=True)
    hs = out.hidden_states
    assert len(hs) == model.config.get_text_config().num_hidden_layers + 1, len(hs)
    feats = torch.cat([hs[l + 1] for l in layer_ids], dim=-1)  # extract_context_feature
    return out.logits[0].float(), feats[0].float()


def raw_embed(model, ids, scale):
    # _raw_input_embeddings: the embedding table's rows, not Gemma's scaled embedding module.
    return torch.nn.functional.embedding(torch.tensor([ids]), model.get_input_embeddings().weight) * scale


def head_weight(model):
    head = getattr(model, "lm_head", None) or model.get_output_embeddings()
    return head.weight.float()


@torch.no_grad()
def dflash_loop(model, drafter, prompt, max_new, cache):
    """dflash_generate at REF_COMMIT, greedy, no stop ids; the target without a cache."""
    cfg = drafter.cfg
    layer_ids = cfg["dflash_config"]["target_layer_ids"]
    scale = float(cfg["dflash_config"].get("input_embedding_scale", cfg.get("input_embedding_scale", 1.0)))
    n_in = len(prompt)
    max_length = n_in + max_new
    out = prompt + [MASK_ID] * (max_new + 1)
    logits, feats = target_forward(model, prompt, layer_ids)
    out[n_in] = int(torch.argmax(logits[-1]))
    target_hidden = feats[None]
    start = n_in
    steps = []
    W_head = head_weight(model)
    while start + 1 < max_length:
        verify_size = min(BLOCK, max_length - start)
        block = out[start:start + verify_size]
        drafted = []
        if verify_size > 1:
            noise = raw_embed(model, block, scale)
            pos = torch.arange(start - target_hidden.shape[1], start + verify_size)[None]
            hidden = drafter.forward(pos, noise, target_hidden, cache)[:, 1 - verify_size:, :]
            crop_to(cache, start)
            dl = drafter.compute_logits(hidden, W_head)
            drafted = [int(x) for x in torch.argmax(dl[0], dim=-1)]
            block = [block[0]] + drafted
        lg, ft = target_forward(model, out[:start] + block, layer_ids)
        lg, ft = lg[start:start + verify_size], ft[start:start + verify_size]
        posterior = [int(x) for x in torch.argmax(lg, dim=-1)]
        acc = 0
        while acc < len(drafted) and drafted[acc] == posterior[acc]:
            acc += 1
        out[start:start + acc + 1] = block[:acc + 1]
        out[start + acc + 1] = posterior[acc]
        produced = min(acc + 1, max_length - start - 1)
        steps.append({"start": start, "drafted": drafted, "accepted": acc, "produced": produced})
        start += produced
        if verify_size > 1:
            target_hidden = ft[None, :produced, :]
    return out[n_in:min(start + 1, max_length)], steps


def write_f32(path, t):
    arr = np.ascontiguousarray(t.detach().to(torch.float32).cpu().numpy().astype("<f4"))
    with open(path, "wb") as f:
        f.write(arr.tobytes())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--target", default=None, help="the target's HF directory")
    args = ap.parse_args()
    torch.manual_seed(0)
    torch.set_grad_enabled(False)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    here = os.path.dirname(os.path.abspath(__file__))
    target_dir = args.target or os.path.join(here, "..", "..", "tests", "fixtures", "golden", TARGET, "hf")
    os.makedirs(args.out, exist_ok=True)

    model, tc, embed_info, tf_version = load_target(target_dir)
    cfg = drafter_config(tc)
    W = make_drafter_weights(cfg, SEED)
    ddir = os.path.join(args.out, "drafter")
    os.makedirs(ddir, exist_ok=True)
    with open(os.path.join(ddir, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2, sort_keys=True)
        f.write("\n")
    mf.st_write(os.path.join(ddir, "model.safetensors"), {k: mf.blob_bf16(v) for k, v in W.items()},
                {"format": "pt"})
    drafter = RefDrafter(cfg, W)
    layer_ids = cfg["dflash_config"]["target_layer_ids"]

    rs = np.random.RandomState(SEED + 1)
    prompt = [mf.BOS] + [int(x) for x in rs.randint(5, tc["vocab_size"], size=PROMPT_LEN - 1)]

    # One block after the prompt.
    logits, feats = target_forward(model, prompt, layer_ids)
    first = int(torch.argmax(logits[-1]))
    block = [first] + [MASK_ID] * (BLOCK - 1)
    cache = ExplicitCache(cfg["num_hidden_layers"])
    pos = torch.arange(0, PROMPT_LEN + BLOCK)[None]
    hidden = drafter.forward(pos, raw_embed(model, block, 1.0), feats[None], cache)
    dl = drafter.compute_logits(hidden[:, 1:, :], head_weight(model))
    drafted = [int(x) for x in torch.argmax(dl[0], dim=-1)]
    write_f32(os.path.join(args.out, "single_features.f32"), feats)
    write_f32(os.path.join(args.out, "single_hidden.f32"), hidden[0])
    write_f32(os.path.join(args.out, "single_logits.f32"), dl[0])

    # The loop, with the explicit cache and with transformers' DynamicCache as the reference makes it.
    gen, steps = dflash_loop(model, drafter, prompt, LOOP_NEW, ExplicitCache(cfg["num_hidden_layers"]))
    tf_cache_note = {}
    try:
        from transformers import DynamicCache
        c2 = DynamicCache(config=drafter.config)
        if hasattr(c2, "activate_past_recording"):
            c2.activate_past_recording()
            tf_cache_note["activate_past_recording"] = True
        else:
            tf_cache_note["activate_past_recording"] = "absent"
        gen2, steps2 = dflash_loop(model, drafter, prompt, LOOP_NEW, c2)
        tf_cache_note["agrees"] = gen2 == gen and steps2 == steps
        if not tf_cache_note["agrees"]:
            tf_cache_note["generated"] = gen2
            tf_cache_note["steps"] = steps2
    except Exception as e:  # noqa
        tf_cache_note["error"] = repr(e)
    plain = []
    seq = list(prompt)
    for _ in range(LOOP_NEW):
        lg, _ = target_forward(model, seq, layer_ids)
        plain.append(int(torch.argmax(lg[-1])))
        seq.append(plain[-1])

    expected = {
        "reference": {"repo": "z-lab/dflash", "path": "dflash/model.py", "commit": REF_COMMIT},
        "versions": {"transformers": tf_version, "torch": torch.__version__, "numpy": np.__version__,
                     "python": platform.python_version()},
        "target": TARGET,
        "embed_scale_info": embed_info,
        "seed": SEED,
        "prompt_ids": prompt,
        "target_layer_ids": layer_ids,
        "single": {"first_token": first, "block": block, "drafted_ids": drafted,
                   "features_shape": list(feats.shape), "hidden_shape": list(hidden[0].shape),
                   "logits_shape": list(dl[0].shape)},
        "loop": {"block_size": BLOCK, "max_new_tokens": LOOP_NEW, "compare_tokens": 32,
                 "generated": gen, "steps": steps, "plain_greedy": plain,
                 "equals_plain": gen == plain[:len(gen)],
                 "transformers_dynamic_cache": tf_cache_note},
    }
    with open(os.path.join(args.out, "expected.json"), "w") as f:
        json.dump(expected, f, indent=1, sort_keys=True)
        f.write("\n")
    files = {}
    for root, _, names in os.walk(args.out):
        for n in sorted(names):
            p = os.path.join(root, n)
            rel = os.path.relpath(p, args.out)
            if rel == "manifest.json":
                continue
            files[rel] = {"size": os.path.getsize(p),
                          "sha256": hashlib.sha256(open(p, "rb").read()).hexdigest()}
    with open(os.path.join(args.out, "manifest.json"), "w") as f:
        json.dump({"files": files}, f, indent=1, sort_keys=True)
        f.write("\n")
    mf.log("drafted (single):", drafted)
    mf.log("loop steps:", [(s["start"], s["accepted"]) for s in steps])
    mf.log("loop equals plain greedy:", expected["loop"]["equals_plain"])
    mf.log("transformers cache:", {k: v for k, v in tf_cache_note.items() if k in ("agrees", "error",
                                                                                  "activate_past_recording")})


if __name__ == "__main__":
    main()
