"""`kvshare serve`'s compiled-grammar cache (--grammar-cache, docs/serving.md
"Grammar cache") on the tiny Gemma 4 fixture: a second request with the
same response_format schema is a hit in /metrics and gives the same output
as the first; another schema, or the same one with another property order,
is a miss; a schema the server refuses is a 400 each time and is not kept;
with room for one grammar, a new schema evicts the old one."""
import re

import pytest

from server_util import GEMMA4, GEMMA4_ID, Server, request

SCHEMA = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 12},
                                           "age": {"type": "integer", "minimum": 0, "maximum": 120}},
          "required": ["name", "age"], "additionalProperties": False}
OTHER = {"type": "array", "items": {"enum": ["red", "green", "blue"]}, "maxItems": 3}


@pytest.fixture(scope="module")
def server():
    with Server(GEMMA4, "--slots", 1, "--grammar-cache", 2) as s:
        yield s


def metrics(server):
    r = request(server, "GET", "/metrics")
    assert r.status == 200
    return {m[1]: float(m[2]) for m in re.finditer(r"^kvshare_(grammar_cache_\w+) (\S+)$", r.text, re.M)}


def ask(server, schema):
    body = {"model": GEMMA4_ID, "max_tokens": 24, "temperature": 0,
            "messages": [{"role": "user", "content": "Describe a person as JSON."}],
            "response_format": {"type": "json_schema", "json_schema": {"name": "p", "schema": schema}}}
    return request(server, "POST", "/v1/chat/completions", body)


def text(r):
    assert r.status == 200, r.text
    return r.json()["choices"][0]["message"]["content"]


def test_a_repeated_schema_hits_and_gives_the_same_output(server):
    before = metrics(server)
    for k in ("hits_total", "misses_total", "evictions_total", "entries", "bytes"):
        assert "grammar_cache_" + k in before
    first = text(ask(server, SCHEMA))
    after_first = metrics(server)
    assert after_first["grammar_cache_misses_total"] == before["grammar_cache_misses_total"] + 1
    assert after_first["grammar_cache_hits_total"] == before["grammar_cache_hits_total"]
    assert after_first["grammar_cache_bytes"] > 0
    second = text(ask(server, SCHEMA))
    after_second = metrics(server)
    assert after_second["grammar_cache_hits_total"] == after_first["grammar_cache_hits_total"] + 1
    assert after_second["grammar_cache_misses_total"] == after_first["grammar_cache_misses_total"]
    assert second == first and first

    # Another schema misses; the same properties in another order are another
    # grammar (they are generated in the schema's order).
    text(ask(server, OTHER))
    reordered = {**SCHEMA, "properties": dict(reversed(list(SCHEMA["properties"].items())))}
    text(ask(server, reordered))
    last = metrics(server)
    assert last["grammar_cache_misses_total"] == after_second["grammar_cache_misses_total"] + 2
    assert last["grammar_cache_hits_total"] == after_second["grammar_cache_hits_total"]


def test_refused_schemas_are_not_kept_and_one_grammar_evicts_the_oldest(server):
    before = metrics(server)
    bad = {"type": "array", "contains": {"type": "integer"}}
    for _ in range(2):
        r = ask(server, bad)
        assert r.status == 400 and r.json()["error"]["code"] == "invalid_schema"
    after = metrics(server)
    assert after["grammar_cache_misses_total"] == before["grammar_cache_misses_total"] + 2
    assert after["grammar_cache_entries"] == before["grammar_cache_entries"] == 2
    # --grammar-cache 2: two new schemas push the two kept ones out.
    for n in (1, 2):
        text(ask(server, {"type": "integer", "minimum": n}))
    full = metrics(server)
    assert full["grammar_cache_entries"] == 2
    assert full["grammar_cache_evictions_total"] == after["grammar_cache_evictions_total"] + 2
