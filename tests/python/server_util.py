"""Helpers of the `kvshare serve` tests: start a real server on 127.0.0.1 (any
free port), wait until /health says 200, read its log, stop it with a signal.

The binary is $KVSHARE_CLI (ctest sets it) or build/bin/kvshare; the tests skip
without it. Every server is started with --port 0 and --host 127.0.0.1, and
every request of the tests goes to that address."""
import http.client
import json
import os
import re
import signal
import subprocess
import threading
import time
import uuid
from pathlib import Path

import pytest

ROOT = Path(os.environ.get("KVSHARE_SOURCE_DIR", Path(__file__).resolve().parents[2]))
from default_model import DEFAULT_MODEL  # noqa: E402
DEFAULT_ID = "gemma-3-270m-q4_k_m"
GEMMA4 = ROOT / "tests" / "fixtures" / "gemma4" / "e2b.f32.gguf"  # tiny, with Gemma 4's chat template
GEMMA4_ID = "e2b.f32"


def cli():
    path = Path(os.environ.get("KVSHARE_CLI", ROOT / "build" / "bin" / "kvshare"))
    if not path.exists():
        pytest.skip(f"no kvshare binary at {path} (build it, or set KVSHARE_CLI)")
    return path


def need_default_model():
    if not DEFAULT_MODEL.exists():
        pytest.skip(f"no default model at {DEFAULT_MODEL} (scripts/fetch_model.py)")
    return DEFAULT_MODEL


class Server:
    """A running `kvshare serve`; its stderr lines are collected in .log."""

    def __init__(self, model, *args, ready=True, timeout=60):
        self.cmd = [str(cli()), "serve", "--host", "127.0.0.1", "--port", "0", "--model", str(model), *map(str, args)]
        self.proc = subprocess.Popen(self.cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                     cwd=ROOT)
        self.log = []
        self._port = None
        self._cv = threading.Condition()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        with self._cv:
            if not self._cv.wait_for(lambda: self._port is not None or self.proc.poll() is not None, timeout):
                self.kill()
                raise RuntimeError("kvshare serve printed no port:\n" + "\n".join(self.log))
        if self._port is None:
            self._reader.join(5)
            raise RuntimeError(f"kvshare serve exited ({self.proc.returncode}):\n" + "\n".join(self.log))
        self.port = self._port
        self.url = f"http://127.0.0.1:{self.port}"
        if ready:
            self.wait_ready(timeout)

    def _read(self):
        for line in self.proc.stderr:
            line = line.rstrip("\n")
            with self._cv:
                self.log.append(line)
                m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", line)
                if m and self._port is None:
                    self._port = int(m.group(1))
                self._cv.notify_all()

    def wait_ready(self, timeout=60):
        end = time.time() + timeout
        while time.time() < end:
            try:
                if request(self, "GET", "/health", timeout=2).status == 200:
                    return
            except OSError:
                pass
            if self.proc.poll() is not None:
                break
            time.sleep(0.05)
        raise RuntimeError("kvshare serve did not become ready:\n" + "\n".join(self.log))

    def wait_log(self, pattern, timeout=10):
        """The first log line matching `pattern` (a regex), waiting for it."""
        rx = re.compile(pattern)
        with self._cv:
            found = []
            def check():
                found[:] = [l for l in self.log if rx.search(l)]
                return bool(found)
            if not self._cv.wait_for(check, timeout):
                raise AssertionError(f"no log line matches {pattern!r}:\n" + "\n".join(self.log))
            return found[0]

    def metrics(self):
        """GET /metrics as {name: value} (label sets kept in the name)."""
        out = {}
        for line in request(self, "GET", "/metrics").text.splitlines():
            if line and not line.startswith("#"):
                name, value = line.rsplit(" ", 1)
                out[name] = float(value)
        return out

    def stop(self, sig=signal.SIGTERM, timeout=60):
        """Sends `sig`, waits for the exit; returns the exit status."""
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            rc = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise
        self._reader.join(5)
        return rc

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if self.proc.poll() is None:
            try:
                self.stop(timeout=30)
            finally:
                self.kill()


def generate(model, prompt, *args, timeout=300):
    """`kvshare generate`'s text (stdout) for `prompt` with extra flags."""
    res = subprocess.run([str(cli()), "generate", "--model", str(model), "--prompt", prompt, *map(str, args)],
                         capture_output=True, timeout=timeout, cwd=ROOT)
    assert res.returncode == 0, res.stderr.decode(errors="replace")
    return res.stdout.decode()  # not text=True: its universal newlines would turn a generated "\r" into "\n"


class Response:
    def __init__(self, status, headers, text):
        self.status, self.headers, self.text = status, headers, text

    def json(self):
        return json.loads(self.text)


def request(server, method, path, body=None, headers=None, timeout=120):
    """One HTTP request to the server (stdlib only). `body`: a dict/list (sent
    as JSON), str or bytes (sent as is)."""
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=timeout)
    try:
        h = dict(headers or {})
        if body is not None and not isinstance(body, (str, bytes)):
            body = json.dumps(body)
            h.setdefault("Content-Type", "application/json")
        conn.request(method, path, body=body, headers=h)
        r = conn.getresponse()
        return Response(r.status, {k.lower(): v for k, v in r.getheaders()}, r.read().decode("utf-8", "replace"))
    finally:
        conn.close()


def post_form(server, path, fields, file_bytes=None, filename="clip.wav", timeout=120):
    """A multipart/form-data POST (the audio endpoints' body): `fields` as text
    parts, then `file_bytes` (if any) as the `file` part."""
    boundary = uuid.uuid4().hex
    body = b""
    for k, v in fields.items():
        body += f"--{boundary}\r\nContent-Disposition: form-data; name=\"{k}\"\r\n\r\n{v}\r\n".encode()
    if file_bytes is not None:
        body += (f"--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"{filename}\"\r\n"
                 "Content-Type: application/octet-stream\r\n\r\n").encode() + file_bytes + b"\r\n"
    body += f"--{boundary}--\r\n".encode()
    return request(server, "POST", path, body, {"Content-Type": f"multipart/form-data; boundary={boundary}"}, timeout)


class Stream:
    """A streaming POST: iterate for the SSE data payloads ("[DONE]" last);
    close() drops the connection (a client that goes away)."""

    def __init__(self, server, path, body, headers=None, timeout=120):
        self.conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=timeout)
        self.conn.request("POST", path, body=json.dumps(body), headers={"Content-Type": "application/json", **(headers or {})})
        self.response = self.conn.getresponse()
        self.status = self.response.status

    def __iter__(self):
        while True:
            line = self.response.readline()
            if not line:
                return
            if line.startswith(b"data: "):
                data = line[6:].strip().decode("utf-8", "replace")
                yield data
                if data == "[DONE]":
                    return

    def close(self):
        self.conn.sock.shutdown(2) if self.conn.sock else None
        self.conn.close()
