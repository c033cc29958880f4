"""Writes tests/fixtures/audio/gemma3ne.*: a prompt with one audio clip end to
end against HF transformers 5.23 on a tiny Gemma 3n.

Run by hand in the reference environment (docs/audio.md "End to end"):
    /opt/kvshare-ref/venv/bin/python tests/tools/audio_e2e_gemma3n_fixtures.py \
        [--llama-cpp /opt/kvshare-ref/llama_cpp_python-0.3.36/vendor/llama.cpp] [--work DIR]

The model is tests/tools/vision_gemma3n_fixture.py's tiny
Gemma3nForConditionalGeneration (its tokenizer has Gemma 3n's audio markers
in the released vocabulary's layout in miniature: <start_of_audio> a text
piece, <end_of_audio> and <audio_soft_token> the first ids of the 16-row
audio vocabulary [528, 544)), rebuilt from its seed; its text GGUF is not
written again: the script converts it and checks the bytes equal
tests/fixtures/vision/gemma3n.f32.gguf. Its never-run 16-bin audio tower is
replaced by one that takes the real 128 mel bins (Gemma3nAudioConfig:
hidden 32, 2 conformer layers, 2 heads, SSCP channels 8 / 4; q / k weights
x 8 so the softcap bends the logits) and a random audio embedder (seed 73);
audio_soft_tokens_per_image is the released 188. The mmproj is written by
tests/tools/audio_mmproj_fixtures.py's gemma3na writer (the sdist's converter
cannot write one).

HF's outputs, for the released chat template's prompt with the hello clip
(hello_22050.gemma3n.f32: HF's features of tests/fixtures/audio/hello_22050.wav)
then "Transcribe this clip.": the prompt ids (Gemma3nProcessor's
full_audio_sequence: "\\n\\n<start_of_audio>" 188 x <audio_soft_token>
"<end_of_audio>\\n\\n"), the logits of the last 48 prompt positions (the
clip's last soft tokens, its end marker and the text after it) and of 16
greedy steps (full recompute per step, fp32, eager), to gemma3ne.json,
gemma3ne.prefill_logits.f32, gemma3ne.step_logits.f32.

Hard tokens (docs/vision.md "Gemma 3n's hard tokens"), to gemma3nh.json and
gemma3nh.logits.f32: HF's logits of every position of a token-id prompt with
no image and no clip (input_ids only) that holds ids of the vision vocabulary
[512, 528) and of the audio one [528, 544) in text positions (both ends of
each range), then two fed-back ids as decode steps (a vision id, an audio
id): the full sequence in one causal forward, whose last rows are what each
decode step gives. HF embeds those ids through embed_vision / embed_audio's
hard path; zeroing both hard tables moves the logits by
hard_tables_zeroed_max_abs_diff.
"""
import argparse
import json
import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import audio_e2e_fixtures as g4e  # noqa: E402  (paths, prompt text, write_f32, features, logits)
import audio_mmproj_fixtures as amf  # noqa: E402  (gemma3na mmproj writer)
import vision_fixtures as vf  # noqa: E402  (convert, defaults)
import vision_gemma3n_fixture as vg  # noqa: E402  (tokenizer, model)

ROOT, OUT, TEXT, STEPS = g4e.ROOT, g4e.OUT, g4e.TEXT, g4e.STEPS
SEED = 73
SLOTS = 188  # Gemma3nProcessor's audio_seq_length
KEEP = 48  # prompt positions whose logits are stored


def build(work: Path):
    from transformers import Gemma3nAudioConfig, Gemma3nConfig, Gemma3nForConditionalGeneration

    sp = vg.build_tokenizer(work / "tok")
    base, d = vg.build_model(work, work / "tok", sp)
    cfg = base.config.to_dict()
    cfg["audio_config"] = Gemma3nAudioConfig(vocab_size=vg.HARD, vocab_offset=vg.SPM_VOCAB + vg.HARD, hidden_size=32,
                                             conf_num_hidden_layers=2, conf_num_attention_heads=2,
                                             sscp_conv_channel_size=[8, 4]).to_dict()
    cfg["audio_soft_tokens_per_image"] = SLOTS
    vg.register_tower()
    model = Gemma3nForConditionalGeneration(Gemma3nConfig(**cfg)).to(torch.float32).eval()
    audio = ("model.audio_tower.", "model.embed_audio.")
    state = {k: v for k, v in base.state_dict().items() if not k.startswith(audio)}
    missing, unexpected = model.load_state_dict(state, strict=False)
    assert not unexpected, unexpected
    assert all(k.startswith(audio) for k in missing), missing
    amf.randomize(model.model.audio_tower, SEED)
    amf.randomize(model.model.embed_audio, SEED + 1)
    with torch.no_grad():  # logits large enough for the softcap (50) to bend them
        for block in model.model.audio_tower.conformer:
            block.attention.attn.q_proj.weight.mul_(8.0)
            block.attention.attn.k_proj.weight.mul_(8.0)
    model.config._attn_implementation = "eager"
    return model, d, sp


