"""`kvshare serve` under load with injected faults (ctest label `load`):
bench/serve_faults.py's run on the default model (32 clients, 500 requests,
disconnects, slow readers, bad bodies, SIGTERM under load), and a burst
beyond the queue limit that must get 503s. Loopback only; the figures are
printed by `bench/serve_faults.py --report`, not here."""
import importlib.util
import json
import socket
import threading

import pytest

from server_util import ROOT, Server, cli, need_default_model

spec = importlib.util.spec_from_file_location("serve_faults", ROOT / "bench" / "serve_faults.py")
serve_faults = importlib.util.module_from_spec(spec)
spec.loader.exec_module(serve_faults)


def test_load_with_faults_then_sigterm():
    fig = serve_faults.run(cli(), need_default_model(), requests=500, clients=32)
    assert fig["requests"] == 500
    assert not fig["errors"], fig["error_samples"]
    # Every fault kind was injected, and served requests were answered.
    assert set(fig["faults"]) == serve_faults.FAULTS
    assert fig["outcomes"]["ok"] > 200
    assert fig["outcomes"]["tool_calls"] > 0  # calls came back and their arguments were checked
    assert fig["after_load_metrics"] == {"kvshare_active_slots": 0, "kvshare_queue_depth": 0,
                                         "kvshare_http_requests_in_flight": 0,
                                         "kvshare_http_connections_waiting": 0}
    assert fig["control_before"] and fig["control_before"] == fig["control_after"]
    assert fig["exit_status"] == 0, fig["log_tail"]
    assert sum(fig["sigterm_streams"].values()) == 8
    assert set(fig["sigterm_streams"]) <= {"ended", "closed", "503"}, fig["sigterm_streams"]
    assert fig["p99_s"] < 120  # a sanity bound, not a timing check


def test_burst_beyond_the_queue_gets_503():
    # Two connection threads, one slot, a queue of two: ten of twelve
    # connections wait in the HTTP library's queue, and they count toward the
    # limit, so the burst is refused (503 + Retry-After) instead of queued
    # there until a thread frees.
    with Server(need_default_model(), "--slots", 1, "--max-queue", 2, "--http-threads", 2) as srv:
        n = 12
        conns = [socket.create_connection(("127.0.0.1", srv.port), timeout=120) for _ in range(n)]
        body = json.dumps({"prompt": "Hello", "max_tokens": 8, "temperature": 0}).encode()
        head = (f"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n").encode()
        results = [None] * n

        def go(i):
            c = serve_faults.Conn.__new__(serve_faults.Conn)
            c.s, c.buf = conns[i], b""
            try:
                c.send(head + body)
                status, headers = c.response_head()
                results[i] = (status, headers, c.body(headers))
            finally:
                c.close()

        threads = [threading.Thread(target=go, args=(i,)) for i in range(n)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        statuses = sorted(r[0] for r in results)
        assert set(statuses) <= {200, 503}, statuses
        assert 503 in statuses and 200 in statuses, statuses
        for status, headers, data in results:
            j = json.loads(data)
            if status == 503:
                assert headers.get("retry-after") == "1"
                assert j["error"]["code"] == "server_busy"
            else:
                assert j["choices"][0]["text"] is not None
        m = srv.metrics()
        assert m["kvshare_requests_rejected_total"] == statuses.count(503)
        assert m["kvshare_http_connections_waiting"] == 0
