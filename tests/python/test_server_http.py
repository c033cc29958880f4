"""HTTP framing as plain clients send it, below what the openai SDK does:
curl's default form label on a JSON body, a POST without a body or its
length, requests the HTTP library refuses (their errors say why), and
HTTP/1.0 streams (no chunked coding). Raw sockets and http.client on the
default model."""
import gzip
import json
import socket
import time

import pytest

from server_util import Server, need_default_model, request


@pytest.fixture(scope="module")
def server():
    with Server(need_default_model(), "--slots", 1, "--max-context", 256) as s:
        yield s


def test_a_json_body_labelled_as_a_form_is_read_as_json(server):
    # `curl -d '{...}'` without -H sends application/x-www-form-urlencoded.
    # Over 8 KiB such a body was a 413 "at most 8388608 bytes" from the HTTP
    # library's form limit, though --max-body-kib (8 MiB) allows it.
    form = "application/x-www-form-urlencoded"
    for pad in (100, 20000):
        body = json.dumps({"prompt": "Hello", "max_tokens": 1, "temperature": 0, "user": "u" * pad})
        r = request(server, "POST", "/v1/completions", body, {"Content-Type": form})
        assert r.status == 200, (pad, r.status, r.text)
        assert r.json()["usage"]["completion_tokens"] == 1
    # The body limit still holds for a form-labelled body.
    big = json.dumps({"prompt": "Hello", "user": "u" * (9 << 20)})
    r = request(server, "POST", "/v1/completions", big, {"Content-Type": form})
    assert r.status == 413 and r.json()["error"]["code"] == "request_too_large", r.text


def test_a_post_without_length_has_no_body(server):
    # `curl -X POST URL` sends neither Content-Length nor Transfer-Encoding:
    # no body (RFC 9112 6.3). It waited 30 s (the read timeout) for the HTTP
    # library to see the client close, then got a bare "Bad request.".
    with socket.create_connection(("127.0.0.1", server.port), timeout=60) as s:
        t0 = time.monotonic()
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n\r\n")
        f = s.makefile("rb")
        status = f.readline()
        headers = {}
        while (line := f.readline()) != b"\r\n":
            k, _, v = line.decode().partition(":")
            headers[k.strip().lower()] = v.strip()
        err = json.loads(f.read(int(headers["content-length"])))["error"]
        assert time.monotonic() - t0 < 10
        assert status.startswith(b"HTTP/1.1 400") and err["code"] == "invalid_json", (status, err)
        # The connection is still in step: the next request is answered.
        s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        assert f.readline().startswith(b"HTTP/1.1 200")


@pytest.mark.parametrize("headers, body, status, code, words", [
    ({"Cookie": "x=" + "a" * 9000}, None, 400, "invalid_http_request", "a header line over 8 KiB"),
    ({"Content-Encoding": "gzip"}, b"not gzip", 400, "invalid_content_encoding", "Content-Encoding 'gzip'"),
    ({"Content-Encoding": "br"}, b"{}", 415, "unsupported_content_encoding", "Unsupported Content-Encoding 'br'"),
])
def test_requests_the_http_library_refuses_say_why(server, headers, body, status, code, words):
    # They were all a bare 400 "Bad request.".
    body = b'{"prompt": "Hello", "max_tokens": 1}' if body is None else body
    r = request(server, "POST", "/v1/completions", body, {"Content-Type": "application/json", **headers})
    err = r.json()["error"]
    assert (r.status, err["code"]) == (status, code) and words in err["message"], r.text
    # A gzip body is taken.
    r = request(server, "POST", "/v1/completions", gzip.compress(b'{"prompt": "Hello", "max_tokens": 1}'),
                {"Content-Type": "application/json", "Content-Encoding": "gzip"})
    assert r.status == 200, r.text


def _raw_exchange(port, head, body):
    with socket.create_connection(("127.0.0.1", port), timeout=60) as s:
        s.sendall(head + body)
        data = b""
        while chunk := s.recv(65536):  # the server's close ends the answer
            data += chunk
    head_bytes, _, payload = data.partition(b"\r\n\r\n")
    return head_bytes.decode().lower(), payload


@pytest.mark.parametrize("connection", ["", "Connection: Keep-Alive\r\n"])
def test_an_http_1_0_stream_is_not_chunked(server, connection):
    # RFC 9112 6.1: no Transfer-Encoding in a response to an HTTP/1.0
    # request (1.0 has no chunked coding; its client would read the chunk
    # sizes as event text). The events come unframed and the connection's
    # close ends them, also when the client asked to keep it alive.
    body = json.dumps({"prompt": "Hello", "max_tokens": 3, "temperature": 0, "stream": True}).encode()
    head = (f"POST /v1/completions HTTP/1.0\r\nContent-Type: application/json\r\n{connection}"
            f"Content-Length: {len(body)}\r\n\r\n").encode()
    headers, payload = _raw_exchange(server.port, head, body)
    assert headers.startswith("http/1.1 200"), headers
    assert "transfer-encoding" not in headers, headers
    events = [e for e in payload.decode().split("\n\n") if e]
    assert all(e.startswith("data: ") for e in events), payload
    assert events[-1] == "data: [DONE]"
    text = "".join(json.loads(e[6:])["choices"][0]["text"] for e in events[:-1])
    want = request(server, "POST", "/v1/completions",
                   {"prompt": "Hello", "max_tokens": 3, "temperature": 0}).json()["choices"][0]["text"]
    assert text == want
