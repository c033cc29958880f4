"""Writes tests/fixtures/audio/gemma4e.*: a prompt with one audio clip end to
end against HF transformers 5.23 on a tiny Gemma 4 E-style model.

Run by hand in the reference environment (docs/audio.md "End to end"):
    /opt/kvshare-ref/venv/bin/python tests/tools/audio_e2e_fixtures.py \
        [--llama-cpp /opt/kvshare-ref/llama_cpp_python-0.3.36/vendor/llama.cpp] [--work /opt/kvshare-ref/vision_work]

The text model is tests/fixtures/vision/'s gemma4 (E2B-like: per-layer
embeddings, KV sharing; tests/tools/vision_fixtures.py builds it into the
work folder; the text GGUF is not written again: the script converts it and
checks the bytes equal tests/fixtures/vision/gemma4.f32.gguf). To it this
script adds an audio tower (Gemma4AudioConfig: hidden 32, 2 conformer
layers, 2 heads, SSCP channels 128 / 4, output 48; q / k weights x 8 so the
softcap bends the logits) and its embedder, random (seed 61), with a tiny
vision tower the converter needs; the sdist's convert_hf_to_gguf.py --mmproj
writes gemma4e.mmproj.f32.gguf (gemma4v + gemma4a).

HF's outputs, for the chat template's prompt with the hello clip
(hello_22050.gemma4.f32: HF's features of tests/fixtures/audio/hello_22050.wav)
then "Transcribe this clip.": the prompt ids (Gemma4Processor's expansion of
<|audio|> to <|audio> 23 x <|audio|> <audio|>), the logits of every prompt
position and of 16 greedy steps (full recompute per step, fp32, eager), to
gemma4e.json, gemma4e.prefill_logits.f32, gemma4e.step_logits.f32.
"""
import argparse
import hashlib
import json
import shutil
import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import vision_fixtures as vf  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "tests" / "fixtures" / "audio"
TEXT = "Transcribe this clip."
SEED = 61
STEPS = 16


def write_f32(path: Path, a):
    a = np.ascontiguousarray(np.asarray(a, dtype="<f4"))
    path.write_bytes(a.tobytes())
    return {"file": path.name, "dtype": "float32", "shape": list(a.shape),
            "sha256": hashlib.sha256(a.tobytes()).hexdigest()}


def build(work: Path):
    from transformers import Gemma4AudioConfig, Gemma4Config, Gemma4ForConditionalGeneration, Gemma4VisionConfig

    base = vf.load_model("gemma4", work)  # the vision fixture's HF model
    cfg = base.config.to_dict()
    cfg["audio_config"] = Gemma4AudioConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                            subsampling_conv_channels=[128, 4], output_proj_dims=48).to_dict()
    model = Gemma4ForConditionalGeneration(Gemma4Config(**cfg)).to(torch.float32).eval()
    missing, unexpected = model.load_state_dict(base.state_dict(), strict=False)
    assert not unexpected, unexpected
    assert all(k.startswith(("model.audio_tower.", "model.embed_audio.")) for k in missing), missing
    g = torch.Generator().manual_seed(SEED)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.startswith(("model.audio_tower.", "model.embed_audio.")):
                p.copy_(torch.randn(p.shape, generator=g) * 0.2)
        for layer in model.model.audio_tower.layers:
            layer.self_attn.q_proj.linear.weight.mul_(8.0)
            layer.self_attn.k_proj.linear.weight.mul_(8.0)
    d = work / "audio_e2e" / "gemma4"  # the folder names the GGUFs (general.name "Gemma4", as the committed text)
    shutil.rmtree(d, ignore_errors=True)
    model.save_pretrained(d)
    tok = vf.tok_dir_for("gemma4", work)
    for f in tok.iterdir():
        if f.is_file():
            shutil.copy(f, d / f.name)
    (d / "preprocessor_config.json").write_text(json.dumps(vf.preprocessor_config("gemma4", model.config)) + "\n")
    return model, d


