"""`kvshare serve` driven by the official `openai` Python client (PyPI):
chat and completions, streaming and not, give exactly the text `kvshare
generate` prints for the same prompt, seed and sampling parameters; logprobs,
stop strings, usage, /v1/models, /tokenize, /detokenize and /tokenizer_info
(llama-server's and vLLM's shapes), and chat.completions.parse with pydantic
models (bounds, datetime, Literal, Optional, nested lists).

Chat runs on the tiny Gemma 4 fixture (it has Gemma 4's chat template),
completions on the default model (a base model: plain completion)."""
import pytest

openai = pytest.importorskip("openai")

from server_util import DEFAULT_ID, GEMMA4, GEMMA4_ID, Server, generate, need_default_model, request  # noqa: E402


@pytest.fixture(scope="module")
def gemma4():
    with Server(GEMMA4, "--slots", 4) as s:
        yield s


@pytest.fixture(scope="module")
def default():
    with Server(need_default_model(), "--slots", 4) as s:
        yield s


def client(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=120)


SAMPLED = dict(temperature=0.8, top_p=0.9, seed=7, max_tokens=24)


def test_chat_equals_generate_streaming_and_not(gemma4):
    c = client(gemma4)
    msg = "Tell me a story about a cat."
    want = generate(GEMMA4, msg, "-n", 24, "--temp", 0.8, "--top-p", 0.9, "--top-k", 40, "--seed", 7)
    assert want
    r = c.chat.completions.create(model=GEMMA4_ID, messages=[{"role": "user", "content": msg}],
                                  extra_body={"top_k": 40}, **SAMPLED)
    assert r.object == "chat.completion"
    assert r.choices[0].message.role == "assistant"
    assert r.choices[0].message.content == want
    assert r.choices[0].finish_reason in ("stop", "length")
    assert r.usage.prompt_tokens > 5 and r.usage.completion_tokens <= 24
    assert r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens

    chunks = list(c.chat.completions.create(model=GEMMA4_ID, messages=[{"role": "user", "content": msg}],
                                            extra_body={"top_k": 40}, stream=True,
                                            stream_options={"include_usage": True}, **SAMPLED))
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
    assert text == want
    finals = [ch.choices[0].finish_reason for ch in chunks if ch.choices and ch.choices[0].finish_reason]
    assert finals == [r.choices[0].finish_reason]
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == r.usage.completion_tokens
    assert all(ch.usage is None for ch in chunks[:-1])
    # The repeat is served from the prompt cache (all but the last prompt token) with the same text.
    assert chunks[-1].usage.prompt_tokens_details.cached_tokens == r.usage.prompt_tokens - 1


def test_completions_equal_generate_streaming_and_not(default):
    c = client(default)
    prompt = "The capital of France is Paris. The capital of Germany is"
    greedy = generate(default_model := need_default_model(), prompt, "--raw", "-n", 16, "--threads", 2)
    assert greedy.startswith(" Berlin")
    sampled = generate(default_model, prompt, "--raw", "-n", 16, "--temp", 0.9, "--top-p", 0.95, "--min-p", 0.05,
                       "--seed", 123, "--threads", 2)
    for want, params in ((greedy, dict(temperature=0)),
                         (sampled, dict(temperature=0.9, top_p=0.95, seed=123, extra_body={"min_p": 0.05}))):
        r = c.completions.create(model=DEFAULT_ID, prompt=prompt, max_tokens=16, **params)
        assert r.object == "text_completion"
        assert r.choices[0].text == want
        stream = c.completions.create(model=DEFAULT_ID, prompt=prompt, max_tokens=16, stream=True, **params)
        assert "".join(ch.choices[0].text for ch in stream if ch.choices) == want


def test_logprobs_chat_and_completions(gemma4):
    c = client(gemma4)
    r = c.chat.completions.create(model=GEMMA4_ID, messages=[{"role": "user", "content": "Hi"}], temperature=0,
                                  max_tokens=6, logprobs=True, top_logprobs=3)
    content = r.choices[0].logprobs.content
    assert 1 <= len(content) <= 6
    for e in content:
        assert e.logprob <= 0 and len(e.top_logprobs) == 3
        # Greedy: the chosen token is the most likely one.
        assert e.top_logprobs[0].token == e.token and e.top_logprobs[0].logprob == e.logprob
        assert e.top_logprobs[0].logprob >= e.top_logprobs[1].logprob >= e.top_logprobs[2].logprob
        assert bytes(e.bytes) == e.token.encode("utf-8", "surrogatepass") or "\ufffd" in e.token
    r = c.completions.create(model=GEMMA4_ID, prompt="Hello", temperature=0, max_tokens=5, logprobs=2)
    lp = r.choices[0].logprobs
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == len(lp.text_offset)
    assert lp.text_offset[0] == 0
    assert all(len(t) == 2 for t in lp.top_logprobs)
    assert all(x <= 0 for x in lp.token_logprobs)


