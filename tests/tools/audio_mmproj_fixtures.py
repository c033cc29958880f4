"""Writes the tiny audio mmproj GGUFs of tests/audio_mmproj_test.cc.

Run by hand in the reference environment (docs/audio.md):
    /opt/kvshare-ref/venv/bin/python tests/tools/audio_mmproj_fixtures.py \
        [--llama-cpp /opt/kvshare-ref/llama_cpp_python-0.3.36/vendor/llama.cpp] [--work /tmp/audio_mmproj]

gemma4a.mmproj.f32.gguf: a tiny random Gemma4ForConditionalGeneration with an
  audio tower (transformers 5.23; hidden 32, 2 conformer layers, 2 heads,
  SSCP channels 128 / 4, output 48, text 64; HF sizes the SSCP projection as
  (channels[0] / 4) * channels[1], so channels[0] stays 128 = the mel bins),
  converted by the llama.cpp
  sdist's convert_hf_to_gguf.py --mmproj --outtype f32: what the converter
  writes, keys and tensor names unchanged. Its q / k weights are scaled by 8
  (so the attention softcap bends the logits) and two linears get finite
  clamps. HF's tower and embedder outputs on two inputs go to gemma4a.json
  and gemma4a.*.f32 (hf_outputs).
gemma3na.mmproj.f32.gguf: that converter cannot write a Gemma 3n mmproj (it
  stops on the audio SSCP's conv_{0,1}.norm.weight), and a tiny Gemma 3n
  needs a full MobileNet-V5; so this script writes an audio-only mmproj
  itself with gguf-py: the converter's keys (Gemma3nVisionAudioModel:
  projector gemma3na, num_mel_bins, eps 1e-5, embedding_length, ff, blocks,
  heads) and its tensor names (the converter's renaming, then gguf-py's
  TensorNameMap for MODEL_ARCH.MMPROJ, as map_tensor_name does), from a tiny
  random Gemma3nAudioEncoder + audio Gemma3nMultimodalEmbedder; the two
  names the converter lacks are written as a.conv1d.{0,1}.norm.weight
  (Gemma 4's spelling for its SSCP norms). F32 throughout (the converter
  would force a.pre_encode.out and mm.a.input_projection to F16). Its q / k
  weights are scaled by 8 too; HF's tower (audio_mel_mask True = padding, as
  Gemma3nModel passes it) and soft embedder outputs go to gemma3na.json and
  gemma3na.*.f32; its hard tokens of rows 0 and vocab - 1 to gemma3na.hard.f32.
Both use the same two inputs (write_outputs; random.features.f32).
"""
import argparse
import json
import shutil
import subprocess
import sys
from pathlib import Path

import gguf
import numpy as np
import torch

OUT = Path(__file__).resolve().parent.parent / "fixtures" / "audio"


def randomize(model, seed):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.2)


def tiny_text_and_vision(vocab_size=300):
    """The tiny text (width 64) and vision configs an audio mmproj is converted
    beside (the converter needs both; bench/audio_peer.py uses them too)."""
    from transformers import Gemma4TextConfig, Gemma4VisionConfig

    text = Gemma4TextConfig(vocab_size=vocab_size, hidden_size=64, intermediate_size=64, num_hidden_layers=2,
                            layer_types=["sliding_attention", "full_attention"], num_attention_heads=2,
                            num_key_value_heads=1, head_dim=32, global_head_dim=64, sliding_window=8,
                            hidden_size_per_layer_input=0, num_kv_shared_layers=0, moe_intermediate_size=None)
    vision = Gemma4VisionConfig(hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=1,
                                num_key_value_heads=1, head_dim=16, patch_size=16, pooling_kernel_size=3,
                                position_embedding_size=8)
    return text, vision


