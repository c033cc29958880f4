"""Writes the Gemma 3n end-to-end image fixture of tests/fixtures/vision/ (gemma3n.*): a tiny
random-weight Gemma3nForConditionalGeneration (HF transformers 5.23) with a tiny MobileNet-V5 tower
(timm's own blocks, tests/tools/gemma3n_vision_fixtures.py's architecture), its text GGUF (llama.cpp's
converter), its mmproj (written by gemma3n_vision_fixtures.write_mmproj: the vendored converter cannot
write a Gemma 3n mmproj, it stops on the audio tower's SSCP norms), and HF's outputs in the layout of
tests/tools/vision_fixtures.py (encoder features, the prompt logits and 16 greedy steps of a one- and a
two-image prompt). Run by hand in the reference environment, never in CI:

  /opt/kvshare-ref/venv/bin/python tests/tools/vision_gemma3n_fixture.py [--work DIR]

The vocabulary mirrors the released one's layout in miniature: a 512-piece SentencePiece model (ids
0..511, <start_of_image> among the user-defined pieces as 255999 is in the real one) plus 32 appended
special pieces: the vision vocabulary [512, 528) (<end_of_image> 512, <image_soft_token> 513, as 262144
and 262145) and the audio one [528, 544) (<end_of_audio>, <audio_soft_token>). HF embeds the ids of the
vision vocabulary (here <end_of_image>) through embed_vision's hard path (mm.embedding); the hf stage
checks that by zeroing that row. Versions as vision_fixtures.py's docstring.
"""
import argparse
import hashlib
import json
import shutil
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import gemma3n_fixtures  # noqa: E402  (SentencePiece settings, corpus)
import gemma3n_vision_fixtures as g3nv  # noqa: E402  (tiny tower architecture, mmproj writer)
import vision_fixtures as vf  # noqa: E402  (shared fixture helpers)

NAME = "gemma3n"
SPM_VOCAB = 512
HARD = 16  # rows of each multimodal vocabulary (the real ones: 128)
VOCAB = SPM_VOCAB + 2 * HARD
N_TEXT = 32
SEED = 72  # greedy tokens stay below the multimodal vocabularies (docs/vision.md), margins > 0.02
ARCH_NAME = "mobilenetv5_kvshare_tiny"
USER_DEFINED = ["<mask>", "<start_of_turn>", "<end_of_turn>", "<start_of_image>", "<start_of_audio>", "\n", "\t"]
N_SPECIAL = 9  # ids 0..8 special (control); "\n" "\t" stay normal pieces
APPENDED = (["<end_of_image>", "<image_soft_token>"] + [f"<vision_unused_{i}>" for i in range(2, HARD)] +
            ["<end_of_audio>", "<audio_soft_token>"] + [f"<audio_unused_{i}>" for i in range(2, HARD)])
S, F = "sliding_attention", "full_attention"


def build_tokenizer(out_dir: Path):
    import sentencepiece as spm
    from sentencepiece import sentencepiece_model_pb2 as pb

    args = dict(gemma3n_fixtures.SPM_ARGS, vocab_size=SPM_VOCAB, user_defined_symbols=USER_DEFINED)
    text = gemma3n_fixtures.CORPUS + "\n" + gemma3n_fixtures.TEXT.read_text()
    lines = [line for line in text.split("\n") if line.strip()]
    buf = __import__("io").BytesIO()
    spm.SentencePieceTrainer.train(sentence_iterator=iter(lines), model_writer=buf, **args)
    proto = pb.ModelProto()
    proto.ParseFromString(buf.getvalue())
    for piece in APPENDED:
        p = proto.pieces.add()
        p.piece, p.score, p.type = piece, 0.0, pb.ModelProto.SentencePiece.USER_DEFINED
    data = proto.SerializeToString()
    sp = spm.SentencePieceProcessor(model_proto=data)
    assert sp.get_piece_size() == VOCAB and sp.piece_to_id("<end_of_image>") == SPM_VOCAB
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "tokenizer.model").write_bytes(data)
    special = list(range(N_SPECIAL)) + list(range(SPM_VOCAB, VOCAB))
    decoder = {str(i): {"content": sp.id_to_piece(i), "lstrip": False, "normalized": False, "rstrip": False,
                        "single_word": False, "special": True} for i in special}
    cfg = {"tokenizer_class": "GemmaTokenizer", "added_tokens_decoder": decoder,
           "bos_token": "<bos>", "eos_token": "<eos>", "unk_token": "<unk>", "pad_token": "<pad>",
           "add_bos_token": True, "add_eos_token": False, "model_max_length": 512, "padding_side": "left"}
    (out_dir / "tokenizer_config.json").write_text(json.dumps(cfg, indent=2) + "\n")
    print(f"tokenizer.model: {len(data)} bytes, sha256 {hashlib.sha256(data).hexdigest()[:16]}")
    return sp


