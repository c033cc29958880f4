"""OpenAI's Responses API on `kvshare serve` (POST /v1/responses, GET
/v1/responses/{id}), driven by the official openai client's responses.create
on the tiny random-weight Gemma 4 fixture: plain text and its incomplete
status, a function tool and the call / output round trip (the output items
sent back as input, and the same through previous_response_id give the same
greedy reply), streamed events in OpenAI's order agreeing with the
non-streamed response, text.format json_schema, the bounded store and its
input_items list, a client that goes away cancelling its stream, and 400s
naming the field for what is not served."""
import json
import time
from typing import Literal

import pytest

openai = pytest.importorskip("openai")
pydantic = pytest.importorskip("pydantic")  # an openai dependency

from server_util import GEMMA4, GEMMA4_ID, Server, Stream, request  # noqa: E402

KEPT = 4  # --responses-kept
LOOKUP = {"type": "function", "name": "lookup", "description": "Look a key up",
          "parameters": {"type": "object", "properties": {"k": {"type": "string", "enum": ["a", "b"]}},
                         "required": ["k"], "additionalProperties": False}}
SCHEMA = {"type": "object", "properties": {"n": {"type": "integer", "minimum": 0, "maximum": 9},
                                           "ok": {"type": "boolean"}},
          "required": ["n", "ok"], "additionalProperties": False}



class Answer(pydantic.BaseModel):
    n: int
    ok: bool
    tag: Literal["x", "y"]


@pytest.fixture(scope="module")
def server():
    with Server(GEMMA4, "--slots", 2, "--responses-kept", KEPT) as s:
        yield s


@pytest.fixture(scope="module")
def c(server):
    client = openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=120)
    yield client
    client.close()  # its kept-alive connections would hold the server's stop for their 5 s


def create(c, **kw):
    return c.responses.create(model=GEMMA4_ID, temperature=0, **kw)


def events(c, **kw):
    """The streamed events, checking sequence numbers, and the final response."""
    evs = list(create(c, stream=True, **kw))
    assert [e.sequence_number for e in evs] == list(range(len(evs)))
    return [e.type for e in evs], evs[-1].response


def test_plain_text_and_max_output_tokens(c, server):
    r = create(c, input="Hello", instructions="Be brief", max_output_tokens=6, metadata={"run": "1"})
    assert r.id.startswith("resp_") and r.object == "response" and r.model == GEMMA4_ID
    assert r.status == "incomplete" and r.incomplete_details.reason == "max_output_tokens"
    assert r.instructions == "Be brief" and r.metadata == {"run": "1"} and r.max_output_tokens == 6
    assert [o.type for o in r.output] == ["message"]
    msg = r.output[0]
    assert msg.id.startswith("msg_") and msg.role == "assistant" and msg.content[0].type == "output_text"
    assert r.output_text == msg.content[0].text and r.output_text
    assert r.usage.output_tokens == 6 and r.usage.input_tokens > 0
    assert r.usage.total_tokens == r.usage.input_tokens + 6
    # Streamed, the same greedy text, in OpenAI's event order.
    types, final = events(c, input="Hello", instructions="Be brief", max_output_tokens=6)
    deltas = types.count("response.output_text.delta")
    assert types == (["response.created", "response.in_progress", "response.output_item.added",
                      "response.content_part.added"] + ["response.output_text.delta"] * deltas +
                     ["response.output_text.done", "response.content_part.done", "response.output_item.done",
                      "response.incomplete"])
    assert final.status == "incomplete" and final.output[0].content[0].text == r.output_text
    # The stream's log line counts its tokens (its choice set once read the
    # handler's request after the handler had returned).
    server.wait_log(r"chat stream: prompt \d+ tokens \(\d+ cached\), output 6 tokens, length")


