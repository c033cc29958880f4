"""`kvshare serve --mmproj`: OpenAI image_url parts as data: URLs, on the
default model (Gemma 3 270M: its vocabulary has Gemma 3's image markers) with
a tiny random Gemma 3 mmproj written here (SigLIP-style, 32 px, 4 soft
tokens an image; the key and tensor names of llama.cpp's converter, as
tests/vision_tiny_mmproj.h writes them). Checks: /v1/models says the model
takes images; one and several images per message and conversation reach the
model (prompt tokens, and the logits depend on the image); the same request
twice is the same, and with any --image-threads; each bad input is a 400 naming the problem
(corrupt, unsupported, over --image-max-pixels, more than the context holds); a server
without --mmproj refuses images naming the flag."""
import base64
import shutil
import struct
import zlib

import numpy as np
import pytest

from server_util import ROOT, Server, need_default_model, request

gguf = pytest.importorskip("gguf")

P = "/v1/chat/completions"
TEXT_EMBD = 640  # Gemma 3 270M
SOFT_TOKENS = 4  # (side / pool)^2 with side 8, pool 4


def write_mmproj(path, seed=1, side=8, patch=4, d=16, ff=32, heads=2, text=TEXT_EMBD):
    rng = np.random.default_rng(seed)

    def rnd(shape, scale, mean=0.0):  # numpy shape: GGUF ne reversed
        return (mean + scale * rng.standard_normal(shape)).astype(np.float32)

    w = gguf.GGUFWriter(str(path), "clip")
    w.add_string("general.type", "mmproj")
    w.add_bool("clip.has_vision_encoder", True)
    w.add_string("clip.projector_type", "gemma3")
    w.add_float32("clip.vision.attention.layer_norm_epsilon", 1e-6)
    w.add_bool("clip.use_gelu", True)
    w.add_uint32("clip.vision.image_size", side * patch)
    w.add_uint32("clip.vision.patch_size", patch)
    w.add_uint32("clip.vision.attention.head_count", heads)
    w.add_uint32("clip.vision.block_count", 1)
    w.add_array("clip.vision.image_mean", [0.5, 0.5, 0.5])
    w.add_array("clip.vision.image_std", [0.5, 0.5, 0.5])
    w.add_tensor("v.patch_embd.weight", rnd((d, 3, patch, patch), 1 / np.sqrt(3 * patch * patch)))
    w.add_tensor("v.patch_embd.bias", rnd((d,), 0.1))
    w.add_tensor("v.position_embd.weight", rnd((side * side, d), 0.5))
    p = "v.blk.0."
    w.add_tensor(p + "ln1.weight", rnd((d,), 0.1, 1.0))
    w.add_tensor(p + "ln1.bias", rnd((d,), 0.1))
    for n in ("attn_q", "attn_k", "attn_v", "attn_out"):
        w.add_tensor(p + n + ".weight", rnd((d, d), 1 / np.sqrt(d)))
        w.add_tensor(p + n + ".bias", rnd((d,), 0.1))
    w.add_tensor(p + "ln2.weight", rnd((d,), 0.1, 1.0))
    w.add_tensor(p + "ln2.bias", rnd((d,), 0.1))
    w.add_tensor(p + "ffn_up.weight", rnd((ff, d), 1 / np.sqrt(d)))
    w.add_tensor(p + "ffn_up.bias", rnd((ff,), 0.1))
    w.add_tensor(p + "ffn_down.weight", rnd((d, ff), 1 / np.sqrt(ff)))
    w.add_tensor(p + "ffn_down.bias", rnd((d,), 0.1))
    w.add_tensor("v.post_ln.weight", rnd((d,), 0.1, 1.0))
    w.add_tensor("v.post_ln.bias", rnd((d,), 0.1))
    w.add_tensor("mm.soft_emb_norm.weight", rnd((d,), 0.1, 1.0))
    w.add_tensor("mm.input_projection.weight", rnd((d, text), 1 / np.sqrt(d)))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def png(width, height, seed):
    """An RGB PNG of random pixels (zlib and struct only)."""
    px = np.random.default_rng(seed).integers(0, 256, (height, width, 3), dtype=np.uint8)
    raw = b"".join(b"\x00" + px[y].tobytes() for y in range(height))

    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)) +
            chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))


