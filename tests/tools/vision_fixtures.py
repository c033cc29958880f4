"""Writes tests/fixtures/vision/: tiny random-weight multimodal Gemma models (HF transformers,
converted by llama.cpp's convert_hf_to_gguf.py into a text GGUF plus an mmproj GGUF), HF's
outputs on them (vision features, whole-prompt logits, greedy steps), and HF's image
preprocessing on real photos. Run by hand, never in CI; only its outputs (small GGUFs, JSON,
raw little-endian binaries, PNGs: plain data) are kept in the tree. The file formats are
documented in tests/fixtures/vision/README.md.

Set-up in a reference folder REF outside the repo ($KVSHARE_REF_DIR, default /opt/kvshare-ref;
about 6 GB, most of it the CUDA wheels that PyPI's Linux torch pulls in; only the CPU is used):

  python3 -m venv $REF/venv
  $REF/venv/bin/pip install numpy torch transformers==5.23.0 tokenizers safetensors \
      sentencepiece timm torchvision Pillow scikit-image gguf pyyaml tqdm requests jinja2 protobuf
  pip download --no-deps --no-binary :all: llama-cpp-python==0.3.36 -d $REF
  tar xzf $REF/llama_cpp_python-0.3.36.tar.gz -C $REF
  $REF/venv/bin/python tests/tools/vision_fixtures.py \
      [--llama-cpp $REF/llama_cpp_python-0.3.36/vendor/llama.cpp] [--work $REF/vision_work] \
      [--stages tok,models,hf,pre,check] [--models gemma3,gemma4,gemma4_large,gemma4_unified]

Versions used for the committed fixtures: Python 3.11.7, torch 2.15.0 (+cu132 wheel, run on
CPU, 2 threads), torchvision 0.29.2, transformers 5.23.0, tokenizers 0.23.3, safetensors 0.8.0,
sentencepiece 0.2.3, numpy 2.4.6, Pillow 13.0.0, scikit-image 0.26.0 (the photos),
llama.cpp ggml-org/llama.cpp@0c1e57098 as vendored in llama-cpp-python 0.3.36 (its
convert_hf_to_gguf.py and gguf-py), PyPI gguf 0.19.0 for the checks.

Stages (all by default, in this order):
  tok     a SentencePiece tokenizer for Gemma 3 (tokenizer.model; the Gemma 3 converter takes
          it) and a BPE tokenizer.json for Gemma 4 (tests/tools/gemma4_fixtures.py's, with the
          image and audio markers added), both 512 tokens, both with the families' marker
          strings as special tokens; written to WORK/tok_gemma3 and WORK/tok_gemma4.
  models  each model in MODELS built from its config (fp32, eager, seeded), every tensor that
          starts constant (norm weights at 1 or 0, biases at 0, clamp bounds at +-inf, Gemma 4's
          std_bias / std_scale) randomized, save_pretrained() into WORK/<name> with its
          tokenizer and a preprocessor_config.json (Gemma 3: the projection rounded to fp16
          values, since the converter stores it F16; Gemma 3: the tower's tensors renamed as in
          the released checkpoints), then converted twice with the vendored
          convert_hf_to_gguf.py --outtype f32: the text model to <name>.f32.gguf and, with
          --mmproj, the vision part to <name>.mmproj.f32.gguf.
  hf      <name>.hf.json plus binaries: the encoder on two seeded pixel tensors, and the whole
          pipeline on a one-image and a two-image prompt (prefill logits and 16 greedy steps),
          each computed twice (model reloaded) and required to be bit-identical.
  pre     preprocess.json plus PNGs: HF's image processors on scikit-image's photos.
  check   reads every GGUF back with PyPI gguf's GGUFReader; prints keys, tensor types and
          sha256, and writes gguf_summary.json (what the converter wrote, used by the pytest).
"""
import argparse
import hashlib
import json
import os
import platform
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(Path(__file__).resolve().parent))
import gemma3n_fixtures  # noqa: E402  (SentencePiece settings and corpus text)
import gemma4_fixtures  # noqa: E402  (BPE tokenizer, JSON layout)
from gemma4_fixtures import dump_lines  # noqa: E402

OUT = ROOT / "tests" / "fixtures" / "vision"
REF = Path(os.environ.get("KVSHARE_REF_DIR", "/opt/kvshare-ref"))
DEFAULT_LLAMA_CPP = REF / "llama_cpp_python-0.3.36/vendor/llama.cpp"
DEFAULT_WORK = REF / "vision_work"

STEPS = 16
VOCAB = 512
THREADS = 2
S, F = "sliding_attention", "full_attention"

# ----------------------------------------------------------------------------------------------
# Tokenizers
# ----------------------------------------------------------------------------------------------
GEMMA3_USER_DEFINED = ["<mask>", "<start_of_turn>", "<end_of_turn>", "<start_of_image>", "<end_of_image>",
                       "<image_soft_token>", "\n", "\t"]  # ids 4..11
GEMMA3_N_SPECIAL = 10  # ids 0..9 special (the converter makes them CONTROL); "\n" "\t" stay normal
GEMMA4_MARKERS = ["<|image>", "<image|>", "<|audio>", "<audio|>"]