def test_function_call_round_trip(c):
    user = [{"role": "user", "content": [{"type": "input_text", "text": "look up a"}]}]
    r = create(c, input=user, tools=[LOOKUP], tool_choice="required")
    assert r.status == "completed" and [o.type for o in r.output] == ["function_call"]
    call = r.output[0]
    assert call.id.startswith("fc_") and call.call_id.startswith("call_") and call.name == "lookup"
    assert json.loads(call.arguments)["k"] in ("a", "b")
    assert r.tools[0].name == "lookup" and r.tools[0].strict is True
    # Streamed: the call's events, the same call.
    types, final = events(c, input=user, tools=[LOOKUP], tool_choice="required")
    assert types == ["response.created", "response.in_progress", "response.output_item.added",
                     "response.function_call_arguments.delta", "response.function_call_arguments.done",
                     "response.output_item.done", "response.completed"]
    assert (final.output[0].name, final.output[0].arguments) == (call.name, call.arguments)
    # The output sent back as input with the call's output, and the same through
    # previous_response_id: one conversation, one greedy reply.
    output = {"type": "function_call_output", "call_id": call.call_id, "output": "42"}
    items = user + [o.model_dump(exclude_none=True) for o in r.output] + [output]
    stateless = create(c, input=items, tools=[LOOKUP], max_output_tokens=8)
    chained = create(c, input=[output], previous_response_id=r.id, tools=[LOOKUP], max_output_tokens=8)
    assert chained.previous_response_id == r.id
    assert chained.output_text == stateless.output_text
    assert chained.usage.input_tokens == stateless.usage.input_tokens
    # A call id the conversation never made is refused with the item's name.
    with pytest.raises(openai.BadRequestError) as e:
        create(c, input=[{**output, "call_id": "call_unknown"}], previous_response_id=r.id, tools=[LOOKUP])
    assert e.value.body["param"] == "input[0].tool_call_id"


def test_text_format_json_schema(c):
    fmt = {"format": {"type": "json_schema", "name": "answer", "schema": SCHEMA, "strict": True}}
    r = create(c, input="Answer in JSON", text=fmt, max_output_tokens=60)
    assert r.status == "completed" and r.text.format.name == "answer"
    value = json.loads(r.output_text)
    assert list(value) == ["n", "ok"] and 0 <= value["n"] <= 9 and isinstance(value["ok"], bool)
    _, final = events(c, input="Answer in JSON", text=fmt, max_output_tokens=60)
    assert final.output[0].content[0].text == r.output_text
    # The SDK's responses.parse with a pydantic model (its strict json_schema).
    parsed = c.responses.parse(model=GEMMA4_ID, input="json", text_format=Answer, temperature=0, max_output_tokens=200)
    assert parsed.status == "completed" and isinstance(parsed.output_parsed, Answer)
    obj = create(c, input="JSON please", text={"format": {"type": "json_object"}}, max_output_tokens=30)
    assert obj.output_text.lstrip()[:1] in ("", "{"), obj.output_text


def test_store_retrieve_and_eviction(c, server):
    first = create(c, input="one", max_output_tokens=2)
    assert c.responses.retrieve(first.id).output_text == first.output_text
    gone = create(c, input="gone", max_output_tokens=1)
    c.responses.delete(gone.id)
    with pytest.raises(openai.NotFoundError):
        c.responses.retrieve(gone.id)
    unstored = create(c, input="two", max_output_tokens=2, store=False)
    assert request(server, "GET", f"/v1/responses/{unstored.id}").status == 404
    for i in range(KEPT):
        create(c, input=f"more {i}", max_output_tokens=1)
    with pytest.raises(openai.BadRequestError) as e:
        create(c, input="again", previous_response_id=first.id, max_output_tokens=1)
    assert e.value.body["param"] == "previous_response_id" and first.id in e.value.body["message"]


@pytest.mark.parametrize("extra,param", [
    ({"tools": [{"type": "web_search"}]}, "tools[0].type"),
    ({"reasoning": {"effort": "high"}}, "reasoning.effort"),
    ({"background": True}, "background"),
    ({"previous_response_id": "resp_never"}, "previous_response_id"),
    ({"text": {"format": {"type": "json_schema", "name": "x", "schema": {"not": {}}}}}, "text.format.schema"),
    ({"max_output_tokens": 0}, "max_output_tokens"),
    ({"input": [{"type": "item_reference", "id": "msg_1"}]}, "input[0].type"),
])
def test_refusals_name_the_field(server, extra, param):
    r = request(server, "POST", "/v1/responses", {"model": GEMMA4_ID, "input": "x", **extra})
    assert r.status == 400, r.text
    assert r.json()["error"]["param"] == param


