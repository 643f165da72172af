#!/usr/bin/env python3
"""Writes a GGUF file (llama.cpp's `gemma4` architecture) with the geometry of a redwing model
directory and random weights, for measuring llama.cpp side by side with redwing.

Every matrix takes the same bytes per weight as in the redwing model: 4-bit affine g64 (0.5625
bytes) becomes Q4_0 (18 bytes per 32 weights, also 0.5625) and 8-bit affine g64 (1.0625) becomes
Q8_0 (34 bytes per 32). Norms and scales are f32 ones. The vocabulary is placeholder pieces
(byte tokens plus <tN>): the benchmark feeds token ids, never text.

Weights are random, not converted: only the routing's spread matters for speed, and a synthetic
redwing model with routing_skew 0 routes near-uniformly too. The values are scaled so that
activations stay finite through all layers.

Usage: gguf_like_model.py MODEL_DIR OUT.gguf   (needs numpy: apt install python3-numpy)
"""
import json
import os
import struct
import sys

try:
    import numpy as np
except ImportError:
    sys.exit("gguf_like_model.py: needs numpy (apt install python3-numpy)")

GGUF_U32, GGUF_I32, GGUF_F32, GGUF_BOOL, GGUF_STR, GGUF_ARR = 4, 5, 6, 7, 8, 9
T_F32, T_Q4_0, T_Q8_0 = 0, 2, 8
BLOCK_BYTES = {T_Q4_0: 18, T_Q8_0: 34}
ALIGN = 32


def load_config(model_dir):
    path = os.path.join(model_dir, "manifest.json")
    try:
        with open(path) as f:
            man = json.load(f)
    except (OSError, ValueError) as e:
        sys.exit(f"gguf_like_model.py: cannot read {path}: {e}")
    cfg = man.get("config", {})
    if cfg.get("architecture") != "gemma4_text" or not cfg.get("enable_moe"):
        sys.exit(f"gguf_like_model.py: {path} is not a Gemma 4 MoE model")
    quant = man.get("quantization", {}).get("tensors", {})
    bits = {name: q.get("bits") for name, q in quant.items() if q.get("type") == "affine"}
    return cfg, bits


def quant_type(bits, name):
    b = bits.get(name)
    if b == 4:
        return T_Q4_0
    if b == 8:
        return T_Q8_0
    sys.exit(f"gguf_like_model.py: {name} is {b}-bit; only 4 and 8 bit have a GGUF twin here")


