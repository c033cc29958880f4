"""A client that goes away frees its slot at once (streaming and not), and
SIGTERM drains: /health and new requests answer 503, requests in flight finish
(or, past --drain-timeout, end with a final chunk, finish_reason "stop" and kvshare_abort "cancelled"),
every stream ends with [DONE], and the process exits 0. A signal while
loading (a load that never ends included) exits 0 at once, a load error exits
1 at once, and a signal while stopping exits at once. --device: a wrong value
lists the valid ones; cuda without a GPU (or without CUDA in the build) fails
at once naming it, and images and embeddings on cuda are no longer refused
(they run there where a GPU is usable)."""
import json
import os
import re
import signal
import socket
import subprocess
import threading
import time

import pytest

from server_util import DEFAULT_ID, GEMMA4, ROOT, Server, Stream, cli, need_default_model, request

P = "/v1/completions"
LONG = {"model": DEFAULT_ID, "prompt": "Once upon a time,", "max_tokens": 400, "temperature": 0}


def wait_for(cond, timeout):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(0.01)
    return cond()


def test_disconnected_clients_free_their_slots():
    with Server(need_default_model(), "--slots", 1) as s:
        # Streaming: read a few tokens, then drop the connection.
        st = Stream(s, P, {**LONG, "stream": True})
        events = iter(st)
        got = [next(events) for _ in range(3)]
        assert all(json.loads(e)["choices"][0]["finish_reason"] is None for e in got)
        assert s.metrics()["kvshare_active_slots"] == 1
        t0 = time.monotonic()
        st.close()
        assert wait_for(lambda: s.metrics()["kvshare_active_slots"] == 0, 5)
        freed_after = time.monotonic() - t0
        m = s.metrics()
        assert m["kvshare_requests_cancelled_total"] == 1
        # Noticed within a step or two: far fewer tokens than asked for were made.
        assert m["kvshare_generation_tokens_total"] < 3 + 20, m["kvshare_generation_tokens_total"]
        assert freed_after < 2.0
        s.wait_log(r"request 1 completion stream: .*abort \(cancelled\), client gone")

        # Not streaming: the client gives up while the server computes.
        sock = socket.create_connection(("127.0.0.1", s.port))
        body = json.dumps(LONG).encode()
        sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                     b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
        assert wait_for(lambda: s.metrics()["kvshare_active_slots"] == 1, 5)
        sock.close()
        assert wait_for(lambda: s.metrics()["kvshare_active_slots"] == 0, 5)
        assert s.metrics()["kvshare_requests_cancelled_total"] == 2
        s.wait_log(r"request 2 completion: .*abort \(cancelled\), client gone")
        # The freed slot serves the next request.
        assert request(s, "POST", P, {**LONG, "max_tokens": 3}).json()["usage"]["completion_tokens"] == 3


def test_sigterm_drains_and_exits_0():
    s = Server(need_default_model(), "--slots", 2)
    try:
        st = Stream(s, P, {**LONG, "max_tokens": 120, "stream": True})
        events = iter(st)
        first = next(events)
        s.proc.send_signal(signal.SIGTERM)
        s.wait_log(r"SIGTERM: draining")
        health = request(s, "GET", "/health")
        assert health.status == 503 and health.json()["error"]["code"] == "shutting_down"
        refused = request(s, "POST", P, {**LONG, "max_tokens": 2})
        assert refused.status == 503 and refused.json()["error"]["type"] == "unavailable_error"
        rest = list(events)
        assert rest[-1] == "[DONE]"
        chunks = [json.loads(e) for e in [first, *rest[:-1]]]
        assert chunks[-1]["choices"][0]["finish_reason"] == "length"  # finished, not cut
        assert sum(1 for c in chunks if c["choices"][0]["text"]) >= 100
        assert s.proc.wait(30) == 0
        s.wait_log(r"\] stopped$")
    finally:
        s.kill()


