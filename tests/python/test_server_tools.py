"""Tool calling in `kvshare serve`, driven by the official openai client: a
full tool loop (tools offered with tool_choice "required", the call comes
back as tool_calls, the result goes back as a tool message, a reply follows)
on the tiny random-weight Gemma 4 fixture, where only the grammar makes the
reply a call, and on the default Gemma 3 model with the JSON convention;
streamed and non-streamed calls agree (greedy); a named tool_choice calls
that tool; tool_choice "none" gives plain content; tools beside a
response_format give a call or the format's document; bad tool shapes are
400s naming the field."""
import json

import pytest

openai = pytest.importorskip("openai")

from server_util import DEFAULT_ID, GEMMA4, GEMMA4_ID, Server, need_default_model, request  # noqa: E402

C = "/v1/chat/completions"
# Short declarations and bounded arguments: the fixture's context is 512 tokens
# and its vocabulary mostly bytes.
LOOKUP = {"type": "function", "function": {
    "name": "lookup", "description": "Look a key up",
    "parameters": {"type": "object", "properties": {"k": {"type": "string", "enum": ["a", "b"]}}, "required": ["k"]}}}
NOW = {"type": "function", "function": {"name": "now"}}
WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Get the current weather in a city",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "enum": ["Paris", "London", "Tokyo"]},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}}, "required": ["city", "unit"]}}}


@pytest.fixture(scope="module")
def gemma4():
    with Server(GEMMA4, "--slots", 2) as s:
        yield s


@pytest.fixture(scope="module")
def gemma3():
    with Server(need_default_model(), "--slots", 2, "--chat-template", "gemma", "--max-context", 1024) as s:
        yield s


def client(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=120)


def streamed(c, **kw):
    """The calls (name, arguments), content and finish_reason of a streamed request, checking the chunk shapes."""
    calls, content, finish = {}, "", None
    for ch in c.chat.completions.create(stream=True, **kw):
        if not ch.choices:
            continue
        d = ch.choices[0].delta
        content += d.content or ""
        for tc in d.tool_calls or []:
            if tc.index not in calls:
                # The first chunk of a call has its id, type and name.
                assert tc.id.startswith("call_") and tc.type == "function" and tc.function.name
                calls[tc.index] = [tc.function.name, tc.function.arguments or ""]
            else:
                assert tc.id is None and not tc.function.name
                calls[tc.index][1] += tc.function.arguments or ""
        finish = ch.choices[0].finish_reason or finish
    assert sorted(calls) == list(range(len(calls)))
    return [tuple(calls[i]) for i in sorted(calls)], content, finish


def tool_loop(server, model, tools, user, answer, **kw):
    """Required call, streamed and not, then the tool's result and the reply; returns the call."""
    c = client(server)
    messages = [{"role": "user", "content": user}]
    req = dict(model=model, messages=messages, tools=tools, tool_choice="required", temperature=0, **kw)
    r = c.chat.completions.create(**req)
    choice = r.choices[0]
    assert choice.finish_reason == "tool_calls", choice
    assert choice.message.content is None
    assert len(choice.message.tool_calls) == 1
    call = choice.message.tool_calls[0]
    assert call.id.startswith("call_") and len(call.id) == 29 and call.type == "function"
    assert call.function.name in [t["function"]["name"] for t in tools]
    args = json.loads(call.function.arguments)
    assert isinstance(args, dict)

    calls, content, finish = streamed(c, **req)
    assert calls == [(call.function.name, call.function.arguments)]
    assert content == "" and finish == "tool_calls"

    messages += [{"role": "assistant", "content": None, "tool_calls": [
                     {"id": call.id, "type": "function",
                      "function": {"name": call.function.name, "arguments": call.function.arguments}}]},
                 {"role": "tool", "tool_call_id": call.id, "content": answer}]
    follow = c.chat.completions.create(model=model, messages=messages, tools=tools, tool_choice="none",
                                       temperature=0, max_tokens=kw.get("max_tokens", 16))
    assert follow.choices[0].message.tool_calls is None
    assert isinstance(follow.choices[0].message.content, str)
    assert follow.choices[0].finish_reason in ("stop", "length")
    return call, args, follow.choices[0].message.content


