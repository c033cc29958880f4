#!/usr/bin/env python3
"""Peer for `kvshare_bench --benchmark_filter=cuda/model` (bench/cuda_model_bench.cc):
HF transformers' Gemma 3 text model at Gemma 3 270M's shapes with random weights
on the GPU (bf16, eager and SDPA attention), one sequence: prefill tok/s of a
512-token prompt and decode tok/s after it (a token at a time with the KV cache,
greedy). Prints one JSON line per attention implementation.
  python3 bench/peer_hf_gemma3_gpu.py [--decode-steps 128]
"""
import argparse
import json
import time

import torch
from transformers import Gemma3ForCausalLM, Gemma3TextConfig


def run(attn, steps):
    cfg = Gemma3TextConfig(vocab_size=262144, hidden_size=640, intermediate_size=2048, num_hidden_layers=18,
                           num_attention_heads=4, num_key_value_heads=1, head_dim=256, sliding_window=512,
                           max_position_embeddings=4096, attn_implementation=attn)
    torch.manual_seed(0)
    model = Gemma3ForCausalLM(cfg).to("cuda", torch.bfloat16).eval()
    prompt = torch.randint(0, cfg.vocab_size, (1, 512), device="cuda")
    with torch.no_grad():
        for _ in range(2):  # warm up
            model(prompt, use_cache=True)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        out = model(prompt, use_cache=True)
        torch.cuda.synchronize()
        prefill = 512 / (time.perf_counter() - t0)
        past = out.past_key_values
        tok = out.logits[:, -1:].argmax(-1)
        for _ in range(8):  # warm up the one-token shapes too
            out = model(tok, past_key_values=past, use_cache=True)
            past = out.past_key_values
            tok = out.logits[:, -1:].argmax(-1)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(steps):
            out = model(tok, past_key_values=past, use_cache=True)
            past = out.past_key_values
            tok = out.logits[:, -1:].argmax(-1)
        torch.cuda.synchronize()
        decode = steps / (time.perf_counter() - t0)
    return {"peer": "transformers", "attn": attn, "prefill512_tok_s": prefill, "decode_tok_s": decode,
            "device": torch.cuda.get_device_name()}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--decode-steps", type=int, default=128)
    a = ap.parse_args()
    for attn in ("sdpa", "eager"):
        try:
            print(json.dumps(run(attn, a.decode_steps)))
        except Exception as e:  # noqa: BLE001 - report and go on with the other implementation
            print(json.dumps({"peer": "transformers", "attn": attn, "error": str(e)[:300]}))


if __name__ == "__main__":
    main()