def test_drain_timeout_cancels_with_a_final_chunk():
    s = Server(need_default_model(), "--slots", 2, "--drain-timeout", 0.3)
    try:
        streams = [Stream(s, P, {**LONG, "max_tokens": 3000, "stream": True, "stream_options": {"include_usage": True}})
                   for _ in range(2)]
        iters = [iter(st) for st in streams]
        for it in iters:
            next(it)
        t0 = time.monotonic()
        s.proc.send_signal(signal.SIGTERM)
        for it in iters:
            rest = list(it)
            assert rest[-1] == "[DONE]"
            final = [json.loads(e) for e in rest[:-1] if json.loads(e)["choices"]][-1]
            assert final["choices"][0]["finish_reason"] == "stop"  # OpenAI's values only
            assert final["choices"][0]["kvshare_abort"] == "cancelled"
            usage = json.loads(rest[-2])["usage"]
            assert 0 < usage["completion_tokens"] < 3000
        assert s.proc.wait(30) == 0
        assert time.monotonic() - t0 < 10
        s.wait_log(r"drain timeout: cancelling")
    finally:
        s.kill()


class Starting:
    """A `kvshare serve` from its first line on (Server waits for "listening")."""

    def __init__(self, *args):
        self.proc = subprocess.Popen([str(cli()), "serve", "--host", "127.0.0.1", "--port", "0", *map(str, args)],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd=ROOT)
        self.lines = []
        self.reader = threading.Thread(target=lambda: self.lines.extend(l.rstrip("\n") for l in self.proc.stderr),
                                       daemon=True)
        self.reader.start()

    def wait_line(self, pattern, timeout=30):
        end = time.monotonic() + timeout
        while not any(re.search(pattern, l) for l in list(self.lines)):
            assert time.monotonic() < end and self.proc.poll() is None, f"no {pattern!r} in:\n" + "\n".join(self.lines)
            time.sleep(0.01)

    def exit_status(self, within):
        """The exit status, which must come within `within` seconds."""
        try:
            rc = self.proc.wait(within)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
            self.reader.join(5)
            pytest.fail(f"still running {within} s later; log:\n" + "\n".join(self.lines))
        self.reader.join(5)
        return rc


def test_signal_while_a_load_never_ends_exits_0(tmp_path):
    # A FIFO with no writer: opening it blocks, as a load stuck on a slow or
    # hung filesystem would; the model (then the mmproj) load never returns.
    fifo = tmp_path / "stuck.gguf"
    os.mkfifo(fifo)
    for args, sig in [(["--model", fifo], signal.SIGTERM), (["--model", GEMMA4, "--mmproj", fifo], signal.SIGINT)]:
        s = Starting(*args)
        s.wait_line(r"\] loading ")
        time.sleep(0.3)
        s.proc.send_signal(sig)
        assert s.exit_status(5) == 0
        assert any(f"{sig.name} while loading: exiting" in l for l in s.lines), s.lines


def test_signal_at_any_moment_of_the_start_exits_0():
    # Mid-load of the default model (~250 MB: parsing, repacking, the KV
    # cache), or just after it: the process is gone in seconds either way.
    model = need_default_model()
    for delay in (0.0, 0.1, 0.5):
        s = Starting("--model", model)
        s.wait_line(r"\] loading ")
        time.sleep(delay)
        s.proc.send_signal(signal.SIGTERM)
        assert s.exit_status(5) == 0, s.lines
        assert any(re.search(r"SIGTERM (while loading: exiting|: draining)", l) for l in s.lines), s.lines


def test_load_error_exits_1_at_once(tmp_path):
    # The error came before the HTTP thread's accept loop had begun, and
    # stopping it then hung the process (most starts).
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"NOTAGGUF" * 64)
    for _ in range(5):
        s = Starting("--model", bad)
        assert s.exit_status(5) == 1
        assert any("not a GGUF file" in l for l in s.lines), s.lines


def test_idle_server_stops_at_once_and_a_second_signal_cuts_a_slow_stop():
    s = Server(GEMMA4)
    t0 = time.monotonic()
    assert s.stop(timeout=5) == 0
    assert time.monotonic() - t0 < 3
    s.wait_log(r"\] stopped$")
    # A client that sent half a request holds the HTTP layer's stop (its read
    # timeout is 30 s): a second signal ends the process at once.
    s = Server(GEMMA4)
    try:
        slow = socket.create_connection(("127.0.0.1", s.port))
        slow.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        time.sleep(0.2)
        s.proc.send_signal(signal.SIGTERM)
        s.wait_log(r"SIGTERM: draining")
        time.sleep(0.5)
        s.proc.send_signal(signal.SIGTERM)
        t0 = time.monotonic()
        assert s.proc.wait(5) == 1
        assert time.monotonic() - t0 < 2
        s.wait_log(r"SIGTERM while stopping: exiting now")
        slow.close()
    finally:
        s.kill()


