#!/usr/bin/env python3
"""Writes random-weight mmproj GGUFs at the real geometry of the Gemma image
encoders, plus a matching one-layer text GGUF for each (llama-mtmd-cli needs a
text model whose n_embd equals the projection width), for the image encode
benchmark (bench/vision_peer.py: kvshare against llama.cpp's llama-mtmd-cli on
the same files). Speed depends only on shapes and types, not on the weights.

Encoders (keys and tensor names as llama.cpp's converter writes them,
conversion/gemma.py; docs/vision.md):
  gemma3   Gemma 3 4B's SigLIP: 896 px, patch 14, 27 layers, d 1152, 16 heads,
           ff 4304, 256 tokens, text width 2560
  gemma4v  Gemma 4 E2B's encoder: 16 layers, d 768, 12 heads of 64, ff 3072,
           patch 16, pool 3, clipped linears (bounds +-100), text width 1536
  gemma4v_scaled  gemma4v with q / k norm weights 64^-1/4, so the attention
           scores spread as a trained model's, and clip.use_gelu (for
           bench/vision_precision.py)
  gemma3nv Gemma 3n's MobileNet-V5-300M: 768 px, stem 64, stages of 128 / 256
           / 640 / 1280 channels with 13 + 19 MQA blocks, fusion 3840 -> 2048,
           text width 2048 (tests/vision_mobilenet_fixture.h RealMnv5_300m)
Types follow an F16 conversion (convert_hf_to_gguf.py --outtype f16): matrices
and conv kernels F16; norms, biases, 1-D and [1, C, 1, 1] tensors F32; F32 also
where the converter forces it (Gemma 3's patch and position embeddings, Gemma
4's position table, Gemma 3n's stem); the input projections F16.

Text models: llama.cpp's gemma3 architecture, one layer, the encoder's text
width, 8 heads of 256 (4 KV heads), FFN 4 x width, a 4096-token synthetic
vocabulary (random_gguf.py) with the image markers as control tokens.

  python3 bench/vision_geometry.py [--out /opt/kvshare-ref/bench] [--only gemma3,gemma4v,gemma3nv] [--seed 0]

Writes OUT/<name>.mmproj.gguf and OUT/<name>.text.gguf (OUT outside the repo:
about 0.9 GB in all). Needs numpy and gguf (PyPI; written against gguf 0.19).
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import gguf

from random_gguf import add_vocabulary, write_tensors

MARKERS = ("<start_of_image>", "<end_of_image>", "<|image>", "<image|>", "<|image|>", "<image_soft_token>")
BOUND = 100.0  # the clipped linears' bounds: wide enough never to bind on these activations


def gemma3():
    d, ff, L, p, side = 1152, 4304, 27, 14, 64
    keys = dict(projector=("clip.projector_type", "gemma3"), image_size=896, patch_size=p, n_embd=d, n_ff=ff,
                n_layer=L, n_head=16, text=2560, mean=0.5, std=0.5, use_gelu=True)
    t = [("mm.input_projection.weight", (2560, d), "w"), ("mm.soft_emb_norm.weight", (d,), "n"),
         ("v.patch_embd.weight", (p, p, 3, d), "c"), ("v.patch_embd.bias", (d,), "c"),
         ("v.position_embd.weight", (d, side * side), "c")]
    for i in range(L):
        b = f"v.blk.{i}."
        t += [(b + "ln1.weight", (d,), "n"), (b + "ln1.bias", (d,), "c"), (b + "ln2.weight", (d,), "n"),
              (b + "ln2.bias", (d,), "c")]
        for m in ("attn_q", "attn_k", "attn_v", "attn_out"):
            t += [(b + m + ".weight", (d, d), "w"), (b + m + ".bias", (d,), "c")]
        t += [(b + "ffn_up.weight", (d, ff), "w"), (b + "ffn_up.bias", (ff,), "c"),
              (b + "ffn_down.weight", (ff, d), "w"), (b + "ffn_down.bias", (d,), "c")]
    t += [("v.post_ln.weight", (d,), "n"), ("v.post_ln.bias", (d,), "c")]
    return keys, t


def gemma4v(qk_norm="n", use_gelu=False):
    d, ff, L, hd = 768, 3072, 16, 64
    keys = dict(projector=("clip.vision.projector_type", "gemma4v"), image_size=224, patch_size=16, n_embd=d,
                n_ff=ff, n_layer=L, n_head=12, text=1536, mean=0.0, std=1.0, use_gelu=use_gelu)

    def clipped(base, shape):
        return [(base + ".weight", shape, "w"), (base + ".input_min", (1,), -BOUND), (base + ".input_max", (1,), BOUND),
                (base + ".output_min", (1,), -BOUND), (base + ".output_max", (1,), BOUND)]

    t = [("v.patch_embd.weight", (16, 16, 3, d), "w"), ("v.position_embd.weight", (d, 10240, 2), "c")]
    for i in range(L):
        b = f"v.blk.{i}."
        t += [(b + n + ".weight", (d,), "n") for n in ("ln1", "attn_post_norm", "ln2", "ffn_post_norm")]
        t += [(b + "attn_q_norm.weight", (hd,), qk_norm), (b + "attn_k_norm.weight", (hd,), qk_norm)]
        for m in ("attn_q", "attn_k", "attn_v", "attn_out"):
            t += clipped(b + m, (d, d))
        t += clipped(b + "ffn_gate", (d, ff)) + clipped(b + "ffn_up", (d, ff)) + clipped(b + "ffn_down", (ff, d))
    t += [("mm.input_projection.weight", (d, 1536), "w")]
    return keys, t


def mnv5_blocks():
    """RealMnv5_300m's stages: (kind, out, mid, k_start, k_mid, heads, head_dim, kv_down)."""
    st = [[("er", 128, 256), ("er", 128, 512), ("er", 128, 512)],
          [("uir", 256, 768, 3, 5)] + [("uir", 256, 1024, k, 0) for k in (5, 3, 5, 3)],
          [("uir", 640, 1536, 5, 5)] + [("uir", 640, 2560, 5, 0)] * 7 + [("uir", 640, 640, 0, 0)]
          + [("mqa", 640, 12, 64, True), ("uir", 640, 1280, 0, 0)] * 13,
          [("uir", 1280, 3840, 5, 5)] + [("mqa", 1280, 16, 96, False), ("uir", 1280, 2560, 0, 0)] * 19]
    return st