def data_url(data, mime="image/png"):
    return f"data:{mime};base64," + base64.b64encode(data).decode()


def image_part(url):
    return {"type": "image_url", "image_url": {"url": url}}


def chat(content, **extra):
    return {"messages": [{"role": "user", "content": content}], "max_tokens": 3, "temperature": 0,
            "logprobs": True, "top_logprobs": 1, **extra}


@pytest.fixture(scope="module")
def mmproj(tmp_path_factory):
    path = tmp_path_factory.mktemp("mmproj") / "tiny-gemma3-mmproj.gguf"
    write_mmproj(path)
    return path


@pytest.fixture(scope="module")
def server(mmproj):
    with Server(need_default_model(), "--slots", 2, "--max-context", 256, "--step-tokens", 64, "--chat-template",
                "gemma", "--mmproj", mmproj, "--image-max-pixels", 4096) as s:
        yield s


def first_logprob(res):
    assert res.status == 200, res.text
    return res.json()["choices"][0]["logprobs"]["content"][0]["logprob"]


def test_models_says_it_takes_images(server):
    m = request(server, "GET", "/v1/models").json()["data"][0]
    assert "multimodal" in m["capabilities"]


def test_images_reach_the_model(server):
    a, b = data_url(png(40, 30, 1)), data_url(png(20, 50, 2))
    text = request(server, "POST", P, chat([{"type": "text", "text": "Describe."}]))
    one = request(server, "POST", P, chat([{"type": "text", "text": "Describe."}, image_part(a)]))
    assert one.status == 200, one.text
    # 4 soft tokens between <start_of_image> and <end_of_image>, "\n\n" around.
    n_text, n_one = text.json()["usage"]["prompt_tokens"], one.json()["usage"]["prompt_tokens"]
    assert n_one - n_text >= SOFT_TOKENS + 2
    # The image's rows are what the model sees: another image, other logits;
    # the same request again, the same (from the prompt cache too).
    other = request(server, "POST", P, chat([{"type": "text", "text": "Describe."}, image_part(b)]))
    assert first_logprob(other) != first_logprob(one)
    again = request(server, "POST", P, chat([{"type": "text", "text": "Describe."}, image_part(a)]))
    assert again.json()["choices"] == one.json()["choices"]
    # Several images per message and per conversation.
    body = {"messages": [{"role": "user", "content": [image_part(a), {"type": "text", "text": "and"}, image_part(b)]},
                         {"role": "assistant", "content": "Two images."},
                         {"role": "user", "content": [{"type": "text", "text": "One more:"}, image_part(a)]}],
            "max_tokens": 2, "temperature": 0}
    res = request(server, "POST", P, body)
    assert res.status == 200, res.text
    assert res.json()["usage"]["prompt_tokens"] >= n_text + 3 * (SOFT_TOKENS + 2)


def test_encode_threads_do_not_change_the_result(server, mmproj):
    """--image-threads sizes the encoder's own pool; the rows, so the reply,
    are the same for any count (the module's server: as many as --threads)."""
    body = chat([{"type": "text", "text": "Describe."}, image_part(data_url(png(40, 30, 9)))])
    want = request(server, "POST", P, body)
    with Server(need_default_model(), "--slots", 2, "--max-context", 256, "--step-tokens", 64, "--chat-template",
                "gemma", "--mmproj", mmproj, "--image-threads", 3) as s:
        s.wait_log(r"images: gemma3 encoder from .*, 3 encode threads")
        got = request(s, "POST", P, body)
    assert got.status == 200 and got.json()["choices"] == want.json()["choices"], got.text


def check_400(res, code, part):
    assert res.status == 400, res.text
    e = res.json()["error"]
    assert e["code"] == code and part in e["message"], e


