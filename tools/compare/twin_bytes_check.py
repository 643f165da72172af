#!/usr/bin/env python3
"""Reads a GGUF twin back and compares every tensor, dequantized the way ggml does, with the
redwing model's values (w = scale·q + bias for affine, the stored value for bf16), without
llama.cpp. For a Q4_1 twin every difference should be 0; Q4_0 and Q8_0 show their rounding.
It also checks that every tensor llama.cpp's gemma4 loader needs is present with its shape.

  twin_bytes_check.py MODEL_DIR TWIN.gguf [--experts N]

--experts N checks the first N experts of each layer (default: all; the full-size model has
3,840 expert matrices per tensor kind, about a minute each way).
(needs numpy: apt install python3-numpy)
"""
import argparse
import os
import struct
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gguf_twin as G  # noqa: E402


def read_gguf(path):
    """(kv dict, {name: (dims, type, absolute offset)}, mapped file)."""
    buf = np.memmap(path, dtype=np.uint8, mode="r")
    pos = 0

    def take(fmt):
        nonlocal pos
        v = struct.unpack_from(fmt, buf, pos)
        pos += struct.calcsize(fmt)
        return v

    def string():
        nonlocal pos
        (n,) = take("<Q")
        s = bytes(buf[pos:pos + n]).decode()
        pos += n
        return s

    scalar = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q",
              11: "<q", 12: "<d"}

    def value(t):
        if t == 8:
            return string()
        if t == 9:
            et, n = take("<IQ")
            return [value(et) for _ in range(n)]
        return take(scalar[t])[0]

    if bytes(buf[:4]) != b"GGUF":
        sys.exit(f"{path}: not a GGUF file")
    pos = 4
    _, nt, nkv = take("<IQQ")
    kv = {}
    for _ in range(nkv):
        k = string()
        (t,) = take("<I")
        kv[k] = value(t)
    infos = []
    for _ in range(nt):
        name = string()
        (nd,) = take("<I")
        dims = list(take(f"<{nd}Q"))
        t, off = take("<IQ")
        infos.append((name, dims, t, off))
    align = kv.get("general.alignment", 32)
    base = pos + (-pos % align)
    return kv, {n: (d, t, base + o) for n, d, t, o in infos}, buf


