"""Bad input never hurts anyone else: every kind of bad request gets OpenAI's
error JSON ({"error": {"message", "type", "param", "code"}}) with its HTTP
status, while a good streaming request running at the same time completes
with exactly its text; the server then keeps serving. Also: API keys, and a
full queue refused with 503 + Retry-After."""
import json
import subprocess
import threading
import time

import pytest

openai = pytest.importorskip("openai")

from server_util import DEFAULT_ID, Server, Stream, cli, need_default_model, request  # noqa: E402

GOOD = {"model": DEFAULT_ID, "prompt": "Once upon a time, in a small village,", "max_tokens": 120, "temperature": 0}

C, P = "/v1/chat/completions", "/v1/completions"
MSGS = [{"role": "user", "content": "hi"}]

# (method, path, body, status, type, code, param, part of the message)
BAD = [
    ("POST", P, '{"model": ', 400, "invalid_request_error", "invalid_json", None, "could not parse the JSON body"),
    # A number beyond double: nlohmann's out_of_range, once a 500 (found by tests/fuzz/chat_fuzz).
    ("POST", P, '{"prompt": "x", "temperature": 1e400}', 400, "invalid_request_error", "invalid_json", None,
     "number overflow"),
    ("POST", P, "[1, 2]", 400, "invalid_request_error", "invalid_type", None, "expected a JSON object"),
    ("POST", P, {**GOOD, "temperature": "hot"}, 400, "invalid_request_error", "invalid_type", "temperature",
     "Invalid type for 'temperature'"),
    ("POST", C, {"model": DEFAULT_ID, "messages": "hi"}, 400, "invalid_request_error", "invalid_type", "messages", ""),
    ("POST", P, {**GOOD, "temperature": 3}, 400, "invalid_request_error", "decimal_above_max_value", "temperature",
     "Expected a value <= 2, but got 3 instead"),
    ("POST", P, {**GOOD, "max_tokens": -1}, 400, "invalid_request_error", "integer_below_min_value", "max_tokens", ""),
    ("POST", P, {**GOOD, "top_p": 0}, 400, "invalid_request_error", "decimal_below_min_value", "top_p", ""),
    ("POST", P, {**GOOD, "n": 17}, 400, "invalid_request_error", "integer_above_max_value", "n", "<= 16"),
    ("POST", P, {**GOOD, "best_of": 2, "stream": True}, 400, "invalid_request_error", "invalid_value", "best_of",
     "cannot be streamed"),
    ("POST", P, {**GOOD, "stop": 5}, 400, "invalid_request_error", "invalid_type", "stop", ""),
    ("POST", P, {**GOOD, "logit_bias": {"5": 101}}, 400, "invalid_request_error", "invalid_value", "logit_bias.5",
     "[-100, 100]"),
    ("POST", P, {**GOOD, "logit_bias": {"x": 1}}, 400, "invalid_request_error", "invalid_value", "logit_bias",
     "not a token id"),
    ("POST", P, {**GOOD, "logit_bias": {"999999": 1}}, 400, "invalid_request_error", "invalid_value", "logit_bias",
     "outside the vocabulary"),
    ("POST", C, {"model": DEFAULT_ID, "messages": MSGS, "top_logprobs": 2}, 400, "invalid_request_error",
     "invalid_value", "top_logprobs", "'logprobs' must be set to true"),
    ("POST", P, {**GOOD, "stream_options": {"include_usage": True}}, 400, "invalid_request_error", "invalid_value",
     "stream_options", "only allowed when 'stream' is enabled"),
    ("POST", P, {**GOOD, "prompt": ""}, 400, "invalid_request_error", "invalid_value", "prompt", "the prompt is empty"),
    ("POST", P, {**GOOD, "prompt": [2, 999999]}, 400, "invalid_request_error", "invalid_value", "prompt",
     "outside the vocabulary"),
    ("POST", C, {"model": DEFAULT_ID, "messages": []}, 400, "invalid_request_error", "empty_array", "messages", ""),
    ("POST", P, {**GOOD, "prompt": "word " * 400}, 400, "invalid_request_error", "context_length_exceeded", "prompt",
     "This model's maximum context length is 256 tokens. However, your prompt resulted in"),
    ("POST", P, {**GOOD, "max_tokens": 250}, 400, "invalid_request_error", "context_length_exceeded", "prompt",
     "This model's maximum context length is 256 tokens. However, you requested"),
    # The default model is a base model: no chat template in its file.
    ("POST", C, {"model": DEFAULT_ID, "messages": MSGS}, 400, "invalid_request_error", "chat_template_missing",
     "messages", "This model has no chat template"),
    ("POST", "/v1/nope", GOOD, 404, "invalid_request_error", "unknown_url", None, "Unknown request URL: POST /v1/nope"),
    ("GET", P, None, 404, "invalid_request_error", "unknown_url", None, "Unknown request URL: GET /v1/completions"),
    ("POST", P, {**GOOD, "prompt": "x" * 70000}, 413, "invalid_request_error", "request_too_large", None,
     "Request body too large: at most 65536 bytes (this server's --max-body-kib"),
    ("POST", "/tokenize", {"text": "x"}, 400, "invalid_request_error", "unknown_parameter", "text", ""),
    ("POST", "/detokenize", {"tokens": [-1]}, 400, "invalid_request_error", "invalid_value", "tokens", ""),
]


