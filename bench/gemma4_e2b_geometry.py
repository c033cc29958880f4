#!/usr/bin/env python3
"""Writes a full-size Gemma 4 E2B-geometry GGUF with random weights, for speed
measurements (kvshare bench against llama-bench on the same file). Real Gemma 4
weights are not reachable from here; speed depends only on shapes and types.

Geometry (the released E2B config): 35 layers, width 1536, 8 heads,
1 KV head, head size 256 (sliding) / 512 (full), layers (4 sliding + 1 full) x 7,
window 512, the last 20 layers KV-shared, FFN 6144 (12288 on the shared layers,
double-wide), per-layer embeddings of 256 per layer (a 262144 x 8960 table),
vocab 262144, proportional RoPE (64 of 256 pairs turn), final softcap 30. The
vocabulary is random_gguf.py's synthetic one, which both engines load.

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
import sys
import time
from pathlib import Path

import numpy as np
import gguf

from random_gguf import add_vocabulary, quantize_q4_k_m, write_tensors

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
    add_vocabulary(w, VOCAB)
    write_tensors(w, tensors(), rng, rope_pairs=ROPE_PAIRS_FULL)
    print(f"wrote {args.out} ({args.out.stat().st_size / 1e9:.2f} GB) in {time.time() - t0:.0f} s")
    if args.quantize:
        quantize_q4_k_m(args.out, args.quantize,
                        ("token_embd.weight", "per_layer_token_embd.weight", "per_layer_model_proj.weight"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