def gemma3nv():
    stem, mid_fuse, n_embd, text = 64, 3840, 2048, 2048
    keys = dict(projector=("clip.vision.projector_type", "gemma3nv"), image_size=768, patch_size=3, n_embd=n_embd,
                n_ff=8192, n_layer=128, n_head=8, text=text, mean=0.0, std=1.0, use_gelu=False)
    t = [("v.conv_stem.conv.weight", (3, 3, 3, stem), "c"), ("v.conv_stem.conv.bias", (1, 1, stem, 1), "c"),
         ("v.conv_stem.bn.weight", (stem,), "n")]
    ch, ends = stem, []

    def conv(name, k, cin, cout):
        return (name, (k, k, cin, cout), "w")

    for s, blocks in enumerate(mnv5_blocks()):
        for i, blk in enumerate(blocks):
            b = f"v.blk.{s}.{i}."
            if blk[0] == "er":
                _, out, mid = blk
                t += [conv(b + "conv_exp.weight", 3, ch, mid), (b + "bn1.weight", (mid,), "n"),
                      conv(b + "conv_pwl.weight", 1, mid, out), (b + "bn2.weight", (out,), "n")]
            elif blk[0] == "uir":
                _, out, mid, ks, km = blk
                if ks:
                    t += [conv(b + "dw_start.conv.weight", ks, 1, ch), (b + "dw_start.bn.weight", (ch,), "n")]
                t += [conv(b + "pw_exp.conv.weight", 1, ch, mid), (b + "pw_exp.bn.weight", (mid,), "n")]
                if km:
                    t += [conv(b + "dw_mid.conv.weight", km, 1, mid), (b + "dw_mid.bn.weight", (mid,), "n")]
                t += [conv(b + "pw_proj.conv.weight", 1, mid, out), (b + "pw_proj.bn.weight", (out,), "n"),
                      (b + "layer_scale.gamma", (1, 1, out, 1), "c")]
            else:
                _, out, heads, hd, down = blk
                t += [(b + "norm.weight", (ch,), "n"), conv(b + "attn.query.proj.weight", 1, ch, heads * hd)]
                for kv in ("key", "value"):
                    a = b + "attn." + kv + "."
                    if down:
                        t += [conv(a + "down_conv.weight", 3, 1, ch), (a + "norm.weight", (ch,), "n")]
                    t += [conv(a + "proj.weight", 1, ch, hd)]
                t += [conv(b + "attn.output.proj.weight", 1, heads * hd, out),
                      (b + "layer_scale.gamma", (1, 1, out, 1), "c")]
            ch = out
        ends.append(ch)
    t += [conv("v.msfa.ffn.pw_exp.conv.weight", 1, ends[-2] + ends[-1], mid_fuse),
          ("v.msfa.ffn.pw_exp.bn.weight", (mid_fuse,), "n"),
          conv("v.msfa.ffn.pw_proj.conv.weight", 1, mid_fuse, n_embd), ("v.msfa.ffn.pw_proj.bn.weight", (n_embd,), "n"),
          ("v.msfa.norm.weight", (n_embd,), "n"), ("mm.embedding.weight", (n_embd, 128), "w"),
          ("mm.hard_emb_norm.weight", (n_embd,), "n"), ("mm.soft_emb_norm.weight", (n_embd,), "n"),
          ("mm.input_projection.weight", (n_embd, text), "w")]
    return keys, t


