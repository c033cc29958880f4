"""kvshare.Model from Python on the real model (the default model, default_model.py;
skipped when the file is absent): config, tokenizer, logits, streaming generation
(greedy, deterministic, equal to the C++ CLI when it is built), early close, and
errors."""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

import numpy as np
import pytest

from peers import need

kvshare = need("kvshare")

ROOT = Path(__file__).resolve().parents[2]
from default_model import DEFAULT_MODEL as MODEL  # noqa: E402
CLI = ROOT / os.environ.get("KVSHARE_BUILD_DIR", "build") / "bin" / "kvshare"
PROMPT = "What is the capital of France?"
# The GGUF is the base model: the question form makes it answer (model_gemma3_test.cc).
RAW = "Question: What is the capital of France? Answer:"

if not MODEL.is_file():
    pytest.skip(f"{MODEL} absent; run scripts/fetch_model.py", allow_module_level=True)


@pytest.fixture(scope="module")
def model():
    return kvshare.Model(str(MODEL), max_context=512, num_threads=2)


def test_config_and_tokenizer(model):
    c = model.config
    assert c["architecture"] == "gemma3" and c["n_layer"] == 18 and c["head_dim"] == 256
    ids = model.tokenize("Hello world", add_bos=True)
    assert ids[0] == model.tokenize("", add_bos=True)[0] and len(ids) >= 3
    assert model.detokenize(ids[1:]) == "Hello world"
    chat = model.chat_tokens([("user", PROMPT)], template="gemma")
    assert model.detokenize(chat).count("<start_of_turn>") == 0  # control tokens are not rendered
    assert len(chat) > len(model.tokenize(PROMPT))
    with pytest.raises(kvshare.Error, match="no tokenizer.chat_template"):  # the base model has none
        model.chat_tokens([("user", PROMPT)])


def test_greedy_generation_streams_and_is_deterministic(model):
    stream = model.generate(RAW, chat=False, max_new_tokens=8)
    pieces = list(stream)
    assert all(isinstance(p, str) for p in pieces) and len(pieces) >= 2
    text = "".join(pieces)
    assert text.strip().startswith("Paris"), text
    stats = stream.stats
    assert stats["generated_tokens"] >= 1 and stats["prompt_tokens"] == len(model.tokenize(RAW, add_bos=True))
    assert stats["stop_reason"] in ("eos", "end_of_turn", "max_tokens")
    assert "".join(model.generate(RAW, chat=False, max_new_tokens=8)) == text
    assert model.last_stats["generated_tokens"] == stats["generated_tokens"]


def test_first_token_is_the_argmax_of_logits(model):
    ids = model.tokenize("The capital of France is", add_bos=True)
    logits = model.logits(ids)
    assert logits.shape == (model.config["n_vocab"],) and logits.dtype == np.float32
    first = "".join(model.generate(ids, max_new_tokens=1))
    assert first == model.detokenize([int(np.argmax(logits))])


@pytest.mark.skipif(not CLI.is_file(), reason="the kvshare CLI is not built")
@pytest.mark.parametrize("chat, flags", [(None, []), (False, ["--raw"]), ("none", ["--chat-template", "none"]),
                                         ("gemma", ["--chat-template", "gemma"])])
def test_same_text_as_the_cli(model, chat, flags):
    prompt = PROMPT if chat == "gemma" else RAW
    out = subprocess.run([str(CLI), "generate", "--model", str(MODEL), "--prompt", prompt, "-n", "12",
                          "--threads", "2", "--max-context", "512"] + flags,
                         check=True, capture_output=True, text=True)
    assert "".join(model.generate(prompt, chat=chat, max_new_tokens=12)) == out.stdout


@pytest.mark.skipif(not CLI.is_file(), reason="the kvshare CLI is not built")
def test_openai_penalties_equal_the_cli(model):
    flags = ["--presence-penalty", "2", "--frequency-penalty", "2"]
    out = subprocess.run([str(CLI), "generate", "--model", str(MODEL), "--prompt", RAW, "-n", "16", "--raw",
                          "--threads", "2", "--max-context", "512"] + flags, check=True, capture_output=True, text=True)
    got = "".join(model.generate(RAW, chat=False, max_new_tokens=16, presence_penalty=2.0, frequency_penalty=2.0))
    assert got == out.stdout
    assert got != "".join(model.generate(RAW, chat=False, max_new_tokens=16))  # the penalties change the text
    with pytest.raises(ValueError, match="presence_penalty"):
        model.generate(RAW, presence_penalty=3.0)