def gemma4a(llama_cpp: Path, work: Path):
    from transformers import Gemma4AudioConfig, Gemma4Config, Gemma4ForConditionalGeneration

    text, vision = tiny_text_and_vision()
    audio = Gemma4AudioConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                              subsampling_conv_channels=[128, 4], output_proj_dims=48)
    cfg = Gemma4Config(text_config=text, vision_config=vision, audio_config=audio)
    torch.manual_seed(5)
    model = Gemma4ForConditionalGeneration(cfg).to(torch.float32).eval()
    randomize(model.model.audio_tower, 6)
    with torch.no_grad():
        # Logits large enough for the softcap (50) to bend them, and finite
        # clamps on a few linears (HF's defaults are +-inf: no-ops).
        for layer in model.model.audio_tower.layers:
            layer.self_attn.q_proj.linear.weight.mul_(8.0)
            layer.self_attn.k_proj.linear.weight.mul_(8.0)
        first = model.model.audio_tower.layers[0]
        first.feed_forward1.ffw_layer_1.output_min.fill_(-1.0)
        first.feed_forward1.ffw_layer_1.output_max.fill_(1.0)
        first.self_attn.v_proj.input_min.fill_(-0.8)
        first.self_attn.v_proj.input_max.fill_(0.8)
    d = work / "gemma4a"
    shutil.rmtree(d, ignore_errors=True)
    model.save_pretrained(d)
    # What the converter reads besides config.json (the vision keys).
    (d / "preprocessor_config.json").write_text(json.dumps(
        {"image_processor_type": "Gemma4ImageProcessor", "image_mean": [0.0] * 3, "image_std": [1.0] * 3,
         "patch_size": 16, "pooling_kernel_size": 3, "max_soft_tokens": 280}))
    out = OUT / "gemma4a.mmproj.f32.gguf"
    cmd = [sys.executable, str(llama_cpp / "convert_hf_to_gguf.py"), str(d), "--mmproj", "--outtype", "f32",
           "--outfile", str(out)]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.stderr.write(r.stdout[-3000:] + r.stderr[-3000:])
        raise SystemExit("convert failed: " + " ".join(cmd))
    print(f"{out.name}: {out.stat().st_size} bytes")
    hf_outputs(model)


def hf_outputs(model):
    """HF's Gemma 4 audio tower and embedder (get_audio_features)."""
    def run(feats, valid):
        with torch.no_grad():
            o = model.model.get_audio_features(torch.from_numpy(feats)[None], torch.from_numpy(valid)[None])
        return o.last_hidden_state[0], o.pooler_output[0], o.attention_mask[0]

    write_outputs("gemma4a", "gemma4", run)


def gemma3na_name(hf: str, tmap) -> str:
    """The converter's name for an HF Gemma 3n audio tensor (conversion/gemma.py
    Gemma3nVisionAudioModel.modify_tensors, then map_tensor_name)."""
    for i in (0, 1):
        if hf == f"subsample_conv_projection.conv_{i}.norm.weight":
            return f"a.conv1d.{i}.norm.weight"  # not in the converter's map: Gemma 4's spelling
    full = hf if hf.startswith("model.embed_audio.") else "model.audio_tower." + hf
    full = full.replace("model.audio_tower.conformer.", "conformer.layers.")
    name = tmap.get_name(full, try_suffixes=(".weight", ".bias"))
    if name is None:
        raise SystemExit(f"no converter name for {full}")
    return name


def gemma3na():
    from transformers.models.gemma3n.configuration_gemma3n import Gemma3nAudioConfig, Gemma3nTextConfig
    from transformers.models.gemma3n.modeling_gemma3n import Gemma3nAudioEncoder, Gemma3nMultimodalEmbedder

    cfg = Gemma3nAudioConfig(hidden_size=32, conf_num_hidden_layers=2, conf_num_attention_heads=2,
                             sscp_conv_channel_size=[8, 4], vocab_size=8)
    text = Gemma3nTextConfig(hidden_size=64)
    torch.manual_seed(7)
    tower = Gemma3nAudioEncoder(cfg).to(torch.float32).eval()
    embedder = Gemma3nMultimodalEmbedder(cfg, text).to(torch.float32).eval()
    randomize(tower, 8)
    randomize(embedder, 9)
    with torch.no_grad():  # logits large enough for the softcap (50) to bend them
        for block in tower.conformer:
            block.attention.attn.q_proj.weight.mul_(8.0)
            block.attention.attn.k_proj.weight.mul_(8.0)
    out = write_gemma3na(tower, embedder, cfg, text, OUT / "gemma3na.mmproj.f32.gguf")
    print(f"{out.name}: {out.stat().st_size} bytes")

    def run(feats, valid):
        with torch.no_grad():
            # Gemma3nModel.get_audio_features: the tower takes True = padding.
            o = tower(torch.from_numpy(feats)[None], torch.from_numpy(~valid)[None])
            return o.last_hidden_state[0], embedder(inputs_embeds=o.last_hidden_state)[0], ~o.audio_mel_mask[0]

    write_outputs("gemma3na", "gemma3n", run)
    with torch.no_grad():  # hard tokens: row 0 (end of audio) and the last row (the prompt's padding)
        ids = torch.tensor([[cfg.vocab_offset, cfg.vocab_offset + cfg.vocab_size - 1]])
        embedder(input_ids=ids)[0].numpy().astype(np.float32).tofile(OUT / "gemma3na.hard.f32")


