"""kvshare.Model from Python on the tiny Gemma 3n fixtures (tests/fixtures/gemma3n/):
the KV-sharing plan in the config, the loader's warning about the hyperparameters
llama.cpp hardcodes (a UserWarning and Model.warnings), greedy generation equal
to HF transformers' greedy continuation, the Gemma chat format, and prompt-lookup
speculation giving the same tokens."""
from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from peers import need

kvshare = need("kvshare")

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures" / "gemma3n"
CLI = ROOT / os.environ.get("KVSHARE_BUILD_DIR", "build") / "bin" / "kvshare"


def load(name, **kw):
    with pytest.warns(UserWarning, match="llama.cpp ignores this file's Gemma 3n hyperparameter keys"):
        return kvshare.Model(str(FIXTURES / name), max_context=128, num_threads=2, **kw)


def test_config_and_warning():
    m = load("e2b.f32.gguf")
    c = m.config
    assert c["architecture"] == "gemma3n" and c["n_layer"] == 6
    assert c["num_kv_shared_layers"] == 2
    assert len(m.warnings) == 1 and "Laurel rank 16 (llama.cpp: 64)" in m.warnings[0]


@pytest.mark.parametrize("name", ["e2b", "pattern5"])
def test_greedy_generation_equals_hf(name):
    hf = json.loads((FIXTURES / f"{name}.hf.json").read_text())
    m = load(f"{name}.f32.gguf")
    want = hf["tokens"][:24]
    stream = m.generate(hf["prompt_ids"], max_new_tokens=len(want))
    text = "".join(stream)
    assert stream.stats["generated_tokens"] == len(want)
    assert text == m.detokenize(want)
    # Prompt lookup keeps the greedy text; the tiny models fall into loops
    # within 80 tokens, which gives the lookup something to find.
    plain = "".join(m.generate(hf["prompt_ids"], max_new_tokens=80))
    assert plain.startswith(text)
    assert "".join(m.generate(hf["prompt_ids"], max_new_tokens=80, draft="ngram")) == plain
    assert m.last_stats["drafted_tokens"] > 0


@pytest.mark.skipif(not CLI.is_file(), reason="the kvshare CLI is not built")
def test_chat_equals_the_cli():
    m = load("e2b.q8_0.gguf", kv_dtype="q8_0")
    out = subprocess.run([str(CLI), "generate", "--model", str(FIXTURES / "e2b.q8_0.gguf"), "--prompt", "Hi there",
                          "-n", "12", "--threads", "2", "--max-context", "128", "--kv-dtype", "q8_0",
                          "--chat-template", "gemma"], check=True, capture_output=True, text=True)
    assert "".join(m.generate("Hi there", chat="gemma", max_new_tokens=12)) == out.stdout
    assert m.chat_tokens([("user", "Hi there")], template="gemma")[:2] == [2, 5]
