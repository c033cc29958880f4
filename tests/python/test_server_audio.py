"""`kvshare serve --mmproj` with audio: OpenAI input_audio parts
({"data": base64, "format": "wav" | "mp3" | "flac" | "ogg"}) on the tiny
Gemma 4 E-style text model of tests/fixtures/vision/ with the gemma4a
mmproj of tests/fixtures/audio/. Checks: a clip reaches the model
(prompt tokens: 25 per second plus the two markers; another clip, other
logits; the same request twice, the same), beside an image-less text; each
bad input is a 400 naming the part and the problem before any work; a server
without an audio encoder refuses input_audio naming --mmproj."""
import base64

import numpy as np
import pytest

from audio_clips import tone, wav16, wav_float
from server_util import ROOT, Server, request

P = "/v1/chat/completions"
TEXT = ROOT / "tests" / "fixtures" / "vision" / "gemma4.f32.gguf"
MMPROJ = ROOT / "tests" / "fixtures" / "audio" / "gemma4a.mmproj.f32.gguf"
CLIPS = ROOT / "tests" / "fixtures" / "audio"


def audio_part(data: bytes, fmt="wav"):
    return {"type": "input_audio", "input_audio": {"data": base64.b64encode(data).decode(), "format": fmt}}


def chat(parts, **kw):
    body = {"messages": [{"role": "user", "content": parts}], "max_tokens": 1, "temperature": 0, "logprobs": True}
    body.update(kw)
    return body


@pytest.fixture(scope="module")
def server():
    with Server(TEXT, "--slots", 2, "--max-context", 256, "--step-tokens", 64, "--chat-template", "gemma4",
                "--mmproj", MMPROJ) as s:
        yield s


def first_logprob(res):
    assert res.status == 200, res.text
    return res.json()["choices"][0]["logprobs"]["content"][0]["logprob"]


def test_clips_reach_the_model(server):
    text = request(server, "POST", P, chat([{"type": "text", "text": "Transcribe."}]))
    one = request(server, "POST", P, chat([audio_part(wav16(tone(440))), {"type": "text", "text": "Transcribe."}]))
    assert one.status == 200, one.text
    n_text, n_one = text.json()["usage"]["prompt_tokens"], one.json()["usage"]["prompt_tokens"]
    assert n_one - n_text == 13 + 2  # 0.5 s: 13 soft tokens, <|audio> and <audio|>
    other = request(server, "POST", P, chat([audio_part(wav16(tone(3000))), {"type": "text", "text": "Transcribe."}]))
    assert first_logprob(other) != first_logprob(one)
    again = request(server, "POST", P, chat([audio_part(wav16(tone(440))), {"type": "text", "text": "Transcribe."}]))
    assert again.json()["choices"] == one.json()["choices"]
    # The other containers, as their formats say.
    for name, fmt in (("fox_16000.flac", "flac"), ("mp3_24000.mp3", "mp3"), ("stereo_44100.ogg", "ogg")):
        res = request(server, "POST", P, chat([audio_part((CLIPS / name).read_bytes(), fmt)]))
        assert res.status == 200, (name, res.text)


def test_long_clip_is_encoded_in_30_s_chunks():
    # 31 s: 750 + 25 soft tokens in one span each (docs/audio.md "Long clips"),
    # so the 751-token step still holds it; the repeat reuses every chunk.
    with Server(TEXT, "--slots", 1, "--max-context", 1024, "--step-tokens", 64, "--chat-template", "gemma4",
                "--mmproj", MMPROJ) as s:
        text = request(s, "POST", P, chat([{"type": "text", "text": "Hi"}])).json()["usage"]["prompt_tokens"]
        body = chat([audio_part(wav16(np.tile(tone(440), 62))), {"type": "text", "text": "Hi"}])
        first = request(s, "POST", P, body).json()["usage"]
        assert first["prompt_tokens"] - text == 775 + 2
        again = request(s, "POST", P, body).json()["usage"]
        assert again["prompt_tokens_details"]["cached_tokens"] == first["prompt_tokens"] - 1


def error_of(server, parts):
    res = request(server, "POST", P, chat(parts))
    assert res.status == 400, res.text
    return res.json()["error"]


def test_bad_audio_is_a_named_400(server):
    ok = wav16(tone(440))
    e = error_of(server, [audio_part(ok, "aac")])
    assert e["code"] == "invalid_audio_format" and e["param"] == "messages[0].content[0].input_audio.format"
    e = error_of(server, [audio_part(ok, "mp3")])
    assert e["code"] == "invalid_audio" and "not the declared format" in e["message"]
    e = error_of(server, [{"type": "input_audio", "input_audio": {"data": "@@@", "format": "wav"}}])
    assert e["code"] == "invalid_base64"
    e = error_of(server, [{"type": "input_audio", "input_audio": {"format": "wav"}}])
    assert e["code"] == "missing_required_parameter"
    e = error_of(server, [audio_part(ok[:30])])
    assert e["code"] == "invalid_audio"
    e = error_of(server, [audio_part(b"\x1aE\xdf\xa3" + bytes(64), "wav")])
    assert e["code"] == "invalid_audio" and "WebM" in e["message"]
    e = error_of(server, [audio_part(ok), audio_part(wav16(np.zeros(1000 * 601), 1000))])
    assert e["code"] == "audio_too_long" and e["param"] == "messages[0].content[1].input_audio"
    # NaN samples in a float WAV: refused by name (they used to reach the
    # model as NaN logits: a 500, and a poisoned prompt cache after it).
    nan = tone(440)
    nan[100:200] = np.nan
    e = error_of(server, [audio_part(wav_float(nan))])
    assert e["code"] == "invalid_audio" and "sample 100 of 8000 (at 0.00625 s) is NaN" in e["message"], e
    # Too short for a soft token (1 sample; 10 ms): named, with the shortest taken.
    for n in (1, 160):
        e = error_of(server, [audio_part(wav16(tone(440)[:n]))])
        assert e["code"] == "invalid_audio" and "too short for one soft token" in e["message"], e
        assert "send at least 10.0625 ms" in e["message"], e
    # The server raised its step to hold a 30 s clip's 750 tokens beside both slots.
    assert any("step tokens raised from 64 to 751" in line for line in server.log)


def test_server_without_audio_encoder_refuses_audio():
    with Server(TEXT, "--slots", 1, "--max-context", 128, "--chat-template", "gemma4") as s:
        e = error_of(s, [audio_part(wav16(tone(440)))])
        assert e["code"] == "audio_unsupported" and "--mmproj" in e["message"]
