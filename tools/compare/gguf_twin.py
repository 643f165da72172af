#!/usr/bin/env python3
"""Writes a GGUF file (llama.cpp's `gemma4` architecture) holding the weights of a redwing model
directory, so that llama.cpp and redwing can be compared on the same model: same routing, same
logits up to each engine's arithmetic.

  --q4 q4_1 (default): every 4-bit affine tensor becomes Q4_1 without changing a value. redwing's
      w = scale·q + bias (q in 0..15, group 64) is llama.cpp's Q4_1 x = d·q + m on 32-blocks, so
      each group becomes two blocks with d = scale, m = bias. That is exact whenever the bf16
      scale and bias are exactly fp16 numbers; the ones that are not are counted and reported.
  --q4 q4_0: 4-bit tensors are re-quantized to Q4_0 (ggml's reference rounding) from their exact
      values: the same bytes per weight as redwing (18 per 32 weights), but not the same values,
      and the rounding is large enough to change the routing. This is the twin for uncapped
      speed runs (which do not depend on the routing), where llama.cpp repacks Q4_0 for its
      fastest kernels.
  --q4 f32: the exact values in fp32, so that llama.cpp multiplies without quantizing its
      activations: with --q8 f32 too, a check of the conversion itself (small models only).
  --q8 q8_0 (default): 8-bit affine tensors (the dense MLP and the router) become Q8_0
      (d·q, q in -127..127), re-quantized from their exact values; the error is reported.
  --q8 f32: they are stored as their exact fp32 values instead (larger, exact).

bf16 norms and scalars are stored as f32 (exact), with llama.cpp's Gemma 4 names and
conventions: norms are the weight itself (no 1 + w), router.scale is ffn_gate_inp.scale,
router.per_expert_scale is ffn_down_exps.scale, layer_scalar is layer_output_scale, and the
full-attention layers' partial ("proportional") RoPE is a rope_freqs tensor that leaves the
unrotated pairs unrotated (factor 1e30), as llama.cpp's converter writes it. The vocabulary is
placeholder pieces: the comparisons feed token ids, never text.

Usage: gguf_twin.py MODEL_DIR OUT.gguf [--q4 q4_1|q4_0|f32] [--q8 q8_0|f32] [--jobs N]
(needs numpy: apt install python3-numpy). --jobs N encodes N tensors at a time in worker
processes, each writing its tensor at its own offset (default: the number of CPUs).
"""
import argparse
import json
import multiprocessing
import os
import struct
import sys

try:
    import numpy as np
except ImportError:
    sys.exit("gguf_twin.py: needs numpy (apt install python3-numpy)")

GGUF_U32, GGUF_I32, GGUF_F32, GGUF_BOOL, GGUF_STR, GGUF_ARR = 4, 5, 6, 7, 8, 9
T_F32, T_Q4_0, T_Q4_1, T_Q8_0, T_BF16 = 0, 2, 3, 8, 30
BLOCK = {T_Q4_0: (32, 18), T_Q4_1: (32, 20), T_Q8_0: (32, 34)}  # weights, bytes per block
ELEM = {T_F32: 4, T_BF16: 2}
ALIGN = 32


def fail(msg):
    sys.exit(f"gguf_twin.py: {msg}")


# ---------------------------------------------------------------- reading the redwing model


