"""Gemma 4 against HF transformers and llama.cpp on the tiny fixture models.

tests/fixtures/gemma4/ holds tiny random-weight Gemma4ForCausalLM models built
with transformers and converted by llama.cpp's own convert_hf_to_gguf.py
(tests/tools/gemma4_fixtures.py, run by hand), one per variant: e2b (per-layer
embeddings, KV sharing, double-wide MLP, head sizes 32 / 64, softcap), keqv
(k_eq_v with per-layer KV heads), moe (26B-A4B-like), noshare, hfrule (a layout
where llama.cpp's fixed sharing rule picks other source layers than HF's).
<name>.hf.json: HF's logits at every prompt position and along its greedy
continuation; <name>.llamacpp.json: llama.cpp's greedy continuation with its
top logits (also for the Q8_0 / Q4_K_M quantizations of e2b).

kvshare runs each file teacher-forced on HF's tokens (a prefill returning every
position, then one cached decode step per token). f32 files: max |kvshare - HF|
over the vocabulary, divided by HF's logit range, must stay below REL_TOL at
every position and step (measured: < 1e-6), and kvshare's greedy token equals
HF's at every step. llama.cpp, which rounds GELU inputs through an fp16 table,
must agree on the greedy token wherever its own top-2 margin is clear (MARGIN).
"""
import json
from pathlib import Path

import pytest

np = pytest.importorskip("numpy")

from logits_dump import ROOT, check_llamacpp_case, logits, skip_if_no_dump  # noqa: E402

skip_if_no_dump()

FIXTURES = ROOT / "tests" / "fixtures" / "gemma4"
HF_MODELS = ["e2b", "keqv", "moe", "noshare", "hfrule"]
REL_TOL = 1e-4
# kvshare against llama.cpp, per weight type of the file: the bound on the logit
# difference over llama.cpp's top 8, and the top-2 margin from which the greedy
# tokens must agree (a few times the measured differences: f32 0.0049, f16
# 0.016, Q8_0 0.34, Q4_K_M 0.23; llama.cpp rounds GELU inputs and F16-matmul
# activations to fp16, and quantizes activations in its own order).
MAX_ABS = {"f32": 0.05, "f16": 0.1, "q8_0": 1.0, "q4_k_m": 1.0}
MARGIN = {"f32": 0.05, "f16": 0.1, "q8_0": 0.7, "q4_k_m": 0.7}


def load(name):
    path = FIXTURES / name
    if not path.is_file():
        pytest.skip(f"{path} absent")
    return json.loads(path.read_text())


def run_teacher_forced(gguf, prompt, tokens):
    """kvshare's logits: every prompt position, then a cached step per token but the last."""
    return logits(prompt, tokens[:-1], model=FIXTURES / gguf, all_positions=True)


@pytest.mark.parametrize("name", HF_MODELS)
def test_logits_match_hf(name):
    hf = load(f"{name}.hf.json")
    prompt, tokens = hf["prompt_ids"], hf["tokens"]
    assert len(prompt) > hf["hf_config"]["sliding_window"], "the prompt must outrun the window"
    assert len(tokens) >= 32
    want = np.array(hf["prefill_logits"] + hf["step_logits"][1:], dtype=np.float64)
    np.testing.assert_array_equal(want[len(prompt) - 1], np.array(hf["step_logits"][0]))
    got = run_teacher_forced(hf["gguf"], prompt, tokens)
    assert got.shape == want.shape
    rel = np.abs(got - want).max(axis=1) / (want.max(axis=1) - want.min(axis=1))
    print(f"{name}: max |kvshare - HF| / logit range over {len(rel)} rows: {rel.max():.3g}")
    assert rel.max() < REL_TOL, (name, int(rel.argmax()), rel.max())
    # Greedy: kvshare's choice at every step is HF's.
    ours = got[len(prompt) - 1:].argmax(axis=1)
    assert list(ours) == tokens, name


LLAMACPP_CASES = [(m, i) for m, n in (("e2b", 4), ("keqv", 1), ("moe", 1), ("noshare", 1)) for i in range(n)]


@pytest.mark.parametrize("name,case", LLAMACPP_CASES)
def test_greedy_matches_llamacpp(name, case):
    """Teacher-forced on llama.cpp's greedy tokens, on the same file (f32, f16,
    and llama.cpp's own Q8_0 / Q4_K_M quantizations of e2b): kvshare's greedy
    token is llama.cpp's wherever llama.cpp's top-2 margin is at least MARGIN,
    and its logits stay within MAX_ABS[type] of llama.cpp's top 8."""
    c = load(f"{name}.llamacpp.json")["cases"][case]
    kind = c["gguf"].split(".")[1]
    check_llamacpp_case(c, FIXTURES / c["gguf"], MARGIN[kind], MAX_ABS[kind])
