"""Writes tests/fixtures/llamacpp_gemma3_tokenizer.json: llama.cpp's own token
ids for a few hundred strings on the default model's vocabulary (Gemma 3,
SentencePiece-style BPE by scores), with special-token parsing off and on, and
its decoding of the plain ids. tests/tokenizer_gemma_test.cc holds kvshare to
them, id for id.

llama.cpp is a peer, not a dependency: this script is run by hand, and only its
output (plain data) is kept in the tree.

  pip install llama-cpp-python    # builds llama.cpp from the sdist
  python3 tests/tools/llamacpp_gemma3_tokenizer_cases.py [MODEL]

The committed file came from llama-cpp-python 0.3.36 (llama.cpp@0c1e57098).

Left out on purpose, where kvshare follows HF / SentencePiece instead:
  - ill-formed UTF-8 (llama.cpp byte-falls-back the raw bytes; kvshare, like
    SentencePiece, reads them as U+FFFD; JSON cannot hold them anyway);
  - "</s>": llama.cpp marks it end-of-generation and CONTROL in every vocabulary
    without <|tool_response> (a PaddleOCR rule), so in Gemma 3, where it is the
    HTML tag, user-defined, its text is a token only with parse_special.
"""
import json
import random
import sys
from pathlib import Path

import llama_cpp
from llama_cpp import Llama

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "python"))
from default_model import DEFAULT_MODEL  # noqa: E402

OUT = ROOT / "tests" / "fixtures" / "llamacpp_gemma3_tokenizer.json"

FIXED = [
    "", " ", "  ", "   ", "\t", "\n", "\r\n", "\n\n", "\n\n\n", "\n" * 40, " " * 40, "\t" * 40, " \n \n", "\r\n\r\n",
    "\r", " hello", "hello ", "  hello  ", "\thello\t", "hello\n\nworld", "a  b   c    d", "x" + " " * 33 + "y",
    " \t \n\t\n ", "\u00a0nbsp\u00a0", "\u3000ideo", "\u2028\u2029", "\x00nul\x00", "\x1b[31mred\x1b[0m",
    "0", "1234567890", "3.14159", "1,000,000", "12345678901234567890123456789", "-42e+10", "2024-11-29T14:05:00Z",
    "٣٤٥", "１２３", "½ ¼ ²³", "!!!", "...", "?!?!", "—–-", "()[]{}<>", "''\"\"``", "@#$%^&*", "<<>>", "&amp;&lt;",
    "def f(x):\n    return x**2\n", "for i in range(10):\n\tprint(i)", "if (a && b || !c) { x += 1; }",
    '{"key": "value", "n": [1, 2, 3], "nested": {"a": null}}', '<html><body><div class="x">Hi</div></body></html>',
    "<table><tr><td>1</td></tr></table>", "```python\nprint('hi')\n```", "$x = \\frac{a}{b}$",
    "https://example.com/path?q=1&r=2#frag", "日本語のテキスト", "中文测试，你好世界！", "한국어 텍스트", "مرحبا بالعالم",
    "नमस्ते दुनिया", "Привет мир", "Γειά σου κόσμε", "שלום עולם", "ภาษาไทย", "Tiếng Việt có dấu", "Straße", "ﬁ ligature",
    "😀", "👍🏽", "👨‍👩‍👧‍👦", "🏳️‍🌈", "👩🏿‍💻", "🇺🇸🇯🇵", "❤️", "1️⃣", "🫠🫨", "e\u0301", "a\u0300\u0301\u0302\u0303",
    "Z̴̡̛͓a̶l̷g̸o̵", "\u200b\u200c\u200d", "\ufeffbom", "\ufffd", "\U000e0001", "\U0010ffff", "\u0378", "\ue000",
    "\U000F0000", "<start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\n", "<bos>", "<eos>", "<pad>", "<unk>",
    "<mask>", "<image_soft_token>", "<start_of_image>", "<end_of_image>", "<unused0>", "<unused99>", "[multimodal]",
    "<b>bold</b>", "<start_of_turn", "start_of_turn>", "<<start_of_turn>>", "<bos><bos>", "x<eos>y",
    "a" * 300, "supercalifragilisticexpialidocious" * 5, "ab" * 150, "The quick brown fox jumps over the lazy dog.",
    "don't won't can't", "Hello, World! How are you?",
]


def random_strings(n, seed=0):
    rng = random.Random(seed)
    alphabets = [
        lambda: chr(rng.randint(0x20, 0x7E)),
        lambda: rng.choice(" \t\n\r"),
        lambda: chr(rng.randint(0xA0, 0x24F)),
        lambda: chr(rng.randint(0x4E00, 0x9FFF)),
        lambda: chr(rng.randint(0x600, 0x6FF)),
        lambda: chr(rng.randint(0x900, 0x97F)),
        lambda: chr(rng.randint(0x1F300, 0x1FAFF)),
        lambda: chr(rng.choice([0x200D, 0xFE0F, 0x1F3FB, 0x1F3FD, 0x301, 0x20E3])),
        lambda: chr(rng.randint(0x10000, 0x10FFFF)),
        lambda: chr(rng.randint(0x300, 0x36F)),
        lambda: rng.choice(["<start_of_turn>", "<end_of_turn>", "<bos>", "\n\n", "  ", "<b>", "<eos>", "<unused7>"]),
        lambda: rng.choice(["the", " the", "ing", " and", "tion", "123", "0", "  ", "\n"]),
    ]
    out = []
    while len(out) < n:
        weights = [rng.random() for _ in alphabets]
        s = "".join(rng.choices(alphabets, weights)[0]() for _ in range(rng.choice([1, 2, 3, 5, 8, 13, 30, 80])))
        if "</s>" not in s:
            out.append(s)
    return out


def main():
    model = sys.argv[1] if len(sys.argv) > 1 else str(DEFAULT_MODEL)
    llm = Llama(model_path=model, vocab_only=True, verbose=False)
    cases = []
    for text in FIXED + random_strings(250):
        assert "</s>" not in text
        b = text.encode()
        plain = llm.tokenize(b, add_bos=False, special=False)
        special = llm.tokenize(b, add_bos=False, special=True)
        decoded = llm.detokenize(plain, special=False).decode("utf-8")
        cases.append({"text": text, "plain": plain, "special": special, "decoded": decoded})
    head = json.dumps({
        "source": f"llama-cpp-python {llama_cpp.__version__}, Llama(model, vocab_only=True)",
        "model": Path(model).name,
        "modes": {"plain": "tokenize(text, add_bos=False, special=False)",
                  "special": "tokenize(text, add_bos=False, special=True)",
                  "decoded": "detokenize(plain, special=False) as UTF-8"},
    }, ensure_ascii=False)
    rows = ",\n".join(json.dumps(c, ensure_ascii=False, separators=(",", ":")) for c in cases)
    OUT.write_text(head[:-1] + ', "cases": [\n' + rows + "\n]}\n")  # one case per line
    print(f"wrote {OUT} ({len(cases)} cases)")


if __name__ == "__main__":
    main()
