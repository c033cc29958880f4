"""Strict tools under tool_choice "auto" in `kvshare serve`: free text stays
free, and a call the model opens is held by a lazy grammar to the tool's
parameters. On the tiny random-weight Gemma 4 fixture the call marker
"<|tool_call>" (one special token) is forced with logit_bias, so the
constrained branch is always taken: the arguments validate with `jsonschema`
(streamed and not, greedy and sampled), while the same forced opening with a
non-strict tool gives no valid call. On the default Gemma 3 model (JSON
convention, nothing forced) the reply is text or a valid call. logit_bias
itself is checked in test_server_errors.py."""
import json
from pathlib import Path

import pytest

openai = pytest.importorskip("openai")
jsonschema = pytest.importorskip("jsonschema")

from server_util import DEFAULT_ID, GEMMA4, GEMMA4_ID, request  # noqa: E402
# The servers (module fixtures) and helpers of the tool suite.
from test_server_tools import client, gemma3, gemma4, streamed  # noqa: E402,F401

C = "/v1/chat/completions"
# Arguments the random fixture never writes by chance: a closed object, an
# enum and an integer.
ARGS = {"type": "object", "properties": {"k": {"type": "string", "enum": ["a", "b"]}, "n": {"type": "integer"}},
        "required": ["k", "n"], "additionalProperties": False}
LOOKUP = {"type": "function", "function": {"name": "lookup", "description": "Look a key up", "parameters": ARGS,
                                           "strict": True}}
WEATHER_ARGS = {"type": "object", "properties": {
    "city": {"type": "string", "enum": ["Paris", "London", "Tokyo"]},
    "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}}, "required": ["city", "unit"],
    "additionalProperties": False}
WEATHER = {"type": "function", "function": {"name": "get_weather", "description": "Get the current weather in a city",
                                            "parameters": WEATHER_ARGS, "strict": True}}


def call_open_id():
    """The fixture's "<|tool_call>" token, from its tokenizer."""
    tok = json.loads((Path(GEMMA4).parent / "tokenizer.json").read_text())
    return next(t["id"] for t in tok["added_tokens"] if t["content"] == "<|tool_call>")


def forced(tools, **kw):
    return dict(model=GEMMA4_ID, messages=[{"role": "user", "content": "Look up a."}], tools=tools,
                tool_choice="auto", parallel_tool_calls=False, max_tokens=80,
                logit_bias={str(call_open_id()): 100}, **kw)


def test_forced_marker_gives_a_call_that_validates(gemma4):
    c = client(gemma4)
    r = c.chat.completions.create(temperature=0, **forced([LOOKUP]))
    choice = r.choices[0]
    assert choice.finish_reason == "tool_calls", choice
    assert len(choice.message.tool_calls) == 1
    call = choice.message.tool_calls[0]
    assert call.function.name == "lookup"
    jsonschema.validate(json.loads(call.function.arguments), ARGS)
    # Streamed: the same call, and the openai client's accumulation works.
    calls, content, finish = streamed(c, temperature=0, **forced([LOOKUP]))
    assert calls == [("lookup", call.function.arguments)] and finish == "tool_calls" and content == ""


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_sampled_calls_validate(gemma4, seed):
    r = client(gemma4).chat.completions.create(temperature=1.5, seed=seed, **forced([LOOKUP]))
    for call in r.choices[0].message.tool_calls or []:
        jsonschema.validate(json.loads(call.function.arguments), ARGS)
    assert r.choices[0].message.tool_calls, "the forced marker opened a call"


def test_a_reply_cut_inside_a_call_leaves_no_markup_in_content(gemma4):
    # Parallel calls, each opened by the bias: max_tokens cuts the reply in
    # the first call, between calls or in the second; the open call is
    # dropped, the closed ones come back, no markup is content.
    c = client(gemma4)
    cut_in_second = 0
    for n in range(4, 124, 8):
        kw = {**forced([LOOKUP]), "parallel_tool_calls": True, "max_tokens": n}
        r = c.chat.completions.create(temperature=0, **kw)
        m = r.choices[0].message
        assert "<|tool_call>" not in (m.content or "") and "call:" not in (m.content or ""), (n, m)
        for call in m.tool_calls or []:
            jsonschema.validate(json.loads(call.function.arguments), ARGS)
        cut_in_second += r.choices[0].finish_reason == "length" and bool(m.tool_calls)
        calls, content, _ = streamed(c, temperature=0, **kw)
        assert "<|tool_call>" not in content and "call:" not in content, (n, content)
        assert [name for name, _ in calls] == [t.function.name for t in m.tool_calls or []]
    assert cut_in_second > 0, "no max_tokens cut a reply after its first call"


def test_without_strict_the_forced_call_does_not_validate(gemma4):
    # The same forced opening, no lazy grammar: the fixture writes no valid
    # call, so the tests above pass by the grammar, not by the model.
    loose = {"type": "function", "function": {**LOOKUP["function"], "strict": False}}
    r = client(gemma4).chat.completions.create(temperature=0, **forced([loose]))
    for call in r.choices[0].message.tool_calls or []:
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(json.loads(call.function.arguments), ARGS)


def test_unforced_auto_is_text_or_a_valid_call(gemma4):
    r = client(gemma4).chat.completions.create(model=GEMMA4_ID, messages=[{"role": "user", "content": "Hi."}],
                                               tools=[LOOKUP], temperature=0, max_tokens=16)
    m = r.choices[0].message
    for call in m.tool_calls or []:
        jsonschema.validate(json.loads(call.function.arguments), ARGS)
    assert m.tool_calls or isinstance(m.content, str)


def test_key_gemma_notation_cannot_write_is_a_400(gemma4):
    bad = {"type": "function", "function": {"name": "f", "strict": True, "parameters": {
        "type": "object", "properties": {"a:b": {"type": "string"}}}}}
    body = {"model": GEMMA4_ID, "messages": [{"role": "user", "content": "hi"}], "tools": [bad], "max_tokens": 4}
    r = request(gemma4, "POST", C, body)
    assert r.status == 400, r.text
    err = r.json()["error"]
    assert err["param"] == "tools" and err["code"] == "invalid_schema" and "a:b" in err["message"], err
    # Not strict: not enforced, so accepted.
    body["tools"][0]["function"]["strict"] = False
    assert request(gemma4, "POST", C, body).status == 200


@pytest.mark.parametrize("parallel", [False, True])
def test_gemma3_json_convention_is_text_or_a_valid_call(gemma3, parallel):
    r = client(gemma3).chat.completions.create(
        model=DEFAULT_ID, messages=[{"role": "user", "content": "What is the weather in Paris, in celsius?"}],
        tools=[WEATHER], tool_choice="auto", parallel_tool_calls=parallel, temperature=0, max_tokens=120)
    m = r.choices[0].message
    for call in m.tool_calls or []:
        assert call.function.name == "get_weather"
        jsonschema.validate(json.loads(call.function.arguments), WEATHER_ARGS)
    assert m.tool_calls or isinstance(m.content, str)
