"""Speculative decoding in `kvshare serve` (--spec ngram, --draft-model) on the
default model: concurrent greedy requests return exactly the text and
logprobs of a server without speculation, the /metrics counters count drafts
and accepted drafts, a request opts out with "speculative": false, and bad
flag combinations stop the server with a named error."""
import subprocess
from concurrent.futures import ThreadPoolExecutor

import pytest

openai = pytest.importorskip("openai")

from server_util import DEFAULT_ID, Server, cli, need_default_model  # noqa: E402

QUOTE = ("We hold these truths to be self-evident, that all men are created equal, that they are endowed "
         "by their Creator with certain unalienable Rights.")
PROMPTS = [
    QUOTE + "\nRepeat the sentence above word for word:\n",
    "for i in range(10):\n    print(i)\nfor j in range(10):\n    print(j)\nfor k in range(10):\n",
    "one, two, three, four, five. one, two, three, four, five. one, two,",
    "The capital of France is Paris. The capital of Germany is",
]


def complete(server, prompt, **extra):
    c = openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=300)
    r = c.completions.create(model=DEFAULT_ID, prompt=prompt, max_tokens=32, temperature=0, logprobs=1,
                             extra_body=extra or None)
    return r.choices[0].text, r.choices[0].logprobs.token_logprobs


def test_concurrent_greedy_requests_equal_the_server_without_speculation():
    model = need_default_model()
    with Server(model, "--slots", 4) as plain:
        want = [complete(plain, p) for p in PROMPTS]
    for flags in (["--spec", "ngram"], ["--draft-model", model, "--draft-max", 3]):
        with Server(model, "--slots", 4, *flags) as s:
            with ThreadPoolExecutor(len(PROMPTS)) as pool:
                got = list(pool.map(lambda p: complete(s, p), PROMPTS))
            m = s.metrics()
            assert any("speculative decoding:" in line for line in s.log), s.log
        for i, (a, b) in enumerate(zip(want, got)):
            assert b[0] == a[0], f"{flags} prompt {i}: {b[0]!r} != {a[0]!r}"
            assert b[1] == a[1], f"{flags} prompt {i}: logprobs differ"
        assert m["kvshare_spec_draft_tokens_total"] > 0, flags
        assert 0 < m["kvshare_spec_accepted_tokens_total"] <= m["kvshare_spec_draft_tokens_total"], flags
        assert m["kvshare_spec_verify_rows_total"] > 0, flags


def test_a_request_opts_out():
    with Server(need_default_model(), "--slots", 2, "--spec", "ngram") as s:
        out = complete(s, PROMPTS[2], speculative=False)
        m0 = s.metrics()
        assert m0["kvshare_spec_draft_tokens_total"] == 0
        assert complete(s, PROMPTS[2]) == out
        assert s.metrics()["kvshare_spec_draft_tokens_total"] > 0


def test_bad_flags_are_named():
    model = need_default_model()
    r = subprocess.run([str(cli()), "serve", "--model", str(model), "--spec", "ngram", "--draft-model", str(model)],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode != 0 and "--spec ngram and --draft-model are exclusive" in r.stderr, r.stderr
    r = subprocess.run([str(cli()), "serve", "--model", str(model), "--spec", "eagle"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode != 0 and "--spec: eagle not in {ngram}" in r.stderr, r.stderr