def metadata(cfg):
    a = "gemma4"
    sw = [t == "sliding_attention" for t in cfg["layer_types"]]
    sl, fu = cfg["sliding"], cfg["full"]
    vocab = cfg["vocab_size"]

    def piece(i):
        if i < 4:
            return ["<pad>", "<eos>", "<bos>", "<unk>"][i]
        if i < 260:
            return "<0x%02X>" % (i - 4)
        return "\u2581" if i == 260 else f"<t{i}>"

    kv = [
        ("general.architecture", GGUF_STR, a),
        ("general.name", GGUF_STR, "redwing-synthetic-twin"),
        ("general.alignment", GGUF_U32, ALIGN),
        (f"{a}.context_length", GGUF_U32, 8192),
        (f"{a}.embedding_length", GGUF_U32, cfg["hidden_size"]),
        (f"{a}.block_count", GGUF_U32, cfg["num_layers"]),
        (f"{a}.feed_forward_length", GGUF_U32, cfg["intermediate_size"]),
        (f"{a}.attention.head_count", GGUF_U32, cfg["num_heads"]),
        (f"{a}.attention.head_count_kv", GGUF_ARR,
         (GGUF_U32, [sl["num_kv_heads"] if s else fu["num_kv_heads"] for s in sw])),
        (f"{a}.attention.key_length", GGUF_U32, fu["head_dim"]),
        (f"{a}.attention.value_length", GGUF_U32, fu["head_dim"]),
        (f"{a}.attention.key_length_swa", GGUF_U32, sl["head_dim"]),
        (f"{a}.attention.value_length_swa", GGUF_U32, sl["head_dim"]),
        (f"{a}.rope.dimension_count", GGUF_U32, fu["head_dim"]),
        (f"{a}.rope.dimension_count_swa", GGUF_U32, sl["head_dim"]),
        (f"{a}.rope.freq_base", GGUF_F32, fu["rope_theta"]),
        (f"{a}.rope.freq_base_swa", GGUF_F32, sl["rope_theta"]),
        (f"{a}.attention.sliding_window", GGUF_U32, cfg["sliding_window"]),
        (f"{a}.attention.sliding_window_pattern", GGUF_ARR, (GGUF_BOOL, sw)),
        (f"{a}.attention.layer_norm_rms_epsilon", GGUF_F32, cfg["rms_norm_eps"]),
        (f"{a}.final_logit_softcapping", GGUF_F32, cfg["final_logit_softcapping"]),
        (f"{a}.expert_count", GGUF_U32, cfg["num_experts"]),
        (f"{a}.expert_used_count", GGUF_U32, cfg["top_k"]),
        (f"{a}.expert_feed_forward_length", GGUF_U32, cfg["moe_intermediate_size"]),
        (f"{a}.embedding_length_per_layer_input", GGUF_U32, 0),
        (f"{a}.vocab_size", GGUF_U32, vocab),
        ("tokenizer.ggml.model", GGUF_STR, "llama"),
        ("tokenizer.ggml.tokens", GGUF_ARR, (GGUF_STR, [piece(i) for i in range(vocab)])),
        ("tokenizer.ggml.scores", GGUF_ARR, (GGUF_F32, [0.0] * vocab)),
        ("tokenizer.ggml.token_type", GGUF_ARR,
         (GGUF_I32, [3 if i < 4 else 6 if i < 260 else 1 for i in range(vocab)])),
        ("tokenizer.ggml.bos_token_id", GGUF_U32, cfg["bos_token_id"]),
        ("tokenizer.ggml.eos_token_id", GGUF_U32, 1),
        ("tokenizer.ggml.unknown_token_id", GGUF_U32, 3),
        ("tokenizer.ggml.padding_token_id", GGUF_U32, cfg["pad_token_id"]),
    ]
    return kv