def test_chat_follows_the_file(model):
    """The default model's file has no chat template: chat=None (the default) is
    plain completion, the same as chat=False; chat=True asks for the file's
    template and fails; a named format must exist in the vocabulary."""
    plain = "".join(model.generate(RAW, chat=False, max_new_tokens=6))
    assert "".join(model.generate(RAW, max_new_tokens=6)) == plain
    assert model.last_stats["prompt_tokens"] == len(model.tokenize(RAW, add_bos=True))
    assert "".join(model.generate(RAW, chat="gemma", max_new_tokens=6)) != plain
    with pytest.raises(kvshare.Error, match="chat=True needs a chat template.*no tokenizer.chat_template"):
        model.generate(RAW, chat=True)
    with pytest.raises(kvshare.Error, match='gemma4 needs the token "<turn\\|>"'):
        model.generate(RAW, chat="gemma4")
    with pytest.raises(kvshare.Error, match='unknown chat template "chatml"'):
        model.generate(RAW, chat="chatml")
    with pytest.raises(TypeError, match="chat must be"):
        model.generate(RAW, chat=1)


def test_close_stops_early_and_frees_the_model(model):
    stream = model.generate("Count from one to one hundred.", max_new_tokens=64)
    next(stream)
    with pytest.raises(kvshare.Error, match="another generation is running"):
        model.generate(PROMPT, max_new_tokens=4)
    stream.close()
    assert stream.stats is None  # cancelled
    assert "".join(model.generate(PROMPT, max_new_tokens=4))


def test_continuing_a_sequence_keeps_the_cache(model):
    list(model.generate(PROMPT, max_new_tokens=4))
    cached = model.cached_tokens
    assert cached > 0
    list(model.generate(" More.", chat=False, reset=False, max_new_tokens=2))
    assert model.cached_tokens > cached
    model.reset()
    assert model.cached_tokens == 0


def test_errors(model):
    with pytest.raises(ValueError, match="top_p"):
        model.generate(PROMPT, top_p=1.5)
    stream = model.generate(PROMPT, max_new_tokens=600)  # exceeds max_context = 512
    with pytest.raises(kvshare.Error, match=r"at least \d+ \(--max-context in kvshare generate, max_context= in"):
        next(stream)
    with pytest.raises(kvshare.Error):
        kvshare.Model(str(ROOT / "models" / "missing.gguf"))
    with pytest.raises(kvshare.Error, match="max_context must be >= 1, got -5"):
        kvshare.Model(str(MODEL), max_context=-5)


@pytest.mark.parametrize("prompt, error, match", [
    (b"Hello", TypeError, r"prompt must be a str or a sequence of token ids \(int\), got bytes: decode it"),
    (None, TypeError, r"prompt must be a str or a sequence of token ids \(int\), got NoneType"),
    (7, TypeError, r"got int"),
    ([2, 2.5], TypeError, r"prompt\[1\] is a float, not a token id"),
    ([2, 10**12], kvshare.Error, r"token id 1000000000000 \(prompt\[1\]\) out of range \[0, 262144\)"),
    ([2, -1], kvshare.Error, r"token id -1 \(prompt\[1\]\) out of range"),
    ("caf\udce9", kvshare.Error, r"prompt is not valid Unicode text \(.*surrogates not allowed"),
])
def test_prompt_type_errors_name_the_argument(model, prompt, error, match):
    """Not pybind11's "Unable to cast Python instance ... to C++ type '?'"."""
    with pytest.raises(error, match=match):
        next(model.generate(prompt, max_new_tokens=1))


def test_prompt_ids_take_numpy_and_tuples(model):
    ids = model.tokenize(RAW, add_bos=True)
    want = "".join(model.generate(ids, max_new_tokens=4))
    assert "".join(model.generate(tuple(ids), max_new_tokens=4)) == want
    assert "".join(model.generate(np.array(ids, dtype=np.int64), max_new_tokens=4)) == want