# ---- --device (docs/serving.md "On the GPU") ----

GEMMA3 = ROOT / "tests" / "fixtures" / "vision" / "gemma3.f32.gguf"  # a tiny Gemma 3 text model
NO_GPU = ("built without CUDA", "no CUDA device is usable")


def run_cli(*args, timeout=60):
    return subprocess.run([str(cli()), *map(str, args)], capture_output=True, text=True, timeout=timeout, cwd=ROOT)


def test_device_values_are_listed_when_one_is_wrong():
    for sub in ("generate", "serve", "bench"):
        for flag in ("--device", "--draft-device"):
            res = run_cli(sub, flag, "tpu")
            assert res.returncode != 0, (sub, flag)
            assert f"{flag}: tpu not in {{cpu,cuda}}" in res.stderr, (sub, flag, res.stderr)


def test_device_cuda_without_a_gpu_fails_fast_naming_it():
    res = run_cli("generate", "--model", GEMMA3, "--device", "cuda", "--prompt", "Hi", "-n", 1)
    if res.returncode == 0:
        pytest.skip("a GPU is usable here: this checks the start-up error without one")
    # The stub (a build without CUDA) and a CUDA build on a host without a GPU
    # each say so, and what to do instead.
    assert "device cuda" in res.stderr and any(w in res.stderr for w in NO_GPU), res.stderr
    assert "use device cpu" in res.stderr, res.stderr
    res = run_cli("bench", "--model", GEMMA3, "--device", "cuda", "--threads", 1, "--prompt-tokens", 8,
                  "--gen-tokens", 2, "--repetitions", 1)
    assert res.returncode == 1 and any(w in res.stderr for w in NO_GPU), res.stderr
    s = Starting("--model", GEMMA3, "--device", "cuda", "--spec", "ngram")
    assert s.exit_status(10) == 1
    assert any("device cuda" in l and any(w in l for w in NO_GPU) for l in s.lines), s.lines
    assert not any("listening on" in l for l in s.lines), s.lines


def test_device_cuda_takes_the_gemma4_assistant():
    # The assistant runs on the target's device: no refusal before loading;
    # the run stops at the missing model instead.
    assistant = ROOT / "tests" / "fixtures" / "gemma4_assistant" / "assistant_plain.f32.gguf"
    res = run_cli("generate", "--model", "/nonexistent.gguf", "--device", "cuda", "--prompt", "Hi",
                  "--draft-model", assistant)
    assert res.returncode == 1 and "/nonexistent.gguf" in res.stderr, res.stderr
    assert "runs on the CPU only so far" not in res.stderr, res.stderr
    s = Starting("--model", "/nonexistent.gguf", "--device", "cuda", "--draft-model", assistant)
    assert s.exit_status(10) == 1
    assert any("/nonexistent.gguf" in l for l in s.lines), s.lines
    assert not any("runs on the CPU only so far" in l for l in s.lines), s.lines


def test_device_cuda_drafts_with_the_gemma4_assistant_on_a_gpu():
    # On a GPU only (skipped here): the assistant runs next to the target's
    # device cache; the CLI reports accepted drafts and the server serves.
    g4a = ROOT / "tests" / "fixtures" / "gemma4_assistant"
    target, assistant = g4a / "target.f32.gguf", g4a / "assistant_plain.f32.gguf"
    res = run_cli("generate", "--model", target, "--device", "cuda", "--draft-model", assistant, "--raw", "-v",
                  "-n", 24, "--draft-max", 4, "--prompt", "Four score and seven years ago")
    if res.returncode != 0 and any(w in res.stderr for w in NO_GPU):
        pytest.skip("no usable GPU here: " + res.stderr.strip().splitlines()[-1])
    assert res.returncode == 0, res.stderr
    assert "speculative decoding: gemma4-assistant drafter" in res.stderr, res.stderr
    assert re.search(r"accepted [1-9][0-9]* / drafted", res.stderr), res.stderr
    with Server(target, "--device", "cuda", "--slots", 1, "--draft-model", assistant) as s:
        s.wait_log(r"model on device cuda")
        r = request(s, "POST", P, {"prompt": "Four score and seven years ago", "max_tokens": 8, "temperature": 0})
        assert r.status == 200 and r.json()["choices"][0]["text"], r.text