def tensors(cfg, bits):
    h, inter, ne = cfg["hidden_size"], cfg["intermediate_size"], cfg["num_experts"]
    fe, nh = cfg["moe_intermediate_size"], cfg["num_heads"]
    sl, fu = cfg["sliding"], cfg["full"]
    out = [("token_embd.weight", [h, cfg["vocab_size"]], quant_type(bits, "embed_tokens")),
           ("output_norm.weight", [h], T_F32),
           ("rope_freqs.weight", [fu["head_dim"] // 2], T_F32)]
    for li, kind in enumerate(cfg["layer_types"]):
        g = sl if kind == "sliding_attention" else fu
        hd, nkv = g["head_dim"], g["num_kv_heads"]
        p, m = f"blk.{li}.", f"layers.{li}."
        out += [(p + "attn_norm.weight", [h], T_F32),
                (p + "attn_q.weight", [h, nh * hd], quant_type(bits, m + "self_attn.q_proj")),
                (p + "attn_k.weight", [h, nkv * hd], quant_type(bits, m + "self_attn.k_proj"))]
        if not g["k_eq_v"]:
            out.append((p + "attn_v.weight", [h, nkv * hd], quant_type(bits, m + "self_attn.v_proj")))
        out += [(p + "attn_output.weight", [nh * hd, h], quant_type(bits, m + "self_attn.o_proj")),
                (p + "attn_q_norm.weight", [hd], T_F32),
                (p + "attn_k_norm.weight", [hd], T_F32),
                (p + "post_attention_norm.weight", [h], T_F32),
                (p + "layer_output_scale.weight", [1], T_F32),
                (p + "ffn_norm.weight", [h], T_F32),
                (p + "ffn_gate.weight", [h, inter], quant_type(bits, m + "mlp.gate_proj")),
                (p + "ffn_up.weight", [h, inter], quant_type(bits, m + "mlp.up_proj")),
                (p + "ffn_down.weight", [inter, h], quant_type(bits, m + "mlp.down_proj")),
                (p + "post_ffw_norm.weight", [h], T_F32),
                (p + "ffn_gate_inp.weight", [h, ne], quant_type(bits, m + "router.proj")),
                (p + "ffn_gate_inp.scale", [h], T_F32),
                (p + "pre_ffw_norm_2.weight", [h], T_F32),
                (p + "post_ffw_norm_1.weight", [h], T_F32),
                (p + "post_ffw_norm_2.weight", [h], T_F32),
                (p + "ffn_gate_exps.weight", [h, fe, ne], quant_type(bits, m + "experts.gate")),
                (p + "ffn_up_exps.weight", [h, fe, ne], quant_type(bits, m + "experts.up")),
                (p + "ffn_down_exps.weight", [fe, h, ne], quant_type(bits, m + "experts.down")),
                (p + "ffn_down_exps.scale", [ne], T_F32)]
    return out


def nbytes(dims, t):
    n = int(np.prod(dims))
    if t == T_F32:
        return 4 * n
    if dims[0] % 32:
        sys.exit(f"gguf_like_model.py: row length {dims[0]} is not a multiple of 32")
    return n // 32 * BLOCK_BYTES[t]


def put_str(f, s):
    b = s.encode()
    f.write(struct.pack("<Q", len(b)))
    f.write(b)


def put_value(f, t, v):
    if t == GGUF_STR:
        put_str(f, v)
    elif t == GGUF_ARR:
        et, items = v
        f.write(struct.pack("<IQ", et, len(items)))
        if et == GGUF_STR:
            for s in items:
                put_str(f, s)
        else:
            f.write(np.asarray(items, dtype={GGUF_U32: "<u4", GGUF_I32: "<i4", GGUF_F32: "<f4",
                                             GGUF_BOOL: "?"}[et]).tobytes())
    else:
        f.write(struct.pack({GGUF_U32: "<I", GGUF_I32: "<i", GGUF_F32: "<f", GGUF_BOOL: "<?"}[t], v))


def random_blocks(rng, t, scale):
    """64 MiB of random blocks whose fp16 scale is `scale` (the codes stay random)."""
    bs = BLOCK_BYTES[t]
    a = rng.integers(0, 256, size=((64 << 20) // bs, bs), dtype=np.uint8)
    a[:, 0:2] = np.frombuffer(np.float16(scale).tobytes(), dtype=np.uint8)
    return a.reshape(-1)


def write(tmp, kv, ts, pool):
    with open(tmp, "wb") as f:
        f.write(b"GGUF")
        f.write(struct.pack("<IQQ", 3, len(ts), len(kv)))
        for key, t, v in kv:
            put_str(f, key)
            f.write(struct.pack("<I", t))
            put_value(f, t, v)
        off = 0
        for name, dims, t in ts:
            put_str(f, name)
            f.write(struct.pack("<I", len(dims)))
            f.write(struct.pack(f"<{len(dims)}Q", *dims))
            f.write(struct.pack("<IQ", t, off))
            off += -(-nbytes(dims, t) // ALIGN) * ALIGN
        f.write(b"\0" * (-f.tell() % ALIGN))
        turn = 0
        for name, dims, t in ts:
            nb = nbytes(dims, t)
            if t == T_F32:
                f.write(np.ones(nb // 4, dtype="<f4").tobytes())
            else:
                # Slices of the random pool at block-aligned offsets that differ per slice.
                src, bs = pool[t], BLOCK_BYTES[t]
                left = nb
                while left > 0:
                    start = (turn * 7919) % (len(src) // bs) * bs
                    turn += 1
                    take = min(left, (len(src) - start) // bs * bs)
                    f.write(src[start:start + take].tobytes())
                    left -= take
            f.write(b"\0" * (-nb % ALIGN))


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__.strip().splitlines()[-1])
    model_dir, out = sys.argv[1], sys.argv[2]
    cfg, bits = load_config(model_dir)
    kv, ts = metadata(cfg), tensors(cfg, bits)
    rng = np.random.default_rng(1)
    # Q4_0 values (q - 8)·0.01 and Q8_0 values q·0.0004: outputs of O(1) for unit-RMS inputs.
    pool = {T_Q4_0: random_blocks(rng, T_Q4_0, 0.01), T_Q8_0: random_blocks(rng, T_Q8_0, 0.0004)}
    tmp = out + ".partial"
    try:
        write(tmp, kv, ts, pool)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise
    os.replace(tmp, out)
    print(f"wrote {out} ({os.path.getsize(out) / 1e9:.2f} GB)")


if __name__ == "__main__":
    main()