class Model:
    """The manifest, the core's tensor directory (mapped) and the expert files of a model dir."""

    def __init__(self, path):
        self.path = path
        try:
            with open(os.path.join(path, "manifest.json")) as f:
                self.manifest = json.load(f)
        except (OSError, ValueError) as e:
            fail(f"cannot read {path}/manifest.json: {e}")
        self.cfg = self.manifest.get("config", {})
        if self.cfg.get("architecture") != "gemma4_text":
            fail(f"{path} is not a Gemma 4 model (architecture {self.cfg.get('architecture')})")
        core = os.path.join(path, self.manifest.get("core", "core.bin"))
        self.core = np.memmap(core, dtype=np.uint8, mode="r")
        if bytes(self.core[:8]) != b"RWCORE01":
            fail(f"{core} has no RWCORE01 magic")
        off, size, _ = struct.unpack("<QQQ", bytes(self.core[8:32]))
        directory = json.loads(bytes(self.core[off:off + size]))
        self.tensors = {t["name"]: t for t in directory["tensors"]}
        self.experts = None
        if self.manifest.get("experts"):
            with open(os.path.join(path, self.manifest["experts"])) as f:
                self.experts = json.load(f)

    def core_tensor(self, name):
        t = self.tensors.get(name)
        if t is None:
            fail(f"{self.path}: core.bin has no tensor {name}")
        return t

    def part(self, buf, d, base=0):
        return buf[base + d["offset"]:base + d["offset"] + d["size"]]

    def floats(self, name):
        """A bf16 or f32 core tensor as f32 (exact)."""
        t = self.core_tensor(name)
        raw = self.part(self.core, t["data"])
        if t["type"] == "bf16":
            return bf16_to_f32(raw.view("<u2"))
        if t["type"] == "f32":
            return raw.view("<f4").astype(np.float32)
        fail(f"{name} is {t['type']}, expected bf16 or f32")

    def affine(self, name):
        """(codes uint32 [out, in·bits/32], scales u16, biases u16, bits, group, shape)."""
        t = self.core_tensor(name)
        return affine_parts(self.core, t, 0)


def bf16_to_f32(u16):
    return (np.asarray(u16, dtype=np.uint32) << 16).view(np.float32)


