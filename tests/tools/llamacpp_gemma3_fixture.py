"""Writes tests/fixtures/llamacpp_gemma3_greedy.json: llama.cpp's own greedy
continuations of a few prompts on the default model, with its top logits at
every step. tests/python/test_gemma3_llamacpp.py holds kvshare to them.

llama.cpp is a peer, not a dependency: this script is run by hand, and only
its output (token ids and logits, plain data) is kept in the tree.

  pip install llama-cpp-python numpy     # builds llama.cpp from the sdist
  python3 tests/tools/llamacpp_gemma3_fixture.py [MODEL]

For each prompt: its token ids as llama.cpp tokenizes them (with <bos>, no
special-token parsing), then STEPS greedy steps; at step i (the logits that
predict generated token i, i.e. after the prompt and tokens < i) the TOP_K
highest logits as [token, logit] pairs, best first.
"""
import json
import sys
from pathlib import Path

import numpy as np
import llama_cpp
from llama_cpp import Llama

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "python"))
from default_model import DEFAULT_MODEL  # noqa: E402

MODEL = Path(sys.argv[1]) if len(sys.argv) > 1 else DEFAULT_MODEL
OUT = ROOT / "tests" / "fixtures" / "llamacpp_gemma3_greedy.json"
STEPS = 32
TOP_K = 8
PROMPTS = [
    "The capital of France is",
    "def fibonacci(n):\n    if n <= 1:\n        return n\n    return",
    "Water boils at a temperature of",
]


def _dumps(fixture):
    """JSON with one line per step (the file stays small and diffable)."""
    compact = lambda v: json.dumps(v, separators=(",", ":"))
    head = {k: v for k, v in fixture.items() if k != "cases"}
    lines = ["{"] + [f" {json.dumps(k)}: {json.dumps(v)}," for k, v in head.items()] + [' "cases": [']
    for i, c in enumerate(fixture["cases"]):
        lines.append(f'  {{"prompt": {json.dumps(c["prompt"])}, "prompt_ids": {compact(c["prompt_ids"])}, "top": [')
        lines += [f"   {compact(step)}" + ("," if j + 1 < len(c["top"]) else "") for j, step in enumerate(c["top"])]
        lines.append("  ]}" + ("," if i + 1 < len(fixture["cases"]) else ""))
    return "\n".join(lines + [" ]", "}"])


def main():
    llm = Llama(model_path=str(MODEL), n_ctx=512, n_batch=512, logits_all=True, verbose=False, n_threads=2)
    cases = []
    for text in PROMPTS:
        ids = llm.tokenize(text.encode(), add_bos=True, special=False)
        llm.reset()
        llm.eval(ids)
        steps = []
        for _ in range(STEPS):
            logits = np.asarray(llm.scores[llm.n_tokens - 1], dtype=np.float64)
            top = np.argsort(-logits, kind="stable")[:TOP_K]
            steps.append([[int(t), round(float(logits[t]), 4)] for t in top])
            llm.eval([int(top[0])])
        cases.append({"prompt": text, "prompt_ids": ids, "top": steps})
    fixture = {
        "source": f"llama-cpp-python {llama_cpp.__version__} (llama.cpp), CPU, greedy, logits_all",
        "system_info": llama_cpp.llama_cpp.llama_print_system_info().decode().strip(),
        "model": MODEL.name,
        "steps": STEPS,
        "top_k": TOP_K,
        "cases": cases,
    }
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(_dumps(fixture) + "\n")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