def test_device_cuda_takes_images():
    # No media refusal on cuda (SupportOn's media_inputs): without a GPU the
    # run fails on the device, naming it; with one the image prompt runs
    # (the vision tower on the CPU, its rows on the GPU).
    vis = ROOT / "tests" / "fixtures" / "vision"
    res = run_cli("generate", "--model", vis / "gemma3.f32.gguf", "--mmproj", vis / "gemma3.mmproj.f32.gguf",
                  "--image", vis / "images" / "rgb.png", "--device", "cuda", "--prompt", "Hi", "-n", 2, "--temp", 0)
    assert "runs on the CPU only so far" not in res.stderr, res.stderr
    s = Starting("--model", GEMMA3, "--device", "cuda", "--mmproj", "/nonexistent.mmproj.gguf")
    assert s.exit_status(10) == 1
    assert not any("runs on the CPU only so far" in l for l in s.lines), s.lines
    if res.returncode != 0:
        assert any(w in res.stderr for w in NO_GPU), res.stderr
        pytest.skip("no usable GPU here: " + res.stderr.strip().splitlines()[-1])
    assert "encoded in" in res.stderr, res.stderr


def test_device_cuda_serves_text_on_a_gpu():
    # On a GPU only (skipped here): one slot; prompt lookup runs, pooled
    # embeddings of a decoder are served (no device refusal), and greedy text
    # equals `generate --device cuda`'s.
    res = run_cli("generate", "--model", GEMMA3, "--device", "cuda", "--raw", "--prompt", "Hi", "-n", 6, "--temp", 0)
    if res.returncode != 0:
        pytest.skip("no usable GPU here: " + res.stderr.strip().splitlines()[-1])
    with Server(GEMMA3, "--device", "cuda", "--slots", 1, "--spec", "ngram", "--pooling", "mean") as s:
        s.wait_log(r"model on device cuda")
        r = request(s, "POST", P, {"prompt": "Hi", "max_tokens": 6, "temperature": 0})
        assert r.status == 200, r.text
        assert r.json()["choices"][0]["text"] == res.stdout, (r.text, res.stdout)
        r = request(s, "POST", "/v1/embeddings", {"input": "Hi"})
        assert r.status == 200 and len(r.json()["data"]) == 1, r.text


EMBEDDING = ROOT / "tests" / "fixtures" / "embedding_gemma"


def test_device_cuda_serves_embeddings():
    # /v1/embeddings on cuda is no longer refused naming the device
    # (SupportOn's embeddings), and EmbeddingGemma has a GPU forward pass:
    # without a GPU the start fails on the device, not on the architecture;
    # on one (skipped here) the fixture's embeddings follow
    # sentence-transformers' within the GPU model's bf16 tolerance (3e-2 of
    # a vector's largest value, tests/cuda_model_compare.h).
    gpu = run_cli("generate", "--model", GEMMA3, "--device", "cuda", "--prompt", "Hi", "-n", 1)
    if gpu.returncode != 0:
        s = Starting("--model", EMBEDDING / "tiny.f32.gguf", "--device", "cuda")
        assert s.exit_status(10) == 1
        assert any("device cuda" in l and any(w in l for w in NO_GPU) for l in s.lines), s.lines
        assert not any("has no GPU forward pass" in l or "runs on the CPU only so far" in l for l in s.lines), s.lines
        pytest.skip("no usable GPU here: " + gpu.stderr.strip().splitlines()[-1])
    ref = json.loads((EMBEDDING / "tiny.st.json").read_text())
    with Server(EMBEDDING / "tiny.f32.gguf", "--device", "cuda", "--slots", 1) as srv:
        srv.wait_log(r"model on device cuda")
        r = request(srv, "POST", "/v1/embeddings", {"input": ref["texts"], "encoding_format": "float"})
        assert r.status == 200, r.text
        got = [d["embedding"] for d in r.json()["data"]]
        assert len(got) == len(ref["embeddings"])
        for i, (g, w) in enumerate(zip(got, ref["embeddings"])):
            assert len(g) == len(w), i
            err = max(abs(a - b) for a, b in zip(g, w)) / max(abs(b) for b in w)
            assert err <= 3e-2, (i, err)
        r = request(srv, "POST", P, {"prompt": "Hi", "max_tokens": 2})
        assert r.status == 400 and "embedding model" in r.json()["error"]["message"], r.text
