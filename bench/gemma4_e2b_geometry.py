#!/usr/bin/env python3
"""Writes a full-size Gemma 4 E2B-geometry GGUF with random weights, for speed
measurements (kvshare bench against llama-bench on the same file). Real Gemma 4
weights are not reachable from here; speed depends only on shapes and types.

Geometry (reference/gemma4_gguf.md §1.4, E2B): 35 layers, width 1536, 8 heads,
1 KV head, head size 256 (sliding) / 512 (full), layers (4 sliding + 1 full) x 7,
window 512, the last 20 layers KV-shared, FFN 6144 (12288 on the shared layers,
double-wide), per-layer embeddings of 256 per layer (a 262144 x 8960 table),
vocab 262144, proportional RoPE (64 of 256 pairs turn), final softcap 30. The
vocabulary is a synthetic SentencePiece-style one (tokenizer.ggml.model "llama":
specials, 256 byte tokens, filler pieces), which both engines load.

The file is written in F16 (about 9 GB; N(0, 0.02) weights, norms around 1) into
the git-ignored models/ folder. With --quantize LLAMA_QUANTIZE (a llama-quantize
binary built locally from the vendored llama.cpp; a reference tool, never a
dependency of kvshare) it is then converted to Q4_K_M, llama.cpp's own type mix
for that preset, and the tensor types of the result are printed.

  python3 bench/gemma4_e2b_geometry.py [--out models/gemma4-e2b-geometry-f16.gguf]
      [--quantize /path/to/llama-quantize] [--seed 0]

Needs numpy and gguf (PyPI; written against gguf 0.19).
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import numpy as np
import gguf

ROOT = Path(__file__).resolve().parents[1]

L, E, HEADS, KV = 35, 1536, 8, 1
HD_SWA, HD_FULL = 256, 512
WINDOW, SHARED, PLE, VOCAB = 512, 20, 256, 262144
FF = [6144 if i < L - SHARED else 12288 for i in range(L)]
SLIDING = [(i % 5) != 4 for i in range(L)]
ROPE_PAIRS_FULL = 64  # partial_rotary_factor 0.25 of 512 dims


def tensors():
    """(name, ggml shape ne0-first, kind) in file order; kind: 'w' matrix, 'n' norm, 'r' rope_freqs, 's' scalar."""
    out = [("token_embd.weight", (E, VOCAB), "w"), ("output_norm.weight", (E,), "n"),
           ("rope_freqs.weight", (HD_FULL // 2,), "r"),
           ("per_layer_token_embd.weight", (PLE * L, VOCAB), "w"),
           ("per_layer_model_proj.weight", (E, PLE * L), "w"), ("per_layer_proj_norm.weight", (PLE,), "n")]
    for i in range(L):
        p, hd = f"blk.{i}.", HD_SWA if SLIDING[i] else HD_FULL
        out += [(p + "attn_norm.weight", (E,), "n"), (p + "attn_q.weight", (E, HEADS * hd), "w"),
                (p + "attn_q_norm.weight", (hd,), "n")]
        if i < L - SHARED:
            out += [(p + "attn_k.weight", (E, KV * hd), "w"), (p + "attn_v.weight", (E, KV * hd), "w"),
                    (p + "attn_k_norm.weight", (hd,), "n")]
        out += [(p + "attn_output.weight", (HEADS * hd, E), "w"), (p + "post_attention_norm.weight", (E,), "n"),
                (p + "ffn_norm.weight", (E,), "n"), (p + "ffn_gate.weight", (E, FF[i]), "w"),
                (p + "ffn_up.weight", (E, FF[i]), "w"), (p + "ffn_down.weight", (FF[i], E), "w"),
                (p + "post_ffw_norm.weight", (E,), "n"), (p + "inp_gate.weight", (E, PLE), "w"),
                (p + "proj.weight", (PLE, E), "w"), (p + "post_norm.weight", (E,), "n"),
                (p + "layer_output_scale.weight", (1,), "s")]
    return out


def vocabulary():
    tokens = ["<pad>", "<eos>", "<bos>", "<unk>"] + [f"<0x{b:02X}>" for b in range(256)]
    types = [gguf.TokenType.CONTROL, gguf.TokenType.CONTROL, gguf.TokenType.CONTROL, gguf.TokenType.UNKNOWN]
    types += [gguf.TokenType.BYTE] * 256
    letters = "abcdefghijklmnopqrstuvwxyz"
    while len(tokens) < VOCAB:  # "▁a", "▁b", ..., then longer pieces: every piece distinct
        n = len(tokens) - 260
        piece = ""
        while True:
            piece = letters[n % 26] + piece
            n //= 26
            if n == 0:
                break
        tokens.append("\u2581" + piece)
        types.append(gguf.TokenType.NORMAL)
    scores = [0.0] * 260 + [-float(i) for i in range(VOCAB - 260)]
    return tokens, scores, types


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=ROOT / "models" / "gemma4-e2b-geometry-f16.gguf")
    ap.add_argument("--quantize", type=Path, help="llama-quantize binary: also write the Q4_K_M file")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(args.seed)
    t0 = time.time()

    w = gguf.GGUFWriter(str(args.out), "gemma4")
    w.add_name("gemma4-e2b-geometry (random weights)")
    a = "gemma4."
    w.add_uint32(a + "block_count", L)
    w.add_uint32(a + "context_length", 131072)
    w.add_uint32(a + "embedding_length", E)
    w.add_array(a + "feed_forward_length", FF)
    w.add_uint32(a + "attention.head_count", HEADS)
    w.add_uint32(a + "attention.head_count_kv", KV)
    for k, v in (("attention.key_length", HD_FULL), ("attention.value_length", HD_FULL),
                 ("attention.key_length_swa", HD_SWA), ("attention.value_length_swa", HD_SWA),
                 ("rope.dimension_count", HD_FULL), ("rope.dimension_count_swa", HD_SWA),
                 ("attention.sliding_window", WINDOW), ("attention.shared_kv_layers", SHARED),
                 ("embedding_length_per_layer_input", PLE)):
        w.add_uint32(a + k, v)
    w.add_float32(a + "rope.freq_base", 1e6)
    w.add_float32(a + "rope.freq_base_swa", 1e4)
    w.add_float32(a + "attention.layer_norm_rms_epsilon", 1e-6)
    w.add_float32(a + "final_logit_softcapping", 30.0)
    w.add_array(a + "attention.sliding_window_pattern", SLIDING)
    tokens, scores, types = vocabulary()
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_bos_token_id(2)
    w.add_eos_token_id(1)
    w.add_unk_token_id(3)
    w.add_pad_token_id(0)
    w.add_add_bos_token(True)
    w.add_add_space_prefix(False)

    specs = tensors()
    for name, shape, kind in specs:
        dtype = np.float16 if kind == "w" else np.float32
        n = int(np.prod(shape))
        w.add_tensor_info(name, tuple(reversed(shape)), np.dtype(dtype), n * np.dtype(dtype).itemsize)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    fout = w.fout[0]
    for name, shape, kind in specs:
        ti = w.tensors[0].pop(name)  # as GGUFWriter.write_tensor_data does, but written in chunks
        w.write_padding(fout, fout.tell())
        n = int(np.prod(shape))
        if kind == "w":
            chunk = 1 << 26
            for lo in range(0, n, chunk):
                m = min(chunk, n - lo)
                (rng.standard_normal(m, dtype=np.float32) * 0.02).astype(np.float16).tofile(fout)
        elif kind == "r":
            np.array([1.0] * ROPE_PAIRS_FULL + [1e30] * (n - ROPE_PAIRS_FULL), dtype=np.float32).tofile(fout)
        else:  # norms and layer scalars around 1
            (1.0 + 0.1 * rng.standard_normal(n, dtype=np.float32)).astype(np.float32).tofile(fout)
        w.write_padding(fout, ti.nbytes)
    w.close()
    print(f"wrote {args.out} ({args.out.stat().st_size / 1e9:.2f} GB) in {time.time() - t0:.0f} s")

    if args.quantize:
        q = args.out.with_name(args.out.name.replace("-f16", "-q4_k_m"))
        t0 = time.time()
        subprocess.run([str(args.quantize), str(args.out), str(q), "Q4_K_M", "2"], check=True,
                       stdout=subprocess.DEVNULL)
        r = gguf.GGUFReader(str(q))
        mix = Counter(t.tensor_type.name for t in r.tensors)
        print(f"wrote {q} ({q.stat().st_size / 1e9:.2f} GB) in {time.time() - t0:.0f} s; tensor types: "
              + ", ".join(f"{k} x{v}" for k, v in mix.most_common()))
        big = {t.name: t.tensor_type.name for t in r.tensors
               if t.name in ("token_embd.weight", "per_layer_token_embd.weight", "per_layer_model_proj.weight")}
        print("  " + ", ".join(f"{k}: {v}" for k, v in big.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