def register_tower():
    """timm model `ARCH_NAME`: gemma3n_vision_fixtures' tiny tower, so that HF's TimmWrapper builds
    (and reloads) it from the config's `architecture`."""
    import timm.models._registry as reg
    from timm.models._efficientnet_builder import decode_arch_def
    from timm.models.mobilenetv5 import MobileNetV5Encoder, MobileNetV5MultiScaleFusionAdapter

    if ARCH_NAME in reg._model_entrypoints:
        return

    def tiny(pretrained=False, **kwargs):
        tower = MobileNetV5Encoder(decode_arch_def(g3nv.ARCH), stem_size=8, fix_stem=True, pad_type="same",
                                   msfa_output_resolution=g3nv.GRID, layer_scale_init_value=1e-5)
        tower.msfa = MobileNetV5MultiScaleFusionAdapter(in_chs=tower.msfa_in_chs, out_chs=g3nv.N_EMBD,
                                                        output_resolution=g3nv.GRID)
        return tower

    tiny.__module__ = "timm.models.mobilenetv5"
    reg.register_model(_named(tiny, ARCH_NAME))


def _named(fn, name):
    fn.__name__ = name
    fn.__qualname__ = name
    return fn


def model_config(ids):
    from transformers import Gemma3nAudioConfig, Gemma3nConfig, Gemma3nTextConfig, Gemma3nVisionConfig

    # 4 layers S S S F, dense (no activation sparsity: with a 64-wide MLP a 0.95 cut leaves 0-3
    # entries and makes the model hypersensitive), no KV sharing, per-layer inputs 8 wide, Laurel 8.
    text = Gemma3nTextConfig(
        vocab_size=VOCAB, vocab_size_per_layer_input=SPM_VOCAB, hidden_size=N_TEXT, intermediate_size=64,
        num_hidden_layers=4, layer_types=[S, S, S, F], num_attention_heads=2, num_key_value_heads=1, head_dim=16,
        num_kv_shared_layers=0, hidden_size_per_layer_input=8, laurel_rank=8,
        activation_sparsity_pattern=[0.0] * 4, sliding_window=8, max_position_embeddings=512, rms_norm_eps=1e-6,
        final_logit_softcapping=30.0, pad_token_id=0, eos_token_id=1, bos_token_id=2,
        hidden_activation="gelu_pytorch_tanh", altup_num_inputs=4, altup_active_idx=0, altup_coef_clip=120.0,
        altup_correct_scale=True, initializer_range=0.12)
    vision = Gemma3nVisionConfig(architecture=ARCH_NAME, hidden_size=g3nv.N_EMBD, vocab_size=HARD,
                                 vocab_offset=SPM_VOCAB, rms_norm_eps=1e-6)
    # the audio tower is never run; as small as its config allows
    audio = Gemma3nAudioConfig(vocab_size=HARD, vocab_offset=SPM_VOCAB + HARD, hidden_size=16,
                               conf_num_hidden_layers=1, conf_num_attention_heads=2, sscp_conv_channel_size=(4, 4),
                               input_feat_size=16)
    return Gemma3nConfig(text_config=text, vision_config=vision, audio_config=audio,
                         vision_soft_tokens_per_image=g3nv.GRID * g3nv.GRID, audio_soft_tokens_per_image=4,
                         boi_token_id=ids["<start_of_image>"], eoi_token_id=ids["<end_of_image>"],
                         image_token_id=ids["<image_soft_token>"], boa_token_id=ids["<start_of_audio>"],
                         eoa_token_id=ids["<end_of_audio>"], audio_token_id=ids["<audio_soft_token>"],
                         initializer_range=0.12)


def randomize(model, seed):
    """Text: gemma3n_fixtures' rules; tower and embedder: gemma3n_vision_fixtures' (norms near 1,
    layer scales near 0.5, unit-gain kernels); the hard embedding table random."""
    import math

    import torch

    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.startswith("model.audio_tower") or name.startswith("model.embed_audio"):
                continue
            if name.startswith(("model.vision_tower", "model.embed_vision")):
                if name.endswith("embedding.weight"):
                    p.copy_(torch.randn(p.shape, generator=g))
                elif name.endswith("gamma"):
                    p.copy_(0.5 + 0.3 * torch.randn(p.shape, generator=g))
                elif p.dim() == 1 and "bias" not in name:
                    p.copy_(1.0 + 0.2 * torch.randn(p.shape, generator=g))
                elif p.dim() == 1:
                    p.copy_(0.2 * torch.randn(p.shape, generator=g))
                else:
                    p.copy_(torch.randn(p.shape, generator=g) / math.sqrt(p[0].numel()))
            else:
                gemma3n_fixtures.randomize_text_param(name, p, g, N_TEXT, "model.language_model.norm.weight")
    for name, p in model.named_parameters():
        if not name.startswith(("model.audio_tower", "model.embed_audio")) and p.numel() > 1:
            assert not bool((p == p.flatten()[0]).all()), f"{name} still constant"


