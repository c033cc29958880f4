"""`kvshare serve` on the tiny Gemma 3n fixture (tests/fixtures/gemma3n/, Q8_0
weights, a q8_0 KV cache, the Gemma chat format named on the command line since
the fixture carries no template): concurrent chat and completion requests, each
batched with the others, return exactly the text `kvshare generate` prints for
the same request, streaming and not; prompt lookup keeps that text."""
from concurrent.futures import ThreadPoolExecutor

import pytest

openai = pytest.importorskip("openai")

from server_util import ROOT, Server, generate  # noqa: E402

MODEL = ROOT / "tests" / "fixtures" / "gemma3n" / "e2b.q8_0.gguf"
MODEL_ID = "e2b.q8_0"
FLAGS = ("--kv-dtype", "q8_0", "--chat-template", "gemma")
PROMPTS = ["Hi there", "Tell me a story about a cat.", "What is 2 + 2?", "abc abc abc abc",
           "The window of this model is twelve tokens, so this prompt runs past it."]


def client(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=120)


def chat(server, msg, **kw):
    r = client(server).chat.completions.create(model=MODEL_ID, messages=[{"role": "user", "content": msg}],
                                               max_tokens=16, **kw)
    return r.choices[0].message.content


def stream_chat(server, msg, **kw):
    chunks = client(server).chat.completions.create(model=MODEL_ID, messages=[{"role": "user", "content": msg}],
                                                    max_tokens=16, stream=True, **kw)
    return "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)


@pytest.mark.parametrize("extra", [(), ("--spec", "ngram")])
def test_concurrent_requests_equal_generate(extra):
    greedy = [generate(MODEL, p, "-n", 16, *FLAGS) for p in PROMPTS]
    # Speculative sampling keeps the distribution, not the draws: compare like with like.
    sampled = [generate(MODEL, p, "-n", 16, "--temp", 0.8, "--top-k", 40, "--seed", 11, *FLAGS, *extra)
               for p in PROMPTS]
    raw = [generate(MODEL, p, "-n", 16, "--raw", "--kv-dtype", "q8_0") for p in PROMPTS]
    assert len(set(greedy)) > 1, "the prompts must give different outputs"
    with Server(MODEL, "--slots", 4, *FLAGS, *extra) as s:
        def one(i):
            p = PROMPTS[i]
            r = client(s).completions.create(model=MODEL_ID, prompt=p, max_tokens=16, temperature=0)
            return (chat(s, p, temperature=0), stream_chat(s, p, temperature=0),
                    chat(s, p, temperature=0.8, seed=11, extra_body={"top_k": 40}), r.choices[0].text)
        with ThreadPoolExecutor(4) as pool:
            got = list(pool.map(one, range(len(PROMPTS))))
        m = s.metrics()
    for i, (g, st, sa, comp) in enumerate(zip(*zip(*got))):
        assert g == greedy[i], (i, g, greedy[i])
        assert st == greedy[i], (i, st, greedy[i])
        assert sa == sampled[i], (i, sa, sampled[i])
        assert comp == raw[i], (i, comp, raw[i])
    assert m["kvshare_active_slots"] == 0
    if extra:
        assert m["kvshare_spec_draft_tokens_total"] > 0
