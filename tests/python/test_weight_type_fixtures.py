"""The low-bit weight types on files llama.cpp's llama-quantize made
(tests/fixtures/weight_types/, written by tests/tools/weight_type_fixtures.py
from the tiny Gemma 4 fixture: the Q2_K, Q3_K_M, IQ4_NL, IQ4_XS, TQ1_0,
TQ2_0, IQ1_S, IQ1_M, IQ2_XXS, IQ2_XS, IQ2_M (IQ2_S), IQ3_XXS and IQ3_S
presets, each a mix of its own type with llama.cpp's fallbacks, and MXFP4,
NVFP4, Q1_0 and Q2_0 forced onto q / gate / up): every file loads, and kvshare
run teacher-forced on llama.cpp's greedy tokens gives logits within MAX_ABS of
llama.cpp's top 8 at every step, and the same greedy token wherever
llama.cpp's top-2 margin is at least MARGIN. Both quantize the activations to
int8 for these types, in their own blocking and summation order, so the
logits differ by more than the f32 fixtures do (the bounds are those of the
Gemma 4 fixtures' Q8_0 and Q4_K_M files, test_gemma4_fixtures.py, where the
same noise measured 0.34 and 0.23)."""
import json

import pytest

np = pytest.importorskip("numpy")

from logits_dump import ROOT, check_llamacpp_case, skip_if_no_dump  # noqa: E402

skip_if_no_dump()

FIXTURES = ROOT / "tests" / "fixtures" / "weight_types"
DOC = json.loads((FIXTURES / "llamacpp.json").read_text())
MAX_ABS = 1.0
MARGIN = 0.7
# The type each file exists for (e2b.<name>.gguf).
OWN_TYPE = {"q2_k": "Q2_K", "q3_k_m": "Q3_K", "iq4_nl": "IQ4_NL", "iq4_xs": "IQ4_XS", "tq1_0": "TQ1_0", "tq2_0": "TQ2_0",
            "mxfp4": "MXFP4", "iq1_s": "IQ1_S", "iq1_m": "IQ1_M", "iq2_xxs": "IQ2_XXS", "iq2_xs": "IQ2_XS",
            "iq2_m": "IQ2_S", "iq3_xxs": "IQ3_XXS", "iq3_s": "IQ3_S", "nvfp4": "NVFP4", "q1_0": "Q1_0", "q2_0": "Q2_0"}


@pytest.mark.parametrize("case", DOC["cases"], ids=[c["gguf"] for c in DOC["cases"]])
def test_greedy_matches_llamacpp(case):
    assert OWN_TYPE[case["gguf"].split(".")[1]] in case["tensor_types"].values()
    check_llamacpp_case(case, FIXTURES / case["gguf"], MARGIN, MAX_ABS)
