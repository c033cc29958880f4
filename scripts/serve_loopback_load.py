#!/usr/bin/env python3
"""The HTTP side of scripts/serve_loopback.sh (stdlib only; 127.0.0.1 only).

  wait-health PORT...            until every replica's /health answers 200 (60 s)
  mixed --lb PORT --replicas P,P --requests N --clients C
                                 a mixed load through nginx, then checks
  failover --lb PORT --requests N
                                 requests through nginx while a replica drains:
                                 every one must succeed

`mixed` sends, from C concurrent clients, N requests cycling through: short
completions, streaming completions with include_usage, a ~300-token prompt
streamed, /v1/models, /health, /tokenize and a bad request (its 400 and error
JSON must come through nginx). It checks every answer, that streams end with
[DONE] and arrive as they are made (the first event comes well before the
last: nginx does not buffer), and that both replicas served requests."""
import argparse
import http.client
import json
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor

MODEL = "gemma-3-270m-q4_k_m"
STORY = "The river runs through the old town, past the market and the cathedral. "


def call(port, method, path, body=None, timeout=120):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request(method, path, body=None if body is None else json.dumps(body),
                     headers={"Content-Type": "application/json"} if body is not None else {})
        r = conn.getresponse()
        return r.status, r.read().decode("utf-8", "replace")
    finally:
        conn.close()


def stream(port, body, timeout=120):
    """(status, events, seconds to the first event, seconds to [DONE])."""
    t0 = time.monotonic()
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request("POST", "/v1/completions", json.dumps({**body, "stream": True}),
                     {"Content-Type": "application/json"})
        r = conn.getresponse()
        if r.status != 200:
            return r.status, [r.read().decode()], 0, 0
        events, first = [], None
        while True:
            line = r.readline()
            if not line:
                break
            if line.startswith(b"data: "):
                if first is None:
                    first = time.monotonic() - t0
                events.append(line[6:].strip().decode())
                if events[-1] == "[DONE]":
                    break
        return 200, events, first, time.monotonic() - t0
    finally:
        conn.close()


def wait_health(ports):
    end = time.time() + 60
    for p in ports:
        while True:
            try:
                if call(p, "GET", "/health", timeout=2)[0] == 200:
                    break
            except OSError:
                pass
            if time.time() > end:
                sys.exit(f"replica on port {p} is not healthy after 60 s")
            time.sleep(0.1)
    print(f"healthy: {' '.join(map(str, ports))}")


def one(lb, i):
    kind = i % 7
    if kind == 0:
        s, text = call(lb, "POST", "/v1/completions",
                       {"model": MODEL, "prompt": f"Question {i}: the capital of France is", "max_tokens": 8,
                        "temperature": 0})
        assert s == 200, text
        return "completion", json.loads(text)["usage"]["completion_tokens"], None
    if kind in (1, 2):
        s, ev, first, total = stream(lb, {"model": MODEL, "prompt": f"Story {i}: once upon a time", "max_tokens": 48,
                                          "temperature": 0.7, "seed": i, "stream_options": {"include_usage": True}})
        assert s == 200 and ev[-1] == "[DONE]", ev[-3:]
        usage = json.loads(ev[-2])["usage"]
        return "stream", usage["completion_tokens"], (first, total)
    if kind == 3:
        s, ev, first, total = stream(lb, {"model": MODEL, "prompt": STORY * 20 + f"Chapter {i}.", "max_tokens": 32,
                                          "temperature": 0})
        assert s == 200 and ev[-1] == "[DONE]", ev[-3:]
        return "long stream", len(ev) - 2, (first, total)
    if kind == 4:
        s, text = call(lb, "GET", "/v1/models")
        assert s == 200 and json.loads(text)["data"][0]["id"] == MODEL, text
        s, text = call(lb, "GET", "/health")
        assert s == 200, text
        return "models+health", 0, None
    if kind == 5:
        s, text = call(lb, "POST", "/tokenize", {"content": "Hello world"})
        assert s == 200 and json.loads(text)["count"] > 0, text
        return "tokenize", 0, None
    s, text = call(lb, "POST", "/v1/completions", {"model": MODEL, "prompt": "x", "temperature": 9})
    err = json.loads(text)["error"]
    assert s == 400 and err["code"] == "decimal_above_max_value" and err["param"] == "temperature", text
    return "bad request", 0, None


def metric(port, name):
    s, text = call(port, "GET", "/metrics")
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return 0.0


def mixed(lb, replicas, n, clients):
    before = {p: metric(p, "kvshare_requests_total") for p in replicas}
    t0 = time.monotonic()
    with ThreadPoolExecutor(clients) as pool:
        results = list(pool.map(lambda i: one(lb, i), range(n)))
    secs = time.monotonic() - t0
    kinds = {}
    for kind, _, _ in results:
        kinds[kind] = kinds.get(kind, 0) + 1
    tokens = sum(t for _, t, _ in results)
    ratios = [first / total for _, _, ft in results if ft for first, total in [ft]]
    served = {p: metric(p, "kvshare_requests_total") - before[p] for p in replicas}
    print(f"mixed load: {n} requests from {clients} clients in {secs:.1f} s through nginx on :{lb}: "
          + ", ".join(f"{k} {v}" for k, v in sorted(kinds.items())))
    print(f"  {tokens} tokens generated ({tokens / secs:.1f} tok/s); per replica (completion requests): "
          + ", ".join(f":{p} {int(v)}" for p, v in served.items()))
    print(f"  streams: first event after {statistics.median(ratios):.0%} of the stream's time (median)")
    assert all(v > 0 for v in served.values()), f"a replica served nothing: {served}"
    assert statistics.median(ratios) < 0.5, "streams arrive late: is nginx buffering them?"


def failover(lb, n):
    ok = 0
    for i in range(n):
        s, text = call(lb, "POST", "/v1/completions",
                       {"model": MODEL, "prompt": f"Failover {i}:", "max_tokens": 4, "temperature": 0})
        assert s == 200, f"request {i} failed while a replica drained: {s} {text}"
        ok += 1
        time.sleep(0.1)
    print(f"failover: {ok}/{n} requests served while a replica drained and stopped")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    w = sub.add_parser("wait-health")
    w.add_argument("ports", type=int, nargs="+")
    m = sub.add_parser("mixed")
    m.add_argument("--lb", type=int, required=True)
    m.add_argument("--replicas", required=True)
    m.add_argument("--requests", type=int, default=28)
    m.add_argument("--clients", type=int, default=6)
    f = sub.add_parser("failover")
    f.add_argument("--lb", type=int, required=True)
    f.add_argument("--requests", type=int, default=8)
    a = ap.parse_args()
    if a.cmd == "wait-health":
        wait_health(a.ports)
    elif a.cmd == "mixed":
        mixed(a.lb, [int(p) for p in a.replicas.split(",")], min(a.requests, 200), min(a.clients, 32))
    else:
        failover(a.lb, min(a.requests, 50))


if __name__ == "__main__":
    main()
