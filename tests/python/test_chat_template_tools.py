"""The prompt text kvshare serve writes for chat requests with tools equals,
byte for byte, Gemma 4's own chat template (the fixture tokenizer's
`chat_template`, from llama.cpp's google-gemma-4-31B-it.jinja) rendered by
jinja2 the way HF transformers renders it, for several conversations: tools
with nested parameters, one and several calls, tool responses, text around
them, calls awaiting responses, tool_choice "none". The server side is
tests/tools/chat_format_dump (the server's request parser and
kvshare::FormatChat); call arguments reach jinja2 as objects, as llama.cpp
and vLLM pass them. Needs jinja2 (skips without it)."""
import copy
import json
import os
import subprocess
from pathlib import Path

import pytest

jinja2 = pytest.importorskip("jinja2")
from jinja2.sandbox import ImmutableSandboxedEnvironment  # noqa: E402

ROOT = Path(os.environ.get("KVSHARE_SOURCE_DIR", Path(__file__).resolve().parents[2]))
TEMPLATE = json.loads((ROOT / "tests" / "fixtures" / "gemma4" / "tokenizer_config.json").read_text())["chat_template"]

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Current weather in a city",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "description": "City name"},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}}, "required": ["city"]}}}
SEARCH = {"type": "function", "function": {
    "name": "search_flights", "description": "Find flights",
    "parameters": {"type": "object", "properties": {
        "route": {"type": "object", "description": "Where", "properties": {
            "from": {"type": "string"}, "to": {"type": "string"}}, "required": ["from", "to"]},
        "dates": {"type": "array", "items": {"type": "string"}, "description": "ISO dates"},
        "Passengers": {"type": "integer", "description": "How many"},
        "direct": {"type": "boolean", "nullable": True},
        "legs": {"type": "array", "items": {"type": "object", "properties": {"code": {"type": "string"}},
                                            "required": ["code"]}}},
        "required": ["route"]}}}
CLOCK = {"type": "function", "function": {"name": "get_time"}}


def call(id, name, args):
    return {"id": id, "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}


CONVERSATIONS = {
    "call_response_and_answer": dict(tools=[WEATHER], messages=[
        {"role": "system", "content": "You are helpful."},
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": None, "tool_calls": [call("call_1", "get_weather", {"city": "Paris"})]},
        {"role": "tool", "tool_call_id": "call_1", "content": "18 C, sunny"},
        {"role": "assistant", "content": "It is 18 C and sunny."},
        {"role": "user", "content": "And London?"}]),
    "parallel_calls_nested_parameters": dict(tools=[WEATHER, SEARCH, CLOCK], messages=[
        {"role": "user", "content": "  Flights Paris to Rome, and the time?  "},
        {"role": "assistant", "content": "Looking.", "tool_calls": [
            call("a1", "search_flights", {"route": {"from": "CDG", "to": "FCO"}, "dates": ["2026-01-02"],
                                          "Passengers": 2, "direct": True, "budget": 120.5, "note": None}),
            call("a2", "get_time", {})]},
        {"role": "tool", "tool_call_id": "a2", "content": "10:00"},
        {"role": "tool", "tool_call_id": "a1", "content": "[{\"flight\": \"AZ1\"}]"}]),
    "calls_awaiting_responses": dict(tools=[WEATHER, CLOCK], messages=[
        {"role": "user", "content": "Weather?"},
        {"role": "assistant", "tool_calls": [call("x", "get_weather", {"city": "Oslo", "unit": "celsius"})]}]),
    "tools_without_history": dict(tools=[SEARCH, CLOCK], messages=[
        {"role": "developer", "content": "Be brief."}, {"role": "user", "content": "Hi"}]),
    "tool_choice_none_keeps_the_history": dict(tools=[WEATHER], tool_choice="none", messages=[
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": "", "tool_calls": [call("c", "get_weather", {"city": "Paris"})]},
        {"role": "tool", "tool_call_id": "c", "content": "rain"},
        {"role": "assistant", "content": "Rain."},
        {"role": "user", "content": "Thanks"}]),
}


def jinja_text(conv):
    """The template's text (tool_choice "none": rendered without tools, as the server offers none)."""
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    messages = copy.deepcopy(conv["messages"])
    for m in messages:
        if m["role"] == "developer":
            m["role"] = "system"
        for c in m.get("tool_calls", []):
            c["function"]["arguments"] = json.loads(c["function"]["arguments"])
    tools = None if conv.get("tool_choice") == "none" else conv["tools"]
    return env.from_string(TEMPLATE).render(messages=messages, tools=tools, bos_token="<bos>",
                                            add_generation_prompt=True)


def kvshare_text(conv, fmt="gemma4"):
    dump = os.environ.get("KVSHARE_CHAT_FORMAT_DUMP", ROOT / "build" / "tests" / "chat_format_dump")
    if not Path(dump).exists():
        pytest.skip(f"no chat_format_dump at {dump} (build it, or set KVSHARE_CHAT_FORMAT_DUMP)")
    body = {"messages": conv["messages"], "tools": conv["tools"]}
    if "tool_choice" in conv:
        body["tool_choice"] = conv["tool_choice"]
    r = subprocess.run([str(dump), fmt], input=json.dumps(body), capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return r.stdout


@pytest.mark.parametrize("name", sorted(CONVERSATIONS))
def test_gemma4_tools_equal_the_template(name):
    want = jinja_text(CONVERSATIONS[name])
    assert "<|tool>" in want or CONVERSATIONS[name].get("tool_choice") == "none"
    assert kvshare_text(CONVERSATIONS[name]) == want


def test_gemma_json_convention_lists_the_tools():
    text = kvshare_text(CONVERSATIONS["call_response_and_answer"], "gemma")
    assert text.startswith("<bos><start_of_turn>user\nYou are helpful.\n\nYou can call these tools")
    params = json.dumps(WEATHER["function"]["parameters"], sort_keys=True, separators=(",", ":"))
    assert '{"name":"get_weather","description":"Current weather in a city","parameters":' + params + "}\n" in text
    assert ('<start_of_turn>model\n{"tool_call":{"name":"get_weather","arguments":{"city":"Paris"}}}<end_of_turn>\n'
            '<start_of_turn>user\n{"tool_response":{"name":"get_weather","content":"18 C, sunny"}}<end_of_turn>\n'
            in text)
