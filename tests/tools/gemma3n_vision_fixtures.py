#!/usr/bin/env python3
"""Writes the Gemma 3n vision peer fixture: a tiny MobileNet-V5 tower built
from timm's own blocks (MobileNetV5Encoder with a small architecture
definition, its fusion adapter swapped for a narrower timm one) plus HF
transformers' Gemma3nMultimodalEmbedder, random weights, and what they give
for a random pixel tensor.

llama.cpp's converter (conversion/gemma.py, Gemma3nVisionAudioModel) cannot
write a Gemma 3n mmproj in the llama-cpp-python 0.3.36 sdist (it stops on the
audio tower's SSCP norms), so this script writes the mmproj itself with the
gguf package (gguf-py), using that converter's key and tensor names and
layouts: v.conv_stem.*, v.blk.{stage}.{i}.* (its block_tensor_mapping),
v.msfa.*, mm.*; conv kernels as torch stores them (ggml ne reversed), the
stem bias and layer_scale.gamma unsqueezed to [1, C, 1, 1], F32 throughout.

The features follow HF Gemma3nModel.get_image_features: the tower's
[1, C, g, g] output reshaped to [1, C, g*g], permuted to tokens, multiplied
by sqrt(C), then the embedder's soft path.

Run in the reference environment (torch, timm, transformers 5.23, gguf):
  /opt/kvshare-ref/venv/bin/python tests/tools/gemma3n_vision_fixtures.py
Writes tests/fixtures/vision/gemma3n_tiny_mmproj.gguf and
gemma3n_tiny_features.gguf (tensors "pixels" [3, S, S] and "features"
[tokens, text]); tests/vision_mobilenet_peer_test.cc reads them.
"""
import math
import os
import sys

import numpy as np
import torch
import gguf
from timm.models._efficientnet_builder import decode_arch_def
from timm.models.mobilenetv5 import MobileNetV5Encoder, MobileNetV5MultiScaleFusionAdapter
from transformers.models.gemma3n.configuration_gemma3n import Gemma3nTextConfig, Gemma3nVisionConfig
from transformers.models.gemma3n.modeling_gemma3n import Gemma3nMultimodalEmbedder

IMAGE = 128
GRID = 4  # fusion output side: 16 tokens
N_EMBD = 32  # fusion output channels (the real tower: 2048)
N_TEXT = 24
# Every block kind (timm arch strings: er = edge residual, uir a<start>
# k<mid> = universal inverted residual, mqa v2 = K/V stride 2).
ARCH = [
    ["er_r1_k3_s2_e2_c16", "er_r1_k3_s1_e2_c16"],
    ["uir_r1_a3_k5_s2_e2_c24", "uir_r1_a3_k0_s1_e2_c24"],
    ["uir_r1_a5_k0_s2_e2_c32", "uir_r1_a0_k3_s1_e2_c32", "uir_r1_a0_k0_s1_e1_c32",
     "mqa_r1_k3_h2_v2_s1_d8_c32", "uir_r1_a0_k0_s1_e2_c32"],
    ["uir_r1_a3_k3_s2_e2_c40", "mqa_r1_k3_h3_s1_d8_c40", "uir_r1_a0_k0_s1_e2_c40"],
]


def build(seed):
    torch.manual_seed(seed)
    tower = MobileNetV5Encoder(decode_arch_def(ARCH), stem_size=8, fix_stem=True, pad_type="same",
                               msfa_output_resolution=GRID, layer_scale_init_value=1e-5)
    tower.msfa = MobileNetV5MultiScaleFusionAdapter(in_chs=tower.msfa_in_chs, out_chs=N_EMBD,
                                                    output_resolution=GRID)
    vcfg = Gemma3nVisionConfig(hidden_size=N_EMBD, vocab_size=8, rms_norm_eps=1e-6)
    tcfg = Gemma3nTextConfig(hidden_size=N_TEXT)
    embedder = Gemma3nMultimodalEmbedder(vcfg, tcfg)
    # Weights that make every step visible: norms and scales near 1 and 0.5
    # (timm initializes layer scales at 1e-5), kernels of unit gain.
    with torch.no_grad():
        for name, p in list(tower.named_parameters()) + list(embedder.named_parameters()):
            if name.endswith("gamma"):
                p.copy_(0.5 + 0.3 * torch.randn_like(p))
            elif p.dim() == 1 and "bias" not in name:
                p.copy_(1.0 + 0.2 * torch.randn_like(p))
            elif p.dim() == 1:
                p.copy_(0.2 * torch.randn_like(p))
            else:
                p.copy_(torch.randn_like(p) / math.sqrt(p[0].numel()))
    return tower.eval(), embedder.eval()


