#!/usr/bin/env python3
"""Writes tests/fixtures/weight_types/: the tiny Gemma 4 fixture model
(tests/fixtures/gemma4/e2b.f32.gguf) quantized by llama.cpp's llama-quantize
into the low-bit presets users download, and llama.cpp's greedy runs on each.
Run by hand; the references are built locally and never committed:

  # llama-quantize and libllama from the llama.cpp vendored in the
  # llama-cpp-python 0.3.36 sdist (cmake -B build && cmake --build build), and
  # the sdist's own llama_cpp package (ctypes) over that libllama:
  PYTHONPATH=/path/to/llama_cpp_python-0.3.36 LLAMA_CPP_LIB_PATH=/path/to/build/bin \\
      python3 tests/tools/weight_type_fixtures.py --llama-quantize /path/to/build/bin/llama-quantize \\
      --llama-imatrix /path/to/build/bin/llama-imatrix

The imatrix presets (IQ1 / IQ2 / IQ3) need an importance matrix; the script
first makes one from the fixture model over a text every Debian machine has:

  llama-imatrix -m tests/fixtures/gemma4/e2b.f32.gguf -f /usr/share/common-licenses/GPL-2 \\
      -o IMATRIX -c 64 -t 1 --chunks 40

For each (name N, preset P, extra arguments A) in PRESETS the script runs

  llama-quantize [--imatrix IMATRIX] A tests/fixtures/gemma4/e2b.f32.gguf tests/fixtures/weight_types/e2b.N.gguf P 1

(--imatrix for the IQ1 / IQ2 / IQ3 presets only)

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
import tempfile
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
# NVFP4 has no preset either, and the Q1_0 / Q2_0 presets have no fallback
# for the fixture's 64-wide matrices: they go onto the same matrices. IQ2_M is the
# preset that writes IQ2_S (the IQ2_S preset writes IQ2_XS).
PRESETS = [("q2_k", "Q2_K", []), ("q3_k_m", "Q3_K_M", []), ("iq4_nl", "IQ4_NL", []), ("iq4_xs", "IQ4_XS", []),
           ("tq1_0", "TQ1_0", []), ("tq2_0", "TQ2_0", []),
           ("mxfp4", "Q8_0", ["--tensor-type", "attn_q=mxfp4", "--tensor-type", "ffn_gate=mxfp4",
                              "--tensor-type", "ffn_up=mxfp4"]),
           ("iq1_s", "IQ1_S", []), ("iq1_m", "IQ1_M", []), ("iq2_xxs", "IQ2_XXS", []), ("iq2_xs", "IQ2_XS", []),
           ("iq2_m", "IQ2_M", []), ("iq3_xxs", "IQ3_XXS", []), ("iq3_s", "IQ3_S", []),
           ("nvfp4", "Q8_0", ["--tensor-type", "attn_q=nvfp4", "--tensor-type", "ffn_gate=nvfp4",
                              "--tensor-type", "ffn_up=nvfp4"]),
           ("q1_0", "Q8_0", ["--tensor-type", "attn_q=q1_0", "--tensor-type", "ffn_gate=q1_0",
                             "--tensor-type", "ffn_up=q1_0"]),
           ("q2_0", "Q8_0", ["--tensor-type", "attn_q=q2_0", "--tensor-type", "ffn_gate=q2_0",
                             "--tensor-type", "ffn_up=q2_0"])]
IMATRIX_TEXT = Path("/usr/share/common-licenses/GPL-2")
IMATRIX_PRESETS = {"IQ1_S", "IQ1_M", "IQ2_XXS", "IQ2_XS", "IQ2_M", "IQ3_XXS", "IQ3_S"}
SOURCE = GEMMA4 / "e2b.f32.gguf"
DUMP = ROOT / "build" / "tests" / "gguf_dequant_dump"  # kvshare's tensor lister
STEPS, TOP_K = 32, 8


def tensor_types(path: Path) -> dict:
    """Tensor name -> ggml type name, as kvshare's reader lists them
    (gguf-py's reader refuses type ids it does not know, such as Q2_0's)."""
    listed = subprocess.run([str(DUMP), str(path), "--list"], check=True, capture_output=True, text=True).stdout
    return {line.split()[0]: line.split()[1] for line in listed.splitlines()}


def make_imatrix(llama_imatrix: Path, out: Path) -> None:
    subprocess.run([str(llama_imatrix), "-m", str(SOURCE), "-f", str(IMATRIX_TEXT), "-o", str(out), "-c", "64", "-t",
                    "1", "--chunks", "40"], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def quantize(llama_quantize: Path, imatrix: Path, name: str, preset: str, extra: list[str]) -> Path:
    out = OUT / f"e2b.{name}.gguf"
    with_imatrix = ["--imatrix", str(imatrix)] if preset in IMATRIX_PRESETS else []
    subprocess.run([str(llama_quantize), *with_imatrix, *extra, str(SOURCE), str(out), preset, "1"],
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
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
    ap.add_argument("--llama-imatrix", type=Path, required=True)
    args = ap.parse_args()
    import llama_cpp

    OUT.mkdir(parents=True, exist_ok=True)
    cases = []
    prompt = json.loads((GEMMA4 / "e2b.hf.json").read_text())["prompt_ids"]
    imatrix = Path(tempfile.mkdtemp()) / "e2b.imatrix.gguf"
    make_imatrix(args.llama_imatrix, imatrix)
    for name, preset, extra in PRESETS:
        path = quantize(args.llama_quantize, imatrix, name, preset, extra)
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