def gemma4v_scaled():
    """gemma4v with every q / k norm weight hd^-1/4: at attention scale 1.0 the
    scores then spread as a 1/sqrt(hd)-scaled model's do (about unit variance),
    where the random ~1.0 norms of gemma4v give scores of spread sqrt(hd) = 8, an
    argmax over the keys that no trained model has (docs/vision.md "Precision").
    With clip.use_gelu, so that llama.cpp runs GELU as HF and kvshare do (it
    falls back to gelu_quick without the key; kvshare ignores it): only the
    rounding is left to compare."""
    return gemma4v(qk_norm=64 ** -0.25, use_gelu=True)


ENCODERS = {"gemma3": gemma3, "gemma4v": gemma4v, "gemma3nv": gemma3nv, "gemma4v_scaled": gemma4v_scaled}


def write_mmproj(path: Path, name: str, rng: np.random.Generator) -> int:
    k, specs = ENCODERS[name]()
    w = gguf.GGUFWriter(str(path), "clip")
    w.add_name(f"{name}-geometry (random weights)")
    w.add_string("general.type", "mmproj")
    w.add_bool("clip.has_vision_encoder", True)
    w.add_bool("clip.has_audio_encoder", False)
    w.add_string(*k["projector"])
    v = "clip.vision."
    w.add_uint32(v + "image_size", k["image_size"])
    w.add_uint32(v + "patch_size", k["patch_size"])
    w.add_uint32(v + "embedding_length", k["n_embd"])
    w.add_uint32(v + "feed_forward_length", k["n_ff"])
    w.add_uint32(v + "block_count", k["n_layer"])
    w.add_uint32(v + "attention.head_count", k["n_head"])
    w.add_float32(v + "attention.layer_norm_epsilon", 1e-6)
    w.add_uint32(v + "projection_dim", k["text"])
    w.add_array(v + "image_mean", [k["mean"]] * 3)
    w.add_array(v + "image_std", [k["std"]] * 3)
    if k["use_gelu"]:
        w.add_bool("clip.use_gelu", True)
    write_tensors(w, specs, rng)
    return k["text"]


def write_text(path: Path, n_embd: int, rng: np.random.Generator, markers: tuple[str, ...] = MARKERS) -> None:
    """markers: control tokens at the vocabulary's end (bench/audio_ttft.py adds the audio ones)."""
    heads, kv, hd, ff, vocab = 8, 4, 256, 4 * n_embd, 4096
    w = gguf.GGUFWriter(str(path), "gemma3")
    w.add_name(f"gemma3-text-{n_embd} (one layer, random weights)")
    a = "gemma3."
    for key, val in (("context_length", 8192), ("embedding_length", n_embd), ("block_count", 1),
                     ("feed_forward_length", ff), ("attention.head_count", heads), ("attention.head_count_kv", kv),
                     ("attention.key_length", hd), ("attention.value_length", hd)):
        w.add_uint32(a + key, val)
    w.add_float32(a + "attention.layer_norm_rms_epsilon", 1e-6)
    w.add_float32(a + "rope.freq_base", 1e6)
    add_vocabulary(w, vocab, markers)
    b = "blk.0."
    specs = [("token_embd.weight", (n_embd, vocab), "w"), ("output_norm.weight", (n_embd,), "n"),
             (b + "attn_norm.weight", (n_embd,), "n"), (b + "attn_q.weight", (n_embd, heads * hd), "w"),
             (b + "attn_k.weight", (n_embd, kv * hd), "w"), (b + "attn_v.weight", (n_embd, kv * hd), "w"),
             (b + "attn_output.weight", (heads * hd, n_embd), "w"), (b + "attn_q_norm.weight", (hd,), "n"),
             (b + "attn_k_norm.weight", (hd,), "n"), (b + "post_attention_norm.weight", (n_embd,), "n"),
             (b + "ffn_norm.weight", (n_embd,), "n"), (b + "ffn_gate.weight", (n_embd, ff), "w"),
             (b + "ffn_up.weight", (n_embd, ff), "w"), (b + "ffn_down.weight", (ff, n_embd), "w"),
             (b + "post_ffw_norm.weight", (n_embd,), "n")]
    write_tensors(w, specs, rng)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=Path("/opt/kvshare-ref/bench"))
    ap.add_argument("--only", default=",".join(ENCODERS))
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(args.seed)
    for name in args.only.split(","):
        t0 = time.time()
        mm = args.out / f"{name}.mmproj.gguf"
        text = write_mmproj(mm, name, rng)
        tx = args.out / f"{name}.text.gguf"
        write_text(tx, text, rng)
        print(f"wrote {mm} ({mm.stat().st_size / 1e6:.0f} MB) and {tx} ({tx.stat().st_size / 1e6:.0f} MB) "
              f"in {time.time() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