def affine_parts(buf, t, base):
    if t["type"] != "affine":
        fail(f"{t['name']} is {t['type']}, expected affine")
    out, inn = t["shape"]
    bits, group = t["bits"], t["group_size"]
    if bits not in (4, 8) or inn % group or group % 32:
        fail(f"{t['name']}: {bits}-bit group {group} over {inn} columns has no GGUF twin here")
    codes = buf[base + t["data"]["offset"]:][:out * inn * bits // 8].view("<u4").reshape(out, -1)
    ng = inn // group
    scales = buf[base + t["scales"]["offset"]:][:out * ng * 2].view("<u2").reshape(out, ng)
    biases = buf[base + t["biases"]["offset"]:][:out * ng * 2].view("<u2").reshape(out, ng)
    return codes, scales, biases, bits, group, (out, inn)


def unpack_codes(codes, bits):
    """uint32 words → uint8 codes [out, in]; element j of a word sits in bits [j·bits, …) LSB
    first, so on a little-endian byte view a 4-bit byte holds element 2k low, 2k+1 high."""
    b = np.ascontiguousarray(codes).view(np.uint8)
    if bits == 8:
        return b
    q = np.empty((b.shape[0], b.shape[1] * 2), dtype=np.uint8)
    q[:, 0::2] = b & 0xF
    q[:, 1::2] = b >> 4
    return q


def dequant(codes, scales, biases, bits, group):
    """redwing's w = scale·q + bias in fp32 (src/backend/cpu/kernels_scalar.cpp)."""
    q = unpack_codes(codes, bits).astype(np.float32)
    rows, inn = q.shape
    s = np.repeat(bf16_to_f32(scales), group, axis=1)
    b = np.repeat(bf16_to_f32(biases), group, axis=1)
    return (s * q + b).astype(np.float32).reshape(rows, inn)


# ---------------------------------------------------------------- GGUF block encoders


class Stats:
    """What the conversion changed: fp16-inexact Q4_1 scales/biases and re-quantization error."""

    def __init__(self):
        self.q41_values = 0
        self.q41_inexact = 0
        self.q41_worst = 0.0
        self.requant = {}  # type → [sum err², sum w², max |err|, max |w|, n]

    def add_requant(self, t, w, back):
        e = back - w
        s = self.requant.setdefault(t, [0.0, 0.0, 0.0, 0.0, 0])
        s[0] += float(np.dot(e.ravel().astype(np.float64), e.ravel().astype(np.float64)))
        s[1] += float(np.dot(w.ravel().astype(np.float64), w.ravel().astype(np.float64)))
        s[2] = max(s[2], float(np.abs(e).max()))
        s[3] = max(s[3], float(np.abs(w).max()))
        s[4] += w.size

    def merge(self, other):
        self.q41_values += other.q41_values
        self.q41_inexact += other.q41_inexact
        self.q41_worst = max(self.q41_worst, other.q41_worst)
        for t, o in other.requant.items():
            s = self.requant.setdefault(t, [0.0, 0.0, 0.0, 0.0, 0])
            s[0] += o[0]
            s[1] += o[1]
            s[2] = max(s[2], o[2])
            s[3] = max(s[3], o[3])
            s[4] += o[4]

    def report(self):
        lines = []
        if self.q41_values:
            lines.append(f"Q4_1: {self.q41_values} scales+biases, {self.q41_inexact} not exactly "
                         f"fp16 (worst relative change {self.q41_worst:.3g})")
        for t, (e2, w2, emax, wmax, n) in self.requant.items():
            name = {T_Q4_0: "Q4_0", T_Q8_0: "Q8_0"}[t]
            lines.append(f"{name} re-quantization over {n} weights: relative RMS error "
                         f"{(e2 / max(w2, 1e-300)) ** 0.5:.3g}, max |error| {emax:.3g} "
                         f"(max |w| {wmax:.3g})")
        return lines


def to_f16_checked(u16, stats):
    f32 = bf16_to_f32(u16)
    f16 = f32.astype(np.float16)
    back = f16.astype(np.float32)
    bad = back != f32
    stats.q41_values += f32.size
    n = int(bad.sum())
    if n:
        stats.q41_inexact += n
        rel = np.abs(back[bad] - f32[bad]) / np.maximum(np.abs(f32[bad]), 1e-38)
        stats.q41_worst = max(stats.q41_worst, float(rel.max()))
    return f16


def q4_1_blocks(codes, scales, biases, group, stats):
    """Exact: each 32-block takes its group's scale as d and bias as m. ggml's Q4_1 keeps
    element j of a block in the low nibble of qs[j] and element j + 16 in the high one."""
    q = unpack_codes(codes, 4)
    rows, inn = q.shape
    nb = inn // 32
    q = q.reshape(rows, nb, 32)
    qs = q[:, :, :16] | (q[:, :, 16:] << 4)
    rep = group // 32
    d = np.repeat(to_f16_checked(scales, stats), rep, axis=1)
    m = np.repeat(to_f16_checked(biases, stats), rep, axis=1)
    out = np.empty((rows, nb, 20), dtype=np.uint8)
    out[:, :, 0:2] = d.reshape(rows, nb, 1).view(np.uint8)
    out[:, :, 2:4] = m.reshape(rows, nb, 1).view(np.uint8)
    out[:, :, 4:] = qs
    return out


def q4_0_blocks(w, stats):
    """ggml's quantize_row_q4_0_ref: d = (the signed value of largest magnitude) / -8,
    q = min(15, int(x/d + 8.5)), x ≈ d·(q - 8)."""
    rows, inn = w.shape
    x = w.reshape(rows, inn // 32, 32)
    idx = np.abs(x).argmax(axis=2)
    mx = np.take_along_axis(x, idx[:, :, None], axis=2)[:, :, 0]
    d = (mx / np.float32(-8)).astype(np.float32)
    with np.errstate(divide="ignore"):
        inv = np.where(d != 0, np.float32(1) / d, np.float32(0)).astype(np.float32)
    q = np.minimum(15, (x * inv[:, :, None] + np.float32(8.5)).astype(np.int8)).astype(np.uint8)
    d16 = d.astype(np.float16)
    stats.add_requant(T_Q4_0, w, (d16.astype(np.float32)[:, :, None] *
                                  (q.astype(np.float32) - 8)).reshape(rows, inn))
    out = np.empty((rows, inn // 32, 18), dtype=np.uint8)
    out[:, :, 0:2] = d16.reshape(rows, -1, 1).view(np.uint8)
    out[:, :, 2:] = q[:, :, :16] | (q[:, :, 16:] << 4)
    return out


def q8_0_blocks(w, stats):
    """ggml's quantize_row_q8_0_ref: d = max|x| / 127, q = round(x/d)."""
    rows, inn = w.shape
    x = w.reshape(rows, inn // 32, 32)
    d = (np.abs(x).max(axis=2) / np.float32(127)).astype(np.float32)
    with np.errstate(divide="ignore"):
        inv = np.where(d != 0, np.float32(1) / d, np.float32(0)).astype(np.float32)
    q = np.round(x * inv[:, :, None]).astype(np.int8)  # ties: roundf is away from zero
    half = np.abs(x * inv[:, :, None] - np.trunc(x * inv[:, :, None])) == 0.5
    q = np.where(half, np.trunc(x * inv[:, :, None]) + np.sign(x), q).astype(np.int8)
    d16 = d.astype(np.float16)
    stats.add_requant(T_Q8_0, w, (d16.astype(np.float32)[:, :, None] *
                                  q.astype(np.float32)).reshape(rows, inn))
    out = np.empty((rows, inn // 32, 34), dtype=np.uint8)
    out[:, :, 0:2] = d16.reshape(rows, -1, 1).view(np.uint8)
    out[:, :, 2:] = q.view(np.uint8)
    return out


# ---------------------------------------------------------------- the twin's tensors


class Twin:
    def __init__(self, model, q4, q8):
        self.m, self.cfg = model, model.cfg
        self.q4 = {"q4_1": T_Q4_1, "q4_0": T_Q4_0, "f32": T_F32}[q4]
        self.q8 = {"q8_0": T_Q8_0, "f32": T_F32}[q8]
        self.stats = Stats()

    def qtype(self, bits):
        return self.q4 if bits == 4 else self.q8

    def encode(self, codes, scales, biases, bits, group):
        """One affine matrix [out, in] as GGUF bytes of this twin's type for its bit width."""
        t = self.qtype(bits)
        if t == T_Q4_1:
            return q4_1_blocks(codes, scales, biases, group, self.stats)
        w = dequant(codes, scales, biases, bits, group)
        if t == T_Q4_0:
            return q4_0_blocks(w, self.stats)
        if t == T_Q8_0:
            return q8_0_blocks(w, self.stats)
        return w

    def matrix(self, gguf_name, rw_name):
        """(gguf name, dims, type, producer) of a core matrix, affine or float."""
        t = self.m.core_tensor(rw_name)
        out, inn = t["shape"]
        if t["type"] == "affine":
            def produce():
                codes, scales, biases, bits, group, _ = self.m.affine(rw_name)
                for r in range(0, out, 8192):  # row slices: the embedding is 738M weights
                    yield self.encode(codes[r:r + 8192], scales[r:r + 8192],
                                      biases[r:r + 8192], bits, group)
            return (gguf_name, [inn, out], self.qtype(t["bits"]), produce)
        ftype = T_BF16 if t["type"] == "bf16" else T_F32

        def raw():
            yield np.asarray(self.m.part(self.m.core, t["data"]))
        return (gguf_name, [inn, out], ftype, raw)

    def vector(self, gguf_name, rw_name):
        t = self.m.core_tensor(rw_name)
        n = int(np.prod(t["shape"]))
        return (gguf_name, [n], T_F32, lambda: iter([self.m.floats(rw_name)]))

    def experts(self, gguf_name, li, which):
        """All experts' `which` matrices of layer li as one [in, out, n_expert] tensor, read from
        the layer file a few experts at a time so the full-size model fits in memory."""
        layer = self.m.experts["layers"][li]
        lay = layer["layout"]
        t, stride = lay[which], lay["stride"]
        out, inn = t["shape"]
        ne = self.cfg["num_experts"]
        path = os.path.join(self.m.path, layer["file"])

        def produce():
            buf = np.memmap(path, dtype=np.uint8, mode="r")
            for e in range(ne):
                yield self.encode(*affine_parts(buf, t, e * stride)[:5])
        return (gguf_name, [inn, out, ne], self.qtype(t["bits"]), produce)

    def tensors(self):
        c = self.cfg
        out = [self.matrix("token_embd.weight", "embed_tokens"),
               self.vector("output_norm.weight", "norm")]
        if not c.get("tie_word_embeddings", True):
            fail("an untied LM head is not supported by this converter")
        fu = c["full"]
        if "full_attention" in c["layer_types"]:
            out.append(("rope_freqs.weight", [fu["head_dim"] // 2], T_F32,
                        lambda: iter([rope_freqs(fu)])))
        names = {"input_layernorm": "attn_norm", "post_attention_layernorm": "post_attention_norm",
                 "pre_feedforward_layernorm": "ffn_norm",
                 "post_feedforward_layernorm": "post_ffw_norm",
                 "post_feedforward_layernorm_1": "post_ffw_norm_1",
                 "pre_feedforward_layernorm_2": "pre_ffw_norm_2",
                 "post_feedforward_layernorm_2": "post_ffw_norm_2",
                 "self_attn.q_norm": "attn_q_norm", "self_attn.k_norm": "attn_k_norm",
                 "layer_scalar": "layer_output_scale"}
        mats = {"self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k",
                "self_attn.v_proj": "attn_v", "self_attn.o_proj": "attn_output",
                "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up", "mlp.down_proj": "ffn_down",
                "router.proj": "ffn_gate_inp"}
        for li in range(c["num_layers"]):
            p, r = f"blk.{li}.", f"layers.{li}."
            for rw, gg in mats.items():
                if r + rw in self.m.tensors:
                    out.append(self.matrix(p + gg + ".weight", r + rw))
            for rw, gg in names.items():
                if r + rw in self.m.tensors:
                    out.append(self.vector(p + gg + ".weight", r + rw))
            if c.get("enable_moe"):
                out.append(self.vector(p + "ffn_gate_inp.scale", r + "router.scale"))
                out.append(self.vector(p + "ffn_down_exps.scale", r + "router.per_expert_scale"))
                for which in ("gate", "up", "down"):
                    out.append(self.experts(f"{p}ffn_{which}_exps.weight", li, which))
        return out


def rope_freqs(full):
    """Full-attention layers rotate int(partial·d/2) pairs with inv_freq base^(-2i/d) and leave
    the rest as they are; llama.cpp gets rotary dimension d and a factor of 1e30 (angle ≈ 0) on
    the unrotated pairs (its convert_hf_to_gguf.py does the same for Gemma 4)."""
    half = full["head_dim"] // 2
    rotated = half
    if full["rope_type"] == "proportional":
        rotated = int(full["partial_rotary_factor"] * full["head_dim"] // 2)
    return np.array([1.0] * rotated + [1e30] * (half - rotated), dtype=np.float32)


def metadata(cfg):
    a = "gemma4"
    sw = [t == "sliding_attention" for t in cfg["layer_types"]]
    sl, fu = cfg["sliding"], cfg["full"]
    vocab = cfg["vocab_size"]
    if sl["rope_type"] != "default":
        fail(f"sliding rope_type {sl['rope_type']} is not supported")

    def piece(i):
        if i < 4:
            return ["<pad>", "<eos>", "<bos>", "<unk>"][i]
        if i < 260:
            return "<0x%02X>" % (i - 4)
        return "\u2581" if i == 260 else f"<t{i}>"

    kv = [
        ("general.architecture", GGUF_STR, a),
        ("general.name", GGUF_STR, "redwing-twin"),
        ("general.alignment", GGUF_U32, ALIGN),
        (f"{a}.context_length", GGUF_U32, cfg["max_position_embeddings"]),
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
        (f"{a}.rope.dimension_count_swa", GGUF_U32,
         int(sl["head_dim"] * sl.get("partial_rotary_factor", 1.0))),
        (f"{a}.rope.freq_base", GGUF_F32, fu["rope_theta"]),
        (f"{a}.rope.freq_base_swa", GGUF_F32, sl["rope_theta"]),
        (f"{a}.attention.sliding_window", GGUF_U32, cfg["sliding_window"]),
        (f"{a}.attention.sliding_window_pattern", GGUF_ARR, (GGUF_BOOL, sw)),
        (f"{a}.attention.layer_norm_rms_epsilon", GGUF_F32, cfg["rms_norm_eps"]),
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
    if cfg.get("final_logit_softcapping"):
        kv.append((f"{a}.final_logit_softcapping", GGUF_F32, cfg["final_logit_softcapping"]))
    if cfg.get("enable_moe"):
        kv += [(f"{a}.expert_count", GGUF_U32, cfg["num_experts"]),
               (f"{a}.expert_used_count", GGUF_U32, cfg["top_k"]),
               (f"{a}.expert_feed_forward_length", GGUF_U32, cfg["moe_intermediate_size"])]
    return kv


# ---------------------------------------------------------------- the GGUF container


def nbytes(dims, t):
    n = int(np.prod(dims))
    if t in ELEM:
        return ELEM[t] * n
    per, size = BLOCK[t]
    if dims[0] % per:
        fail(f"row length {dims[0]} is not a multiple of {per}")
    return n // per * size


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


def write_header(f, kv, tensors):
    """Writes the header and returns each tensor's absolute data offset."""
    f.write(b"GGUF")
    f.write(struct.pack("<IQQ", 3, len(tensors), len(kv)))
    for key, t, v in kv:
        put_str(f, key)
        f.write(struct.pack("<I", t))
        put_value(f, t, v)
    off, rel = 0, []
    for name, dims, t, _ in tensors:
        put_str(f, name)
        f.write(struct.pack("<I", len(dims)))
        f.write(struct.pack(f"<{len(dims)}Q", *dims))
        f.write(struct.pack("<IQ", t, off))
        rel.append(off)
        off += -(-nbytes(dims, t) // ALIGN) * ALIGN
    f.write(b"\0" * (-f.tell() % ALIGN))
    data = f.tell()
    return [data + r for r in rel], data + off


def write_tensor(fd, tensor, at):
    """One tensor's bytes at offset `at` of the open file fd (positioned writes: workers share
    the file), its padding included."""
    name, dims, t, produce = tensor
    want, pos = nbytes(dims, t), at
    for chunk in produce():
        b = np.ascontiguousarray(chunk).tobytes()
        if os.pwrite(fd, b, pos) != len(b):
            fail(f"{name}: short write")
        pos += len(b)
    if pos - at != want:
        fail(f"{name}: wrote {pos - at} bytes, expected {want}")
    pad = -want % ALIGN
    if pad:
        os.pwrite(fd, b"\0" * pad, pos)


# The worker processes' view of the job (set before the pool forks, so nothing is pickled but
# indices and statistics).
_JOB = {}


def _encode_one(i):
    twin, tensors, offsets, path = _JOB["twin"], _JOB["tensors"], _JOB["offsets"], _JOB["path"]
    twin.stats = Stats()
    fd = os.open(path, os.O_WRONLY)
    try:
        write_tensor(fd, tensors[i], offsets[i])
    finally:
        os.close(fd)
    return twin.stats


def write_gguf(path, kv, tensors, twin, jobs):
    with open(path, "wb") as f:
        offsets, end = write_header(f, kv, tensors)
        f.truncate(end)
    # Largest first, so the embedding does not start last.
    order = sorted(range(len(tensors)), key=lambda i: -nbytes(tensors[i][1], tensors[i][2]))
    if jobs <= 1:
        fd = os.open(path, os.O_WRONLY)
        try:
            for i in order:
                write_tensor(fd, tensors[i], offsets[i])
        finally:
            os.close(fd)
        return
    _JOB.update(twin=twin, tensors=tensors, offsets=offsets, path=path)
    total = twin.stats
    with multiprocessing.get_context("fork").Pool(jobs) as pool:
        for st in pool.imap_unordered(_encode_one, order):
            total.merge(st)
    twin.stats = total


def main():
    ap = argparse.ArgumentParser(description="GGUF twin of a redwing model (same weights).")
    ap.add_argument("model_dir")
    ap.add_argument("out")
    ap.add_argument("--q4", choices=["q4_1", "q4_0", "f32"], default="q4_1")
    ap.add_argument("--q8", choices=["q8_0", "f32"], default="q8_0")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    a = ap.parse_args()
    if a.jobs < 1:
        fail("--jobs must be at least 1")
    twin = Twin(Model(a.model_dir), a.q4, a.q8)
    tmp = a.out + ".partial"
    try:
        write_gguf(tmp, metadata(twin.cfg), twin.tensors(), twin, a.jobs)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise
    os.replace(tmp, a.out)
    print(f"wrote {a.out} ({os.path.getsize(a.out) / 1e9:.2f} GB), 4-bit as {a.q4}, "
          f"8-bit as {a.q8}")
    for line in twin.stats.report():
        print("  " + line)


if __name__ == "__main__":
    main()