def test_stop_strings(gemma4):
    c = client(gemma4)
    msgs = [{"role": "user", "content": "Count"}]
    full = c.chat.completions.create(model=GEMMA4_ID, messages=msgs, temperature=0, max_tokens=20)
    text = full.choices[0].message.content
    assert len(text) >= 6
    stop = text[3:5]
    for kwargs in ({}, {"stream": True}):
        r = c.chat.completions.create(model=GEMMA4_ID, messages=msgs, temperature=0, max_tokens=20,
                                      stop=["never-there", stop], **kwargs)
        if kwargs:
            chunks = list(r)
            got = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
            reason = [ch.choices[0].finish_reason for ch in chunks if ch.choices and ch.choices[0].finish_reason][0]
        else:
            got, reason = r.choices[0].message.content, r.choices[0].finish_reason
        assert got == text[:text.index(stop)]
        assert reason == "stop"


def test_models_tokenize_detokenize(gemma4):
    models = client(gemma4).models.list().data
    assert [m.id for m in models] == [GEMMA4_ID]
    assert models[0].owned_by == "kvshare"
    t = request(gemma4, "POST", "/tokenize", {"content": "Hello world"}).json()
    assert t["count"] == len(t["tokens"]) > 0
    assert request(gemma4, "POST", "/detokenize", {"tokens": t["tokens"]}).json()["content"] == "Hello world"
    pieces = request(gemma4, "POST", "/tokenize", {"content": "Hello", "with_pieces": True,
                                                   "add_special": True}).json()["tokens"]
    assert pieces[0]["piece"] == "<bos>" and "".join(p["piece"] for p in pieces[1:]) == "Hello"
    # As llama-server: a byte-fallback piece that is not UTF-8 by itself comes as
    # its bytes (the fixture has no token for "日", E6 97 A5), not as U+FFFD.
    split = request(gemma4, "POST", "/tokenize", {"content": "日x", "with_pieces": True}).json()["tokens"]
    assert [p["piece"] for p in split] == [[0xE6], [0x97], [0xA5], "x"]
    # /detokenize writes special tokens as their text, as llama-server and vLLM do,
    # so it undoes /tokenize (which parses special-token text by default).
    turn = request(gemma4, "POST", "/tokenize", {"content": "<|turn>user\nHi", "add_special": True}).json()["tokens"]
    assert turn[:2] == [2, 5]
    assert request(gemma4, "POST", "/detokenize", {"tokens": turn}).json()["content"] == "<bos><|turn>user\nHi"
    # vLLM's shapes, which lm-evaluation-harness's remote tokenizer sends:
    # "prompt" with add_special_tokens (default true), "prompt" back, /tokenizer_info.
    plain = request(gemma4, "POST", "/tokenize", {"prompt": "Hello world", "add_special_tokens": False}).json()
    assert plain["tokens"] == t["tokens"]
    bos = request(gemma4, "POST", "/tokenize", {"model": GEMMA4_ID, "prompt": "Hello world"}).json()["tokens"]
    assert bos[1:] == t["tokens"] and bos[0] == pieces[0]["id"]
    assert request(gemma4, "POST", "/detokenize", {"tokens": t["tokens"]}).json()["prompt"] == "Hello world"
    info = request(gemma4, "GET", "/tokenizer_info").json()
    assert info["bos_token"] == "<bos>" and info["eos_token"] and info["model_max_length"] == 4096
    assert request(gemma4, "POST", "/tokenize", {"prompt": info["eos_token"]}).json()["count"] == 2
    both = request(gemma4, "POST", "/tokenize", {"prompt": "a", "content": "a"})
    assert both.status == 400 and both.json()["error"]["param"] == "prompt"


def test_parse_pydantic_models(gemma4):
    # chat.completions.parse sends the model's strict JSON Schema (Field bounds,
    # date-time, enum, anyOf with null, nested arrays of objects, $defs) and
    # validates the reply with pydantic: the grammar must produce what it accepts.
    from datetime import datetime
    from typing import List, Literal, Optional

    from pydantic import BaseModel, Field

    class Item(BaseModel):
        name: str = Field(min_length=1, max_length=8)
        qty: int = Field(ge=1, le=99)
        tags: List[Literal["a", "b", "c"]] = Field(max_length=3)

    class Order(BaseModel):
        kind: Literal["buy", "sell"]
        when: datetime
        price: float = Field(gt=0, lt=1000)
        note: Optional[str] = Field(max_length=10)
        items: List[Item] = Field(min_length=1, max_length=2)
        grid: List[List[int]] = Field(max_length=2)

    with client(gemma4) as c:
        replies = [c.chat.completions.parse(model=GEMMA4_ID, messages=[{"role": "user", "content": "An order"}],
                                            response_format=Order, temperature=1, seed=seed, max_tokens=400)
                   for seed in (1, 2, 3)]
    for r in replies:
        choice = r.choices[0]
        assert choice.finish_reason == "stop", choice.message.content
        order = choice.message.parsed
        assert isinstance(order, Order) and 0 < order.price < 1000 and 1 <= len(order.items) <= 2
        assert order == Order.model_validate_json(choice.message.content)
