#!/usr/bin/env python3
"""Writes a full-size Gemma 3n E2B-geometry GGUF with random weights, for speed
measurements (kvshare bench against llama-bench on the same file). Real Gemma 3n
weights are not reachable from here; speed depends only on shapes and types.

Geometry (the released E2B text config, as llama.cpp's converter writes it):
30 layers, width 2048, 8 heads, 2 KV heads, head size 256, layers
(4 sliding + 1 full) x 6, window 512, the last 10 layers KV-shared, FFN 8192,
AltUp with 4 streams, Laurel rank 64, per-layer embeddings of 256 per layer,
activation sparsity 0.95 (scale 1.6449) on layers 0-9, vocab 262400 (the
converter pads both embedding tables to it), final softcap 30. These are also
the values llama.cpp hardcodes for gemma3n (docs/gemma3n.md), so unpatched
llama.cpp computes this file as kvshare does. The vocabulary is random_gguf.py's
synthetic one, which both engines load.

The file is written in F16 (about 11 GB) into the git-ignored models/ folder.
With --quantize LLAMA_QUANTIZE (a llama-quantize binary built locally from the
vendored llama.cpp; a reference tool, never a dependency of kvshare) it is then
converted to Q4_K_M and the tensor types of the result are printed.

  python3 bench/gemma3n_e2b_geometry.py [--out models/gemma3n-e2b-geometry-f16.gguf]
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

L, E, HEADS, KV, HD = 30, 2048, 8, 2, 256
WINDOW, SHARED, PLE, VOCAB, FF = 512, 10, 256, 262400, 8192
ALTUP, LAUREL = 4, 64
SLIDING = [(i + 1) % 5 != 0 for i in range(L)]
SPARSITY_SCALE = [1.6448535919189453 if i < 10 else float("-inf") for i in range(L)]  # Phi^-1(0.95), Phi^-1(0)


def tensors():
    """(name, ggml shape ne0-first, kind) in the converter's order; kinds as in random_gguf.py."""
    out = [("altup_proj.weight", (E, E, ALTUP - 1), "w"), ("altup_unembd_proj.weight", (E, E, ALTUP - 1), "w"),
           ("token_embd.weight", (E, VOCAB), "w"), ("per_layer_token_embd.weight", (PLE * L, VOCAB), "w")]
    for i in range(L):
        p = f"blk.{i}."
        out += [(p + "altup_correct_scale.weight", (E,), "n"), (p + "altup_correct_coef.weight", (ALTUP, ALTUP), "c"),
                (p + "altup_router.weight", (E, ALTUP), "w"),
                (p + "altup_predict_coef.weight", (ALTUP, ALTUP * ALTUP), "c"),
                (p + "altup_router_norm.weight", (E,), "n"), (p + "attn_norm.weight", (E,), "n"),
                (p + "laurel_l.weight", (E, LAUREL), "w"), (p + "laurel_r.weight", (LAUREL, E), "w"),
                (p + "laurel_post_norm.weight", (E,), "n"),
                (p + "ffn_down.weight", (FF, E), "w"), (p + "ffn_gate.weight", (E, FF), "w"),
                (p + "ffn_up.weight", (E, FF), "w"), (p + "inp_gate.weight", (E, PLE), "w"),
                (p + "proj.weight", (PLE, E), "w"), (p + "post_attention_norm.weight", (E,), "n"),
                (p + "post_ffw_norm.weight", (E,), "n"), (p + "post_norm.weight", (E,), "n"),
                (p + "ffn_norm.weight", (E,), "n"), (p + "attn_k_norm.weight", (HD,), "n"),
                # llama.cpp requires K/V weights on the shared layers too (released files carry them).
                (p + "attn_k.weight", (E, KV * HD), "w"), (p + "attn_output.weight", (HEADS * HD, E), "w"),
                (p + "attn_q_norm.weight", (HD,), "n"), (p + "attn_q.weight", (E, HEADS * HD), "w"),
                (p + "attn_v.weight", (E, KV * HD), "w")]
    out += [("output_norm.weight", (E,), "n"), ("per_layer_model_proj.weight", (E, PLE * L), "w"),
            ("per_layer_proj_norm.weight", (PLE,), "n")]
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=ROOT / "models" / "gemma3n-e2b-geometry-f16.gguf")
    ap.add_argument("--quantize", type=Path, help="llama-quantize binary: also write the Q4_K_M file")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(args.seed)
    t0 = time.time()

    w = gguf.GGUFWriter(str(args.out), "gemma3n")
    w.add_name("gemma3n-e2b-geometry (random weights)")
    a = "gemma3n."
    w.add_uint32(a + "block_count", L)
    w.add_uint32(a + "context_length", 32768)
    w.add_uint32(a + "embedding_length", E)
    w.add_array(a + "feed_forward_length", [FF] * L)
    w.add_uint32(a + "attention.head_count", HEADS)
    w.add_uint32(a + "attention.head_count_kv", KV)
    w.add_float32(a + "rope.freq_base", 1e6)
    w.add_float32(a + "rope.freq_base_swa", 1e4)
    w.add_float32(a + "attention.layer_norm_rms_epsilon", 1e-6)
    for k, v in (("attention.key_length", HD), ("attention.value_length", HD), ("attention.sliding_window", WINDOW),
                 ("altup.active_idx", 0), ("altup.num_inputs", ALTUP), ("embedding_length_per_layer_input", PLE),
                 ("attention.shared_kv_layers", SHARED)):
        w.add_uint32(a + k, v)
    w.add_float32(a + "final_logit_softcapping", 30.0)
    w.add_array(a + "activation_sparsity_scale", SPARSITY_SCALE)
    w.add_array(a + "attention.sliding_window_pattern", SLIDING)
    add_vocabulary(w, VOCAB)
    write_tensors(w, tensors(), rng)
    print(f"wrote {args.out} ({args.out.stat().st_size / 1e9:.2f} GB) in {time.time() - t0:.0f} s")
    if args.quantize:
        quantize_q4_k_m(args.out, args.quantize,
                        ("token_embd.weight", "per_layer_token_embd.weight", "per_layer_model_proj.weight",
                         "altup_proj.weight", "blk.0.laurel_l.weight", "blk.0.ffn_down.weight"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