def test_gemma4_tool_loop(gemma4):
    call, args, _ = tool_loop(gemma4, GEMMA4_ID, [LOOKUP, NOW], "Look up a.", "42", max_tokens=160)
    if call.function.name == "lookup":
        assert args in ({"k": "a"}, {"k": "b"})
    else:
        assert args == {}


def test_gemma4_named_function_and_none(gemma4):
    c = client(gemma4)
    msgs = [{"role": "user", "content": "Time?"}]
    r = c.chat.completions.create(model=GEMMA4_ID, messages=msgs, tools=[LOOKUP, NOW], temperature=0, max_tokens=160,
                                  tool_choice={"type": "function", "function": {"name": "now"}})
    assert r.choices[0].finish_reason == "tool_calls"
    assert [(t.function.name, t.function.arguments) for t in r.choices[0].message.tool_calls] == [("now", "{}")]
    # "none": not offered, nothing parsed; the text equals the request without tools.
    plain = c.chat.completions.create(model=GEMMA4_ID, messages=msgs, temperature=0, max_tokens=12)
    none = c.chat.completions.create(model=GEMMA4_ID, messages=msgs, tools=[LOOKUP, NOW], tool_choice="none",
                                     temperature=0, max_tokens=12)
    assert none.choices[0].message.tool_calls is None
    assert none.choices[0].message.content == plain.choices[0].message.content
    assert none.usage.prompt_tokens == plain.usage.prompt_tokens
    # "auto" offers them: a longer prompt, and a well-formed reply either way.
    auto = c.chat.completions.create(model=GEMMA4_ID, messages=msgs, tools=[LOOKUP, NOW], temperature=0, max_tokens=12)
    assert auto.usage.prompt_tokens > plain.usage.prompt_tokens
    m = auto.choices[0].message
    assert (m.tool_calls and auto.choices[0].finish_reason == "tool_calls") or isinstance(m.content, str)


def test_gemma3_tool_loop_json_convention(gemma3):
    call, args, reply = tool_loop(gemma3, DEFAULT_ID, [WEATHER], "What is the weather in Paris, in celsius?",
                                  '{"temperature": 18, "sky": "sunny"}', max_tokens=60)
    assert call.function.name == "get_weather"
    assert args["city"] in ("Paris", "London", "Tokyo") and args["unit"] in ("celsius", "fahrenheit")
    assert reply.strip()


def test_gemma3_none_is_plain_content(gemma3):
    c = client(gemma3)
    msgs = [{"role": "user", "content": "Say hello."}]
    plain = c.chat.completions.create(model=DEFAULT_ID, messages=msgs, temperature=0, max_tokens=10)
    none = c.chat.completions.create(model=DEFAULT_ID, messages=msgs, tools=[WEATHER], tool_choice="none",
                                     temperature=0, max_tokens=10)
    assert none.choices[0].message.content == plain.choices[0].message.content
    assert none.choices[0].message.tool_calls is None


