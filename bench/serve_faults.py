#!/usr/bin/env python3
"""Load and fault run against a real `kvshare serve` on 127.0.0.1.

C closed-loop clients (default 32) send N requests (default 500): chat and
completions, streaming and not, JSON-schema response_format requests, tool
calls (tool_choice auto, required or a named function; arguments parsed and
checked against the tool's schema whenever a call is returned), mixed
with injected faults: disconnects mid-headers, mid-body, mid-stream and while
a non-streamed answer is computed (cancellations), slow readers of a stream,
malformed JSON, bodies over the server's --max-body-kib (413), and token-id
prompts outside the vocabulary (400). Every answer is checked: well-formed
JSON, well-formed SSE ending in [DONE], the expected 4xx, or a clean close.
A greedy control request is sent on the idle server before and after the
load (its output must not change); then /metrics must show no slot held, and
finally SIGTERM arrives while streams run: they must end cleanly and the
server exit 0.

  bench/serve_faults.py --report                  # the figures of one run
  bench/serve_faults.py --duration 600 --report   # a soak: load for 10 minutes,
                                                  # the server's RSS sampled each second

tests/python/test_server_faults.py runs it (ctest label `load`) and asserts on
the returned figures; only --report prints them. Standard library only."""
import argparse
import json
import os
import random
import re
import select
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MAX_BODY_KIB = 64  # the server is started with it, so that an oversized body is cheap to send
SCHEMA = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 12},
                                           "age": {"type": "integer"}},
          "required": ["name", "age"], "additionalProperties": False}
TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "Current weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 20}},
                   "required": ["city"], "additionalProperties": False}}}]
CONTROL = {"prompt": "The capital of France is", "max_tokens": 16, "temperature": 0, "seed": 1}

# Request kinds and their weights: served ones, then faults.
KINDS = [("chat", 14), ("chat_stream", 14), ("completion", 12), ("completion_stream", 12), ("json_schema", 8),
         ("json_schema_stream", 4), ("tools", 6), ("tools_stream", 4),
         ("disconnect_headers", 4), ("disconnect_body", 4), ("disconnect_stream", 6), ("cancel_wait", 5),
         ("slow_reader", 3), ("malformed_json", 5), ("oversized", 3), ("oov_tokens", 5)]
FAULTS = {"disconnect_headers", "disconnect_body", "disconnect_stream", "cancel_wait", "slow_reader",
          "malformed_json", "oversized", "oov_tokens"}


class Bad(Exception):
    """A response that is not well-formed, or not what the fault expects."""


class Conn:
    """A raw HTTP/1.1 client connection: faults need to stop anywhere."""

    def __init__(self, port, timeout=120, rcvbuf=None):
        self.s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        if rcvbuf:
            self.s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        self.s.settimeout(timeout)
        self.s.connect(("127.0.0.1", port))
        self.buf = b""

    def head(self, method, path, length, extra=""):
        return (f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                f"Content-Length: {length}\r\nConnection: close\r\n{extra}\r\n").encode()

    def send(self, data):
        self.s.sendall(data)

    def _more(self, n=65536):
        d = self.s.recv(n)
        if not d:
            raise Bad("connection closed mid-response")
        self.buf += d

    def line(self):
        while b"\r\n" not in self.buf:
            self._more()
        l, self.buf = self.buf.split(b"\r\n", 1)
        return l

    def exact(self, n):
        while len(self.buf) < n:
            self._more()
        d, self.buf = self.buf[:n], self.buf[n:]
        return d

    def response_head(self):
        status = self.line().decode()
        m = re.match(r"HTTP/1\.[01] (\d{3})", status)
        if not m:
            raise Bad(f"bad status line {status!r}")
        headers = {}
        while True:
            l = self.line().decode()
            if not l:
                break
            k, _, v = l.partition(":")
            headers[k.strip().lower()] = v.strip()
        return int(m.group(1)), headers

    def chunks(self):
        """The chunked body's pieces, as they arrive."""
        while True:
            size = int(self.line().split(b";")[0], 16)
            if size == 0:
                self.line()
                return
            yield self.exact(size)
            if self.exact(2) != b"\r\n":
                raise Bad("bad chunk framing")

    def body(self, headers):
        if headers.get("transfer-encoding", "").lower() == "chunked":
            return b"".join(self.chunks())
        return self.exact(int(headers.get("content-length", "0")))

    def close(self):
        try:
            self.s.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.s.close()