def build_gemma3_tokenizer(out_dir: Path):
    import sentencepiece as spm

    args = dict(gemma3n_fixtures.SPM_ARGS, user_defined_symbols=GEMMA3_USER_DEFINED)
    text = gemma4_fixtures.CORPUS + "\n" + gemma3n_fixtures.TEXT.read_text()
    lines = [line for line in text.split("\n") if line.strip()]
    protos = []
    for _ in range(2):
        buf = __import__("io").BytesIO()
        spm.SentencePieceTrainer.train(sentence_iterator=iter(lines), model_writer=buf, **args)
        protos.append(buf.getvalue())
    assert protos[0] == protos[1], "SentencePiece training is not deterministic"
    sp = spm.SentencePieceProcessor(model_proto=protos[0])
    assert sp.get_piece_size() == VOCAB
    assert [sp.id_to_piece(4 + i) for i in range(6)] == GEMMA3_USER_DEFINED[:6]
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "tokenizer.model").write_bytes(protos[0])
    decoder = {str(i): {"content": sp.id_to_piece(i), "lstrip": False, "normalized": False, "rstrip": False,
                        "single_word": False, "special": True} for i in range(GEMMA3_N_SPECIAL)}
    cfg = {"tokenizer_class": "GemmaTokenizer", "added_tokens_decoder": decoder,
           "bos_token": "<bos>", "eos_token": "<eos>", "unk_token": "<unk>", "pad_token": "<pad>",
           "boi_token": "<start_of_image>", "eoi_token": "<end_of_image>", "image_token": "<image_soft_token>",
           "add_bos_token": True, "add_eos_token": False, "model_max_length": 512, "padding_side": "left"}
    (out_dir / "tokenizer_config.json").write_text(json.dumps(cfg, indent=2) + "\n")
    print(f"gemma3 tokenizer.model: {len(protos[0])} bytes, sha256 {hashlib.sha256(protos[0]).hexdigest()[:16]}")


def build_gemma4_tokenizer(out_dir: Path, llama_cpp: Path):
    """gemma4_fixtures' tokenizer with the image / audio begin and end markers added as specials
    (its module globals are swapped for the call and restored)."""
    g = gemma4_fixtures
    saved = (g.GEMMA4_SPECIALS, g.ALL_SPECIALS, g.BYTE_BASE)
    try:
        g.GEMMA4_SPECIALS = saved[0] + GEMMA4_MARKERS
        g.ALL_SPECIALS = g.SPECIALS + g.GEMMA4_SPECIALS
        g.BYTE_BASE = len(g.ALL_SPECIALS)
        g.build_tokenizer(out_dir, llama_cpp)
    finally:
        g.GEMMA4_SPECIALS, g.ALL_SPECIALS, g.BYTE_BASE = saved


def token_ids(tok_dir: Path, strings):
    if (tok_dir / "tokenizer.model").is_file():
        import sentencepiece as spm

        sp = spm.SentencePieceProcessor(model_file=str(tok_dir / "tokenizer.model"))
        ids = {s: sp.piece_to_id(s) for s in strings}
    else:
        vocab = json.loads((tok_dir / "tokenizer.json").read_text())["model"]["vocab"]
        ids = {s: vocab[s] for s in strings}
    assert all(i > 3 for i in ids.values()), ids
    return ids


# ----------------------------------------------------------------------------------------------
# Models
# ----------------------------------------------------------------------------------------------
G3_MARKERS = ["<start_of_image>", "<end_of_image>", "<image_soft_token>"]
G4_MARKERS = ["<|image>", "<|image|>", "<image|>", "<|audio>", "<|audio|>", "<audio|>", "<|video|>"]

# Per model: the family, seed (chosen among a few so that the 16 greedy steps change token at
# least once in both prompts, top-2 margins > 1e-3: random models tend to repeat one token), pixel
# geometry of the encoder fixture ((height, width) per tensor),
# and the prompts' text. Layouts: every prompt is longer than the sliding window, and an image's
# soft tokens outnumber the window where the family attends bidirectionally inside images (so the
# window AND same-image rule is exercised).
MODELS = {
    "gemma3": dict(family="gemma3", seed=31, sizes=[(112, 112), (112, 112)]),
    "gemma4": dict(family="gemma4", seed=44, sizes=[(96, 144), (144, 144)]),
    "gemma4_large": dict(family="gemma4", seed=50, sizes=[(96, 144), (144, 144)]),
    "gemma4_unified": dict(family="gemma4", seed=48, sizes=[(96, 144), (144, 144)]),
}
PROMPTS = {  # name -> (text around the images, number of images)
    "one_image": ("Describe the picture in one line.", 1),
    "two_images": ("What differs between these two pictures?", 2),
}


GEMMA3_FF = 32  # MLP width of the gemma3 text model (6 layers must fit the folder's size budget)