def write_hard_tokens(model, sp):
    """gemma3nh.*: HF's logits of a token-id prompt with multimodal-vocabulary ids (the docstring)."""
    v0, a0 = vg.SPM_VOCAB, vg.SPM_VOCAB + vg.HARD
    assert model.model.embed_vision.vocab_offset == v0 and model.model.embed_audio.vocab_offset == a0
    prompt = ([2] + sp.encode("The cat sat") + [v0, v0 + 7] + sp.encode(" on the") + [a0 - 1, a0] +
              sp.encode(" mat") + [a0 + vg.HARD - 1] + sp.encode(" today"))
    fed = [v0 + 3, a0 + 5]  # decode steps: fed-back ids of each range
    ids = prompt + fed
    with torch.no_grad():
        out = model(input_ids=torch.tensor([ids]), use_cache=False).logits[0].float().numpy()
        tables = [model.model.embed_vision.embedding.weight, model.model.embed_audio.embedding.weight]
        saved = [t.detach().clone() for t in tables]
        for t in tables:
            t.zero_()
        try:
            zeroed = model(input_ids=torch.tensor([ids]), use_cache=False).logits[0].float().numpy()
        finally:
            for t, w in zip(tables, saved):
                t.copy_(w)
    effect = float(np.max(np.abs(zeroed - out)))
    assert effect > 1e-2, effect
    head = {
        "source": "HF transformers Gemma3nForConditionalGeneration, CPU, fp32, eager, use_cache=False, input_ids "
                  "only (no pixels, no audio features); one causal forward of prompt_ids + fed_ids",
        "text_gguf": "../vision/gemma3n.f32.gguf", "vision_mmproj": "../vision/gemma3n.mmproj.f32.gguf",
        "audio_mmproj": "gemma3ne.mmproj.f32.gguf", "vision_vocabulary": [v0, a0],
        "audio_vocabulary": [a0, a0 + vg.HARD], "prompt_ids": prompt, "fed_ids": fed,
        "logits": g4e.write_f32(OUT / "gemma3nh.logits.f32", out),
        "hard_tables_zeroed_max_abs_diff": float("%.4g" % effect),
    }
    (OUT / "gemma3nh.json").write_text(json.dumps(head, indent=1) + "\n")
    print(f"hard tokens: {len(prompt)} + {len(fed)} ids, hard tables' effect {effect:.3g}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--llama-cpp", type=Path, default=vf.DEFAULT_LLAMA_CPP)
    ap.add_argument("--work", type=Path, default=vf.REF / "audio_work_gemma3n")
    a = ap.parse_args()
    torch.set_num_threads(2)
    torch.use_deterministic_algorithms(True)
    model, d, sp = build(a.work)
    text = a.work / "gemma3ne.text.f32.gguf"
    vf.convert(d, text, a.llama_cpp, mmproj=False)
    committed = ROOT / "tests" / "fixtures" / "vision" / "gemma3n.f32.gguf"
    assert text.read_bytes() == committed.read_bytes(), "the text GGUF differs from tests/fixtures/vision's"
    out = amf.write_gemma3na(model.model.audio_tower, model.model.embed_audio, model.config.audio_config,
                             model.config.text_config, OUT / "gemma3ne.mmproj.f32.gguf")
    print(f"{out.name}: {out.stat().st_size} bytes")

    feats, valid = g4e.features("gemma3n")
    seq = "\n\n<start_of_audio>" + "<audio_soft_token>" * SLOTS + "<end_of_audio>\n\n"
    s = "<start_of_turn>user\n" + seq + TEXT + "<end_of_turn>\n<start_of_turn>model\n"
    ids = [2] + sp.encode(s)
    soft = sp.piece_to_id("<audio_soft_token>")
    assert ids.count(soft) == SLOTS, ids
    pre = g4e.logits(model, ids, feats, valid)
    chain, tokens, steps = list(ids), [], []
    for i in range(STEPS):
        row = pre[-1] if i == 0 else g4e.logits(model, chain, feats, valid)[-1]
        tokens.append(int(np.argmax(row)))
        steps.append(row.copy())
        chain.append(tokens[-1])
    steps = np.stack(steps)
    # A generated id of the multimodal vocabularies would be embedded by HF's hard path.
    assert max(tokens) < vg.SPM_VOCAB, tokens
    top2 = np.sort(np.concatenate([pre[-1:], steps]), axis=1)[:, -2:]
    margin = float(np.min(top2[:, 1] - top2[:, 0]))
    effect = float(np.max(np.abs(g4e.logits(model, ids, torch.zeros_like(feats), valid) - pre)))
    assert effect > 1e-2, effect
    with torch.no_grad():
        n_soft = int((~model.model.get_audio_features(feats, ~valid, return_dict=True).audio_mel_mask).sum())
    head = {
        "source": "HF transformers Gemma3nForConditionalGeneration, CPU, fp32, eager, use_cache=False "
                  "(full recompute per step), greedy",
        "text_gguf": "../vision/gemma3n.f32.gguf", "mmproj": "gemma3ne.mmproj.f32.gguf", "seed": SEED,
        "features": "hello_22050.gemma3n.f32", "text": s, "prompt_ids": ids, "audio_slots": SLOTS,
        "clip_soft_tokens": n_soft, "prefill_first_position": len(ids) - KEEP,
        "prefill_logits": g4e.write_f32(OUT / "gemma3ne.prefill_logits.f32", pre[-KEEP:]), "tokens": tokens,
        "step_logits": g4e.write_f32(OUT / "gemma3ne.step_logits.f32", steps),
        "min_top2_margin": float("%.4g" % margin), "zero_features_max_abs_diff": float("%.4g" % effect),
    }
    (OUT / "gemma3ne.json").write_text(json.dumps(head, indent=1) + "\n")
    write_hard_tokens(model, sp)
    print(f"{len(ids)} ids, {n_soft} clip tokens, tokens {tokens}, margin {margin:.3g}, clip effect {effect:.3g}")


if __name__ == "__main__":
    main()