def features(extractor="gemma4"):
    """HF's features of the hello clip for `extractor` and its valid-frame mask."""
    clips = json.loads((OUT / "audio.json").read_text())["clips"]
    mask = next(c for c in clips if c["name"] == "hello_22050")[extractor]["mask"]
    f = np.fromfile(OUT / f"hello_22050.{extractor}.f32", dtype="<f4").reshape(-1, 128)
    valid = np.array([c == "1" for c in mask])
    assert len(valid) == f.shape[0]
    return torch.from_numpy(f)[None], torch.from_numpy(valid)[None]


def logits(model, ids, feats, valid):
    with torch.no_grad():
        out = model(input_ids=torch.tensor([ids]), input_features=feats, input_features_mask=valid,
                    use_cache=False)
    return out.logits[0].float().numpy()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--llama-cpp", type=Path, default=vf.DEFAULT_LLAMA_CPP)
    ap.add_argument("--work", type=Path, default=vf.DEFAULT_WORK)
    a = ap.parse_args()
    torch.set_num_threads(2)
    model, d = build(a.work)
    # The text GGUF must be the committed one.
    text = a.work / "gemma4e.text.f32.gguf"
    vf.convert(d, text, a.llama_cpp, mmproj=False)
    committed = ROOT / "tests" / "fixtures" / "vision" / "gemma4.f32.gguf"
    assert text.read_bytes() == committed.read_bytes(), "the text GGUF differs from tests/fixtures/vision's"
    vf.convert(d, OUT / "gemma4e.mmproj.f32.gguf", a.llama_cpp, mmproj=True)

    from transformers import AutoTokenizer

    feats, valid = features()
    with torch.no_grad():
        n_soft = int(model.model.get_audio_features(feats, valid).attention_mask.sum())
    t = AutoTokenizer.from_pretrained(d)
    msg = [{"role": "user", "content": [{"type": "audio"}, {"type": "text", "text": TEXT}]}]
    s = t.apply_chat_template(msg, tokenize=False, add_generation_prompt=True)
    assert s.count("<|audio|>") == 1, s
    s = s.replace("<|audio|>", "<|audio>" + "<|audio|>" * n_soft + "<audio|>")
    ids = t(s, add_special_tokens=False).input_ids
    pre = logits(model, ids, feats, valid)
    seq, tokens, steps = list(ids), [], []
    for i in range(STEPS):
        row = pre[-1] if i == 0 else logits(model, seq, feats, valid)[-1]
        tokens.append(int(np.argmax(row)))
        steps.append(row.copy())
        seq.append(tokens[-1])
    steps = np.stack(steps)
    top2 = np.sort(np.concatenate([pre[-1:], steps]), axis=1)[:, -2:]
    margin = float(np.min(top2[:, 1] - top2[:, 0]))
    # The clip matters: zeroed features give other logits.
    effect = float(np.max(np.abs(logits(model, ids, torch.zeros_like(feats), valid) - pre)))
    assert effect > 1e-2, effect
    head = {
        "source": "HF transformers Gemma4ForConditionalGeneration, CPU, fp32, eager, use_cache=False "
                  "(full recompute per step), greedy",
        "text_gguf": "../vision/gemma4.f32.gguf", "mmproj": "gemma4e.mmproj.f32.gguf", "seed": SEED,
        "features": "hello_22050.gemma4.f32", "text": s, "prompt_ids": ids, "audio_tokens": n_soft,
        "prefill_logits": write_f32(OUT / "gemma4e.prefill_logits.f32", pre), "tokens": tokens,
        "step_logits": write_f32(OUT / "gemma4e.step_logits.f32", steps),
        "min_top2_margin": float("%.4g" % margin), "zero_features_max_abs_diff": float("%.4g" % effect),
    }
    (OUT / "gemma4e.json").write_text(json.dumps(head, indent=1) + "\n")
    print(f"{len(ids)} ids, {n_soft} audio tokens, tokens {tokens}, margin {margin:.3g}, clip effect {effect:.3g}")


if __name__ == "__main__":
    main()