def model_config(name, tok_ids):
    """The HF config of `name` (a composite *Config)."""
    if name == "gemma3":
        from transformers import Gemma3Config, Gemma3TextConfig, SiglipVisionConfig

        # 6 layers, the 6th full: a Gemma 3 GGUF carries no layer pattern (the converter writes
        # none; llama.cpp and kvshare make every 6th layer full), so the HF config must follow it.
        text = Gemma3TextConfig(
            vocab_size=VOCAB, hidden_size=64, intermediate_size=GEMMA3_FF, num_hidden_layers=6,
            layer_types=[S, S, S, S, S, F], num_attention_heads=2, num_key_value_heads=1, head_dim=32,
            query_pre_attn_scalar=32, sliding_window=12, max_position_embeddings=512, rms_norm_eps=1e-6,
            # no final softcap: HF 5.23's Gemma3ForConditionalGeneration never applies it (only
            # Gemma3ForCausalLM does), while the converter writes it and llama.cpp applies it; the
            # released Gemma 3 configs have none
            final_logit_softcapping=None, initializer_range=0.15, pad_token_id=0, eos_token_id=1, bos_token_id=2,
            rope_parameters={S: {"rope_type": "default", "rope_theta": 10000.0},
                             F: {"rope_type": "default", "rope_theta": 1000000.0}})
        # 112 px / 14 = 8x8 patches, 16 tokens: pooling 2 (not the real 4, so the converter writes
        # clip.vision.projector.scale_factor)
        vision = SiglipVisionConfig(image_size=112, patch_size=14, hidden_size=48, intermediate_size=96,
                                    num_hidden_layers=2, num_attention_heads=2, layer_norm_eps=1e-6,
                                    vision_use_head=False, hidden_act="gelu_pytorch_tanh")
        return Gemma3Config(text_config=text, vision_config=vision, mm_tokens_per_image=16,
                            boi_token_index=tok_ids["<start_of_image>"], eoi_token_index=tok_ids["<end_of_image>"],
                            image_token_index=tok_ids["<image_soft_token>"], initializer_range=0.15)
    ids = dict(boi_token_id=tok_ids["<|image>"], eoi_token_id=tok_ids["<image|>"],
               image_token_id=tok_ids["<|image|>"], video_token_id=tok_ids["<|video|>"],
               boa_token_id=tok_ids["<|audio>"], eoa_token_index=tok_ids["<audio|>"],
               audio_token_id=tok_ids["<|audio|>"])
    text_common = dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=64, max_position_embeddings=512,
                       rms_norm_eps=1e-6, final_logit_softcapping=30.0, pad_token_id=0, eos_token_id=1,
                       bos_token_id=2, hidden_activation="gelu_pytorch_tanh", head_dim=32, global_head_dim=64,
                       initializer_range=0.2)
    if name == "gemma4_unified":
        from transformers import (Gemma4UnifiedAudioConfig, Gemma4UnifiedConfig, Gemma4UnifiedTextConfig,
                                  Gemma4UnifiedVisionConfig)

        text = Gemma4UnifiedTextConfig(**text_common, num_hidden_layers=4, layer_types=[S, S, F, F],
                                       num_attention_heads=2, num_key_value_heads=1, sliding_window=8,
                                       use_bidirectional_attention="vision")
        # one token per 48 px patch; the position table only as long as the fixtures need
        vision = Gemma4UnifiedVisionConfig(patch_size=16, pooling_kernel_size=3, mm_embed_dim=16,
                                           mm_posemb_size=24, output_proj_dims=16, initializer_range=0.2)
        # the converter requires an audio part; 64 samples per token (not 640) keeps the file small
        audio = Gemma4UnifiedAudioConfig(audio_embed_dim=64)
        return Gemma4UnifiedConfig(text_config=text, vision_config=vision, audio_config=audio,
                                   initializer_range=0.2, **ids)
    from transformers import Gemma4Config, Gemma4TextConfig, Gemma4VisionConfig

    vision_common = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
                         num_key_value_heads=2, head_dim=16, patch_size=16, pooling_kernel_size=3,
                         position_embedding_size=24, rms_norm_eps=1e-6, initializer_range=0.2)
    if name == "gemma4":  # E2B-like: per-layer embeddings, KV sharing, clipped linears, causal images
        text = Gemma4TextConfig(**text_common, num_hidden_layers=5, layer_types=[S, S, F, S, F],
                                num_attention_heads=2, num_key_value_heads=1, num_kv_shared_layers=2,
                                hidden_size_per_layer_input=16, vocab_size_per_layer_input=VOCAB,
                                use_double_wide_mlp=True, sliding_window=8)
        vision = Gemma4VisionConfig(**vision_common, use_clipped_linears=True)
    else:  # 26B/31B-like: no PLE, k_eq_v, bidirectional images on sliding layers, standardize
        text = Gemma4TextConfig(**text_common, num_hidden_layers=4, layer_types=[S, S, F, F],
                                num_attention_heads=2, num_key_value_heads=2, num_global_key_value_heads=1,
                                attention_k_eq_v=True, num_kv_shared_layers=0, hidden_size_per_layer_input=0,
                                sliding_window=8, use_bidirectional_attention="vision")
        vision = Gemma4VisionConfig(**vision_common, standardize=True)
    return Gemma4Config(text_config=text, vision_config=vision, audio_config=None, initializer_range=0.2, **ids)


def model_class(name):
    import transformers

    return getattr(transformers, {"gemma3": "Gemma3ForConditionalGeneration",
                                  "gemma4_unified": "Gemma4UnifiedForConditionalGeneration"}.get(
        name, "Gemma4ForConditionalGeneration"))


def randomize(model, seed):
    """Every floating tensor that starts constant gets random values, so that a missing or
    misplaced norm, bias, clamp or standardization changes the outputs."""
    import torch

    g = torch.Generator().manual_seed(seed)
    uni = lambda t, lo, hi: t.copy_(lo + (hi - lo) * torch.rand(t.shape, generator=g, dtype=t.dtype))
    changed = []
    with torch.no_grad():
        for name, p in list(model.named_parameters()) + list(model.named_buffers()):
            if not p.is_floating_point() or "inv_freq" in name or "embed_scale" in name or p.numel() == 0:
                continue
            if name.endswith(("q_norm.weight", "k_norm.weight")) and "vision" not in name:
                uni(p, 0.2, 0.6)  # Gemma 4 text attention scale is 1: keep q.k moderate
            elif name.endswith("input_min"):
                p.fill_(-2.0 - float(torch.rand((), generator=g)))
            elif name.endswith("input_max"):
                p.fill_(2.0 + float(torch.rand((), generator=g)))
            elif name.endswith("output_min"):
                p.fill_(-1.0 - float(torch.rand((), generator=g)))
            elif name.endswith("output_max"):
                p.fill_(1.0 + float(torch.rand((), generator=g)))
            elif name.endswith("std_bias"):
                p.copy_(0.3 * torch.randn(p.shape, generator=g))
            elif name.endswith("std_scale"):
                uni(p, 0.5, 1.5)
            elif bool((p == p.flatten()[0]).all()) and p.numel() > 1 or name.endswith("layer_scalar"):
                v = float(p.flatten()[0])
                if v == 1.0:
                    uni(p, 0.5, 1.5)
                elif v == 0.0 and name.endswith("bias"):
                    uni(p, -0.2, 0.2)
                elif v == 0.0:  # Gemma 3's (1 + w) norms, the unified position table
                    uni(p, -0.5, 0.5)
                else:
                    raise AssertionError(f"{name}: constant {v}, no rule")
            else:
                continue
            changed.append(name)
    for name, p in list(model.named_parameters()) + list(model.named_buffers()):
        if p.is_floating_point() and p.numel() > 1 and "inv_freq" not in name:
            assert not bool((p == p.flatten()[0]).all()), f"{name} is still constant"
        assert bool(torch.isfinite(p).all()) if p.is_floating_point() else True, name
    return changed


