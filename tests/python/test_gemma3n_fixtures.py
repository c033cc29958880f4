"""Gemma 3n against HF transformers and llama.cpp on the tiny fixture models.

tests/fixtures/gemma3n/ holds tiny random-weight Gemma3nForCausalLM models
built with transformers and converted by llama.cpp's own convert_hf_to_gguf.py
(tests/tools/gemma3n_fixtures.py, run by hand): e2b (6 layers S S S F S F, the
last 2 KV-shared, activation sparsity on layers 0-1, AltUp with 4 streams,
Laurel, per-layer embeddings, a window shorter than the prompt) in f32, f16,
Q8_0 and Q4_K_M, and pattern5 (HF's every-5th-full pattern over 10 layers, 5
shared, sparsity 0.95 / 0.95 / 0.9 / 0.8 then dense). <name>.hf.json: HF's
logits at every prompt position and along its greedy continuation;
<name>.llamacpp.json: llama.cpp's greedy continuation with its top logits per
GGUF (llama.cpp patched to read the Gemma 3n keys it otherwise hardcodes and
to cut the sparsity at HF's population std; see the fixtures' README).

kvshare runs each file teacher-forced on HF's tokens (a prefill returning every
position, then one cached decode step per token).
- f32: max |kvshare - HF| over the vocabulary, divided by HF's logit range,
  below REL_TOL = 1e-5 at every position and step (measured: 3.0e-6 / 5.6e-6),
  and HF's greedy token at every step. f16 weights: F16_REL_TOL.
- llama.cpp, per weight type: the logits within MAX_ABS of llama.cpp's top 8,
  and the same greedy token wherever llama.cpp's top-2 margin is at least
  MARGIN (llama.cpp rounds GELU inputs through an fp16 table and quantizes
  activations in its own order).
"""
import json

import pytest

np = pytest.importorskip("numpy")

from logits_dump import ROOT, check_llamacpp_case, logits, skip_if_no_dump  # noqa: E402

skip_if_no_dump()

FIXTURES = ROOT / "tests" / "fixtures" / "gemma3n"
REL_TOL = 1e-5
F16_REL_TOL = 0.01  # measured 2.6e-3
# Measured: f32 0.0061, f16 0.019, Q8_0 0.28, Q4_K_M 0.29 (llama.cpp's own noise,
# batch against one-by-one, is up to 0.10 on Q4_K_M).
MAX_ABS = {"f32": 0.05, "f16": 0.1, "q8_0": 1.0, "q4_k_m": 2.0}
MARGIN = {"f32": 0.05, "f16": 0.1, "q8_0": 0.7, "q4_k_m": 0.7}


def load(name):
    path = FIXTURES / name
    if not path.is_file():
        pytest.skip(f"{path} absent")
    return json.loads(path.read_text())


@pytest.mark.parametrize("name, kind, tol", [("e2b", "f32", REL_TOL), ("pattern5", "f32", REL_TOL),
                                             ("e2b", "f16", F16_REL_TOL)])
def test_logits_match_hf(name, kind, tol):
    hf = load(f"{name}.hf.json")
    prompt, tokens = hf["prompt_ids"], hf["tokens"]
    assert len(prompt) > hf["hf_config"]["sliding_window"], "the prompt must outrun the window"
    want = np.array(hf["prefill_logits"] + hf["step_logits"][1:], dtype=np.float64)
    got = logits(prompt, tokens[:-1], model=FIXTURES / f"{name}.{kind}.gguf", all_positions=True)
    assert got.shape == want.shape
    rel = np.abs(got - want).max(axis=1) / (want.max(axis=1) - want.min(axis=1))
    print(f"{name}.{kind}: max |kvshare - HF| / logit range over {len(rel)} rows: {rel.max():.3g}")
    assert rel.max() < tol, (name, kind, int(rel.argmax()), rel.max())
    assert list(got[len(prompt) - 1:].argmax(axis=1)) == tokens, (name, kind)


CASES = [(m, i) for m, n in (("e2b", 4), ("pattern5", 1)) for i in range(n)]


@pytest.mark.parametrize("name, case", CASES)
def test_greedy_matches_llamacpp(name, case):
    c = load(f"{name}.llamacpp.json")["cases"][case]
    kind = c["gguf"].split(".")[1]
    check_llamacpp_case(c, FIXTURES / c["gguf"], MARGIN[kind], MAX_ABS[kind])
