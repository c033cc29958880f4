"""`kvshare serve`'s OpenAI parameters beyond one plain choice, on the tiny
Gemma 4 fixture with the official `openai` client and raw HTTP:
- n > 1 with a seed: choice i is bitwise the n = 1 request with seed + i
  (text and logprobs), streamed or not; usage counts the prompt once;
- presence_penalty / frequency_penalty: the text `kvshare generate` prints
  with --presence-penalty / --frequency-penalty;
- /v1/completions: echo, prompt logprobs (OpenAI's legacy format, the shape
  lm-evaluation-harness's local-completions reads for loglikelihood), max_tokens
  0, lists of prompts (index = prompt_index * n + i), best_of."""
import json
import math

import pytest

openai = pytest.importorskip("openai")

from server_util import GEMMA4, GEMMA4_ID, Server, generate, request  # noqa: E402


@pytest.fixture(scope="module")
def srv():
    with Server(GEMMA4, "--slots", 4) as s:
        yield s


def client(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=120)


def post(server, path, body):
    r = request(server, "POST", path, json.dumps(body), {"Content-Type": "application/json"})
    assert r.status == 200, r.text
    return r.json()


MSGS = [{"role": "user", "content": "Tell me a story."}]


def test_n_choices_equal_separate_requests_with_derived_seeds(srv):
    c = client(srv)
    kw = dict(model=GEMMA4_ID, messages=MSGS, temperature=1.0, max_tokens=12, logprobs=True, top_logprobs=2)
    r = c.chat.completions.create(n=3, seed=40, **kw)
    assert [ch.index for ch in r.choices] == [0, 1, 2]
    singles = [c.chat.completions.create(n=1, seed=40 + i, **kw) for i in range(3)]
    for ch, one in zip(r.choices, singles):
        assert ch.message.content == one.choices[0].message.content
        assert [(t.token, t.logprob) for t in ch.logprobs.content] == \
            [(t.token, t.logprob) for t in one.choices[0].logprobs.content]
    assert len({ch.message.content for ch in r.choices}) > 1, "the seeds should give different texts"
    assert r.usage.prompt_tokens == singles[0].usage.prompt_tokens
    assert r.usage.completion_tokens == sum(s.usage.completion_tokens for s in singles)
    # Streamed: every chunk names its choice; each choice's text and finish reason as above.
    chunks = list(c.chat.completions.create(n=3, seed=40, stream=True, stream_options={"include_usage": True},
                                            **kw))
    texts, finish = ["", "", ""], [None, None, None]
    for ch in chunks[:-1]:
        for x in ch.choices:
            texts[x.index] += x.delta.content or ""
            finish[x.index] = x.finish_reason or finish[x.index]
    assert texts == [ch.message.content for ch in r.choices]
    assert finish == [ch.finish_reason for ch in r.choices]
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == r.usage.completion_tokens
    assert chunks[-1].usage.prompt_tokens == r.usage.prompt_tokens


def test_presence_and_frequency_penalties_equal_generate(srv):
    want = generate(GEMMA4, "Count", "-n", 16, "--temp", 0, "--presence-penalty", 1.5, "--frequency-penalty", 0.7)
    plain = generate(GEMMA4, "Count", "-n", 16, "--temp", 0)
    assert want != plain, "the penalties should change the greedy text (else the test could not fail)"
    r = client(srv).chat.completions.create(model=GEMMA4_ID, messages=[{"role": "user", "content": "Count"}],
                                            temperature=0, max_tokens=16, presence_penalty=1.5,
                                            frequency_penalty=0.7)
    assert r.choices[0].message.content == want


def test_echo_prompt_logprobs_and_max_tokens_zero(srv):
    ids = post(srv, "/tokenize", {"content": "Hello world, this is", "add_special": True})["tokens"]
    # lm-evaluation-harness's loglikelihood request: token ids, echo, logprobs, max_tokens 1.
    r = post(srv, "/v1/completions", {"model": GEMMA4_ID, "prompt": [ids], "max_tokens": 1, "temperature": 0,
                                      "logprobs": 1, "echo": True, "seed": 1234})
    lp = r["choices"][0]["logprobs"]
    assert len(lp["tokens"]) == len(lp["token_logprobs"]) == len(lp["top_logprobs"]) == len(ids) + 1
    assert lp["token_logprobs"][0] is None and lp["top_logprobs"][0] is None
    assert all(x <= 0 for x in lp["token_logprobs"][1:])
    assert all(len(t) == 1 and max(t.values()) >= x for t, x in zip(lp["top_logprobs"][1:], lp["token_logprobs"][1:]))
    assert lp["text_offset"][0] == 0 and lp["text_offset"] == sorted(lp["text_offset"])
    # A prompt token's logprob is what generating that token after the tokens before it gives.
    for k in (3, len(ids) - 1):
        g = post(srv, "/v1/completions", {"prompt": ids[:k], "max_tokens": 1, "temperature": 0, "logprobs": 0,
                                          "logit_bias": {str(ids[k]): 100}})
        got = g["choices"][0]["logprobs"]
        assert got["tokens"][0] == lp["tokens"][k]
        assert math.isclose(got["token_logprobs"][0], lp["token_logprobs"][k], abs_tol=1e-5)
    # max_tokens 0: the prompt alone, nothing generated.
    z = post(srv, "/v1/completions", {"prompt": "Hello world", "max_tokens": 0, "echo": True, "logprobs": 0})
    assert z["choices"][0]["text"] == "Hello world"
    assert z["choices"][0]["finish_reason"] == "length" and z["usage"]["completion_tokens"] == 0
    assert z["choices"][0]["logprobs"]["token_logprobs"][0] is None
    e = post(srv, "/v1/completions", {"prompt": "Hello world", "max_tokens": 3, "echo": True, "temperature": 0})
    assert e["choices"][0]["text"].startswith("Hello world") and e["choices"][0]["logprobs"] is None


def test_prompt_lists_and_best_of(srv):
    c = client(srv)
    prompts = ["Once upon", "The sky"]
    r = c.completions.create(model=GEMMA4_ID, prompt=prompts, n=2, max_tokens=6, temperature=1.0, seed=3)
    assert sorted(ch.index for ch in r.choices) == [0, 1, 2, 3]
    by_index = {ch.index: ch.text for ch in r.choices}
    for p, prompt in enumerate(prompts):
        for i in range(2):
            one = c.completions.create(model=GEMMA4_ID, prompt=prompt, max_tokens=6, temperature=1.0, seed=3 + i)
            assert by_index[p * 2 + i] == one.choices[0].text
    # best_of 3, n 1: the candidate (seeds 5, 6, 7) with the highest mean token logprob.
    best = c.completions.create(model=GEMMA4_ID, prompt="Once upon", max_tokens=6, temperature=1.0, seed=5,
                                best_of=3, logprobs=0)
    cands = [c.completions.create(model=GEMMA4_ID, prompt="Once upon", max_tokens=6, temperature=1.0, seed=5 + i,
                                  logprobs=0).choices[0] for i in range(3)]
    means = [sum(ch.logprobs.token_logprobs) / len(ch.logprobs.token_logprobs) for ch in cands]
    assert len(best.choices) == 1 and best.choices[0].index == 0
    assert best.choices[0].text == cands[max(range(3), key=lambda i: (means[i], -i))].text
    assert best.usage.completion_tokens == sum(len(ch.logprobs.token_logprobs) for ch in cands)
    bad = request(srv, "POST", "/v1/completions", json.dumps({"prompt": "x", "n": 17}),
                  {"Content-Type": "application/json"})
    assert bad.status == 400 and bad.json()["error"]["param"] == "n"
