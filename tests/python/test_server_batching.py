"""Continuous batching and prompt caching through a real `kvshare serve` on the
default model: 8 concurrent greedy requests return exactly the text (and
logprobs) each returns alone, and a request that shares a prefix with an
earlier one is served from the cache (the metrics count the hit) with the same
output as without the cache."""
from concurrent.futures import ThreadPoolExecutor

import pytest

openai = pytest.importorskip("openai")

from server_util import DEFAULT_ID, Server, need_default_model  # noqa: E402

PARAGRAPH = ("The river runs through the old town, past the market and the cathedral, "
             "and on summer evenings people sit along its banks. ")
PROMPTS = [
    "The capital of France is Paris. The capital of Germany is",
    "Once upon a time, in a small village,",
    "def fibonacci(n):",
    "Question: What is 12 times 12? Answer:",
    PARAGRAPH * 2 + "In winter",
    "1, 2, 3, 5, 8, 13,",
    "The three primary colors are",
    PARAGRAPH * 24 + "The town is famous for",  # ~600 tokens: past the 512-token sliding window
]


def complete(server, prompt):
    c = openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=300)
    r = c.completions.create(model=DEFAULT_ID, prompt=prompt, max_tokens=20, temperature=0, logprobs=1)
    return r.choices[0].text, r.choices[0].logprobs.token_logprobs, r.usage


def test_eight_concurrent_greedy_requests_equal_each_alone():
    with Server(need_default_model(), "--slots", 8, "--no-prompt-cache", "--step-tokens", 128) as s:
        alone = [complete(s, p) for p in PROMPTS]
        before = s.metrics()
        with ThreadPoolExecutor(len(PROMPTS)) as pool:
            together = list(pool.map(lambda p: complete(s, p), PROMPTS))
        after = s.metrics()
    assert alone[7][2].prompt_tokens > 512
    for i, (a, t) in enumerate(zip(alone, together)):
        assert t[0] == a[0], f"prompt {i}: {t[0]!r} != {a[0]!r}"
        assert t[1] == a[1], f"prompt {i}: logprobs differ"
    # They really ran together: fewer steps than the requests run one after another.
    steps_alone = before["kvshare_steps_total"]
    steps_together = after["kvshare_steps_total"] - before["kvshare_steps_total"]
    assert steps_together < steps_alone / 2, (steps_together, steps_alone)


def test_shared_prefix_is_served_from_the_cache_with_the_same_output():
    first = PARAGRAPH * 6 + "In spring the river"
    second = PARAGRAPH * 6 + "On market days the square"
    with Server(need_default_model(), "--slots", 2, "--no-prompt-cache") as cold:
        want = complete(cold, second)
    with Server(need_default_model(), "--slots", 2) as s:
        complete(s, first)
        m0 = s.metrics()
        got = complete(s, second)
        m1 = s.metrics()
    assert got[0] == want[0] and got[1] == want[1]
    assert got[2].prompt_tokens_details.cached_tokens > 100
    assert want[2].prompt_tokens_details.cached_tokens == 0
    assert m1["kvshare_prompt_cache_hits_total"] == m0["kvshare_prompt_cache_hits_total"] + 1
    assert (m1["kvshare_prompt_tokens_cached_total"] - m0["kvshare_prompt_tokens_cached_total"]
            == got[2].prompt_tokens_details.cached_tokens)
    assert m1["kvshare_prompt_cache_fallbacks_total"] == 0