def preprocessor_config(name, cfg):
    """What the converter reads (image_mean / image_std, Gemma 3's image_seq_length)."""
    if name == "gemma3":
        size = cfg.vision_config.image_size
        return {"image_processor_type": "Gemma3ImageProcessor", "do_resize": True, "do_rescale": True,
                "do_normalize": True, "image_mean": [0.5] * 3, "image_std": [0.5] * 3, "resample": 2,
                "rescale_factor": 1 / 255, "size": {"height": size, "width": size},
                "image_seq_length": cfg.mm_tokens_per_image, "do_pan_and_scan": None}
    cls = "Gemma4UnifiedImageProcessor" if name == "gemma4_unified" else "Gemma4ImageProcessor"
    return {"image_processor_type": cls, "do_resize": True, "do_rescale": True, "do_normalize": False,
            "image_mean": [0.0] * 3, "image_std": [1.0] * 3, "resample": 3, "rescale_factor": 1 / 255,
            "patch_size": 16, "pooling_kernel_size": 3, "max_soft_tokens": 280}


def tok_dir_for(name, work: Path):
    return work / ("tok_gemma3" if MODELS[name]["family"] == "gemma3" else "tok_gemma4")


def marker_ids(name, work: Path):
    return token_ids(tok_dir_for(name, work), G3_MARKERS if MODELS[name]["family"] == "gemma3" else G4_MARKERS)


def build_model(name, work: Path):
    import torch

    torch.manual_seed(MODELS[name]["seed"])
    cfg = model_config(name, marker_ids(name, work))
    model = model_class(name)(cfg).to(torch.float32)
    randomize(model, MODELS[name]["seed"] + 1000)
    if name == "gemma3":  # the converter forces mm.input_projection to F16: make it exact in fp16
        import torch

        with torch.no_grad():
            w = model.model.multi_modal_projector.mm_input_projection_weight
            w.copy_(w.half().float())
    model.eval()
    d = work / name
    if d.exists():
        shutil.rmtree(d)
    model.save_pretrained(d)
    if name == "gemma3":
        released_siglip_names(d / "model.safetensors")
    tok = tok_dir_for(name, work)
    for f in tok.iterdir():
        if f.is_file():
            shutil.copy(f, d / f.name)
    (d / "preprocessor_config.json").write_text(json.dumps(preprocessor_config(name, cfg), indent=2) + "\n")
    n = sum(p.numel() for p in model.parameters())
    print(f"{name}: {n} parameters saved to {d}")
    return d


def released_siglip_names(path: Path):
    """transformers 5.23 saves Gemma 3's tower as vision_tower.embeddings...; the released
    checkpoints (and the converter's tensor map) say vision_tower.vision_model.embeddings...
    HF loads both (checked in the hf stage: its outputs come from the renamed file)."""
    from safetensors.torch import load_file, save_file

    tensors = load_file(str(path))
    renamed = {("vision_tower.vision_model." + k[len("vision_tower."):] if k.startswith("vision_tower.") else k): v
               for k, v in tensors.items()}
    save_file(renamed, str(path), metadata={"format": "pt"})


