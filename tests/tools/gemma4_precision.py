"""float32 accuracy of kvshare's Gemma 4 forward pass at real head geometry,
against HF transformers' float32 forward and two float64 evaluations.
Run by hand, never in CI (docs/precision.md has the figures and the finding).

HF's rotary module computes the RoPE angles and their cos / sin in float32 even
when the model runs in float64, so `model.double()` is not a float64
evaluation: it is one with float32 RoPE. This script measures against both:
  hf64      HF's model.double() as it is
  true64    the same with the rotary module patched to float64 angles (inverse
            frequencies base^(-2i/H) recomputed in double)
Each distance is the max |logit difference| at the last prompt position.

Set-up: the reference venv of tests/tools/gemma4_fixtures.py (torch,
transformers 5.23.0, llama.cpp's convert_hf_to_gguf.py); kvshare built
(build/tests/logits_dump).

  $REF/venv/bin/python tests/tools/gemma4_precision.py [--work DIR] \
      [--llama-cpp $REF/llama_cpp_python-0.3.36/vendor/llama.cpp] \
      [--head-dim 256] [--layers SSSFSF] [--init 0.03] [--lengths 400,700]
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(Path(__file__).parent))
import gemma4_fixtures as g4  # noqa: E402  (COMMON, randomize, convert, VOCAB, BYTE_BASE)


def build(args, work: Path):
    from transformers import Gemma4ForCausalLM, Gemma4TextConfig

    S, F = "sliding_attention", "full_attention"
    cfg = dict(g4.COMMON, max_position_embeddings=4096, hidden_size=512, intermediate_size=1024,
               num_hidden_layers=len(args.layers), layer_types=[S if c == "S" else F for c in args.layers],
               num_attention_heads=8, num_key_value_heads=1, head_dim=args.head_dim,
               global_head_dim=2 * args.head_dim, num_kv_shared_layers=0, hidden_size_per_layer_input=0,
               sliding_window=512, initializer_range=args.init)
    torch.manual_seed(5)
    model = Gemma4ForCausalLM(Gemma4TextConfig(**cfg)).to(torch.float32)
    g4.randomize(model, 1005)
    model.eval()
    d = work / "model"
    if d.exists():
        shutil.rmtree(d)
    model.save_pretrained(d)
    for f in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(ROOT / "tests/fixtures/gemma4" / f, d / f)
    g4.convert(d, "f32", work / "model.f32.gguf", args.llama_cpp)
    return model


def float64_rope(model):
    """Patches the rotary module: float64 angles and cos / sin for float64 inputs."""
    import transformers.models.gemma4.modeling_gemma4 as mg

    cfg = model.config
    orig = mg.Gemma4TextRotaryEmbedding.forward

    def forward(self, x, position_ids, layer_type):
        if x.dtype != torch.float64:
            return orig(self, x, position_ids, layer_type)
        buf = getattr(self, f"{layer_type}_inv_freq")
        base, H = cfg.rope_parameters[layer_type]["rope_theta"], 2 * buf.numel()
        inv = torch.tensor([base ** (-2.0 * i / H) if buf[i] != 0 else 0.0 for i in range(buf.numel())],
                           dtype=torch.float64)
        assert torch.allclose(inv, buf.double(), rtol=1e-6)
        angles = position_ids[..., None].double() * inv
        emb = torch.cat((angles, angles), -1)
        scale = getattr(self, f"{layer_type}_attention_scaling")
        return emb.cos() * scale, emb.sin() * scale

    return orig, forward


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--work", type=Path, default=Path(os.environ.get("KVSHARE_REF_DIR", "/opt/kvshare-ref")) / "precision")
    ap.add_argument("--llama-cpp", type=Path,
                    default=Path(os.environ.get("KVSHARE_REF_DIR", "/opt/kvshare-ref")) / "llama_cpp_python-0.3.36/vendor/llama.cpp")
    ap.add_argument("--logits-dump", type=Path, default=ROOT / "build/tests/logits_dump")
    ap.add_argument("--head-dim", type=int, default=256)
    ap.add_argument("--layers", default="SSSFSF")
    ap.add_argument("--init", type=float, default=0.03)
    ap.add_argument("--lengths", default="400,700")
    args = ap.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    import transformers.models.gemma4.modeling_gemma4 as mg

    model = build(args, args.work)
    orig, patched = float64_rope(model)
    rng = np.random.default_rng(1)
    rows = []
    for n in map(int, args.lengths.split(",")):
        ids = [2] + [int(t) for t in rng.integers(g4.BYTE_BASE, g4.VOCAB, size=n - 1)]
        x = torch.tensor([ids])
        with torch.no_grad():
            hf32 = model.float()(input_ids=x, use_cache=False).logits[0, -1].double().numpy()
            m64 = model.double()
            hf64 = m64(input_ids=x, use_cache=False).logits[0, -1].numpy()
            mg.Gemma4TextRotaryEmbedding.forward = patched
            true64 = m64(input_ids=x, use_cache=False).logits[0, -1].numpy()
            mg.Gemma4TextRotaryEmbedding.forward = orig
            model.float()
        out = args.work / "kvshare.f32"
        subprocess.run([str(args.logits_dump), str(args.work / "model.f32.gguf"), str(out),
                        ",".join(map(str, ids))], check=True)
        kv = np.fromfile(out, dtype=np.float32).astype(np.float64)
        d = lambda a, b: float(np.abs(a - b).max())
        row = {"positions": n, "hf32_vs_hf64": d(hf32, hf64), "kvshare_vs_hf64": d(kv, hf64),
               "hf32_vs_true64": d(hf32, true64), "kvshare_vs_true64": d(kv, true64),
               "hf64_vs_true64": d(hf64, true64)}
        rows.append(row)
        print(json.dumps(row))
    return rows


if __name__ == "__main__":
    main()