def test_bad_images_are_400s_naming_the_problem(server):
    p = "messages[0].content[1].image_url.url"
    text = {"type": "text", "text": "Describe."}
    check_400(request(server, "POST", P, chat([text, image_part("data:image/png;base64,!!!")])), "invalid_base64",
              "base64")
    check_400(request(server, "POST", P, chat([text, image_part("https://example.com/cat.png")])),
              "invalid_image_url", "data: URL")
    check_400(request(server, "POST", P, chat([text, image_part("file:///etc/passwd")])), "invalid_image_url",
              "data: URL")
    corrupt = png(16, 16, 3)[:60]
    check_400(request(server, "POST", P, chat([text, image_part(data_url(corrupt))])), "invalid_image", p)
    tiff = b"II*\x00" + b"\x00" * 64
    check_400(request(server, "POST", P, chat([text, image_part(data_url(tiff, "image/tiff"))])), "invalid_image",
              "TIFF")
    # Over --image-max-pixels (4096 here), from the header: the limit and the flag.
    check_400(request(server, "POST", P, chat([text, image_part(data_url(png(100, 50, 4)))])), "invalid_image",
              "5000 pixels is over the limit of 4096 pixels; the server's limit (kvshare serve --image-max-pixels)")
    check_400(request(server, "POST", P, chat([text, image_part(data_url(png(8, 8, 4)))], max_soft_tokens=100)),
              "invalid_value", "max_soft_tokens")
    # More images than the context holds (256 tokens; 4 soft tokens and the
    # markers an image).
    many = [text] + [image_part(data_url(png(8, 8, 5)))] * 50
    check_400(request(server, "POST", P, chat(many)), "context_length_exceeded", "images")
    # Still serving.
    assert request(server, "POST", P, chat([text, image_part(data_url(png(8, 8, 6)))])).status == 200


def test_encoder_refusals_name_the_image():
    # The tiny Gemma 4 tower's position table has 24 entries a side: a 30 x 40
    # image at 70 soft tokens needs 27 x 21 patches. The encoder's error was a
    # 400 with neither code nor param.
    vision = ROOT / "tests" / "fixtures" / "vision"
    with Server(vision / "gemma4.f32.gguf", "--slots", 1, "--max-context", 256, "--chat-template", "gemma4",
                "--mmproj", vision / "gemma4.mmproj.f32.gguf") as s:
        text = {"type": "text", "text": "Describe."}
        res = request(s, "POST", P, chat([text, image_part(data_url(png(30, 40, 7)))], max_soft_tokens=70))
        check_400(res, "invalid_image", "more per side than the position table's 24")
        assert res.json()["error"]["param"] == "messages[0].content[1].image_url.url"
        assert request(s, "POST", P, chat([text, image_part(data_url(png(8, 8, 6)))], max_soft_tokens=70)).status == 200


def test_without_mmproj_images_name_the_flag():
    with Server(need_default_model(), "--slots", 1, "--max-context", 128, "--chat-template", "gemma") as s:
        m = request(s, "GET", "/v1/models").json()["data"][0]
        assert m["capabilities"] == ["completion"]
        res = request(s, "POST", P, chat([{"type": "text", "text": "Hi"}, image_part(data_url(png(8, 8, 7)))]))
        check_400(res, "images_unsupported", "--mmproj")


def test_chat_page_attaches_images(server, tmp_path):
    """The chat page's Image button (shown since /v1/models says
    "multimodal") attaches a file as a data: URL to the next message."""
    if shutil.which("chromium") is None:
        pytest.skip("no chromium (Debian package chromium)")
    from cdp import Browser
    from test_server_chat_page import open_page, send
    path = tmp_path / "a.png"
    path.write_bytes(png(24, 24, 8))
    b = Browser()
    try:
        open_page(b, server)
        assert b.wait("!document.getElementById('attach').hidden")
        b.eval("document.getElementById('max').value = 3; document.getElementById('temp').value = 0")
        root = b.call("DOM.getDocument")["root"]["nodeId"]
        node = b.call("DOM.querySelector", nodeId=root, selector="#files")["nodeId"]
        b.call("DOM.setFileInputFiles", nodeId=node, files=[str(path)])
        assert b.wait("document.getElementById('attach').textContent === 'Image (1)'")
        send(b, "Describe.")
        assert b.wait("(document.querySelector('.msg.user') || {}).textContent") == "Describe. [1 image]"
        b.wait("(() => { const s = document.querySelector('.stats'); return s && s.textContent.includes('·'); })()")
        assert b.eval("document.querySelector('.msg.error') === null")
        server.wait_log(r"chat stream: .*output \d+ tokens")
    finally:
        b.close()