def test_raw_stream_has_typed_events_and_no_done(server):
    r = request(server, "POST", "/v1/responses", {"input": "x", "max_output_tokens": 2, "stream": True})
    assert r.status == 200 and r.headers["content-type"].startswith("text/event-stream")
    blocks = [b for b in r.text.split("\n\n") if b]
    for b in blocks:
        event, data = b.split("\n")
        assert event.startswith("event: ") and data.startswith("data: ")
        assert json.loads(data[6:])["type"] == event[7:]
    assert "[DONE]" not in r.text


def test_a_client_that_goes_away_cancels_its_stream(server):
    # Greedy: no end of turn for over 1000 tokens on this fixture (sampled, one may come early).
    s = Stream(server, "/v1/responses", {"input": "x", "max_output_tokens": 4000, "temperature": 0, "stream": True})
    got = iter(s)
    for _ in range(6):  # created, in_progress, the message's opening, some deltas
        next(got)
    s.close()
    line = server.wait_log(r"output \d+ tokens, .*client gone", timeout=20)
    assert int(line.split("output ")[1].split()[0]) < 1000
    end = time.time() + 10
    while server.metrics()["kvshare_http_requests_in_flight"] and time.time() < end:
        time.sleep(0.02)
    assert server.metrics()["kvshare_http_requests_in_flight"] == 0


def test_input_items_list(c, server):
    user = {"role": "user", "content": "look up a"}
    r = create(c, input=[user], tools=[LOOKUP], tool_choice="required")
    call = r.output[0]
    output = {"type": "function_call_output", "call_id": call.call_id, "output": "42"}
    sent = [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": "look up a"}]},
            call.model_dump(exclude_none=True), output, {"role": "assistant", "content": "done"}]
    second = create(c, input=sent, instructions="Be brief", tools=[LOOKUP], max_output_tokens=2)
    page = c.responses.input_items.list(second.id, order="asc")
    assert page.object == "list" and page.has_more is False
    items = page.data
    assert [i.type for i in items] == ["message", "function_call", "function_call_output", "message"]
    assert items[0].id.startswith("msg_") and items[0].role == "user" and items[0].content[0].text == "look up a"
    assert (items[1].id, items[1].call_id, items[1].arguments) == (call.id, call.call_id, call.arguments)
    assert items[2].id.startswith("fco_") and items[2].call_id == call.call_id and items[2].output == "42"
    assert items[3].role == "assistant" and items[3].content[0].type == "output_text"
    assert items[3].content[0].text == "done" and all(i.status == "completed" for i in items)
    assert (page.first_id, page.last_id) == (items[0].id, items[3].id)
    # Newest first by default; limit and after page through.
    raw = request(server, "GET", f"/v1/responses/{second.id}/input_items?limit=3").json()
    assert [i["id"] for i in raw["data"]] == [i.id for i in items[::-1][:3]] and raw["has_more"] is True
    rest = request(server, "GET", f"/v1/responses/{second.id}/input_items?limit=3&after={raw['last_id']}").json()
    assert [i["id"] for i in rest["data"]] == [items[0].id] and rest["has_more"] is False
    # A string input is one user message; unknown ids and bad queries are refused.
    text = create(c, input="Hello", max_output_tokens=1)
    [item] = c.responses.input_items.list(text.id).data
    assert item.role == "user" and item.content[0].type == "input_text" and item.content[0].text == "Hello"
    with pytest.raises(openai.NotFoundError):
        c.responses.input_items.list("resp_never")
    for query, param in (("limit=0", "limit"), ("limit=x", "limit"), ("order=up", "order"), ("after=msg_x", "after")):
        bad = request(server, "GET", f"/v1/responses/{text.id}/input_items?{query}")
        assert bad.status == 400 and bad.json()["error"]["param"] == param, bad.text
