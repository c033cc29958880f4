"""kvshare.Model from Python on the tiny Gemma 4 fixtures (tests/fixtures/gemma4/):
per-layer geometry in the config, the loader's warning where llama.cpp would share
KV from other layers (a UserWarning and Model.warnings), and greedy generation
that equals HF transformers' greedy continuation of the fixture's prompt."""
from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest

from peers import need

kvshare = need("kvshare")

FIXTURES = Path(__file__).resolve().parents[2] / "tests" / "fixtures" / "gemma4"


def test_per_layer_config():
    m = kvshare.Model(str(FIXTURES / "e2b.f32.gguf"), max_context=128, num_threads=1)
    c = m.config
    assert c["architecture"] == "gemma4"
    assert c["layer_head_dim"] == [32, 32, 64, 32, 64]
    assert c["layer_n_ff"] == [32, 32, 32, 64, 64]
    assert c["num_kv_shared_layers"] == 2
    assert m.warnings == []


def test_sharing_rule_warning():
    with pytest.warns(UserWarning, match=r"layer 4 reads 3 \(llama.cpp: 2\)"):
        m = kvshare.Model(str(FIXTURES / "hfrule.f32.gguf"), max_context=128, num_threads=1)
    assert len(m.warnings) == 1


def test_logits_follow_hf_greedy():
    hf = json.loads((FIXTURES / "keqv.hf.json").read_text())
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        m = kvshare.Model(str(FIXTURES / "keqv.f32.gguf"), max_context=128, num_threads=2)
    seq = list(hf["prompt_ids"])
    for want in hf["tokens"][:8]:
        logits = m.logits(seq)
        assert int(logits.argmax()) == want
        seq.append(want)


ASSISTANT = FIXTURES.parent / "gemma4_assistant"


def test_assistant_drafts_losslessly():
    """kvshare.Assistant (Gemma 4's drafter, which reads the model's KV cache)
    as Model.generate's draft: the target's greedy tokens of the fixture
    (HF's), in fewer verify steps than tokens, with HF's acceptance."""
    spec = json.loads((ASSISTANT / "speculative.hf.json").read_text())
    m = kvshare.Model(str(ASSISTANT / "target.f32.gguf"), max_context=128, num_threads=2)
    a = kvshare.Assistant(str(ASSISTANT / "assistant_plain.f32.gguf"))
    assert a.config["n_embd_backbone"] == m.config["n_embd"] == 128
    assert a.config["is_sliding"] == [True, False] and not a.config["ordered_embeddings"]
    p = spec["prompts"][0]
    plain = "".join(m.generate(p["ids"], max_new_tokens=32))
    text = "".join(m.generate(p["ids"], max_new_tokens=32, draft=a, draft_max=4, draft_adaptive=False))
    assert text == plain == m.detokenize(p["greedy"])
    st = m.last_stats
    clean = next(r for r in p["runs"] if r["name"] == "clean_hf_hf_assistant_plain")
    assert (st["drafted_tokens"], st["accepted_tokens"]) == (clean["drafted"], clean["accepted"])
    assert st["decode_steps"] < 31
    with pytest.raises(kvshare.Error, match="is not a Gemma 4 assistant"):
        kvshare.Assistant(str(ASSISTANT / "target.f32.gguf"))
    other = kvshare.Model(str(FIXTURES / "e2b.f32.gguf"), max_context=128, num_threads=1)
    with pytest.raises(kvshare.Error, match="target of width 128"):
        other.generate("Hi", draft=a)