def load_model(work: Path):
    import torch
    from transformers import Gemma3nForConditionalGeneration

    register_tower()
    m = Gemma3nForConditionalGeneration.from_pretrained(work / NAME, dtype=torch.float32, attn_implementation="eager")
    return m.eval()


def build_model(work: Path, tok_dir: Path, sp):
    import torch
    from transformers import Gemma3nForConditionalGeneration

    register_tower()
    ids = {s: sp.piece_to_id(s) for s in APPENDED[:2] + ["<start_of_image>", "<start_of_audio>", "<end_of_audio>",
                                                         "<audio_soft_token>"]}
    torch.manual_seed(SEED)
    model = Gemma3nForConditionalGeneration(model_config(ids)).to(torch.float32)
    randomize(model, SEED + 1000)
    model.eval()
    d = work / NAME
    if d.exists():
        shutil.rmtree(d)
    model.save_pretrained(d)
    for f in ("tokenizer.model", "tokenizer_config.json"):
        shutil.copy(tok_dir / f, d / f)
    (d / "preprocessor_config.json").write_text(json.dumps({
        "image_processor_type": "SiglipImageProcessor", "do_resize": True, "do_rescale": True,
        "do_normalize": False, "image_mean": [0.0] * 3, "image_std": [1.0] * 3, "resample": 2,
        "rescale_factor": 1 / 255, "size": {"height": g3nv.IMAGE, "width": g3nv.IMAGE}}, indent=2) + "\n")
    print(f"{NAME}: {sum(p.numel() for p in model.parameters())} parameters -> {d}")
    return model, d


def pixel_levels():
    rng = np.random.default_rng(9)
    return [rng.integers(0, 256, size=(3, g3nv.IMAGE, g3nv.IMAGE), dtype=np.uint8) for _ in range(2)]


def encode(model, chw):
    import torch

    with torch.no_grad():
        return model.model.get_image_features(torch.from_numpy(chw)[None], return_dict=True).pooler_output[0].numpy()


def build_prompt(sp, text, n_images):
    """Gemma3nProcessor's expansion (full_image_sequence) in the released chat template's message."""
    seq = "\n\n<start_of_image>" + "<image_soft_token>" * (g3nv.GRID * g3nv.GRID) + "<end_of_image>\n\n"
    s = "<start_of_turn>user\n" + seq * n_images + text + "<end_of_turn>\n<start_of_turn>model\n"
    return [2] + sp.encode(s), s


def forward_logits(model, ids, pixels, hard_row_zeroed=False):
    import torch

    kw = {"input_ids": torch.tensor([ids]), "pixel_values": torch.from_numpy(np.stack(pixels)), "use_cache": False}
    with torch.no_grad():
        if not hard_row_zeroed:
            return model(**kw).logits[0].float().numpy()
        emb = model.model.embed_vision.embedding.weight
        saved = emb.detach().clone()
        emb[0].zero_()  # <end_of_image> = vocab_offset + 0
        try:
            return model(**kw).logits[0].float().numpy()
        finally:
            emb.copy_(saved)


def run_prompt(model, ids, pixels):
    pre = forward_logits(model, ids, pixels)
    seq, tokens, steps = list(ids), [], []
    for i in range(vf.STEPS):
        row = pre[-1] if i == 0 else forward_logits(model, seq, pixels)[-1]
        tokens.append(int(np.argmax(row)))
        steps.append(row.copy())
        seq.append(tokens[-1])
    return pre, tokens, np.stack(steps)


