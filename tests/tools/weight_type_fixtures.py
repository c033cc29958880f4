#!/usr/bin/env python3
"""Writes tests/fixtures/weight_types/: the tiny Gemma 4 fixture model
(tests/fixtures/gemma4/e2b.f32.gguf) quantized by llama.cpp's llama-quantize
into the low-bit presets users download, and llama.cpp's greedy runs on each.
Run by hand; the references are built locally and never committed:

  # llama-quantize and libllama from the llama.cpp vendored in the
  # llama-cpp-python 0.3.36 sdist (cmake -B build && cmake --build build), and
  # the sdist's own llama_cpp package (ctypes) over that libllama:
  PYTHONPATH=/path/to/llama_cpp_python-0.3.36 LLAMA_CPP_LIB_PATH=/path/to/build/bin \\
      python3 tests/tools/weight_type_fixtures.py --llama-quantize /path/to/build/bin/llama-quantize

For each (name N, preset P, extra arguments A) in PRESETS the script runs

  llama-quantize A tests/fixtures/gemma4/e2b.f32.gguf tests/fixtures/weight_types/e2b.N.gguf P 1

(e2b's matrices are 256 wide, so the K-quant, IQ4_XS and TQ presets use
their own types for q / k / v / gate / up and the embedding; llama-quantize
falls back to IQ4_NL and Q4_0-Q8_0 types for the 32- and 64-wide ones), then
llama.cpp's greedy continuation of the Gemma 4 fixture's prompt (f32 KV, no
flash attention, prompt in one batch) with its top 8 logits per step, into
llamacpp.json:

  {source, system_info, steps, top_k, cases: [{gguf, preset, tensor_types,
   prompt_ids, tokens, top: [[[id, logit] x 8] per step], min_margin}]}

tests/python/test_weight_type_fixtures.py checks kvshare against it.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gemma4_fixtures import top_entry  # noqa: E402  (the same greedy record)

ROOT = Path(__file__).resolve().parents[2]
GEMMA4 = ROOT / "tests" / "fixtures" / "gemma4"
OUT = ROOT / "tests" / "fixtures" / "weight_types"
# (name, llama-quantize preset, extra arguments). llama-quantize writes MXFP4
# only for MoE experts (MXFP4_MOE), where the tiny MoE fixture's routing flips
# on near-ties under any quantization; "mxfp4" forces it onto dense matrices.
PRESETS = [("q2_k", "Q2_K", []), ("q3_k_m", "Q3_K_M", []), ("iq4_nl", "IQ4_NL", []), ("iq4_xs", "IQ4_XS", []),
           ("tq1_0", "TQ1_0", []), ("tq2_0", "TQ2_0", []),
           ("mxfp4", "Q8_0", ["--tensor-type", "attn_q=mxfp4", "--tensor-type", "ffn_gate=mxfp4",
                              "--tensor-type", "ffn_up=mxfp4"])]
SOURCE = GEMMA4 / "e2b.f32.gguf"
STEPS, TOP_K = 32, 8


def tensor_types(path: Path) -> dict:
    from gguf import GGUFReader

    return {t.name: t.tensor_type.name for t in GGUFReader(str(path)).tensors}


def quantize(llama_quantize: Path, name: str, preset: str, extra: list[str]) -> Path:
    out = OUT / f"e2b.{name}.gguf"
    subprocess.run([str(llama_quantize), *extra, str(SOURCE), str(out), preset, "1"], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    mix = Counter(tensor_types(out).values())
    print(f"{out.name}: " + ", ".join(f"{k} x{v}" for k, v in mix.most_common()))
    return out


def greedy(path: Path, prompt: list[int]) -> dict:
    import llama_cpp

    llm = llama_cpp.Llama(model_path=str(path), n_ctx=128, n_batch=128, n_ubatch=128, logits_all=True,
                          n_threads=1, n_threads_batch=1, seed=0, verbose=False, flash_attn=False,
                          type_k=llama_cpp.GGML_TYPE_F32, type_v=llama_cpp.GGML_TYPE_F32)
    llm.reset()
    llm.eval(prompt)
    tokens, top, margins = [], [], []
    for _ in range(STEPS):
        entry, margin, best = top_entry(np.asarray(llm.scores[llm.n_tokens - 1], dtype=np.float64), TOP_K)
        top.append(entry)
        margins.append(margin)
        tokens.append(best)
        llm.eval([best])
    del llm
    return {"tokens": tokens, "top": top, "min_margin": float("%.4g" % min(margins))}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--llama-quantize", type=Path, required=True)
    args = ap.parse_args()
    import llama_cpp

    OUT.mkdir(parents=True, exist_ok=True)
    cases = []
    prompt = json.loads((GEMMA4 / "e2b.hf.json").read_text())["prompt_ids"]
    for name, preset, extra in PRESETS:
        path = quantize(args.llama_quantize, name, preset, extra)
        run = greedy(path, prompt)
        cases.append({"gguf": path.name, "preset": " ".join(extra + [preset]), "tensor_types": tensor_types(path),
                      "prompt_ids": prompt, **run})
        print(f"  greedy {run['tokens'][:10]}..., min top-2 margin {run['min_margin']}")
    doc = {
        "source": f"llama-quantize and llama-cpp-python {llama_cpp.__version__} (llama.cpp ggml-org/llama.cpp@0c1e57098), "
                  "CPU, greedy, f32 KV, no flash attention",
        "system_info": llama_cpp.llama_cpp.llama_print_system_info().decode().strip(),
        "quantized_from": str(SOURCE.relative_to(ROOT)),
        "steps": STEPS,
        "top_k": TOP_K,
        "cases": cases,
    }
    (OUT / "llamacpp.json").write_text(json.dumps(doc, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
