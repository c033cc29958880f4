"""`kvshare serve` driven by the client libraries people already run against
OpenAI-compatible servers, on the tiny random-weight Gemma 4 fixture (one
server for the module):

- LangChain (PyPI langchain-openai): ChatOpenAI(base_url=...) with
  with_structured_output in its three methods (json_schema: response_format
  json_schema; function_calling: a forced tool call; json_mode:
  response_format json_object) and bind_tools with a tool call round trip
  (the call, the tool's result sent back, the reply).
- The OpenAI Agents SDK (PyPI openai-agents): an agent with one function
  tool over /v1/responses (OpenAIResponsesModel on an AsyncOpenAI client
  pointed at the server, tracing off) and an output_type, run and streamed:
  the forced call, the tool's output sent back, the structured answer.

The model's weights are random: what makes the replies valid is the grammar
(structured outputs, forced tool choices), not the model. A missing library
skips its test locally and fails under KVSHARE_REQUIRE_PEERS=1 (CI).
"""
import asyncio
import json
from typing import List, Literal

import pytest

openai = pytest.importorskip("openai")

from peers import need  # noqa: E402
from pydantic import BaseModel, Field  # noqa: E402  (an openai dependency)
from server_util import GEMMA4, GEMMA4_ID, Server  # noqa: E402


@pytest.fixture(scope="module")
def server():
    with Server(GEMMA4, "--slots", 2) as s:
        yield s


class Pick(BaseModel):
    """A pick."""
    color: Literal["red", "green"]
    n: int = Field(ge=0, le=9)
    tags: List[Literal["x", "y"]] = Field(max_length=2)


def chat_model(server, **kw):
    lc = need("langchain_openai")
    return lc.ChatOpenAI(base_url=server.url + "/v1", api_key="unused", model=GEMMA4_ID, temperature=0,
                         max_tokens=300, max_retries=0, timeout=120, **kw)


@pytest.mark.parametrize("method", ["json_schema", "function_calling"])
def test_langchain_structured_output(server, method):
    out = chat_model(server).with_structured_output(Pick, method=method, include_raw=True).invoke("Pick one")
    assert out["parsing_error"] is None, out["raw"]
    assert isinstance(out["parsed"], Pick) and 0 <= out["parsed"].n <= 9
    raw = out["raw"]
    if method == "function_calling":  # a forced call of the tool named after the model
        assert [c["name"] for c in raw.tool_calls] == ["Pick"] and raw.content == ""
        assert Pick(**raw.tool_calls[0]["args"]) == out["parsed"]
    else:
        assert Pick.model_validate_json(raw.content) == out["parsed"]


def test_langchain_json_mode(server):
    # json_mode: response_format json_object (any object), parsed as JSON.
    schema = {"title": "pick", "description": "A pick", "type": "object",
              "properties": {"color": {"type": "string"}}}
    out = chat_model(server).with_structured_output(schema, method="json_mode", include_raw=True).invoke(
        "JSON")  # greedy, this prompt ends the object early on this fixture (others run to max_tokens)
    assert out["parsing_error"] is None, out["raw"]
    assert isinstance(out["parsed"], dict) and json.loads(out["raw"].content) == out["parsed"]


def test_langchain_bind_tools_round_trip(server):
    need("langchain_core")  # a langchain-openai dependency
    from langchain_core.messages import HumanMessage, ToolMessage
    from langchain_core.tools import tool

    seen = []

    @tool
    def lookup(k: Literal["a", "b"]) -> str:
        """Look a key up."""
        seen.append(k)
        return "42"

    llm = chat_model(server)
    msgs = [HumanMessage("Look up a")]
    ai = llm.bind_tools([lookup], tool_choice="lookup").invoke(msgs)
    assert [c["name"] for c in ai.tool_calls] == ["lookup"] and ai.tool_calls[0]["id"].startswith("call_")
    result = lookup.invoke(ai.tool_calls[0])  # a ToolMessage with the call's id
    assert isinstance(result, ToolMessage) and seen == [ai.tool_calls[0]["args"]["k"]]
    final = llm.bind_tools([lookup]).invoke(msgs + [ai, result], max_tokens=8)
    assert final.response_metadata["finish_reason"] in ("stop", "length", "tool_calls")
    assert isinstance(final.content, str) and final.usage_metadata["input_tokens"] > 0
    # A tool_call_id that matches no call is refused (as OpenAI does).
    with pytest.raises(openai.BadRequestError):
        llm.invoke(msgs + [ai, ToolMessage("42", tool_call_id="call_unknown")])


class Answer(BaseModel):
    value: Literal["42", "none"]


def test_agents_sdk_function_tool(server):
    agents = need("agents")
    agents.set_tracing_disabled(True)
    calls = []

    @agents.function_tool
    def lookup(k: Literal["a", "b"]) -> str:
        """Look a key up."""
        calls.append(k)
        return "42"

    async def run():
        client = openai.AsyncOpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=120)
        model = agents.OpenAIResponsesModel(model=GEMMA4_ID, openai_client=client)
        # A random-weight model calls a tool only when the choice forces it;
        # after the call the SDK resets tool_choice to auto, and the reply is
        # then one JSON document: another call or the output_type's answer.
        agent = agents.Agent(name="looker", instructions="Use the tool.", tools=[lookup], model=model,
                             output_type=Answer,
                             model_settings=agents.ModelSettings(tool_choice="required", temperature=0,
                                                                 max_tokens=300))
        r = await agents.Runner.run(agent, "Look up a", max_turns=4)
        assert isinstance(r.final_output, Answer) and len(calls) >= 1
        kinds = [type(i).__name__ for i in r.new_items]
        assert kinds[:2] == ["ToolCallItem", "ToolCallOutputItem"] and kinds[-1] == "MessageOutputItem"
        # The last response's input: the user message, the call and its output.
        last = r.raw_responses[-1].response_id
        items = await client.responses.input_items.list(last, order="asc")
        types = [i.type for i in items.data]
        assert types[0] == "message" and types[1:3] == ["function_call", "function_call_output"]
        before = len(calls)
        streamed = agents.Runner.run_streamed(agent, "Look up b", max_turns=4)
        events = {e.type async for e in streamed.stream_events()}
        assert isinstance(streamed.final_output, Answer) and len(calls) > before
        assert {"raw_response_event", "run_item_stream_event"} <= events
        await client.close()

    asyncio.run(run())
