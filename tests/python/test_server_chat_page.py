"""The chat page (GET /) in headless Chromium (Debian `chromium`, driven over
the DevTools protocol by tests/python/cdp.py): a message typed and sent with
Enter streams a reply into the page with its tokens per second, a screenshot
is saved under the test's output ($KVSHARE_TEST_OUTPUT_DIR, else pytest's
tmp_path), and the Stop button ends a reply and frees the server's slot."""
import os
import shutil
from pathlib import Path

import pytest

from server_util import GEMMA4, Server, need_default_model

if shutil.which("chromium") is None:
    pytest.skip("no chromium (Debian package chromium)", allow_module_level=True)

from cdp import Browser  # noqa: E402


@pytest.fixture
def browser():
    b = Browser()
    yield b
    b.close()


def output_dir(tmp_path):
    d = os.environ.get("KVSHARE_TEST_OUTPUT_DIR")
    return Path(d) if d else tmp_path


def open_page(browser, server):
    browser.call("Page.navigate", url=server.url + "/")
    browser.wait("document.readyState === 'complete' && document.getElementById('model').textContent.includes('tokens')")


def send(browser, text):
    browser.eval("document.getElementById('input').focus()")
    browser.call("Input.insertText", text=text)
    for kind in ("keyDown", "keyUp"):
        browser.call("Input.dispatchKeyEvent", type=kind, key="Enter", code="Enter", windowsVirtualKeyCode=13,
                     nativeVirtualKeyCode=13, text="\r" if kind == "keyDown" else "")


def test_chat_page_streams_a_reply(browser, tmp_path):
    with Server(GEMMA4, "--slots", 2) as s:
        open_page(browser, s)
        assert browser.eval("document.getElementById('model').textContent").startswith("e2b.f32")
        browser.eval("document.getElementById('max').value = 48; document.getElementById('temp').value = 0")
        send(browser, "Hello there")
        assert browser.wait("document.querySelector('.msg.user') && document.querySelector('.msg.user').textContent") \
            == "Hello there"
        reply = browser.wait("(document.querySelector('.msg.assistant') || {}).textContent")
        stats = browser.wait("(() => { const s = document.querySelector('.stats'); "
                             "return s && s.textContent.includes('·') && s.textContent; })()")
        assert "tok/s" in stats and "tokens" in stats, stats
        assert len(reply) > 0
        shot = browser.screenshot(output_dir(tmp_path) / "server_chat_page.png")
        print(f"screenshot: {shot}")
        assert shot.stat().st_size > 5000
        # The page sent a chat request (the fixture has a chat template) and got it streamed.
        assert s.metrics()["kvshare_requests_total"] == 1
        s.wait_log(r"request 1 chat stream: .*output \d+ tokens")


def test_stop_button_ends_the_reply_and_frees_the_slot(browser, tmp_path):
    # The default model has no chat template: the page falls back to plain completion.
    with Server(need_default_model(), "--slots", 1) as s:
        open_page(browser, s)
        browser.eval("document.getElementById('max').value = 2000")
        send(browser, "Once upon a time")
        browser.wait("document.querySelectorAll('.msg.assistant').length > 0 && "
                     "document.querySelector('.msg.assistant').textContent.length > 20", timeout=60)
        assert "plain completion" in browser.eval("document.getElementById('mode').textContent")
        assert browser.eval("document.getElementById('stop').disabled") is False
        browser.eval("document.getElementById('stop').click()")
        browser.wait("document.querySelector('.stats').textContent.includes('stopped')")
        assert browser.eval("document.getElementById('send').disabled") is False
        browser.screenshot(output_dir(tmp_path) / "server_chat_page_stopped.png")
        import time
        end = time.time() + 5
        while s.metrics()["kvshare_active_slots"] != 0 and time.time() < end:
            time.sleep(0.05)
        m = s.metrics()
        assert m["kvshare_active_slots"] == 0
        assert m["kvshare_requests_cancelled_total"] == 1
        assert m["kvshare_generation_tokens_total"] < 2000


def test_chat_page_sends_audio(tmp_path):
    """The Audio button (shown since /v1/models lists "audio") attaches a WAV
    as it is; Record takes a clip from Chromium's fake microphone (WebM /
    Opus, which the server does not read) and the page turns it into a 16 kHz
    mono WAV; both go as input_audio parts before the text."""
    import base64
    import io
    import time
    import wave

    from audio_clips import tone, wav16
    from server_util import ROOT

    clip = wav16(tone(440, 0.5))
    path = tmp_path / "a.wav"
    path.write_bytes(clip)
    with Server(ROOT / "tests" / "fixtures" / "vision" / "gemma4.f32.gguf", "--slots", 1, "--max-context", 256,
                "--chat-template", "gemma4", "--mmproj", ROOT / "tests" / "fixtures" / "audio" / "gemma4a.mmproj.f32.gguf") as s:
        b = Browser(args=("--use-fake-device-for-media-stream", "--use-fake-ui-for-media-stream"))
        try:
            open_page(b, s)
            b.wait("!document.getElementById('audio').hidden && !document.getElementById('record').hidden")
            # Keep the request bodies the page sends.
            b.eval("window.sent = []; const f = window.fetch; window.fetch = (p, o) => "
                   "{ if (o && o.body) window.sent.push(JSON.parse(o.body)); return f(p, o); }; 0")
            root = b.call("DOM.getDocument")["root"]["nodeId"]
            node = b.call("DOM.querySelector", nodeId=root, selector="#audio-files")["nodeId"]
            b.call("DOM.setFileInputFiles", nodeId=node, files=[str(path)])
            b.wait("document.getElementById('audio').textContent === 'Audio (1)'")
            b.eval("document.getElementById('record').click()")
            b.wait("document.getElementById('record').textContent === 'Stop recording'")
            time.sleep(0.6)
            b.eval("document.getElementById('record').click()")
            b.wait("document.getElementById('audio').textContent === 'Audio (2)'")
            b.eval("document.getElementById('max').value = 3; document.getElementById('temp').value = 0")
            send(b, "What is said?")
            assert b.wait("(document.querySelector('.msg.user') || {}).textContent") == "What is said? [2 clips]"
            b.wait("(() => { const s = document.querySelector('.stats'); return s && s.textContent.includes('·'); })()")
            assert b.eval("document.querySelector('.msg.error') === null")
            parts = b.eval("window.sent[window.sent.length - 1]")["messages"][-1]["content"]
            assert [p["type"] for p in parts] == ["input_audio", "input_audio", "text"]
            assert parts[0]["input_audio"] == {"data": base64.b64encode(clip).decode(), "format": "wav"}
            assert parts[1]["input_audio"]["format"] == "wav"
            with wave.open(io.BytesIO(base64.b64decode(parts[1]["input_audio"]["data"]))) as w:
                assert (w.getframerate(), w.getnchannels(), w.getsampwidth()) == (16000, 1, 2)
                assert w.getnframes() > 16000 * 0.3
            assert parts[2] == {"type": "text", "text": "What is said?"}
            s.wait_log(r"chat stream: .*output \d+ tokens")
        finally:
            b.close()