def features(tower, embedder, pixels):
    with torch.no_grad():
        x = tower(pixels)  # [1, C, g, g]
        x = x.reshape(x.shape[0], N_EMBD, GRID * GRID).permute(0, 2, 1)
        x = x * N_EMBD ** 0.5
        return embedder(inputs_embeds=x)[0]


def gguf_name(name):
    if name.startswith("blocks."):
        return "v.blk." + name[len("blocks."):]
    if name.startswith(("conv_stem.", "msfa.")):
        return "v." + name
    return {"embedding.weight": "mm.embedding.weight",
            "hard_embedding_norm.weight": "mm.hard_emb_norm.weight",
            "soft_embedding_norm.weight": "mm.soft_emb_norm.weight",
            "embedding_projection.weight": "mm.input_projection.weight"}[name]


def write_mmproj(path, tower, embedder, n_text=N_TEXT):
    w = gguf.GGUFWriter(path, arch="clip")
    w.add_string("general.type", "mmproj")
    w.add_bool("clip.has_vision_encoder", True)
    w.add_bool("clip.has_audio_encoder", False)
    w.add_string("clip.vision.projector_type", "gemma3nv")
    w.add_uint32("clip.vision.image_size", IMAGE)
    w.add_uint32("clip.vision.patch_size", IMAGE // (GRID * GRID))
    w.add_uint32("clip.vision.embedding_length", N_EMBD)
    w.add_uint32("clip.vision.feed_forward_length", 4 * N_EMBD)
    w.add_uint32("clip.vision.block_count", 128)
    w.add_uint32("clip.vision.attention.head_count", 8)
    w.add_float32("clip.vision.attention.layer_norm_epsilon", 1e-6)
    w.add_uint32("clip.vision.projection_dim", n_text)
    w.add_array("clip.vision.image_mean", [0.0, 0.0, 0.0])
    w.add_array("clip.vision.image_std", [1.0, 1.0, 1.0])
    tensors = list(tower.state_dict().items()) + list(embedder.state_dict().items())
    for name, t in tensors:
        g = gguf_name(name)
        if g.endswith("conv_stem.conv.bias") or g.endswith("layer_scale.gamma"):
            t = t.reshape(1, -1, 1, 1)
        w.add_tensor(g, t.detach().numpy().astype(np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def main():
    out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fixtures", "vision")
    os.makedirs(out, exist_ok=True)
    tower, embedder = build(seed=0)
    gen = torch.Generator().manual_seed(1)
    pixels = torch.rand(1, 3, IMAGE, IMAGE, generator=gen)
    f32 = features(tower, embedder, pixels)
    f64 = features(tower.double(), embedder.double(), pixels.double())
    rel = ((f32.double() - f64).abs().max() / f64.abs().max()).item()
    print(f"HF float32 vs float64: max relative error {rel:.3g}")
    tower.float()
    embedder.float()
    write_mmproj(os.path.join(out, "gemma3n_tiny_mmproj.gguf"), tower, embedder)
    w = gguf.GGUFWriter(os.path.join(out, "gemma3n_tiny_features.gguf"), arch="kvshare-fixture")
    w.add_string("general.description", "HF Gemma 3n vision features of a tiny timm MobileNet-V5 tower "
                 "(tests/tools/gemma3n_vision_fixtures.py)")
    w.add_tensor("pixels", pixels[0].numpy().astype(np.float32))
    w.add_tensor("features", f32.numpy().astype(np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print(f"wrote {out}: {len(list(tower.state_dict()))} tower tensors, features {tuple(f32.shape)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
