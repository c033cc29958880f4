"""`POST /v1/audio/translations` (multipart: file, model, prompt,
response_format json | text | verbose_json | srt | vtt, temperature) on the
tiny Gemma 4 E-style text model of tests/fixtures/vision/ with the gemma4a
mmproj of tests/fixtures/audio/, through the openai SDK's
`audio.translations.create`: the formats carry the English part of what the
model answers to the clip, the caller's prompt and the model card's AST
instruction; fields OpenAI's translations do not have are ignored and named
(refused with --strict-openai), `stream` is refused, bad input is the
transcriptions' named 400."""
import base64

import numpy as np
import pytest

from audio_clips import tone, wav16
from server_util import ROOT, Server, post_form, request

TEXT = ROOT / "tests" / "fixtures" / "vision" / "gemma4.f32.gguf"
MMPROJ = ROOT / "tests" / "fixtures" / "audio" / "gemma4a.mmproj.f32.gguf"
PATH = "/v1/audio/translations"
# The Gemma 4 model card's AST prompt, from the clip's own language into
# English (docs/audio.md "Prompts").
AST = ("Transcribe the following speech segment in its original language, then translate it into English.\n"
       "When formatting the answer, first output the transcription in its original language, then one newline, "
       "then output the string 'English: ', then the translation in English.")
PROMPT = "Names: Ada, Grace."


def english(answer):
    """What follows the first line that starts with "English:"; else all."""
    lines = answer.split("\n")
    for i, line in enumerate(lines):
        if line.startswith("English:"):
            return "\n".join([line[len("English:"):]] + lines[i + 1:]).strip(" \t\r\n")
    return answer.strip(" \t\r\n")


def cue(text):
    return "\n".join(line for line in text.split("\n") if line.strip(" \t\r"))


def error(r):
    assert r.status == 400, r.text
    return r.json()["error"]


@pytest.fixture(scope="module")
def server():
    with Server(TEXT, "--slots", 1, "--max-context", 256, "--chat-template", "gemma4", "--mmproj", MMPROJ) as s:
        yield s


# The SDK marks translations.create deprecated (OpenAI shuts the endpoint
# down in 2027); the call is what clients of it send today.
@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_formats_with_the_openai_sdk(server):
    openai = pytest.importorskip("openai")
    clip = wav16(tone(440, 1.0))
    with openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=120) as client:
        def create(fmt):
            return client.audio.translations.create(model="x", file=("clip.wav", clip), prompt=PROMPT,
                                                    response_format=fmt, temperature=0)
        j, text, verbose, srt, vtt = (create(f) for f in ("json", "text", "verbose_json", "srt", "vtt"))
    # The answer is the English part of what a chat with the clip, the
    # prompt and the instruction generates (greedy: the same tokens).
    audio = {"type": "input_audio", "input_audio": {"data": base64.b64encode(clip).decode(), "format": "wav"}}
    chat = {"messages": [{"role": "user", "content": [audio, {"type": "text", "text": PROMPT + "\n" + AST}]}],
            "temperature": 0}
    answer = request(server, "POST", "/v1/chat/completions", chat).json()["choices"][0]["message"]["content"]
    assert j.text == english(answer) and j.text
    assert text == j.text + "\n"
    v = verbose.to_dict()
    assert v["task"] == "translate" and v["language"] == "english" and v["text"] == j.text
    assert v["duration"] == pytest.approx(1.0) and v["segments"][0]["end"] == pytest.approx(1.0)
    assert srt == "1\n00:00:00,000 --> 00:00:01,000\n" + cue(j.text) + "\n\n"
    assert vtt == "WEBVTT\n\n00:00:00.000 --> 00:00:01.000\n" + cue(j.text) + "\n\n"


def test_fields_openai_has_not_and_bad_input(server):
    clip = wav16(tone(440, 0.5))
    plain = post_form(server, PATH, {"model": "x"}, clip)
    # `language` is not a field of OpenAI's translations: ignored and named.
    r = post_form(server, PATH, {"model": "x", "language": "it", "stream": "false"}, clip)
    assert r.status == 200 and r.json()["text"] == plain.json()["text"]
    assert r.headers["x-kvshare-ignored-fields"] == "language, stream"
    # A stream would answer in another shape: refused.
    e = error(post_form(server, PATH, {"stream": "true"}, clip))
    assert e["param"] == "stream" and e["code"] == "unsupported_parameter"
    e = error(post_form(server, PATH, {"model": "x"}))
    assert e["param"] == "file" and e["code"] == "missing_required_parameter"
    e = error(request(server, "POST", PATH, {"model": "x"}))
    assert e["param"] == "file" and "multipart/form-data" in e["message"]
    e = error(post_form(server, PATH, {"response_format": "xml"}, clip))
    assert e["param"] == "response_format" and '"vtt", got "xml"' in e["message"]
    for t in ("hot", "1.5", "-0.1"):
        assert error(post_form(server, PATH, {"temperature": t}, clip))["param"] == "temperature"
    assert error(post_form(server, PATH, {}, b"not audio"))["code"] == "invalid_audio"
    assert error(post_form(server, PATH, {}, wav16(np.zeros(1000 * 601), 1000)))["code"] == "audio_too_long"


def test_strict_openai_refuses_unknown_fields():
    with Server(TEXT, "--slots", 1, "--max-context", 128, "--chat-template", "gemma4", "--mmproj", MMPROJ,
                "--strict-openai") as s:
        e = error(post_form(s, PATH, {"model": "gemma4.f32", "language": "it"}, wav16(tone(440))))
        assert e["param"] == "language" and e["code"] == "unknown_parameter"
        e = error(post_form(s, PATH, {}, wav16(tone(440))))
        assert e["param"] == "model" and e["code"] == "missing_required_parameter"


def test_without_audio_encoder_the_transcriptions_error():
    with Server(TEXT, "--slots", 1, "--max-context", 128, "--chat-template", "gemma4") as s:
        clip = wav16(tone(440))
        e = error(post_form(s, PATH, {"model": "x"}, clip))
        assert e["code"] == "audio_unsupported" and e["param"] == "file" and "--mmproj" in e["message"]
        assert e == error(post_form(s, "/v1/audio/transcriptions", {"model": "x"}, clip))