def dechunk(data):
    """A whole chunked body's content."""
    out = b""
    while True:
        head, sep, data = data.partition(b"\r\n")
        if not sep:
            raise Bad("chunked body ends early")
        try:
            size = int(head.split(b";")[0], 16)
        except ValueError:
            raise Bad(f"bad chunk size {head[:20]!r}")
        if size == 0:
            return out
        if len(data) < size + 2 or data[size:size + 2] != b"\r\n":
            raise Bad("chunked body ends early")
        out, data = out + data[:size], data[size + 2:]


def post(port, path, body, timeout=120):
    c = Conn(port, timeout)
    try:
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        c.send(c.head("POST", path, len(data)) + data)
        status, headers = c.response_head()
        return status, headers, c.body(headers)
    finally:
        c.close()


def get(port, path, timeout=30):
    c = Conn(port, timeout)
    try:
        c.send(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n".encode())
        status, headers = c.response_head()
        return status, c.body(headers).decode()
    finally:
        c.close()


def metrics(port):
    out = {}
    for l in get(port, "/metrics")[1].splitlines():
        if l and not l.startswith("#"):
            k, v = l.rsplit(" ", 1)
            out[k] = float(v)
    return out


def check_json(status, body, want=(200,)):
    try:
        j = json.loads(body)
    except ValueError as e:
        raise Bad(f"{status}: body is not JSON ({e}): {body[:200]!r}")
    if status not in want:
        raise Bad(f"status {status}, expected {want}: {body[:300]!r}")
    if status >= 400 and not (isinstance(j.get("error"), dict) and j["error"].get("message")):
        raise Bad(f"{status} without an error object: {body[:200]!r}")
    return j


def check_sse(data):
    """The payloads of a complete SSE body; each is JSON but the last, [DONE]."""
    text = data.decode("utf-8")
    events = [e for e in text.split("\n\n") if e.strip()]
    if not events:
        raise Bad("empty event stream")
    payloads = []
    for e in events:
        if not e.startswith("data: "):
            raise Bad(f"not an SSE data event: {e[:100]!r}")
        payloads.append(e[6:])
    if payloads[-1] != "[DONE]":
        raise Bad(f"stream does not end with [DONE]: {payloads[-1][:100]!r}")
    out = []
    for p in payloads[:-1]:
        try:
            out.append(json.loads(p))
        except ValueError:
            raise Bad(f"event is not JSON: {p[:100]!r}")
    return out


def check_calls(calls):
    """Returned tool calls: each names TOOLS' function with arguments that are
    JSON following its parameters."""
    if not calls:
        raise Bad("finish_reason tool_calls without tool_calls")
    for c in calls:
        f = c.get("function") or {}
        if c.get("type") != "function" or f.get("name") != TOOLS[0]["function"]["name"] or not c.get("id"):
            raise Bad(f"bad tool call {c!r}")
        try:
            args = json.loads(f.get("arguments"))
        except (TypeError, ValueError):
            raise Bad(f"tool call arguments are not JSON: {f.get('arguments')!r}")
        params = TOOLS[0]["function"]["parameters"]  # every property required, no others, strings bounded
        if not (isinstance(args, dict) and set(args) == set(params["required"])
                and all(isinstance(args[k], str) and len(args[k]) <= p["maxLength"]
                        for k, p in params["properties"].items())):
            raise Bad(f"tool call arguments do not follow the schema: {args!r}")


def check_streamed_calls(events):
    """Tool-call deltas, accumulated by index as OpenAI clients do."""
    calls, finish = {}, None
    for e in events:
        for ch in e.get("choices", []):
            finish = ch.get("finish_reason") or finish
            for d in (ch.get("delta") or {}).get("tool_calls") or []:
                c = calls.setdefault(d["index"], {"type": "function", "function": {"name": "", "arguments": ""}})
                c["id"] = d.get("id") or c.get("id")
                c["type"] = d.get("type") or c["type"]
                f = d.get("function") or {}
                c["function"]["name"] += f.get("name") or ""
                c["function"]["arguments"] += f.get("arguments") or ""
    if finish == "tool_calls":
        check_calls([calls[i] for i in sorted(calls)])
        return True
    if calls and finish != "length":  # max_tokens may cut a call short
        raise Bad(f"tool call deltas with finish_reason {finish!r}")
    return False


def body_for(kind, rng):
    n = rng.randint(3, 10)
    stream = kind.endswith("_stream") or kind in ("disconnect_stream", "slow_reader")
    if kind.startswith("completion") or kind == "cancel_wait":
        b = {"prompt": rng.choice(["Once upon a time", "def fib(n):", "The sky is", "1, 2, 3,"]),
             "max_tokens": n if kind != "cancel_wait" else 48}
    elif kind.startswith("tools"):
        b = {"messages": [{"role": "user", "content": rng.choice(["What is the weather in Paris?", "Hi"])}],
             "max_tokens": 40, "tools": TOOLS,
             "tool_choice": rng.choice(["auto", "required", {"type": "function", "function": {"name": "get_weather"}}])}
    elif kind.startswith("json_schema"):
        b = {"messages": [{"role": "user", "content": "Give a person as JSON."}], "max_tokens": 40,
             "response_format": {"type": "json_schema", "json_schema": {"name": "person", "schema": SCHEMA}}}
    else:
        b = {"messages": [{"role": "system", "content": "Be brief."},
                          {"role": "user", "content": rng.choice(["Hi", "Name a colour.", "What is 2+2?"])}],
             "max_tokens": n if kind not in ("disconnect_stream", "slow_reader") else 24}
    b["temperature"] = rng.choice([0, 0.7, 1.0])
    b["seed"] = rng.randint(0, 1 << 30)
    if stream:
        b["stream"] = True
    return b


def one(port, kind, rng):
    """Runs one request of `kind`; returns its outcome name ("ok", "tool_calls":
    ok with checked tool calls, "4xx", "503", "closed") or raises Bad."""
    path = "/v1/chat/completions" if (kind.startswith(("chat", "json_schema", "tools"))
                                      or kind in ("disconnect_stream", "slow_reader")) else "/v1/completions"
    if kind in ("chat", "completion", "json_schema", "tools"):
        status, _, body = post(port, path, body_for(kind, rng))
        if status == 503:
            check_json(status, body, (503,))
            return "503"
        j = check_json(status, body)
        if kind == "json_schema" and j["choices"][0]["finish_reason"] == "stop":
            json.loads(j["choices"][0]["message"]["content"])  # complete output must follow the schema's JSON
        if kind == "tools" and j["choices"][0]["finish_reason"] == "tool_calls":
            check_calls(j["choices"][0]["message"].get("tool_calls"))
            return "tool_calls"
        return "ok"
    if kind in ("chat_stream", "completion_stream", "json_schema_stream", "tools_stream"):
        c = Conn(port)
        try:
            data = json.dumps(body_for(kind, rng)).encode()
            c.send(c.head("POST", path, len(data)) + data)
            status, headers = c.response_head()
            body = c.body(headers)
        finally:
            c.close()
        if status == 503:
            check_json(status, body, (503,))
            return "503"
        if status != 200 or not headers.get("content-type", "").startswith("text/event-stream"):
            raise Bad(f"stream answered {status} {headers.get('content-type')}: {body[:200]!r}")
        events = check_sse(body)
        if kind == "tools_stream" and check_streamed_calls(events):
            return "tool_calls"
        return "ok"
    if kind == "disconnect_headers":
        c = Conn(port)
        data = c.head("POST", path, 100)
        c.send(data[:rng.randint(1, len(data) - 1)])
        time.sleep(rng.random() * 0.05)
        c.close()
        return "closed"
    if kind == "disconnect_body":
        c = Conn(port)
        data = json.dumps(body_for("chat", rng)).encode()
        c.send(c.head("POST", path, len(data)) + data[:rng.randint(0, len(data) - 1)])
        time.sleep(rng.random() * 0.05)
        c.close()
        return "closed"
    if kind == "disconnect_stream":
        c = Conn(port)
        try:
            data = json.dumps(body_for(kind, rng)).encode()
            c.send(c.head("POST", path, len(data)) + data)
            status, headers = c.response_head()
            if status != 200:
                check_json(status, c.body(headers), (503,))
                return "503"
            for i, _ in enumerate(c.chunks()):
                if i >= rng.randint(0, 3):
                    break
        finally:
            c.close()
        return "closed"
    if kind == "cancel_wait":
        c = Conn(port)
        data = json.dumps(body_for(kind, rng)).encode()
        c.send(c.head("POST", path, len(data)) + data)
        time.sleep(rng.random() * 0.3)
        c.close()
        return "closed"
    if kind == "slow_reader":
        c = Conn(port, rcvbuf=1024)
        try:
            data = json.dumps(body_for(kind, rng)).encode()
            c.send(c.head("POST", path, len(data)) + data)
            time.sleep(0.5)  # let the server write into a full socket
            status, headers = c.response_head()
            if status == 503:
                check_json(status, c.body(headers), (503,))
                return "503"
            body = b""
            while True:  # 64 bytes every 20 ms
                try:
                    d = c.s.recv(64)
                except socket.timeout:
                    raise Bad("slow reader: no data")
                if not d:
                    break
                body += d
                time.sleep(0.02)
        finally:
            c.close()
        check_sse(dechunk(c.buf + body))
        return "ok"
    if kind == "malformed_json":
        bad = rng.choice([b"{", b'{"messages": [', b"not json", b'{"prompt": "x",}', b"\xff\xfe{}", b""])
        status, _, body = post(port, path, bad)
        check_json(status, body, (400,))
        return "4xx"
    if kind == "oversized":
        c = Conn(port)
        try:
            size = MAX_BODY_KIB * 1024 + rng.randint(1, 4096)
            c.send(c.head("POST", path, size))
            sent, piece = 0, b" " * 16384
            # Stop sending once the server answered (it refuses after the headers).
            while sent < size and not select.select([c.s], [], [], 0)[0]:
                try:
                    c.send(piece[:size - sent])
                except OSError:
                    break
                sent += len(piece)
            try:
                status, headers = c.response_head()
                body = c.body(headers)
            except (Bad, ConnectionResetError):
                return "closed"  # the server closed with our bytes unread: the kernel's reset
        finally:
            c.close()
        check_json(status, body, (413, 400))
        return "4xx"
    if kind == "oov_tokens":
        ids = [2, 100, rng.choice([262144, 262144 + rng.randint(1, 10**6), 2**31 - 1, -1])]
        rng.shuffle(ids)
        status, _, body = post(port, "/v1/completions", {"prompt": ids, "max_tokens": 4})
        check_json(status, body, (400,))
        return "4xx"
    raise ValueError(kind)


def run_load(port, requests, clients, seed=0, deadline=None):
    """The mixed load; returns its figures. With `deadline` (time.time()), it
    repeats the request list until then (soak)."""
    rng = random.Random(seed)
    names, weights = zip(*KINDS)
    plan = rng.choices(names, weights, k=requests)
    lock = threading.Lock()
    fig = {"requests": 0, "kinds": Counter(), "faults": Counter(), "outcomes": Counter(), "errors": Counter(),
           "error_samples": [], "latency": []}

    def worker(w):
        r = random.Random(seed * 1000 + w)
        i = w
        while True:
            if i >= len(plan):
                if deadline is None or time.time() >= deadline:
                    return
                i %= len(plan)
            kind = plan[i]
            i += clients
            t0 = time.perf_counter()
            try:
                out = one(port, kind, r)
                err = None
            except (Bad, OSError, ValueError, KeyError) as e:
                out, err = "error", f"{kind}: {type(e).__name__}: {e}"
            dt = time.perf_counter() - t0
            with lock:
                fig["requests"] += 1
                fig["kinds"][kind] += 1
                if kind in FAULTS:
                    fig["faults"][kind] += 1
                fig["outcomes"][out] += 1
                if err:
                    fig["errors"][kind] += 1
                    if len(fig["error_samples"]) < 10:
                        fig["error_samples"].append(err)
                elif out in ("ok", "tool_calls") and kind not in FAULTS:
                    fig["latency"].append(dt)

    t0 = time.perf_counter()
    with ThreadPoolExecutor(clients) as ex:
        list(ex.map(worker, range(clients)))
    fig["wall_s"] = time.perf_counter() - t0
    lat = sorted(fig["latency"])
    fig["p50_s"] = statistics.median(lat) if lat else None
    fig["p99_s"] = lat[min(len(lat) - 1, int(0.99 * len(lat)))] if lat else None
    return fig


def control(port):
    status, _, body = post(port, "/v1/completions", CONTROL)
    return check_json(status, body)["choices"][0]["text"]


def wait_idle(port, timeout=30):
    """/metrics once no slot, queue entry or response is held (or the last read)."""
    end = time.time() + timeout
    while True:
        m = metrics(port)
        if (m.get("kvshare_active_slots", 1) == 0 and m.get("kvshare_queue_depth", 1) == 0
                and m.get("kvshare_http_requests_in_flight", 1) == 0) or time.time() > end:
            return m
        time.sleep(0.1)


def sigterm_under_load(server, streams=8):
    """Starts `streams` streaming requests, sends SIGTERM once each has its
    first bytes, and checks each ends as well-formed SSE (finished or aborted)
    or a clean close. Returns (exit status, outcomes)."""
    port = server.port
    started = threading.Barrier(streams + 1)
    outcomes = Counter()
    lock = threading.Lock()

    def stream(i):
        c = Conn(port, timeout=120)
        out = "error"
        try:
            data = json.dumps({"prompt": "Tell me a long story about", "max_tokens": 64, "stream": True,
                               "temperature": 0.8, "seed": i}).encode()
            c.send(c.head("POST", "/v1/completions", len(data)) + data)
            status, headers = c.response_head()
            pieces = c.chunks()
            first = next(pieces) if status == 200 else b""
            started.wait(60)
            if status != 200:
                check_json(status, c.body(headers), (503,))
                out = "503"
            else:
                try:
                    rest = b"".join(pieces)
                    check_sse(first + rest)
                    out = "ended"
                except Bad as e:
                    if "closed mid-response" not in str(e):
                        raise
                    out = "closed"
        except threading.BrokenBarrierError:
            out = "error"
        except (Bad, OSError, ValueError) as e:
            out = f"error: {e}"
        finally:
            c.close()
        with lock:
            outcomes[out] += 1

    threads = [threading.Thread(target=stream, args=(i,)) for i in range(streams)]
    for t in threads:
        t.start()
    try:
        started.wait(120)
    except threading.BrokenBarrierError:
        pass
    server.proc.send_signal(signal.SIGTERM)
    for t in threads:
        t.join(120)
    return server.proc.wait(120), outcomes


class Serve:
    """`kvshare serve` on 127.0.0.1, any free port; stderr collected."""

    def __init__(self, cli, model, *args):
        self.proc = subprocess.Popen([str(cli), "serve", "--host", "127.0.0.1", "--port", "0", "--model", str(model),
                                      *map(str, args)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        self.log, self.port = [], None
        ready = threading.Event()

        def read():
            for l in self.proc.stderr:
                self.log.append(l.rstrip("\n"))
                m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", l)
                if m:
                    self.port = int(m.group(1))
                if "ready:" in l:
                    ready.set()
            ready.set()

        threading.Thread(target=read, daemon=True).start()
        if not ready.wait(120) or self.port is None or self.proc.poll() is not None:
            self.kill()
            raise RuntimeError("kvshare serve did not start:\n" + "\n".join(self.log))

    def rss_kib(self):
        try:
            with open(f"/proc/{self.proc.pid}/status") as f:
                for l in f:
                    if l.startswith("VmRSS:"):
                        return int(l.split()[1])
        except OSError:
            return None

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)


def serve_args(slots=8):
    # --chat-template gemma: the default model is a base model without a template.
    return ["--slots", slots, "--chat-template", "gemma", "--max-body-kib", MAX_BODY_KIB, "--max-context", 512,
            "--drain-timeout", 20]


def run(cli, model, requests=500, clients=32, seed=0, duration=None):
    """The whole run on a fresh server; returns the figures (see --report)."""
    srv = Serve(cli, model, *serve_args())
    rss, stop = [], threading.Event()

    def sample():
        while not stop.is_set():
            v = srv.rss_kib()
            if v:
                rss.append((time.time(), v))
            stop.wait(1.0)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        before = control(srv.port)
        fig = run_load(srv.port, requests, clients, seed, None if duration is None else time.time() + duration)
        idle = wait_idle(srv.port)
        fig["after_load_metrics"] = {k: idle.get(k) for k in (
            "kvshare_active_slots", "kvshare_queue_depth", "kvshare_http_requests_in_flight",
            "kvshare_http_connections_waiting")}
        fig["control_before"], fig["control_after"] = before, control(srv.port)
        fig["exit_status"], fig["sigterm_streams"] = sigterm_under_load(srv)
        fig["log_tail"] = srv.log[-5:]
    finally:
        stop.set()
        sampler.join(5)
        srv.kill()
    fig["rss_kib"] = (min(v for _, v in rss), max(v for _, v in rss)) if rss else None
    # The RSS at each minute of the load (KiB): a leak shows as a climb after the first.
    t0 = rss[0][0] if rss else 0
    fig["rss_by_minute_kib"] = [max((v for t, v in rss if m * 60 <= t - t0 < (m + 1) * 60), default=0)
                                for m in range(int((rss[-1][0] - t0) // 60) + 1)] if rss else []
    return fig


def report(fig):
    p = lambda x: "n/a" if x is None else f"{x * 1000:.0f} ms"
    print(f"requests: {fig['requests']} in {fig['wall_s']:.1f} s "
          f"({fig['requests'] / fig['wall_s']:.1f}/s)")
    print("kinds:    " + ", ".join(f"{k} {v}" for k, v in sorted(fig["kinds"].items())))
    print("faults:   " + ", ".join(f"{k} {v}" for k, v in sorted(fig["faults"].items())) +
          f" (total {sum(fig['faults'].values())})")
    print("outcomes: " + ", ".join(f"{k} {v}" for k, v in sorted(fig["outcomes"].items())))
    print("errors:   " + (", ".join(f"{k} {v}" for k, v in sorted(fig["errors"].items())) or "none"))
    for e in fig["error_samples"]:
        print("  " + e)
    print(f"latency of served requests: p50 {p(fig['p50_s'])}, p99 {p(fig['p99_s'])} ({len(fig['latency'])})")
    print(f"after the load: {fig['after_load_metrics']}")
    print(f"control output unchanged: {fig['control_before'] == fig['control_after']} ({fig['control_before']!r})")
    print(f"SIGTERM under load: exit status {fig['exit_status']}, streams {dict(fig['sigterm_streams'])}")
    if fig["rss_kib"]:
        print(f"server RSS: min {fig['rss_kib'][0] / 1024:.0f} MiB, max {fig['rss_kib'][1] / 1024:.0f} MiB")
        print("server RSS, max per minute (MiB): " + " ".join(f"{v / 1024:.0f}" for v in fig["rss_by_minute_kib"]))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cli", default=os.environ.get("KVSHARE_CLI", ROOT / "build" / "bin" / "kvshare"))
    ap.add_argument("--model", default=None, help="GGUF (default: the default model, scripts/fetch_model.py)")
    ap.add_argument("--requests", type=int, default=500)
    ap.add_argument("--clients", type=int, default=32)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--duration", type=float, default=None, help="soak: repeat the load for this many seconds")
    ap.add_argument("--report", action="store_true", help="print the figures")
    a = ap.parse_args()
    model = a.model
    if model is None:
        sys.path.insert(0, str(ROOT / "tests" / "python"))
        from default_model import DEFAULT_MODEL
        model = DEFAULT_MODEL
    fig = run(a.cli, model, a.requests, a.clients, a.seed, a.duration)
    if a.report:
        report(fig)
    ok = (not fig["errors"] and fig["exit_status"] == 0 and fig["control_before"] == fig["control_after"]
          and fig["after_load_metrics"]["kvshare_active_slots"] == 0)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
