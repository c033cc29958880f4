#!/usr/bin/env python3
"""Peer of kvshare_bench's cuda/model/ rows (bench/cuda_model_bench.cc): HF
transformers on the same GPU, random bf16 weights, SDPA attention and a static
KV cache (transformers' StaticCache), eager (no torch.compile, no CUDA graphs).

Shapes (the configs are built in code: no network, no model files):
  gemma3_270m_shapes   Gemma 3 270M: 18 layers, width 640, FFN 2048, 4 heads on
                       1 KV head of 256, window 512 (5 sliding + 1 full),
                       vocab 262144
  gemma4_e2b_geometry  Gemma 4 E2B, the numbers of bench/gemma4_e2b_geometry.py:
                       35 layers (4 sliding + 1 full) x 7, width 1536, 8 heads on
                       1 KV head, head size 256 sliding / 512 full, window 512,
                       the last 20 layers KV-shared with a double-wide FFN
                       (6144 / 12288), per-layer embeddings of 256, final
                       softcap 30; vocab --gemma4-vocab (default 16384, as
                       kvshare_bench's row of this name builds it: its writer
                       holds the file in memory; the released model has 262144)

Rows, one JSON object per line on stdout (names as docs/gpu_check.md describes, so
scripts/gpu_check_report.py joins them with kvshare's rows of the same name):
  model/<shape>/prefill<P>     one sequence, a P-token prompt (--prompt, 512)
                               into an empty cache, logits of the last token
                               only: P / s
  model/<shape>/decode/C:<c>   c sequences after a --decode-prompt-token prompt
                               each (64, as kvshare_bench), one token per
                               sequence per step: c * steps / s
Each row also gives its setup ("setup": vocab, context). A failed row prints
{"name": ..., "error": ...} and the others go on.

  python3 bench/peer_hf_gpu_models.py [--json out.json]   (rewritten after each row)
  python3 bench/peer_hf_gpu_models.py --tiny --device cpu   # seconds, no GPU
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

SHAPES = ("gemma3_270m_shapes", "gemma4_e2b_geometry")


def gemma3_config(tiny):
    from transformers import Gemma3TextConfig
    if tiny:
        dims = dict(vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=6,
                    num_attention_heads=4, num_key_value_heads=1, head_dim=32, sliding_window=16)
    else:
        dims = dict(vocab_size=262144, hidden_size=640, intermediate_size=2048, num_hidden_layers=18,
                    num_attention_heads=4, num_key_value_heads=1, head_dim=256, sliding_window=512)
    n = dims["num_hidden_layers"]
    return Gemma3TextConfig(**dims, max_position_embeddings=32768,
                            layer_types=["full_attention" if i % 6 == 5 else "sliding_attention" for i in range(n)])


def gemma4_config(tiny, vocab=16384):
    from transformers import Gemma4TextConfig
    if tiny:
        groups, shared = 2, 4
        dims = dict(vocab_size=512, vocab_size_per_layer_input=512, hidden_size=64, intermediate_size=128,
                    num_attention_heads=2, num_key_value_heads=1, head_dim=32, global_head_dim=64,
                    hidden_size_per_layer_input=16, sliding_window=16)
    else:
        groups, shared = 7, 20
        dims = dict(vocab_size=vocab, vocab_size_per_layer_input=vocab, hidden_size=1536, intermediate_size=6144,
                    num_attention_heads=8, num_key_value_heads=1, head_dim=256, global_head_dim=512,
                    hidden_size_per_layer_input=256, sliding_window=512)
    types = (["sliding_attention"] * 4 + ["full_attention"]) * groups
    return Gemma4TextConfig(**dims, num_hidden_layers=len(types), layer_types=types, num_kv_shared_layers=shared,
                            use_double_wide_mlp=True, final_logit_softcapping=30.0, attention_k_eq_v=False,
                            enable_moe_block=False, max_position_embeddings=131072)


def build(shape, tiny, device, dtype, attn, gemma4_vocab=16384):
    """The model with random weights: matrices N(0, 0.02), vectors as initialized."""
    import torch
    if shape == "gemma3_270m_shapes":
        from transformers import Gemma3ForCausalLM as cls
        cfg = gemma3_config(tiny)
    else:
        from transformers import Gemma4ForCausalLM as cls
        cfg = gemma4_config(tiny, gemma4_vocab)
    cfg._attn_implementation = attn
    torch.manual_seed(0)
    old = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        with torch.device(device):  # weights are made on the GPU: no host copy of E2B's 9 GB
            model = cls(cfg)
    finally:
        torch.set_default_dtype(old)
    model = model.to(device=device, dtype=dtype).eval()
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() >= 2:
                p.normal_(0.0, 0.02)
    return model, cfg


class Timer:
    """Wall seconds of a region, the device synchronized at both ends."""

    def __init__(self, device):
        import torch
        self.sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)

    def __enter__(self):
        self.sync()
        self.t0 = time.perf_counter()
        return self

    def __exit__(self, *exc):
        self.sync()
        self.seconds = time.perf_counter() - self.t0


def prefill_row(model, cfg, device, prompt, reps):
    import torch
    from transformers import StaticCache
    cache = StaticCache(config=cfg, max_cache_len=prompt)
    ids = torch.randint(0, cfg.vocab_size, (1, prompt), device=device)
    pos = torch.arange(prompt, device=device)
    times = []
    for i in range(reps + 1):  # the first call warms up
        cache.reset()
        with Timer(device) as t:
            model(input_ids=ids, past_key_values=cache, cache_position=pos, use_cache=True, logits_to_keep=1)
        if i:
            times.append(t.seconds)
    sec = statistics.median(times)
    return {"tok_s": prompt / sec, "ms": sec * 1e3}


def decode_row(model, cfg, device, prompt, rows, steps):
    import torch
    from transformers import StaticCache
    warm = 2
    cache = StaticCache(config=cfg, max_cache_len=prompt + warm + steps)
    ids = torch.randint(0, cfg.vocab_size, (rows, prompt), device=device)
    out = model(input_ids=ids, past_key_values=cache, cache_position=torch.arange(prompt, device=device),
                use_cache=True, logits_to_keep=1)
    tok = out.logits[:, -1:].argmax(-1)
    step_pos = [torch.tensor([prompt + i], device=device) for i in range(warm + steps)]

    def step(i):
        o = model(input_ids=tok, past_key_values=cache, cache_position=step_pos[i], use_cache=True)
        return o.logits[:, -1:].argmax(-1)

    for i in range(warm):
        tok = step(i)
    with Timer(device) as t:
        for i in range(warm, warm + steps):
            tok = step(i)
    return {"tok_s": rows * steps / t.seconds, "ms_per_step": t.seconds / steps * 1e3}


def row_names(shape, prompt, rows):
    """The rows of a shape, named as kvshare_bench's cuda/model/ rows less the 'cuda/'."""
    return [f"model/{shape}/prefill{prompt}"] + [f"model/{shape}/decode/C:{c}" for c in rows]