@pytest.fixture(scope="module")
def server():
    with Server(need_default_model(), "--slots", 2, "--max-context", 256, "--max-body-kib", 64) as s:
        yield s


def check_error(res, status, etype, code, param, part):
    assert res.status == status, res.text
    assert res.headers["content-type"].startswith("application/json")
    body = res.json()
    assert set(body) == {"error"} and set(body["error"]) == {"message", "type", "param", "code"}, body
    e = body["error"]
    assert e["type"] == etype and e["code"] == code and e["param"] == param, e
    assert part in e["message"], e["message"]


def test_every_bad_input_gets_its_error_while_a_good_request_completes(server):
    want = request(server, "POST", P, GOOD).json()["choices"][0]["text"]
    good = Stream(server, P, {**GOOD, "stream": True})
    assert good.status == 200
    events = iter(good)
    first = next(events)  # the good request is running: now the bad ones
    results = []

    bad_done = []

    def bad_all():
        for method, path, body, *want_err in BAD:
            results.append((request(server, method, path, body), want_err, body))
        bad_done.append(time.monotonic())

    t = threading.Thread(target=bad_all)
    t.start()
    rest = list(events)
    good_done = time.monotonic()
    t.join()
    for res, want_err, body in results:
        try:
            check_error(res, *want_err)
        except AssertionError as e:
            raise AssertionError(f"{str(body)[:120]}: {e}") from None
    text = "".join(json.loads(e)["choices"][0]["text"] for e in [first, *rest] if e != "[DONE]")
    assert rest[-1] == "[DONE]"
    assert text == want
    # The bad requests were answered while the good one streamed, not after it.
    assert len(results) == len(BAD) and bad_done[0] < good_done
    # Still serving, and the bad requests left no trace in the scheduler.
    assert request(server, "POST", P, GOOD).json()["choices"][0]["text"] == want
    m = server.metrics()
    assert m["kvshare_active_slots"] == 0 and m["kvshare_queue_depth"] == 0
    assert m['kvshare_http_responses_total{code="400"}'] >= 20


def test_openai_client_sees_the_errors(server):
    c = openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0)
    with pytest.raises(openai.BadRequestError) as e:
        c.completions.create(model=DEFAULT_ID, prompt="word " * 400, max_tokens=5)
    assert e.value.status_code == 400 and e.value.code == "context_length_exceeded"
    assert "maximum context length is 256 tokens" in e.value.message
    # Another model name is served (not --strict-openai, whose 404 the
    # strict server below checks).
    assert c.completions.create(model="nope", prompt="x", max_tokens=2).model == DEFAULT_ID


