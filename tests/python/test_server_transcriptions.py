"""`POST /v1/audio/transcriptions` (multipart: file, model, language, prompt,
response_format json | text | verbose_json | srt | vtt) on the tiny Gemma 4
E-style text model of tests/fixtures/vision/ with the gemma4a mmproj of
tests/fixtures/audio/: the formats carry the same text, the clip's duration
is reported, and bad input is a named 400."""
import base64
import json

import numpy as np
import pytest

from audio_clips import tone, wav16
from server_util import ROOT, Server, request
from server_util import post_form as util_post_form

TEXT = ROOT / "tests" / "fixtures" / "vision" / "gemma4.f32.gguf"
MMPROJ = ROOT / "tests" / "fixtures" / "audio" / "gemma4a.mmproj.f32.gguf"


def post_form(server, fields, file_bytes=None):
    r = util_post_form(server, "/v1/audio/transcriptions", fields, file_bytes)
    return r.status, r.text


@pytest.fixture(scope="module")
def server():
    with Server(TEXT, "--slots", 1, "--max-context", 256, "--chat-template", "gemma4", "--mmproj", MMPROJ) as s:
        yield s


def test_formats_carry_the_same_text(server):
    clip = wav16(tone(440, 1.0))
    status, body = post_form(server, {"model": "x", "language": "English"}, clip)
    assert status == 200, body
    j = json.loads(body)
    assert isinstance(j["text"], str) and j["usage"]["seconds"] == pytest.approx(1.0)
    status, text = post_form(server, {"response_format": "text", "language": "English"}, clip)
    assert status == 200 and text == j["text"] + "\n"
    status, body = post_form(server, {"response_format": "verbose_json", "language": "English"}, clip)
    v = json.loads(body)
    assert v["task"] == "transcribe" and v["language"] == "English" and v["text"] == j["text"]
    assert v["duration"] == pytest.approx(1.0) and v["segments"][0]["end"] == pytest.approx(1.0)
    status, srt = post_form(server, {"response_format": "srt", "language": "English"}, clip)
    assert status == 200 and srt == "1\n00:00:00,000 --> 00:00:01,000\n" + j["text"] + "\n\n"


def test_bad_input_is_a_named_400(server):
    status, body = post_form(server, {"model": "x"})
    assert status == 400 and json.loads(body)["error"]["param"] == "file"
    status, body = post_form(server, {"response_format": "xml"}, wav16(tone(440)))
    assert status == 400 and json.loads(body)["error"]["param"] == "response_format"
    status, body = post_form(server, {}, b"not audio")
    assert status == 400 and json.loads(body)["error"]["code"] == "invalid_audio"
    status, body = post_form(server, {}, wav16(np.zeros(1000 * 601), 1000))
    assert status == 400 and json.loads(body)["error"]["code"] == "audio_too_long"


def test_stream_with_the_openai_sdk(server):
    openai = pytest.importorskip("openai")
    clip = wav16(tone(440, 1.0))
    with openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=120) as client:
        whole = client.audio.transcriptions.create(model="x", file=("clip.wav", clip), language="English")
        events = list(client.audio.transcriptions.create(model="x", file=("clip.wav", clip), language="English",
                                                         stream=True))
    kinds = [e.type for e in events]
    # Deltas, then one done event carrying the whole text and the usage.
    assert kinds[-1] == "transcript.text.done" and set(kinds[:-1]) == {"transcript.text.delta"}, kinds
    done = events[-1]
    assert "".join(e.delta for e in events[:-1]) == done.text == whole.text
    u = done.usage
    assert u.type == "tokens" and u.output_tokens > 0 and u.total_tokens == u.input_tokens + u.output_tokens
    # The prompt is the clip, then the documented ASR instruction
    # (docs/audio.md "Prompts"): the same chat has as many tokens.
    instruction = ("Transcribe the following speech segment in English into English text.\n\n"
                   "Follow these specific instructions for formatting the answer:\n"
                   "* Only output the transcription, with no newlines.\n"
                   "* When transcribing numbers, write the digits, i.e. write 1.7 and not one point seven, "
                   "and write 3 instead of three.")
    audio = {"type": "input_audio", "input_audio": {"data": base64.b64encode(clip).decode(), "format": "wav"}}
    chat = {"messages": [{"role": "user", "content": [audio, {"type": "text", "text": instruction}]}], "max_tokens": 1}
    assert request(server, "POST", "/v1/chat/completions", chat).json()["usage"]["prompt_tokens"] == u.input_tokens
