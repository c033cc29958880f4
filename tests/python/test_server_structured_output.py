"""Structured output in `kvshare serve` (response_format json_schema and
json_object, enforced by constrained decoding) on the default model: for
every schema of data/json_schemas.json, completions and chat, greedy and
sampled, some streamed, the output parses with json.loads and validates
with the `jsonschema` module, and ends with finish_reason "stop". The
schemas bound their strings and arrays so that every valid output fits
MAX_TOKENS (one, "city", has an unbounded string: greedy and the seeded
draws are deterministic, so it finishing is a fixed fact, not luck; the
recursive "tree" may end with "length", as its entry says why).
Unsupported keywords are a 400 naming them, on both endpoints."""
import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

jsonschema = pytest.importorskip("jsonschema")

from server_util import DEFAULT_ID, Server, Stream, need_default_model, request  # noqa: E402

SCHEMAS = json.loads((Path(__file__).parent / "data" / "json_schemas.json").read_text())["schemas"]
MAX_TOKENS = 120
C, P = "/v1/chat/completions", "/v1/completions"


@pytest.fixture(scope="module")
def server():
    with Server(need_default_model(), "--slots", 4, "--chat-template", "gemma", "--max-context", 512) as s:
        yield s


def body(entry, chat, sampled, stream=False, fmt=None):
    b = {"model": DEFAULT_ID, "max_tokens": MAX_TOKENS, "stream": stream,
         "response_format": fmt or {"type": "json_schema",
                                    "json_schema": {"name": entry["name"], "schema": entry["schema"], "strict": True}}}
    if chat:
        b["messages"] = [{"role": "user", "content": f"Reply in JSON with {entry['description']}."}]
    else:
        b["prompt"] = f"Here is {entry['description']} as JSON:\n"
    b.update({"temperature": 0.9, "top_p": 0.95, "seed": 11} if sampled else {"temperature": 0})
    return b


def run(server, b, chat):
    """The output text and finish_reason of one request."""
    if not b["stream"]:
        r = request(server, "POST", C if chat else P, b, timeout=300)
        assert r.status == 200, r.text
        choice = r.json()["choices"][0]
        return (choice["message"]["content"] if chat else choice["text"]), choice["finish_reason"]
    s = Stream(server, C if chat else P, b, timeout=300)
    assert s.status == 200
    text, finish = "", None
    for data in s:
        if data == "[DONE]":
            break
        for choice in json.loads(data)["choices"]:
            text += (choice.get("delta", {}).get("content") or "") if chat else choice.get("text", "")
            finish = choice.get("finish_reason") or finish
    return text, finish


def problems(entry, text, finish):
    """What is wrong with one output (empty: nothing)."""
    if finish == "length" and entry.get("length_ok"):
        return ""
    if finish != "stop":
        return f"finish_reason {finish!r}: {text!r}"
    try:
        value = json.loads(text)
    except ValueError as e:
        return f"not JSON ({e}): {text!r}"
    try:
        jsonschema.validate(value, entry["schema"])
    except jsonschema.ValidationError as e:
        return f"does not validate ({e.message}): {text!r}"
    return ""


def test_the_schemas_are_valid_json_schemas():
    assert len(SCHEMAS) >= 30
    assert len({e["name"] for e in SCHEMAS}) == len(SCHEMAS)
    for e in SCHEMAS:
        jsonschema.Draft202012Validator.check_schema(e["schema"])


def test_every_schema_on_both_endpoints_greedy_and_sampled(server):
    # Every schema: completions greedy and chat sampled; every third also the
    # other two; every fifth streamed too.
    jobs = []
    for i, e in enumerate(SCHEMAS):
        combos = [(False, False), (True, True)] + ([(False, True), (True, False)] if i % 3 == 0 else [])
        jobs += [(e, chat, sampled, False) for chat, sampled in combos]
        if i % 5 == 0:
            jobs += [(e, True, False, True), (e, False, True, True)]

    def one(job):
        e, chat, sampled, stream = job
        text, finish = run(server, body(e, chat, sampled, stream), chat)
        what = problems(e, text, finish)
        kind = f"{e['name']} {'chat' if chat else 'completions'} {'sampled' if sampled else 'greedy'}" + \
            (" stream" if stream else "")
        return f"{kind}: {what}" if what else ""

    with ThreadPoolExecutor(4) as pool:
        bad = [p for p in pool.map(one, jobs) if p]
    assert not bad, "\n".join(bad)