def write_gemma3na(tower, embedder, cfg, text, out: Path, f16_blocks=False) -> Path:
    """The gemma3na mmproj of an HF Gemma3nAudioEncoder and audio embedder, as
    the converter would write it; `f16_blocks`: the blocks' 2-D matrices F16
    but the depthwise kernels, as a default (F16) conversion (bench/audio_peer.py)."""
    tmap = gguf.get_tensor_name_map(gguf.MODEL_ARCH.MMPROJ, cfg.conf_num_hidden_layers)
    w = gguf.GGUFWriter(str(out), "clip")
    w.add_type(gguf.GGUFType.MMPROJ)
    w.add_bool("clip.has_vision_encoder", False)
    w.add_bool("clip.has_audio_encoder", True)
    w.add_uint32("clip.audio.projection_dim", text.hidden_size)
    w.add_uint32("clip.audio.embedding_length", cfg.hidden_size)
    w.add_uint32("clip.audio.feed_forward_length", cfg.hidden_size * 4)
    w.add_uint32("clip.audio.block_count", cfg.conf_num_hidden_layers)
    w.add_uint32("clip.audio.attention.head_count", cfg.conf_num_attention_heads)
    w.add_string("clip.audio.projector_type", "gemma3na")
    w.add_uint32("clip.audio.num_mel_bins", cfg.input_feat_size)
    w.add_float32("clip.audio.attention.layer_norm_epsilon", 1e-5)
    tensors = [(k, v) for k, v in tower.state_dict().items()]
    tensors += [("model.embed_audio." + k, v) for k, v in embedder.state_dict().items()]
    for hf, t in tensors:
        name = gemma3na_name(hf, tmap)
        a = t.detach().contiguous().numpy().astype("float32")
        half = f16_blocks and name.startswith("a.blk.") and a.ndim == 2 and "conv_dw" not in name
        w.add_tensor(name, a.astype("float16") if half else a)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return out


def write_outputs(prefix, extractor, run):
    """`run` (features [T, 128], valid mask [T]) -> (tower [T', w], soft tokens
    [T', text], valid [T']) on two inputs: the hello clip's features for
    `extractor` (tests/tools/audio_fixtures.py) and 101 seeded random frames,
    the last 18 padded (3 attention blocks; padded queries and keys); written
    as <prefix>.<input>.{tower,embed}.f32 (every frame) and <prefix>.json."""
    clips = json.loads((OUT / "audio.json").read_text())["clips"]
    hello = next(c for c in clips if c["name"] == "hello_22050")
    feats = np.fromfile(OUT / f"hello_22050.{extractor}.f32", dtype=np.float32).reshape(-1, 128)
    mask = np.array([m == "1" for m in hello[extractor]["mask"]])
    rand = np.random.default_rng(11).normal(-3.0, 2.0, (101, 128)).astype(np.float32)
    rand.tofile(OUT / "random.features.f32")
    meta = {}
    for name, x, m in (("hello", feats, mask), ("random", rand, np.arange(101) < 83)):
        tower, embed, valid = run(x, m)
        tower.numpy().astype(np.float32).tofile(OUT / f"{prefix}.{name}.tower.f32")
        embed.numpy().astype(np.float32).tofile(OUT / f"{prefix}.{name}.embed.f32")
        meta[name] = {"frames": int(x.shape[0]), "tokens": int(valid.shape[0]),
                      "mask": "".join("1" if v else "0" for v in valid.numpy())}
    (OUT / f"{prefix}.json").write_text(json.dumps(meta, indent=1) + "\n")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--llama-cpp", type=Path,
                    default=Path("/opt/kvshare-ref/llama_cpp_python-0.3.36/vendor/llama.cpp"))
    ap.add_argument("--work", type=Path, default=Path("/tmp/audio_mmproj"))
    args = ap.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    sys.path.insert(0, str(args.llama_cpp / "gguf-py"))
    gemma4a(args.llama_cpp, args.work)
    gemma3na()


if __name__ == "__main__":
    main()