@pytest.mark.parametrize("patch, param, words", [
    ({"tools": [{"type": "function", "function": {"description": "x"}}]}, "tools[0].function.name", "Missing"),
    ({"tools": [{"type": "function", "function": {"name": "f", "parameters": [1]}}]}, "tools[0].function.parameters",
     "an object"),
    ({"tools": [{"type": "function", "function": {"name": "bad name"}}]}, "tools[0].function.name", "a-z"),
    ({"tools": [NOW, NOW]}, "tools[1].function.name", "unique"),
    ({"tools": [NOW], "tool_choice": {"type": "function", "function": {"name": "later"}}},
     "tool_choice.function.name", "no tool named 'later'"),
    ({"tools": [NOW], "tool_choice": "sometimes"}, "tool_choice", "'required'"),
    ({"tool_choice": "required"}, "tool_choice", "at least one tool"),
    ({"tools": [{"type": "function", "function": {
        "name": "f", "strict": True,
        "parameters": {"type": "object", "properties": {"id": {"type": "array", "minItems": 2, "uniqueItems": True}}}}}]},
     "tools[0].function.parameters", "'uniqueItems'"),
    ({"messages": [{"role": "user", "content": "hi"}, {"role": "tool", "content": "42"}]},
     "messages[1].tool_call_id", "Missing"),
    ({"messages": [{"role": "assistant", "content": None, "tool_calls": [{"id": "c", "function": {"arguments": "{}"}}]}]},
     "messages[0].tool_calls[0].function.name", "Missing"),
])
def test_bad_tools_are_400s_naming_the_field(gemma4, patch, param, words):
    body = {"model": GEMMA4_ID, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4, **patch}
    r = request(gemma4, "POST", C, body)
    assert r.status == 400, r.text
    err = r.json()["error"]
    assert err["param"] == param and words in err["message"], err


def test_strict_false_renders_unsupported_keywords(gemma4):
    tool = {"type": "function", "function": {
        "name": "f", "parameters": {"type": "object", "properties": {"id": {"type": "string", "pattern": "^x"}}}}}
    r = request(gemma4, "POST", C, {"model": GEMMA4_ID, "messages": [{"role": "user", "content": "hi"}],
                                    "tools": [tool], "tool_choice": "required", "max_tokens": 120, "temperature": 0})
    assert r.status == 200, r.text
    # The call is forced, its arguments are any object (which may outgrow max_tokens on random weights).
    choice = r.json()["choices"][0]
    if choice["finish_reason"] != "length":
        assert choice["finish_reason"] == "tool_calls"
        assert isinstance(json.loads(choice["message"]["tool_calls"][0]["function"]["arguments"]), dict)


def test_gemma4_tools_beside_a_format(gemma4):
    # Tools offered freely next to a response_format (what the Agents SDK sends
    # for an agent with tools and an output_type): the reply is one JSON
    # document, a call in the JSON convention or the format's answer; forced,
    # it is the call.
    schema = {"type": "object", "properties": {"n": {"type": "integer", "minimum": 0, "maximum": 9}},
              "required": ["n"], "additionalProperties": False}
    kw = dict(model=GEMMA4_ID, messages=[{"role": "user", "content": "Look up a"}], tools=[LOOKUP], max_tokens=200,
              response_format={"type": "json_schema", "json_schema": {"name": "n", "schema": schema}})
    c = client(gemma4)
    kinds = set()
    for seed in range(1, 7):  # sampled: on this fixture seeds 1..6 give both kinds
        r = c.chat.completions.create(temperature=1, seed=seed, **kw)
        ch = r.choices[0]
        if ch.finish_reason == "tool_calls":
            assert ch.message.content is None and [t.function.name for t in ch.message.tool_calls] == ["lookup"]
            assert json.loads(ch.message.tool_calls[0].function.arguments)["k"] in ("a", "b")
        else:
            assert ch.finish_reason == "stop" and not ch.message.tool_calls
            assert 0 <= json.loads(ch.message.content)["n"] <= 9
        kinds.add(ch.finish_reason)
        if seed in (1, 2):  # streamed: the same reply (an answer, a call)
            calls, content, finish = streamed(c, temperature=1, seed=seed, **kw)
            assert finish == ch.finish_reason and content == (ch.message.content or "")
            assert [c[0] for c in calls] == [t.function.name for t in ch.message.tool_calls or []]
    assert kinds == {"tool_calls", "stop"}
    forced = c.chat.completions.create(temperature=1, seed=1, tool_choice="required", **kw).choices[0]
    assert forced.finish_reason == "tool_calls" and forced.message.tool_calls[0].function.name == "lookup"