def converter_copy(model_dir: Path):
    """The vendored converter's Gemma4Model.set_gguf_parameters requires the text config key
    expert_intermediate_size or moe_intermediate_size (find_hparam, not optional), which
    Gemma4UnifiedTextConfig does not have: convert from a copy whose config.json carries
    "moe_intermediate_size": null (HF itself never reads that copy)."""
    cfg = json.loads((model_dir / "config.json").read_text())
    if "moe_intermediate_size" in cfg["text_config"]:
        return model_dir
    copy = model_dir.parent / (model_dir.name + "_for_converter")
    if copy.exists():
        shutil.rmtree(copy)
    shutil.copytree(model_dir, copy)
    cfg["text_config"]["moe_intermediate_size"] = None
    (copy / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")
    return copy


def convert(model_dir: Path, out: Path, llama_cpp: Path, mmproj: bool):
    model_dir = converter_copy(model_dir)
    cmd = [sys.executable, str(llama_cpp / "convert_hf_to_gguf.py"), str(model_dir), "--outtype", "f32",
           "--outfile", str(out)] + (["--mmproj"] if mmproj else [])
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.stderr.write(r.stdout[-4000:] + r.stderr[-4000:])
        raise SystemExit(f"convert failed: {' '.join(cmd)}")
    print(f"  {out.name}: {out.stat().st_size} bytes")


# ----------------------------------------------------------------------------------------------
# HF outputs
# ----------------------------------------------------------------------------------------------
def versions():
    import torchvision

    v = gemma4_fixtures.versions()
    v["torchvision"] = torchvision.__version__
    return v


def write_f32(path: Path, array):
    a = np.ascontiguousarray(np.asarray(array, dtype="<f4"))
    path.write_bytes(a.tobytes())
    return {"file": path.name, "dtype": "float32", "shape": list(a.shape),
            "sha256": hashlib.sha256(a.tobytes()).hexdigest()}


PIXEL_FORMULA = {"gemma3": "x = (float32(u) / 255 - 0.5) / 0.5, each step in float32 (x in [-1, 1])",
                 "gemma4": "x = float32(u) / 255 in float32 (x in [0, 1])"}


def pixel_tensors(family, levels=False):
    """Two seeded pixel tensors [3, H, W] (CHW, float32) at the family's geometry, as the HF
    processor would hand them to the model, from uint8 noise u (PIXEL_FORMULA; every step is one
    IEEE float32 operation, so the tensor is exactly reproducible from u). Shared by every model
    of the family (files pixels.<family>.<i>.u8 hold u). levels=True returns u."""
    sizes = MODELS["gemma3" if family == "gemma3" else "gemma4"]["sizes"]
    rng = np.random.default_rng(7 if family == "gemma3" else 8)
    out = []
    for h, w in sizes:
        u = rng.integers(0, 256, size=(3, h, w), dtype=np.uint8)
        if levels:
            out.append(u)
            continue
        x = u.astype(np.float32) / np.float32(255)
        if family == "gemma3":
            x = (x - np.float32(0.5)) / np.float32(0.5)
        out.append(x.astype(np.float32))
    return out


def gemma4_patches(chw, unified: bool):
    """HF's model inputs for one unpadded image: Gemma4ImageProcessor's patchify (16 px patches,
    each flattened (row, col, channel), positions (x, y)), and for the unified model its
    patches_merge into 48 px patches."""
    import torch
    from transformers.models.gemma4.image_processing_gemma4 import convert_image_to_patches

    img = torch.from_numpy(chw)
    ph, pw = img.shape[1] // 16, img.shape[2] // 16
    patches = convert_image_to_patches(img, 16)
    gx, gy = torch.meshgrid(torch.arange(pw), torch.arange(ph), indexing="xy")
    pos = torch.stack([gx, gy], dim=-1).reshape(patches.shape[0], 2)
    if unified:
        from transformers.models.gemma4_unified.image_processing_gemma4_unified import patches_merge

        merged, mpos = patches_merge(patches[None], pos[None], patches.shape[0] // 9)
        return merged, mpos
    return patches[None], pos[None]


def encode(model, name, chw):
    """The vision features HF splices into the text embeddings for one image: [tokens, n_text]."""
    import torch

    with torch.no_grad():
        if name == "gemma3":
            out = model.model.get_image_features(pixel_values=torch.from_numpy(chw)[None], return_dict=True)
            return out.pooler_output[0].numpy()
        px, pos = gemma4_patches(chw, name == "gemma4_unified")
        out = model.model.get_image_features(px, pos, return_dict=True)
        return torch.cat(list(out.pooler_output), dim=0).numpy()


def load_model(name, work: Path):
    import torch
    from safetensors.torch import load_file

    model = model_class(name).from_pretrained(work / name, dtype=torch.float32, attn_implementation="eager")
    model.eval()
    if name == "gemma3":  # the renamed checkpoint (released_siglip_names) loads completely
        sd = model.state_dict()
        ren = [("vision_tower.vision_model.", "model.vision_tower."), ("language_model.model.", "model.language_model."),
               ("multi_modal_projector.", "model.multi_modal_projector.")]
        for k, t in load_file(str(work / name / "model.safetensors")).items():
            for a, b in ren:
                k = k.replace(a, b) if k.startswith(a) else k
            assert torch.equal(sd[k], t), k
    return model


def build_prompt(name, work: Path, n_images, text, n_tokens):
    """Token ids as the family's processor builds them, with the soft tokens expanded.
    Gemma 3 (by hand, as Gemma3Processor + the released chat template do): <bos>
    <start_of_turn>user\n, per image "\n\n<start_of_image>" + n x <image_soft_token> +
    "<end_of_image>\n\n", the text, <end_of_turn>\n<start_of_turn>model\n. Gemma 4: the chat
    template (llama.cpp's google-gemma-4-31B-it.jinja) puts <|image|> per image, which
    Gemma4Processor.replace_image_token turns into <|image> + n x <|image|> + <image|>."""
    tok = tok_dir_for(name, work)
    if MODELS[name]["family"] == "gemma3":
        import sentencepiece as spm

        sp = spm.SentencePieceProcessor(model_file=str(tok / "tokenizer.model"))
        images = "".join("\n\n<start_of_image>" + "<image_soft_token>" * n + "<end_of_image>\n\n" for n in n_tokens)
        s = "<start_of_turn>user\n" + images + text + "<end_of_turn>\n<start_of_turn>model\n"
        return [2] + sp.encode(s), s
    from transformers import AutoTokenizer

    t = AutoTokenizer.from_pretrained(tok)
    msg = [{"role": "user", "content": [{"type": "image"}] * n_images + [{"type": "text", "text": text}]}]
    s = t.apply_chat_template(msg, tokenize=False, add_generation_prompt=True)
    parts = s.split("<|image|>")
    assert len(parts) == n_images + 1
    s = parts[0] + "".join("<|image>" + "<|image|>" * n + "<image|>" + p for n, p in zip(n_tokens, parts[1:]))
    return t(s, add_special_tokens=False).input_ids, s


def spans_of(ids, soft_id):
    spans, i = [], 0
    while i < len(ids):
        if ids[i] == soft_id:
            j = i
            while j < len(ids) and ids[j] == soft_id:
                j += 1
            spans.append([i, j - i])
            i = j
        else:
            i += 1
    return spans


def generate_masks(model, n, tt):
    """The unified model's masks as Gemma4UnifiedForConditionalGeneration.create_masks_for_generate
    builds them (the rule `generate` uses with a compileable cache, and llama.cpp's): same image
    ORed onto the sliding layers only, inside the window; full layers causal. Handed to forward
    as a prebuilt {layer type: mask} dict, which Gemma4UnifiedModel.forward uses as is."""
    import torch

    emb = torch.zeros(1, n, model.config.get_text_config().hidden_size)
    return model.create_masks_for_generate(config=model.config, inputs_embeds=emb, attention_mask=None,
                                           past_key_values=None, position_ids=torch.arange(n)[None],
                                           mm_token_type_ids=tt)


def forward_logits(model, name, ids, pixels, types=True, swap=None, generate_rule=False):
    """Logits [len(ids), vocab] of one full forward (no cache). types=False leaves out the
    token-type input (HF then masks causally); swap replaces the pixel tensors; generate_rule
    (unified model only) masks by generate_masks instead of the forward path's rule."""
    import torch

    pixels = swap if swap is not None else pixels
    soft = model.config.image_token_id if hasattr(model.config, "image_token_id") else model.config.image_token_index
    inp = torch.tensor([ids])
    tt = (inp == soft).long()
    kw = {"input_ids": inp, "use_cache": False}
    if name == "gemma3":
        kw["pixel_values"] = torch.from_numpy(np.stack(pixels))
        if types:
            kw["token_type_ids"] = tt
    else:
        parts = [gemma4_patches(p, name == "gemma4_unified") for p in pixels]
        n = max(px.shape[1] for px, _ in parts)
        pad = lambda t, v: torch.nn.functional.pad(t, (0, 0, 0, n - t.shape[1]), value=v)
        kw["pixel_values"] = torch.cat([pad(px, 0.0) for px, _ in parts])  # padded as the processor does
        kw["image_position_ids"] = torch.cat([pad(pos, -1) for _, pos in parts])
        if types:
            kw["mm_token_type_ids"] = tt
        if generate_rule:
            kw["attention_mask"] = generate_masks(model, len(ids), tt)
    with torch.no_grad():
        return model(**kw).logits[0].float().numpy()


def run_prompt(model, name, ids, pixels, generate_rule=False):
    pre = forward_logits(model, name, ids, pixels, generate_rule=generate_rule)
    seq, tokens, steps = list(ids), [], []
    for i in range(STEPS):
        row = pre[-1] if i == 0 else forward_logits(model, name, seq, pixels, generate_rule=generate_rule)[-1]
        t = int(np.argmax(row))
        steps.append(row.copy())
        tokens.append(t)
        seq.append(t)
    return pre, tokens, np.stack(steps)


BIDIR = {
    "gemma3": "every layer: a soft token sees every soft token of its image (full layers: causal OR same "
              "image; sliding layers: window AND (causal OR same image)); HF token_type_ids = 1 on soft tokens",
    "gemma4": "none: causal on every layer (text use_bidirectional_attention None)",
    "gemma4_large": "sliding layers only: window AND (causal OR same image); full layers causal "
                    "(use_bidirectional_attention='vision', HF mm_token_type_ids = 1 on soft tokens)",
    "gemma4_unified": "HF 5.23 Gemma4UnifiedModel.forward (the path used here): same-image ORed onto BOTH full "
                      "and sliding layers, after the window (create_masks_for_generate with block_sequence_ids)",
}
BIDIR_GENERATE = ("sliding layers only: window AND (causal OR same image); full layers causal (HF 5.23 "
                  "Gemma4UnifiedForConditionalGeneration.create_masks_for_generate, as generate uses it with a "
                  "compileable cache; llama.cpp's rule too)")


# The unified model's prompts that also get references under generate_masks' rule (one: the
# folder's size budget); the two-image prompt's first image (9 tokens) is longer than the window.
GENERATE_RULE_PROMPTS = ("two_images",)


def generate_rule_reference(model, name, work: Path, pname, ids, px, forward_pre):
    """Prefill logits and 16 greedy steps of one prompt under generate_masks' rule, computed
    twice (model reloaded) and required bit-identical, as write_hf's own."""
    pre, tokens, steps = run_prompt_twice(model, name, work, ids, px, generate_rule=True)
    rule_effect = float(np.max(np.abs(pre - forward_pre)))
    assert rule_effect > 1e-3, rule_effect  # the two rules differ on this prompt
    print(f"  {name}/{pname} generate rule: tokens {tokens[:6]}..., vs forward path {rule_effect:.3g}")
    return dict(rule=BIDIR_GENERATE, **logits_refs(f"{name}.{pname}.generate_rule", pre, tokens, steps),
                forward_path_max_abs_diff=float("%.4g" % rule_effect))


def run_prompt_twice(model, name, work: Path, ids, px, generate_rule=False):
    """run_prompt, repeated on a reloaded model and required bit-identical."""
    pre, tokens, steps = run_prompt(model, name, ids, px, generate_rule)
    pre2, tokens2, steps2 = run_prompt(load_model(name, work), name, ids, px, generate_rule)
    assert tokens == tokens2 and np.array_equal(pre, pre2) and np.array_equal(steps, steps2), \
        f"{name}: HF not deterministic"
    return pre, tokens, steps


def logits_refs(stem, pre, tokens, steps):
    """The JSON entries (and files <stem>.{prefill,step}_logits.f32) of one prompt's run."""
    top2 = np.sort(steps, axis=1)
    return {"prefill_logits": write_f32(OUT / f"{stem}.prefill_logits.f32", pre), "tokens": tokens,
            "step_logits": write_f32(OUT / f"{stem}.step_logits.f32", steps),
            "min_top2_margin": float("%.6g" % np.min(top2[:, -1] - top2[:, -2]))}


def write_hf(name, work: Path):
    family = MODELS[name]["family"]
    model = load_model(name, work)
    cfg = model.config
    pixels = pixel_tensors(family)
    levels = pixel_tensors(family, levels=True)
    markers = marker_ids(name, work)
    soft_id = markers["<image_soft_token>" if family == "gemma3" else "<|image|>"]
    enc, feats = [], []
    for i, chw in enumerate(pixels):
        f = encode(model, name, chw)
        f2 = encode(load_model(name, work), name, chw)
        assert np.array_equal(f, f2), f"{name}: encoder not deterministic"
        feats.append(f)
        (OUT / f"pixels.{family}.{i}.u8").write_bytes(levels[i].tobytes())
        e = {"pixels": {"file": f"pixels.{family}.{i}.u8", "dtype": "uint8", "shape": list(levels[i].shape),
                        "value": PIXEL_FORMULA[family],
                        "float32_sha256": hashlib.sha256(np.ascontiguousarray(chw, "<f4").tobytes()).hexdigest()},
             "features": write_f32(OUT / f"{name}.features.{i}.f32", f),
             "tokens": int(f.shape[0]), "features_l2": float("%.9g" % np.linalg.norm(f.astype(np.float64)))}
        enc.append(e)
    prompts = {}
    for pname, (text, n_img) in PROMPTS.items():
        order = [0] if n_img == 1 else [1, 0]  # the two-image prompt: the second tensor first
        px = [pixels[k] for k in order]
        ids, s = build_prompt(name, work, n_img, text, [feats[k].shape[0] for k in order])
        spans = spans_of(ids, soft_id)
        assert [n for _, n in spans] == [feats[k].shape[0] for k in order], spans
        pre, tokens, steps = run_prompt_twice(model, name, work, ids, px)
        full = forward_logits(model, name, ids + tokens[:-1], px)
        full_diff = float(np.max(np.abs(full - np.concatenate([pre, steps[1:]]))))
        assert full_diff < 1e-4, (name, pname, full_diff)
        other = [np.ascontiguousarray(p[:, :, ::-1]) for p in px]  # mirrored images, same token counts
        image_effect = float(np.max(np.abs(forward_logits(model, name, ids, px, swap=other) - pre)))
        mask_effect = float(np.max(np.abs(forward_logits(model, name, ids, px, types=False) - pre)))
        assert image_effect > 1e-2, (name, pname, image_effect)
        if name == "gemma4":
            assert mask_effect == 0.0, mask_effect
        else:
            assert mask_effect > 1e-3, (name, pname, mask_effect)
        prompts[pname] = {
            "text": s, "prompt_ids": ids, "n_prompt": len(ids), "images": order,
            "image_spans": spans, **logits_refs(f"{name}.{pname}", pre, tokens, steps),
            "full_forward_max_abs_diff": float("%.3g" % full_diff),
            "image_mirror_max_abs_diff": float("%.4g" % image_effect),
            "causal_mask_max_abs_diff": float("%.4g" % mask_effect),
        }
        print(f"  {name}/{pname}: {len(ids)} ids, spans {spans}, tokens {tokens[:6]}..., margin "
              f"{prompts[pname]['min_top2_margin']}, swap {image_effect:.3g}, causal {mask_effect:.3g}")
        if name == "gemma4_unified" and pname in GENERATE_RULE_PROMPTS:
            prompts[pname]["generate_rule"] = generate_rule_reference(model, name, work, pname, ids, px, pre)
    head = {
        "source": f"HF transformers {type(model).__name__}, CPU, fp32, eager attention, use_cache=False "
                  "(full recompute per step), greedy",
        "versions": versions(), "model": name, "gguf": f"{name}.f32.gguf", "mmproj": f"{name}.mmproj.f32.gguf",
        "seed": MODELS[name]["seed"],
        "hf_config": json.loads((work / name / "config.json").read_text()),
        "marker_ids": markers, "image_soft_token_id": soft_id,
        "bidirectional_images": BIDIR[name],
        "encoder": enc, "prompts": prompts,
    }
    (OUT / f"{name}.hf.json").write_text(json.dumps(head, indent=1, ensure_ascii=False) + "\n")


# ----------------------------------------------------------------------------------------------
# Preprocessing
# ----------------------------------------------------------------------------------------------
# scikit-image's photos (skimage/data in the scikit-image wheel): (file, crop (y0, y1, x0, x1) or None)
PHOTOS = [("astronaut.png", None), ("chelsea.png", None), ("coffee.png", None), ("motorcycle_left.png", None),
          ("page.png", None),  # greyscale (PIL mode L), 2:1
          ("chelsea.png", (40, 136, 200, 264))]  # small (96 x 64, portrait): upscaled by every processor
G3_RELEASED = dict(size={"height": 896, "width": 896}, resample=2, do_rescale=True, rescale_factor=1 / 255,
                   do_normalize=True, image_mean=[0.5] * 3, image_std=[0.5] * 3)
G3_PAS = dict(do_pan_and_scan=True, pan_and_scan_min_crop_size=256, pan_and_scan_max_num_crops=4,
              pan_and_scan_min_ratio_to_activate=1.2)
# name -> (class, kwargs, the float32 value of a uint8 level u as HF computes it)
PROCESSORS = {
    "gemma3_896": ("Gemma3ImageProcessor", dict(G3_RELEASED), "(u - 127.5) / 127.5"),
    "gemma3_896_pas": ("Gemma3ImageProcessor", dict(G3_RELEASED, **G3_PAS), "(u - 127.5) / 127.5"),
    "siglip_768": ("SiglipImageProcessor", dict(size={"height": 768, "width": 768}, resample=2, do_rescale=True,
                                                rescale_factor=1 / 255, do_normalize=False), "u * (1/255)"),
    "gemma4_70": ("Gemma4ImageProcessor", dict(max_soft_tokens=70), "u * (1/255)"),
    "gemma4_280": ("Gemma4ImageProcessor", dict(max_soft_tokens=280), "u * (1/255)"),
}
# The PNGs hold every STRIDE-th row and column of the levels (the budget of tests/fixtures/vision
# does not allow whole 896 px images), except these cases, stored whole (stride 1).
STRIDE = 4
FULL_RES = {("gemma4_70", "page"), ("gemma4_70", "chelsea_crop")}


def photo(file, crop):
    import skimage
    from PIL import Image

    path = Path(skimage.__file__).parent / "data" / file
    img = Image.open(path)
    img.load()
    if crop is not None:
        y0, y1, x0, x1 = crop
        img = img.crop((x0, y0, x1, y1))
    return img, hashlib.sha256(path.read_bytes()).hexdigest()


def unpatchify(pv, pos, n):
    """Gemma 4's patches [n, 768] with positions (x, y) back to an image [3, H, W]."""
    pv, pos = pv[:n], pos[:n]
    h, w = int(pos[:, 1].max() + 1) * 16, int(pos[:, 0].max() + 1) * 16
    img = np.zeros((h, w, 3), np.float32)
    for p, (x, y) in zip(pv, pos):
        img[y * 16:(y + 1) * 16, x * 16:(x + 1) * 16] = p.reshape(16, 16, 3)
    return img.transpose(2, 0, 1)


def to_levels(x, formula):
    """The uint8 levels u behind HF's float tensor x, and the largest |x - value(u)|."""
    if formula.startswith("(u - 127.5)"):
        u = np.rint(x * np.float32(127.5) + np.float32(127.5))
        back = (u.astype(np.float32) - np.float32(127.5)) / np.float32(127.5)
    else:
        u = np.rint(x * np.float32(255))
        back = u.astype(np.float32) * np.float32(1 / 255)
    assert u.min() >= 0 and u.max() <= 255
    return u.astype(np.uint8), float(np.max(np.abs(back - x)))


def write_png(path: Path, chw_u8, stride):
    from PIL import Image

    hwc = np.ascontiguousarray(chw_u8.transpose(1, 2, 0)[::stride, ::stride])
    Image.fromarray(hwc, "RGB").save(path, format="PNG", optimize=True)
    return {"png": path.name, "stride": stride, "png_shape": list(hwc.shape)}


def run_processor(name, img):
    import transformers

    cls, kw, formula = PROCESSORS[name]
    proc = getattr(transformers, cls)(**kw)
    out = proc(images=img, return_tensors="pt")
    pv = out["pixel_values"].numpy()
    if cls == "Gemma4ImageProcessor":
        n = int(out["num_soft_tokens_per_image"][0])
        return [unpatchify(pv[0], out["image_position_ids"][0].numpy(), n * 9)], [n], type(proc).__name__
    return list(pv), [256] * pv.shape[0], type(proc).__name__


def write_preprocess():
    import PIL
    import torchvision
    from transformers import AutoImageProcessor  # noqa: F401  (the default backend is recorded below)
    from transformers.models.auto.image_processing_auto import IMAGE_PROCESSOR_MAPPING_NAMES

    cases = []
    written = {}
    for name, (cls, kw, formula) in PROCESSORS.items():
        for file, crop in PHOTOS:
            img, photo_sha = photo(file, crop)
            tensors, tokens, used = run_processor(name, img)
            again, _, _ = run_processor(name, photo(file, crop)[0])
            assert all(np.array_equal(a, b) for a, b in zip(tensors, again)), "preprocessing not deterministic"
            outs = []
            stem = Path(file).stem + ("_crop" if crop else "")
            tag = f"{name}.{stem}"
            stride = 1 if (name, stem) in FULL_RES else STRIDE
            for k, x in enumerate(tensors):
                u, err = to_levels(x, formula)
                assert err <= 1e-6, (name, file, err)
                sha = hashlib.sha256(u.tobytes()).hexdigest()
                o = {"shape": list(x.shape), "tokens": tokens[k], "levels_sha256": sha,
                     "float_vs_levels_max_abs": err, "mean": float("%.9g" % x.astype(np.float64).mean())}
                if sha in written:  # pan-and-scan's first tensor is the plain 896 px image
                    o.update(written[sha])
                else:
                    written[sha] = write_png(OUT / f"pre.{tag}.{k}.png", u, stride)
                    o.update(written[sha])
                outs.append(o)
            cases.append({"processor": name, "photo": file, "photo_sha256": photo_sha, "crop_y0_y1_x0_x1": crop,
                          "photo_mode": img.mode, "photo_hw": [img.height, img.width], "outputs": outs})
            print(f"  {tag}: {img.height}x{img.width} -> {[o['shape'] for o in outs]} tokens {tokens}")
    head = {
        "source": "HF transformers image processors on scikit-image's photos",
        "versions": dict(versions(), pillow=PIL.__version__, torchvision=torchvision.__version__,
                         skimage=__import__("skimage").__version__),
        "backend": "torchvision (transformers 5.23 picks the torchvision backend whenever torchvision is "
                   "installed: image_processing_auto.py; mapping " +
                   json.dumps({k: IMAGE_PROCESSOR_MAPPING_NAMES[k] for k in ("gemma3", "gemma3n", "gemma4")}) + ")",
        "processors": {k: {"class": c, "kwargs": kw, "value_of_level": f} for k, (c, kw, f) in PROCESSORS.items()},
        "cases": cases,
    }
    (OUT / "preprocess.json").write_text(json.dumps(head, indent=1) + "\n")


# ----------------------------------------------------------------------------------------------
# Check
# ----------------------------------------------------------------------------------------------
def gguf_summary(path: Path):
    """Keys (scalars and short arrays) and {tensor: [type, shape]} of a GGUF, via PyPI gguf."""
    from gguf import GGUFReader, GGUFValueType

    r = GGUFReader(str(path))
    keys = {}
    for f in r.fields.values():
        if f.name.startswith("tokenizer.ggml.") and f.types[0] == GGUFValueType.ARRAY:
            keys[f.name] = f"[{len(f.data)} items]"
            continue
        try:
            v = f.contents()
        except Exception:  # noqa: BLE001
            v = "?"
        keys[f.name] = v if not isinstance(v, list) or len(v) <= 8 else f"[{len(v)} items]"
    tensors = {t.name: [t.tensor_type.name, [int(x) for x in t.shape]] for t in r.tensors}
    return keys, tensors


def check():
    total = 0
    for path in sorted(OUT.iterdir()):
        total += path.stat().st_size
        if path.suffix != ".gguf":
            continue
        keys, tensors = gguf_summary(path)
        sha = hashlib.sha256(path.read_bytes()).hexdigest()[:16]
        print(f"{path.name}: {path.stat().st_size} bytes, sha256 {sha}, {len(tensors)} tensors")
        for k, v in keys.items():
            if k.startswith("clip.") or k in ("general.architecture", "general.type") or ".projector" in k:
                print(f"    {k} = {v}")
        odd = {n: t for n, (t, _) in tensors.items() if t != "F32"}
        print(f"    non-F32 tensors: {odd or 'none'}")
    print(f"tests/fixtures/vision: {total} bytes")
    assert total < 10 * 1024 * 1024, total  # with vision_gemma3n_fixture.py's gemma3n.* (1.1 MB)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--llama-cpp", type=Path, default=DEFAULT_LLAMA_CPP)
    ap.add_argument("--work", type=Path, default=DEFAULT_WORK)
    ap.add_argument("--stages", default="tok,models,hf,pre,check")
    ap.add_argument("--models", default=",".join(MODELS))
    a = ap.parse_args()
    import torch

    torch.set_num_threads(THREADS)
    torch.use_deterministic_algorithms(True)
    stages, names = a.stages.split(","), a.models.split(",")
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / ".gitignore").write_text("# The tiny random-weight fixture models are committed (the root .gitignore "
                                    "keeps real models out).\n!*.gguf\n")
    if "tok" in stages:
        build_gemma3_tokenizer(a.work / "tok_gemma3")
        build_gemma4_tokenizer(a.work / "tok_gemma4", a.llama_cpp)
    if "models" in stages:
        for name in names:
            d = build_model(name, a.work)
            convert(d, OUT / f"{name}.f32.gguf", a.llama_cpp, mmproj=False)
            convert(d, OUT / f"{name}.mmproj.f32.gguf", a.llama_cpp, mmproj=True)
    if "hf" in stages:
        for name in names:
            write_hf(name, a.work)
    if "pre" in stages:
        write_preprocess()
    if "check" in stages:
        check()


if __name__ == "__main__":
    main()