def test_kv_cache_options_change_its_bytes():
    """kv_dtype and kv_shared_layers reach the model state: float16 halves the KV
    bytes, sharing the last 6 of 18 layers drops their K/V (the stats say what the
    cache would hold without sharing), and an out-of-range count names the range."""
    def run(**kw):
        m = kvshare.Model(str(MODEL), max_context=512, num_threads=2, **kw)
        stream = m.generate(RAW, chat=False, max_new_tokens=2)
        text = "".join(stream)
        return text, stream.stats

    _, base = run()
    _, half = run(kv_dtype="float16")
    q8_text, q8 = run(kv_dtype="q8_0")
    _, shared = run(kv_shared_layers=6)
    assert half["kv_bytes"] * 2 == base["kv_bytes"]
    assert q8["kv_bytes"] * 128 == base["kv_bytes"] * 34  # 34 bytes per 32 values
    assert q8_text
    assert base["kv_bytes_without_sharing"] == base["kv_bytes"]
    assert shared["kv_bytes_without_sharing"] == base["kv_bytes"]
    assert 0 < shared["kv_bytes"] < base["kv_bytes"]
    with pytest.raises(ValueError, match="kv_dtype"):
        kvshare.Model(str(MODEL), kv_dtype="int8")
    with pytest.raises(ValueError, match="out of range"):
        kvshare.Model(str(MODEL), kv_shared_layers=18)


def test_precision_options():
    """attention_precision and weight_precision take f32 or bf16; bf16 runs where
    the AMX tiles are usable and is refused with what to use elsewhere."""
    for arg in ("attention_precision", "weight_precision"):
        with pytest.raises(ValueError, match=f"{arg} 'fp8' is not one of f32, bf16"):
            kvshare.Model(str(MODEL), **{arg: "fp8"})
    amx = "amx_bf16" in Path("/proc/cpuinfo").read_text() and os.environ.get("KVSHARE_KERNEL", "amx") == "amx"
    for arg in ("attention_precision", "weight_precision"):
        if amx:
            m = kvshare.Model(str(MODEL), max_context=64, num_threads=2, kv_dtype="float16", **{arg: "bf16"})
            assert "".join(m.generate(RAW, chat=False, max_new_tokens=2))
        else:
            with pytest.raises(kvshare.Error, match=f'AMX.*{arg}.*f32'):
                kvshare.Model(str(MODEL), **{arg: "bf16"})


def test_speculative_decoding_is_lossless(model):
    """draft="ngram" and a draft model (here the same file: every draft accepted)
    give the greedy text of generation without speculation, in fewer target
    steps; bad draft arguments are refused at the call."""
    prompt = "one two three four five six. one two three four five six. one two"
    plain = "".join(model.generate(prompt, chat=False, max_new_tokens=32))
    base = model.last_stats
    assert base["drafted_tokens"] == 0
    lookup = "".join(model.generate(prompt, chat=False, max_new_tokens=32, draft="ngram"))
    assert lookup == plain
    st = model.last_stats
    assert st["accepted_tokens"] > 0 and st["decode_steps"] < base["decode_steps"]
    drafter = kvshare.Model(str(MODEL), max_context=512, num_threads=2)
    drafted = "".join(model.generate(prompt, chat=False, max_new_tokens=32, draft=drafter, draft_max=4,
                                     draft_adaptive=False))
    assert drafted == plain
    st = model.last_stats
    assert st["verify_steps"] > 0
    assert st["accepted_tokens"] == st["drafted_tokens"] or st["stop_reason"] != "max_tokens"
    with pytest.raises(kvshare.Error, match="draft_max"):
        model.generate(prompt, draft="ngram", draft_max=0)
    # Back to prompt lookup after the draft model: the drafter follows the argument.
    again = "".join(model.generate(prompt, chat=False, max_new_tokens=32, draft="ngram"))
    assert again == plain and model.last_stats["accepted_tokens"] > 0
    with pytest.raises(kvshare.Error, match='draft must be None, "ngram"'):
        model.generate(prompt, draft="medusa")
    with pytest.raises(kvshare.Error, match='draft must be None, "ngram".*got ""'):
        model.generate(prompt, draft="")
    with pytest.raises(TypeError, match="draft must be"):
        model.generate(prompt, draft=3)