def write_hf(work: Path, sp):
    model = load_model(work)  # eager attention, as the reload (the built model runs sdpa)
    levels = pixel_levels()
    pixels = [(u.astype(np.float32) / np.float32(255)).astype(np.float32) for u in levels]
    reloaded = load_model(work)
    enc, feats = [], []
    for i, chw in enumerate(pixels):
        f = encode(model, chw)
        assert np.array_equal(f, encode(reloaded, chw)), "encoder not deterministic"
        feats.append(f)
        (vf.OUT / f"pixels.{NAME}.{i}.u8").write_bytes(levels[i].tobytes())
        enc.append({"pixels": {"file": f"pixels.{NAME}.{i}.u8", "dtype": "uint8", "shape": list(levels[i].shape),
                               "value": vf.PIXEL_FORMULA["gemma4"]},
                    "features": vf.write_f32(vf.OUT / f"{NAME}.features.{i}.f32", f), "tokens": int(f.shape[0])})
    soft, eoi = sp.piece_to_id("<image_soft_token>"), sp.piece_to_id("<end_of_image>")
    prompts = {}
    for pname, (text, n_img) in vf.PROMPTS.items():
        order = [0] if n_img == 1 else [1, 0]
        px = [pixels[k] for k in order]
        ids, s = build_prompt(sp, text, n_img)
        spans = vf.spans_of(ids, soft)
        assert eoi in ids and len(spans) == n_img
        pre, tokens, steps = run_prompt(model, ids, px)
        pre2, tokens2, steps2 = run_prompt(reloaded, ids, px)
        assert tokens == tokens2 and np.array_equal(pre, pre2) and np.array_equal(steps, steps2), "not deterministic"
        other = [np.ascontiguousarray(p[:, :, ::-1]) for p in px]
        image_effect = float(np.max(np.abs(forward_logits(model, ids, other) - pre)))
        hard_effect = float(np.max(np.abs(forward_logits(model, ids, px, hard_row_zeroed=True) - pre)))
        assert image_effect > 1e-2 and hard_effect > 1e-3, (image_effect, hard_effect)
        # A generated id of the multimodal vocabularies would be embedded by HF's hard path, by kvshare
        # (and llama.cpp) from the text table: the seed keeps the greedy tokens below them.
        assert max(tokens) < SPM_VOCAB, tokens
        prompts[pname] = {"text": s, "prompt_ids": ids, "n_prompt": len(ids), "images": order, "image_spans": spans,
                          **vf.logits_refs(f"{NAME}.{pname}", pre, tokens, steps),
                          "image_mirror_max_abs_diff": float("%.4g" % image_effect),
                          "end_of_image_hard_row_zeroed_max_abs_diff": float("%.4g" % hard_effect)}
        print(f"  {pname}: {len(ids)} ids, spans {spans}, tokens {tokens[:6]}..., margin "
              f"{prompts[pname]['min_top2_margin']}, swap {image_effect:.3g}, eoi hard row {hard_effect:.3g}")
    head = {"source": "HF transformers Gemma3nForConditionalGeneration, CPU, fp32, eager attention, "
                      "use_cache=False (full recompute per step), greedy",
            "versions": vf.versions(), "model": NAME, "gguf": f"{NAME}.f32.gguf", "mmproj": f"{NAME}.mmproj.f32.gguf",
            "seed": SEED, "hf_config": json.loads((work / NAME / "config.json").read_text()),
            "marker_ids": {p: sp.piece_to_id(p) for p in ["<start_of_image>"] + APPENDED[:2]},
            "image_soft_token_id": soft, "vision_vocabulary": [SPM_VOCAB, SPM_VOCAB + HARD],
            "bidirectional_images": "none: causal on every layer (HF passes the plain causal mask)",
            "hard_tokens": "ids in the vision vocabulary outside the soft tokens (<end_of_image>) are embedded by "
                           "embed_vision's hard path (mm.embedding, hard_emb_norm, projection, norm); "
                           "end_of_image_hard_row_zeroed_max_abs_diff shows they reach the logits",
            "encoder": enc, "prompts": prompts}
    (vf.OUT / f"{NAME}.hf.json").write_text(json.dumps(head, indent=1, ensure_ascii=False) + "\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--llama-cpp", type=Path, default=vf.DEFAULT_LLAMA_CPP)
    ap.add_argument("--work", type=Path, default=vf.REF / "vision_work_gemma3n")
    a = ap.parse_args()
    import torch

    torch.set_num_threads(vf.THREADS)
    torch.use_deterministic_algorithms(True)
    sp = build_tokenizer(a.work / "tok")
    model, d = build_model(a.work, a.work / "tok", sp)
    vf.convert(d, vf.OUT / f"{NAME}.f32.gguf", a.llama_cpp, mmproj=False)
    tower = model.model.vision_tower.timm_model
    g3nv.write_mmproj(str(vf.OUT / f"{NAME}.mmproj.f32.gguf"), tower, model.model.embed_vision, n_text=N_TEXT)
    write_hf(a.work, sp)
    total = sum(p.stat().st_size for p in vf.OUT.glob(f"*{NAME}.*") if p.name.startswith((NAME + ".", "pixels.")))
    print(f"{NAME} files: {total} bytes")


if __name__ == "__main__":
    main()