def run_shape(shape, a, emit):
    import torch
    dtype = torch.bfloat16 if a.device.startswith("cuda") else torch.float32
    prompt = 32 if a.tiny else a.prompt
    ctx = 24 if a.tiny else a.decode_prompt
    steps = 4 if a.tiny else a.decode_steps
    rows = [1, 2] if a.tiny else a.rows
    base = {"peer": "transformers", "attn": a.attn, "cache": "static", "dtype": str(dtype).replace("torch.", "")}
    names = row_names(shape, prompt, rows)
    try:
        t0 = time.perf_counter()
        model, cfg = build(shape, a.tiny, a.device, dtype, a.attn, a.gemma4_vocab)
        build_s = time.perf_counter() - t0
    except Exception as e:  # noqa: BLE001 - every row of the shape reports why
        for n in names:
            emit({"name": n, **base, "error": f"building the model: {type(e).__name__}: {str(e)[:300]}"})
        return
    with torch.no_grad():
        for n, c in zip(names, [None] + rows):
            try:
                if c is None:
                    r, setup = prefill_row(model, cfg, a.device, prompt, a.reps), f"prompt {prompt}"
                else:
                    r, setup = decode_row(model, cfg, a.device, ctx, c, steps), f"context {ctx}+, {steps} steps"
                emit({"name": n, **base, **r, "setup": f"vocab {cfg.vocab_size}, {setup}",
                      "build_s": round(build_s, 2)})
            except Exception as e:  # noqa: BLE001 - report and go on with the next row
                emit({"name": n, **base, "error": f"{type(e).__name__}: {str(e)[:300]}"})
            if a.device.startswith("cuda"):
                torch.cuda.empty_cache()
    del model
    if a.device.startswith("cuda"):
        torch.cuda.empty_cache()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shapes", default=",".join(SHAPES), help="comma list of " + ", ".join(SHAPES))
    ap.add_argument("--rows", default="1,8,64", help="decode rows C (comma list)")
    ap.add_argument("--prompt", type=int, default=512, help="prefill rows: prompt tokens")
    ap.add_argument("--decode-prompt", type=int, default=64, help="decode rows: prompt tokens of each row")
    ap.add_argument("--gemma4-vocab", type=int, default=16384, help="gemma4_e2b_geometry's vocabulary")
    ap.add_argument("--decode-steps", type=int, default=32)
    ap.add_argument("--reps", type=int, default=3, help="timed prefill calls (median)")
    ap.add_argument("--attn", default="sdpa", help="transformers attention implementation")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--tiny", action="store_true", help="toy sizes (seconds on a CPU): checks the script, not speed")
    ap.add_argument("--json", help="also write {device, versions, rows} here")
    a = ap.parse_args()
    a.rows = [int(x) for x in a.rows.split(",") if x]
    shapes = [s for s in a.shapes.split(",") if s]
    bad = [s for s in shapes if s not in SHAPES]
    if bad:
        ap.error(f"--shapes: unknown {bad}; expected some of {list(SHAPES)}")
    rows = []
    info = {"peer": "transformers", "device": None}

    def save():  # after every row: a run cut by its timeout keeps the rows it finished
        if a.json:
            with open(a.json, "w") as f:
                json.dump({**info, "tiny": a.tiny, "rows": rows}, f, indent=1)

    def emit(r):
        rows.append(r)
        print(json.dumps(r), flush=True)
        save()

    try:
        import torch
        info["torch"] = torch.__version__
        if a.device.startswith("cuda") and not torch.cuda.is_available():
            raise RuntimeError("torch sees no CUDA device (use --device cpu --tiny for a dry run)")
        info["device"] = torch.cuda.get_device_name() if a.device.startswith("cuda") else "cpu"
        import transformers
        info["transformers"] = transformers.__version__
    except Exception as e:  # noqa: BLE001 - one line that says why, then every row as skipped
        info["error"] = f"{type(e).__name__}: {e}"
        print(json.dumps(info), flush=True)
        for s in shapes:
            for n in row_names(s, a.prompt, a.rows):
                rows.append({"name": n, "peer": "transformers", "skipped": info["error"]})
    else:
        print(json.dumps(info), flush=True)
        for s in shapes:
            run_shape(s, a, emit)
    save()
    return 0


if __name__ == "__main__":
    sys.exit(main())