def test_json_object(server):
    # Any object: nothing bounds it, so the prompts show a short one first
    # (the small model rambles otherwise; the grammar still holds then, but
    # the output would end at max_tokens).
    fmt = {"type": "json_object"}
    chat = {"model": DEFAULT_ID, "max_tokens": MAX_TOKENS, "temperature": 0, "response_format": fmt,
            "messages": [{"role": "user", "content": "A color as JSON."},
                         {"role": "assistant", "content": '{"color": "red"}'},
                         {"role": "user", "content": "Another color as JSON."}]}
    completion = {"model": DEFAULT_ID, "max_tokens": MAX_TOKENS, "temperature": 0, "response_format": fmt,
                  "prompt": 'JSON: {"color": "red"}\nJSON: {"color": "blue"}\nJSON:'}
    for is_chat, b in ((True, chat), (False, completion)):
        for stream in (False, True):
            text, finish = run(server, {**b, "stream": stream}, is_chat)
            assert finish == "stop", text
            assert isinstance(json.loads(text), dict), text
    # The official client's response_format argument.
    openai = pytest.importorskip("openai")
    c = openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=120)
    e = next(e for e in SCHEMAS if e["name"] == "weather")
    r = c.chat.completions.create(model=DEFAULT_ID, messages=[{"role": "user", "content": "Weather in Paris?"}],
                                  max_tokens=MAX_TOKENS, temperature=0,
                                  response_format={"type": "json_schema",
                                                   "json_schema": {"name": "weather", "schema": e["schema"]}})
    assert r.choices[0].finish_reason == "stop"
    jsonschema.validate(json.loads(r.choices[0].message.content), e["schema"])


def test_a_schema_that_stops_early_finishes_with_length(server):
    e = next(e for e in SCHEMAS if e["name"] == "person")
    b = body(e, False, False)
    b["max_tokens"] = 3
    text, finish = run(server, b, False)
    assert finish == "length"
    with pytest.raises(ValueError):
        json.loads(text)


@pytest.mark.parametrize("chat", [False, True])
def test_unsupported_keywords_are_a_400_naming_them(server, chat):
    for schema, keyword in [({"type": "array", "minItems": 2, "uniqueItems": True}, "uniqueItems"),
                            ({"type": "object", "properties": {"n": {"type": "array", "contains": {"type": "integer"}}}},
                             "contains"),
                            ({"not": {"minimum": 1}}, "not")]:
        b = body({"name": "bad", "description": "x", "schema": schema}, chat, False)
        r = request(server, "POST", C if chat else P, b)
        assert r.status == 400, r.text
        err = r.json()["error"]
        assert err["param"] == "response_format.json_schema.schema", err
        assert err["code"] == "invalid_schema", err
        assert f"unsupported JSON Schema keyword '{keyword}'" in err["message"], err
    r = request(server, "POST", C if chat else P, body({"name": "x", "description": "x"}, chat, False,
                                                      fmt={"type": "yaml"}))
    assert r.status == 400 and r.json()["error"]["param"] == "response_format.type", r.text


def test_constrained_requests_are_not_speculated():
    # --spec ngram: constrained requests decode one token per step (their
    # drafts would not be checked against the grammar), and give the output
    # of a server without speculation.
    picks = [e for e in SCHEMAS if e["name"] in ("person", "weather", "tags")]
    with Server(need_default_model(), "--slots", 2, "--chat-template", "gemma", "--max-context", 512,
                "--spec", "ngram") as s:
        got = [run(s, body(e, False, False), False) for e in picks]
        assert s.metrics()["kvshare_spec_draft_tokens_total"] == 0
    with Server(need_default_model(), "--slots", 2, "--max-context", 512) as plain:
        want = [run(plain, body(e, False, False), False) for e in picks]
    assert got == want
    for e, (text, finish) in zip(picks, got):
        assert not problems(e, text, finish), (e["name"], text)