def test_api_key():
    with Server(need_default_model(), "--slots", 1, "--max-context", 128, "--api-key", "sekret") as s:
        body = {**GOOD, "max_tokens": 2}
        for headers in ({}, {"Authorization": "Bearer wrong"}, {"X-Api-Key": "wrong"}):
            res = request(s, "POST", P, body, headers)
            check_error(res, 401, "authentication_error", "invalid_api_key", None, "API key")
        for path in ("/v1/models", "/metrics", "/tokenize"):
            assert request(s, "GET" if path != "/tokenize" else "POST", path, {"content": "x"} if path == "/tokenize"
                           else None).status == 401
        assert request(s, "POST", P, body, {"Authorization": "Bearer sekret"}).status == 200
        # The scheme is case-insensitive (RFC 7235); a missing key is still refused.
        assert request(s, "POST", P, body, {"Authorization": "bearer  sekret"}).status == 200
        assert request(s, "POST", P, body, {"Authorization": "BEARER sekret"}).status == 200
        assert request(s, "POST", P, body, {"Authorization": "Bearersekret"}).status == 401
        assert request(s, "POST", P, body, {"X-Api-Key": "sekret"}).status == 200
        assert request(s, "GET", "/health").status == 200
        assert request(s, "GET", "/").status == 200
        ok = openai.OpenAI(base_url=s.url + "/v1", api_key="sekret", max_retries=0)
        assert ok.completions.create(model=DEFAULT_ID, prompt="Hi", max_tokens=2).usage.completion_tokens >= 1
        with pytest.raises(openai.AuthenticationError):
            openai.OpenAI(base_url=s.url + "/v1", api_key="bad", max_retries=0).models.list()


def test_full_queue_is_refused_with_503_and_retry_after():
    with Server(need_default_model(), "--slots", 1, "--max-queue", 0, "--max-context", 256) as s:
        busy = Stream(s, P, {**GOOD, "stream": True})
        events = iter(busy)
        next(events)  # the only slot is taken
        res = request(s, "POST", P, {**GOOD, "max_tokens": 2})
        check_error(res, 503, "unavailable_error", "server_busy", None, "The server is busy")
        assert res.headers["retry-after"] == "1"
        assert list(events)[-1] == "[DONE]"  # the running request is not hurt
        again = request(s, "POST", P, {**GOOD, "max_tokens": 2})
        assert again.status == 200, again.text  # and the slot is free again
        assert s.metrics()["kvshare_requests_rejected_total"] == 1


def test_deeply_nested_bodies_are_a_400_not_a_crash():
    # Found by reading the request parser's fuzz paths: a response_format
    # schema holding a million nested arrays (2 MB, under the 8 MiB limit)
    # overflowed a connection thread's stack in the schema's dump and killed
    # the server; a long $ref chain did the same in the schema compiler.
    # (An object of 100000 $defs is refused too: more than 1024 members.)
    deep = "[" * 1_000_000 + "]" * 1_000_000
    schema_body = ('{"prompt": "x", "max_tokens": 2, "response_format": {"type": "json_schema", "json_schema": '
                   '{"name": "x", "schema": {"enum": [' + deep + ']}}}}')
    chain = {"$ref": "#/$defs/d0", "$defs": {f"d{i}": {"$ref": f"#/$defs/d{i + 1}"} for i in range(1000)}}
    chain["$defs"]["d1000"] = {"type": "null"}
    with Server(need_default_model(), "--slots", 1, "--max-context", 256) as s:
        res = request(s, "POST", P, schema_body)
        check_error(res, 400, "invalid_request_error", "invalid_json", None, "nested deeper than 512 levels")
        res = request(s, "POST", "/tokenize", '{"content": ' + deep + "}")
        check_error(res, 400, "invalid_request_error", "invalid_json", None, "nested deeper than 512 levels")
        res = request(s, "POST", P, {"prompt": "x", "max_tokens": 2, "response_format": {
            "type": "json_schema", "json_schema": {"name": "x", "schema": chain}}})
        check_error(res, 400, "invalid_request_error", "invalid_schema", "response_format.json_schema.schema",
                    "nested deeper than 128 levels")
        assert request(s, "POST", P, {**GOOD, "max_tokens": 2}).status == 200  # still serving