def decode(buf, off, rows, cols, t):
    """A [rows, cols] tensor as ggml's dequantize_row_* gives it (fp16 d/m in fp32)."""
    if t == G.T_F32:
        return buf[off:off + rows * cols * 4].view("<f4").reshape(rows, cols)
    if t == G.T_BF16:
        return G.bf16_to_f32(buf[off:off + rows * cols * 2].view("<u2")).reshape(rows, cols)
    per, size = G.BLOCK[t]
    nb = cols // per
    b = np.asarray(buf[off:off + rows * nb * size]).reshape(rows, nb, size)
    d = b[:, :, 0:2].copy().view(np.float16).astype(np.float32)
    if t == G.T_Q8_0:
        return (d * b[:, :, 2:].view(np.int8).astype(np.float32)).reshape(rows, cols)
    qs = b[:, :, 4:] if t == G.T_Q4_1 else b[:, :, 2:]
    q = np.concatenate([qs & 0xF, qs >> 4], axis=2).astype(np.float32)  # j, then j + 16
    if t == G.T_Q4_1:
        m = b[:, :, 2:4].copy().view(np.float16).astype(np.float32)
        return (d * q + m).reshape(rows, cols)
    return (d * (q - 8)).reshape(rows, cols)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model_dir")
    ap.add_argument("gguf")
    ap.add_argument("--experts", type=int, default=0)
    a = ap.parse_args()
    m = G.Model(a.model_dir)
    cfg = m.cfg
    kv, tensors, buf = read_gguf(a.gguf)
    twin = G.Twin(m, "q4_1", "q8_0")
    expected = twin.tensors()
    worst = {}  # gguf type → (max |diff|, max |w|, tensors)
    missing = [n for n, *_ in expected if n not in tensors]
    extra = [n for n in tensors if n not in {e[0] for e in expected}]
    for name, dims, _, _ in expected:
        if name in tensors and tensors[name][0] != dims:
            missing.append(f"{name} (shape {tensors[name][0]}, expected {dims})")

    def note(t, got, want):
        w = worst.setdefault(t, [0.0, 0.0, 0])
        w[0] = max(w[0], float(np.abs(got - want).max()))
        w[1] = max(w[1], float(np.abs(want).max()))
        w[2] += 1

    rw_of = {e[0]: e for e in expected}
    for name, (dims, t, off) in tensors.items():
        if name not in rw_of or name == "rope_freqs.weight":
            continue
        if len(dims) == 3:  # experts: [in, out, n_expert]
            li = int(name.split(".")[1])
            which = name.split(".")[2].split("_")[1]
            layer = m.experts["layers"][li]
            lay = layer["layout"]
            ebuf = np.memmap(os.path.join(m.path, layer["file"]), dtype=np.uint8, mode="r")
            per = G.nbytes(dims[:2], t)
            for e in range(a.experts or dims[2]):
                parts = G.affine_parts(ebuf, lay[which], e * lay["stride"])
                want = G.dequant(*parts[:5])
                note(t, decode(buf, off + e * per, dims[1], dims[0], t), want)
            continue
        rw = rw_name(name)
        ct = m.core_tensor(rw)
        if ct["type"] == "affine":
            codes, sc, bi, bits, group, _ = m.affine(rw)
            for r in range(0, dims[1], 8192):
                want = G.dequant(codes[r:r + 8192], sc[r:r + 8192], bi[r:r + 8192], bits, group)
                got = decode(buf, off + G.nbytes([dims[0], r], t), want.shape[0], dims[0], t)
                note(t, got, want)
        else:
            want = m.floats(rw).reshape(-1, dims[0])
            note(t, decode(buf, off, want.shape[0], dims[0], t), want)
    names = {G.T_F32: "F32", G.T_BF16: "BF16", G.T_Q4_0: "Q4_0", G.T_Q4_1: "Q4_1",
             G.T_Q8_0: "Q8_0"}
    print(f"{len(tensors)} tensors, {len(kv)} metadata keys; layers {cfg['num_layers']}")
    for t, (diff, wmax, n) in sorted(worst.items()):
        print(f"  {names[t]}: {n} tensors/experts, max |twin - redwing| {diff:.3g} (max |w| {wmax:.3g})")
    if missing or extra:
        print(f"  missing or misshapen: {missing}\n  unexpected: {extra}")
        sys.exit(1)


def rw_name(gguf_name):
    top = {"token_embd.weight": "embed_tokens", "output_norm.weight": "norm"}
    if gguf_name in top:
        return top[gguf_name]
    _, li, rest = gguf_name.split(".", 2)
    per = {"attn_norm.weight": "input_layernorm", "post_attention_norm.weight":
           "post_attention_layernorm", "ffn_norm.weight": "pre_feedforward_layernorm",
           "post_ffw_norm.weight": "post_feedforward_layernorm",
           "post_ffw_norm_1.weight": "post_feedforward_layernorm_1",
           "pre_ffw_norm_2.weight": "pre_feedforward_layernorm_2",
           "post_ffw_norm_2.weight": "post_feedforward_layernorm_2",
           "attn_q_norm.weight": "self_attn.q_norm", "attn_k_norm.weight": "self_attn.k_norm",
           "layer_output_scale.weight": "layer_scalar", "attn_q.weight": "self_attn.q_proj",
           "attn_k.weight": "self_attn.k_proj", "attn_v.weight": "self_attn.v_proj",
           "attn_output.weight": "self_attn.o_proj", "ffn_gate.weight": "mlp.gate_proj",
           "ffn_up.weight": "mlp.up_proj", "ffn_down.weight": "mlp.down_proj",
           "ffn_gate_inp.weight": "router.proj", "ffn_gate_inp.scale": "router.scale",
           "ffn_down_exps.scale": "router.per_expert_scale"}
    return f"layers.{li}.{per[rest]}"


if __name__ == "__main__":
    main()