def test_pydantic_models_with_refs_as_tools_and_formats(gemma4, gemma3):
    # pydantic writes nested models and enums as {"$ref": "#/$defs/..."}. Put
    # inside a call schema (forced calls, Gemma 3's calls under "auto" with a
    # strict tool) or an anyOf beside tools, those references pointed at the
    # root that no longer holds $defs: every such request was a 400 "'$ref'
    # #/$defs/Loc does not resolve".
    from enum import Enum
    from typing import List, Literal

    from pydantic import BaseModel, Field

    class Unit(str, Enum):
        c = "c"
        f = "f"

    class Loc(BaseModel):
        city: Literal["Paris", "Rome"]
        unit: Unit

    class GetWeather(BaseModel):
        locs: List[Loc] = Field(min_length=1, max_length=2)

    class Pick(BaseModel):
        loc: Loc

    tools = [openai.pydantic_function_tool(GetWeather), openai.pydantic_function_tool(Pick)]
    assert "$defs" in json.dumps(tools[0]) and "$ref" in json.dumps(tools[1])
    msgs = [{"role": "user", "content": "Weather in Paris?"}]
    c = client(gemma4)
    for choice in ("required", {"type": "function", "function": {"name": "Pick"}}):  # two branches, one
        r = c.chat.completions.parse(model=GEMMA4_ID, messages=msgs, tools=tools, tool_choice=choice,
                                     max_tokens=200, temperature=1, seed=1)
        call = r.choices[0].message.tool_calls[0]
        assert r.choices[0].finish_reason == "tool_calls"
        assert isinstance(call.function.parsed_arguments, (GetWeather, Pick))
    # Beside a format (the Agents SDK's tools and output_type), both with $defs.
    r = c.chat.completions.parse(model=GEMMA4_ID, messages=msgs, tools=tools, response_format=Pick,
                                 max_tokens=200, temperature=1, seed=1)
    ch = r.choices[0]
    assert ch.finish_reason in ("stop", "tool_calls"), ch
    assert isinstance(ch.message.parsed, Pick) if ch.finish_reason == "stop" else ch.message.tool_calls
    # Gemma 3 under "auto" with strict tools: the lazy grammar of JSON calls.
    for parallel in (True, False):
        r = request(gemma3, "POST", C, {"model": DEFAULT_ID, "messages": msgs, "tools": tools, "max_tokens": 4,
                                        "parallel_tool_calls": parallel, "temperature": 0})
        assert r.status == 200, r.text


def test_forced_calls_write_arguments_in_declared_order(gemma3):
    # The forced call's schema sorted the parameters' properties, so a model
    # wrote "answer" before the "reasoning" declared to come first (what
    # reasoning-first models rely on), unlike calls under "auto".
    tool = {"type": "function", "function": {"name": "f", "strict": True, "parameters": {
        "type": "object", "properties": {"reasoning": {"type": "string", "maxLength": 5},
                                         "answer": {"type": "string", "enum": ["yes", "no"]}},
        "required": ["reasoning", "answer"], "additionalProperties": False}}}
    for choice in ("required", {"type": "function", "function": {"name": "f"}}):
        r = request(gemma3, "POST", C, {"model": DEFAULT_ID, "messages": [{"role": "user", "content": "Is it?"}],
                                        "tools": [tool], "tool_choice": choice, "max_tokens": 60, "temperature": 0})
        ch = r.json()["choices"][0]
        assert ch["finish_reason"] == "tool_calls", r.text
        args = json.loads(ch["message"]["tool_calls"][0]["function"]["arguments"], object_pairs_hook=list)
        assert [k for k, _ in args] == ["reasoning", "answer"], args
    # The Responses API's flat tools too.
    flat = {"type": "function", **tool["function"]}
    r = request(gemma3, "POST", "/v1/responses", {"model": DEFAULT_ID, "input": "Is it?", "tools": [flat],
                                                   "tool_choice": "required", "max_output_tokens": 60,
                                                   "temperature": 0})
    call = [o for o in r.json()["output"] if o["type"] == "function_call"]
    assert call and [k for k, _ in json.loads(call[0]["arguments"], object_pairs_hook=list)] == ["reasoning", "answer"]
