"""`kvshare serve` /v1/embeddings driven by the official `openai` client: the EmbeddingGemma-style
fixture (tests/fixtures/embedding_gemma, written by tests/tools/embedding_gemma_fixture.py) gives
sentence-transformers' embeddings of the same texts (cosine > 0.99999 and elementwise within 1e-5),
as base64 (the SDK's default) and float, with and without `dimensions`, from texts and from token
arrays; OpenAI errors for what cannot be embedded; pooled embeddings of a decoder with --pooling,
which leave its slot's prompt cache as it was."""
import json
import math

import pytest

openai = pytest.importorskip("openai")

from server_util import GEMMA4, ROOT, Server, request  # noqa: E402

FIXTURE = ROOT / "tests" / "fixtures" / "embedding_gemma"
TOL = 1e-5


@pytest.fixture(scope="module")
def ref():
    return json.loads((FIXTURE / "tiny.st.json").read_text())


@pytest.fixture(scope="module")
def server():
    with Server(FIXTURE / "tiny.f32.gguf", "--slots", 2, "--max-context", 512) as s:
        yield s


def client(s):
    return openai.OpenAI(base_url=s.url + "/v1", api_key="unused", max_retries=0, timeout=60)


def assert_close(got, want):
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert len(g) == len(w)
        dot = sum(a * b for a, b in zip(g, w))
        cos = dot / math.sqrt(sum(a * a for a in g) * sum(b * b for b in w))
        assert cos > 1 - TOL
        assert max(abs(a - b) for a, b in zip(g, w)) <= TOL


def test_texts_match_sentence_transformers(server, ref):
    c = client(server)
    r = c.embeddings.create(model="tiny.f32", input=ref["texts"])  # the SDK asks for base64
    assert r.object == "list" and r.model == "tiny.f32"
    assert [d.index for d in r.data] == list(range(len(ref["texts"])))
    assert all(d.object == "embedding" for d in r.data)
    assert_close([d.embedding for d in r.data], ref["embeddings"])
    n = sum(len(i) for i in ref["ids"])
    assert r.usage.prompt_tokens == n and r.usage.total_tokens == n

    one = c.embeddings.create(model="tiny.f32", input=ref["texts"][1], encoding_format="float")
    assert_close([one.data[0].embedding], [ref["embeddings"][1]])
    for d, want in ref["truncated"].items():
        r = c.embeddings.create(model="tiny.f32", input=ref["texts"], dimensions=int(d), encoding_format="float")
        assert_close([x.embedding for x in r.data], want)


def test_token_arrays(server, ref):
    c = client(server)
    r = c.embeddings.create(model="tiny.f32", input=ref["ids"], encoding_format="float")
    assert_close([d.embedding for d in r.data], ref["embeddings"])
    r = c.embeddings.create(model="tiny.f32", input=ref["ids"][2], dimensions=16)
    assert_close([r.data[0].embedding], [ref["truncated"]["16"][2]])


def test_tokenize_adds_what_the_vocabulary_adds(server, ref):
    # The fixture adds BOS and EOS (add_eos_token), as sentence-transformers and
    # /v1/embeddings do; llama-server's add_special and vLLM's add_special_tokens
    # add both too. Before, /tokenize added BOS only: one token short.
    for text, ids in zip(ref["texts"], ref["ids"]):
        assert request(server, "POST", "/tokenize", {"content": text, "add_special": True}).json()["tokens"] == ids
        assert request(server, "POST", "/tokenize", {"prompt": text}).json()["tokens"] == ids
        assert request(server, "POST", "/tokenize", {"content": text}).json()["tokens"] == ids[1:-1]


@pytest.mark.parametrize("body,status,param,needle", [
    ({"input": ""}, 400, "input", "input 0 is empty"),
    ({"input": []}, 400, "input", "the list is empty"),
    ({"input": ["a", 3]}, 400, "input", "neither a string nor a token array"),
    ({"input": [2, 9999]}, 400, "input", "outside the vocabulary [0, 512)"),
    ({"input": [5] * 513}, 400, "input", "maximum context length is 512 tokens"),
    ({"input": "a", "dimensions": 65}, 400, "dimensions", "out of range [1, 64]"),
    ({"input": "a", "dimensions": 0}, 400, "dimensions", "out of range [1, 64]"),
    ({"input": "a", "encoding_format": "int8"}, 400, "encoding_format", "Supported values are"),
    ({}, 400, "input", "Missing required parameter"),
])
def test_errors(server, body, status, param, needle):
    r = request(server, "POST", "/v1/embeddings", body)
    assert r.status == status, r.text
    err = r.json()["error"]
    assert err["param"] == param and needle in err["message"], err


def test_embedding_model_does_not_generate(server):
    r = request(server, "POST", "/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}]})
    assert r.status == 400 and "is an embedding model" in r.json()["error"]["message"]
    m = request(server, "GET", "/v1/models").json()["data"][0]
    assert m["capabilities"] == ["embedding"]


def test_decoder_needs_pooling():
    with Server(GEMMA4, "--slots", 1) as s:
        r = request(s, "POST", "/v1/embeddings", {"input": "hello"})
        assert r.status == 400 and "--pooling" in r.json()["error"]["message"]
    with Server(GEMMA4, "--slots", 1, "--pooling", "mean") as s:
        c = client(s)
        before = c.completions.create(model="x", prompt="Once upon a time", max_tokens=8, temperature=0)
        r = c.embeddings.create(model="x", input=["hello", "hello there"], encoding_format="float")
        vecs = [d.embedding for d in r.data]
        assert all(abs(sum(v * v for v in e) - 1) < 1e-5 for e in vecs)
        assert vecs[0] != vecs[1]
        # Embeddings run on states of their own: the slot's prompt cache still holds the prompt.
        after = c.completions.create(model="x", prompt="Once upon a time", max_tokens=8, temperature=0)
        assert after.choices[0].text == before.choices[0].text
        assert after.usage.prompt_tokens_details.cached_tokens == before.usage.prompt_tokens - 1