def test_tolerant_requests_and_strict_openai():
    """By default a request without `model` goes to the served model, and
    unknown fields are ignored, named in the X-Kvshare-Ignored-Fields header
    and in the log; --strict-openai refuses both, as OpenAI's API does."""
    body = {"prompt": GOOD["prompt"], "max_tokens": 4, "temperature": 0, "mirostat": 2, "n_probs": 3}
    with Server(need_default_model(), "--slots", 1, "--max-context", 128) as s:
        want = request(s, "POST", P, {**GOOD, "max_tokens": 4}).json()["choices"][0]["text"]
        res = request(s, "POST", P, body)
        assert res.status == 200, res.text
        assert res.json()["choices"][0]["text"] == want and res.json()["model"] == DEFAULT_ID
        assert res.headers["x-kvshare-ignored-fields"] == "mirostat, n_probs"
        assert any("ignored unknown fields mirostat, n_probs" in line for line in s.log), s.log
        # Types of known fields are still checked.
        check_error(request(s, "POST", P, {**body, "temperature": "hot"}), 400, "invalid_request_error",
                    "invalid_type", "temperature", "")
        # The official client's extra_body reaches the server the same way.
        c = openai.OpenAI(base_url=s.url + "/v1", api_key="unused", max_retries=0)
        r = c.completions.create(model=DEFAULT_ID, prompt=GOOD["prompt"], max_tokens=4, temperature=0,
                                 extra_body={"cache_prompt": True})
        assert r.choices[0].text == want
        # Any model name is served (tools hard-code "gpt-4o"), and named back.
        res = request(s, "POST", P, {**GOOD, "max_tokens": 4, "model": "gpt-4o"})
        assert res.status == 200 and res.json()["choices"][0]["text"] == want, res.text
        assert res.headers["x-kvshare-served-model"] == DEFAULT_ID
        assert any("names model 'gpt-4o'; serving" in line for line in s.log), s.log
        assert c.models.retrieve(DEFAULT_ID).id == DEFAULT_ID
        assert c.models.retrieve("gpt-4o").id == DEFAULT_ID
    with Server(need_default_model(), "--slots", 1, "--max-context", 128, "--strict-openai") as s:
        check_error(request(s, "POST", P, {**GOOD, "model": "gpt-4o"}), 404, "invalid_request_error",
                    "model_not_found", "model", "The model `gpt-4o` does not exist")
        check_error(request(s, "GET", "/v1/models/gpt-4o", None), 404, "invalid_request_error", "model_not_found",
                    "model", "The model `gpt-4o` does not exist")
        check_error(request(s, "POST", P, {**GOOD, "max_tokens": 4, "temprature": 0.5}), 400, "invalid_request_error",
                    "unknown_parameter", "temprature", "Unrecognized request argument supplied: temprature")
        check_error(request(s, "POST", P, {"prompt": "x", "max_tokens": 2}), 400, "invalid_request_error",
                    "missing_required_parameter", "model", "You must provide a model parameter")


def test_cors_and_a_port_in_use():
    """--cors-origin: allowed origins get Access-Control-Allow-Origin and a
    preflight answer; others none. A second server on a port in use is a
    start-up error (no SO_REUSEPORT), and "listening" is logged only once the
    model has loaded."""
    with Server(need_default_model(), "--slots", 1, "--max-context", 128, "--cors-origin",
                "http://localhost:3000") as s:
        pre = request(s, "OPTIONS", P, None, {"Origin": "http://localhost:3000",
                                                "Access-Control-Request-Method": "POST",
                                                "Access-Control-Request-Headers": "authorization, content-type"})
        assert pre.status == 204, pre.text
        assert pre.headers["access-control-allow-origin"] == "http://localhost:3000"
        assert "POST" in pre.headers["access-control-allow-methods"]
        assert pre.headers["access-control-allow-headers"] == "authorization, content-type"
        res = request(s, "POST", P, {**GOOD, "max_tokens": 2}, {"Origin": "http://localhost:3000"})
        assert res.status == 200 and res.headers["access-control-allow-origin"] == "http://localhost:3000"
        res = request(s, "POST", P, {**GOOD, "max_tokens": 2}, {"Origin": "http://evil.example"})
        assert res.status == 200 and "access-control-allow-origin" not in res.headers
        loading = [i for i, line in enumerate(s.log) if "] loading " in line]
        listening = [i for i, line in enumerate(s.log) if "listening on http://" in line]
        assert loading and listening and loading[0] < listening[0], s.log
        proc = subprocess.run([str(cli()), "serve", "--model", need_default_model(), "--port",
                               str(s.port)], capture_output=True, text=True, timeout=60)
        assert proc.returncode != 0
        assert f"cannot listen on 127.0.0.1:{s.port}" in proc.stderr, proc.stderr
        assert "listening on" not in proc.stderr
