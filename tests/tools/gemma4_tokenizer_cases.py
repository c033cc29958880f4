"""Writes tests/fixtures/gemma4_tokenizer.json: a small vocabulary shaped like a
Gemma 4 `tokenizer.json`, trained here with HF `tokenizers`, stored the way a
converted GGUF holds it, plus HF's own encodings and decodings of a few hundred
strings. tests/tokenizer_gemma4_test.cc holds kvshare's `gemma4`
tokenizer to them, id for id and byte for byte.

HF `tokenizers` is a peer, not a dependency: this script is run by hand and only
its output (plain data) is kept in the tree. HF's trainer breaks ties between
equally frequent pairs in hash order, so each run trains a slightly different
vocabulary; any run's output is a valid fixture (the vocabulary and every
expected output come from the same run).

  pip install tokenizers gguf
  python3 tests/tools/gemma4_tokenizer_cases.py [--check-converter]

The tokenizer (what Gemma 4's tokenizer.json is, per
HF tokenizer.json as the tokenizers library reads it, and llama.cpp's GEMMA4
pre-type):
  model          BPE with explicit merges, byte_fallback, unk "<unk>"
  normalizer     Replace(" ", "▁")
  pre_tokenizer  Split(/[^\\n]+|[\\n]+/, isolated): newline runs apart from the rest
  decoder        Sequence(Replace("▁", " "), ByteFallback, Fuse)
  post_processor "<bos> $A" (BOS on add_special_tokens)
  vocabulary     <pad>=0 <eos>=1 <bos>=2 <unk>=3 <mask>=4, then Gemma 4's special
                 tokens <|turn> ... <|"|> (5..13), <0x00>..<0xFF> (14..269), then
                 the trained pieces (first the alphabet, then one per merge).
All specials are HF special added tokens (normalized=false).

The "gguf" object of the fixture is what llama.cpp's converter writes for it:
Gemma4Model.set_vocab (conversion/gemma.py) over gguf-py's LlamaHfVocab and
SpecialVocab(load_merges=True), written here with gguf's own GGUFWriter and read
back with GGUFReader. LlamaHfVocab needs `transformers`; its rule is mirrored
below (tokens in id order, score -1000, type BYTE for "<0xNN>", CONTROL for
special ids, else NORMAL; then the seven "visible" tokens forced to
USER_DEFINED). --check-converter (needs `transformers`) also runs the real
LlamaHfVocab on the saved tokenizer.json and checks the mirror against it.

Loading (llama.cpp, and kvshare's ReadVocab): BOS is always added, and the
end-of-generation tokens <eos>, <turn|>, <|tool_response> are CONTROL (llama.cpp
ORs CONTROL into its EOG tokens; the converter wrote <|tool_response>
USER_DEFINED). The rules below use these load-time types.

Cases. "encode": {text, parse_special, add_bos, ids}.
  parse_special = true: HF `encode(text, add_special_tokens=add_bos)`, special
    tokens recognized (HF's default).
  parse_special = false: llama.cpp's rule (our EncodeOptions::parse_special =
    false): CONTROL token text is plain text, USER_DEFINED tokens are still cut
    out (leftmost, longest first). HF has no such mode, so the expected ids are
    built from HF pieces: the text is cut at USER_DEFINED token text, each
    remaining piece encoded by HF with encode_special_tokens = True.
"decode": {ids, render_special, text}.
  render_special = true: HF `decode(ids, skip_special_tokens=False)`.
  render_special = false: the same after dropping CONTROL/UNKNOWN ids (llama.cpp
    and kvshare render USER_DEFINED tokens, HF would skip them as special).
  Only id sequences whose bytes are well-formed UTF-8 are kept: for broken
  sequences HF writes one U+FFFD per byte, kvshare (Unicode's maximal-subpart
  rule) one per ill-formed subsequence.
"""
import argparse
import importlib.metadata
import json
import random
import re
import sys
import tempfile
from pathlib import Path

import gguf
from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers
from tokenizers import processors, trainers
import tokenizers

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "tests" / "fixtures" / "gemma4_tokenizer.json"

CONTROL_SPECIALS = ["<pad>", "<eos>", "<bos>", "<unk>", "<mask>"]
GEMMA4_SPECIALS = ["<|turn>", "<turn|>", "<|channel>", "<channel|>", "<|tool_call>", "<tool_call|>",
                   "<|tool_response>", "<tool_response|>", '<|"|>']
# llama.cpp's end-of-generation tokens for Gemma 4 (llama-vocab.cpp): CONTROL on load.
EOG_TOKENS = {"<eos>", "<turn|>", "<|tool_response>"}
# Gemma4Model.set_vocab's visible_tokens: forced to USER_DEFINED.
VISIBLE_TOKENS = {"<|channel>", "<channel|>", "<|tool_call>", "<tool_call|>", "<|tool_response>",
                  "<tool_response|>", '<|"|>'}
BYTE_TOKENS = [f"<0x{b:02X}>" for b in range(256)]
TRAINED_SIZE = 560       # alphabet + merges; total vocabulary = 270 + this
LIMIT_ALPHABET = 150     # rarer characters are left to byte fallback

# ---------------------------------------------------------------- training text

PARAGRAPHS = [
    "The quick brown fox jumps over the lazy dog. The dog sleeps in the sun, and the fox runs away.",
    "In the beginning there was nothing but text, and the text was tokenized into pieces.",
    "Hello, world! How are you today? I am fine, thank you. Are you there? Yes, I am here.",
    "She said: \"It's not what you think.\" He replied, 'Isn't it?' They laughed -- then left.",
    "Numbers: 0 1 2 3 4 5 6 7 8 9 10 42 100 1024 2048 65536 3.14159 2.71828 1e-5 -7 +8 50% $12.99",
    "Dates like 2024-01-15 and times like 12:30:45 appear in logs; so do versions like v1.2.3.",
    "def fibonacci(n):\n    if n <= 1:\n        return n\n    return fibonacci(n - 1) + fibonacci(n - 2)\n",
    "for (int i = 0; i < n; ++i) {\n\tsum += a[i] * b[i];\n}\nreturn sum;\n",
    "#include <stdio.h>\n\nint main(void) {\n    printf(\"hello, world\\n\");\n    return 0;\n}\n",
    "{\"name\": \"kvshare\", \"version\": \"0.1.0\", \"tags\": [\"llm\", \"gqa\"], \"ok\": true, \"n\": null}\n",
    "<html>\n  <body>\n    <div class=\"main\">Text &amp; more</div>\n  </body>\n</html>\n",
    "SELECT id, name FROM users WHERE age > 30 ORDER BY name;\n",
    "    indented with four spaces\n        and eight spaces\n\t\tand two tabs\n",
    "Line one\nLine two\n\nParagraph two\n\n\nParagraph three\n\n\n\nThe end\n",
    "Das ist ein schöner Tag. Größe, Übung, Äpfel und Straße.",
    "Le café est très bon. À bientôt, garçon! Où est la bibliothèque? Noël, naïve, façade.",
    "El niño está en la montaña. ¿Dónde está? ¡Aquí! Mañana será otro día.",
    "Привет, мир! Как дела? Это тест токенизатора. Москва и Санкт-Петербург.",
    "Γειά σου κόσμε. Η γλώσσα είναι όμορφη. Αλφα βήτα γάμμα δέλτα.",
    "你好，世界！今天天气很好。我们一起去学习中文吧。中国的历史很长。",
    "日本語のテキストです。ひらがなとカタカナ、そして漢字。東京は大きな都市です。",
    "한국어 텍스트입니다. 안녕하세요, 만나서 반갑습니다. 서울은 큰 도시입니다.",
    "مرحبا بالعالم. هذه جملة باللغة العربية. كيف حالك اليوم؟",
    "שלום עולם. זה משפט בעברית. מה שלומך היום?",
    "नमस्ते दुनिया। यह हिंदी में एक वाक्य है।",
    "สวัสดีชาวโลก นี่คือประโยคภาษาไทย",
    "Emoji: 😀 😂 🎉 👍 ❤️ 🚀 🌍 — fun! 👍🏽 👨‍👩‍👧 🇫🇷 🇯🇵",
    "Math: ∑ ∫ √ ∞ ≈ ≠ ≤ ≥ ± × ÷ π α β γ → ← ↔ ∀ ∃ ∈ ∉ ⊂ ∪ ∩",
    "Combining marks: e\u0301 a\u0300 o\u0308 n\u0303 c\u0327 and stacked z\u0335\u0321\u0317a\u0336l\u0338g\u0337o\u0334.",
    "Quotes “curly” and ‘single’, dashes – and —, ellipsis … and bullets • · ¶ § © ® ™",
    "   leading spaces, trailing spaces   \nand  double  spaces  between  words  \n",
    "git commit -m \"Fix the tokenizer\" && git push origin main\n$ ls -la /usr/local/bin | grep python3\n",
    "https://example.com/path/to/page?query=1&lang=en#section user@example.org",
    "The model writes the answer, then the user reads the answer and asks another question.",
    "Tokenization splits text into tokens; tokens become ids; ids become embeddings.",
]


def corpus():
    rng = random.Random(7)
    out = []
    for _ in range(30):
        out.extend(PARAGRAPHS)
    words = " ".join(PARAGRAPHS).split()
    for _ in range(400):  # shuffled word salad: merges that cross the usual boundaries
        out.append(" ".join(rng.choice(words) for _ in range(rng.randint(3, 12))))
    for n in range(1, 9):  # newline and whitespace runs of many lengths
        out.extend(["x" + "\n" * n + "y"] * (12 - n))
        out.extend(["a" + " " * n + "b"] * (12 - n))
    return out


# ---------------------------------------------------------------- the tokenizer

NEWLINE_SPLIT = pre_tokenizers.Split(Regex("[^\n]+|[\n]+"), behavior="isolated")


def train():
    """Trained pieces in id order (alphabet first) and the merges, on ▁-escaped text."""
    t = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True))
    t.normalizer = normalizers.Replace(" ", "▁")
    t.pre_tokenizer = NEWLINE_SPLIT
    trainer = trainers.BpeTrainer(vocab_size=TRAINED_SIZE, limit_alphabet=LIMIT_ALPHABET,
                                  min_frequency=2, show_progress=False)
    t.train_from_iterator(corpus(), trainer)
    model = json.loads(t.to_str())["model"]
    pieces = [p for p, _ in sorted(model["vocab"].items(), key=lambda kv: kv[1])]
    merges = [tuple(m.split(" ", 1)) if isinstance(m, str) else tuple(m) for m in model["merges"]]
    return pieces, merges


def build():
    pieces, merges = train()
    head = CONTROL_SPECIALS + GEMMA4_SPECIALS + BYTE_TOKENS
    clash = set(pieces) & set(head)
    assert not clash, f"trained pieces collide with special or byte tokens: {clash}"
    vocab = {p: i for i, p in enumerate(head + pieces)}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    tok.normalizer = normalizers.Replace(" ", "▁")
    tok.pre_tokenizer = NEWLINE_SPLIT
    tok.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse()])
    tok.post_processor = processors.TemplateProcessing(single="<bos> $A", pair="<bos> $A $B",
                                                       special_tokens=[("<bos>", vocab["<bos>"])])
    tok.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in CONTROL_SPECIALS + GEMMA4_SPECIALS])
    assert tok.get_vocab_size() == len(vocab), "special tokens must reuse their vocabulary ids"
    return tok


def save_hf_dir(tok, d):
    tok.save(str(d / "tokenizer.json"))
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "pad_token": "<pad>", "eos_token": "<eos>", "bos_token": "<bos>", "unk_token": "<unk>",
        "mask_token": "<mask>", "additional_special_tokens": GEMMA4_SPECIALS,
        "add_bos_token": True, "add_eos_token": False,
    }
    (d / "tokenizer_config.json").write_text(json.dumps(config, indent=1))


def converter_vocab(tok):
    """(tokens, scores, types) as LlamaHfVocab + Gemma4Model.set_vocab produce them."""
    special_ids = {tok.token_to_id(s) for s in CONTROL_SPECIALS + GEMMA4_SPECIALS}
    tokens, scores, types = [], [], []
    for i in range(tok.get_vocab_size()):
        text = tok.id_to_token(i)
        if re.fullmatch(r"<0x[0-9A-Fa-f]{2}>", text):
            t = gguf.TokenType.BYTE
        elif i in special_ids:
            t = gguf.TokenType.CONTROL
        else:
            t = gguf.TokenType.NORMAL
        if text in VISIBLE_TOKENS:
            t = gguf.TokenType.USER_DEFINED
        tokens.append(text)
        scores.append(-1000.0)
        types.append(int(t))
    return tokens, scores, types


def check_converter(d, tokens, types):
    """The mirror above against gguf-py's real LlamaHfVocab (needs transformers)."""
    vocab = gguf.LlamaHfVocab(d)
    got = [(t.decode(), int(ty)) for t, _, ty in vocab.all_tokens()]
    got = [(t, int(gguf.TokenType.USER_DEFINED) if t in VISIBLE_TOKENS else ty) for t, ty in got]
    assert got == list(zip(tokens, types)), "LlamaHfVocab disagrees with the mirrored converter rule"
    print(f"converter check: {vocab!r} agrees on all {len(got)} tokens and types")


def gguf_fields(tok, d):
    """Writes the tokenizer part of a converted GGUF (Gemma4Model.set_vocab) and reads it back."""
    tokens, scores, types = converter_vocab(tok)
    path = d / "vocab.gguf"
    w = gguf.GGUFWriter(path, "gemma4")
    w.add_tokenizer_model("gemma4")
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types(types)
    special = gguf.SpecialVocab(d, load_merges=True)
    special.add_to_gguf(w)
    w.add_add_space_prefix(False)
    w.add_add_bos_token(True)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    out = {}
    for name, field in gguf.GGUFReader(path).fields.items():
        if name.startswith("tokenizer."):
            out[name] = field.contents()
    return out, tokens, types


# ---------------------------------------------------------------- cases

UNITS = ["a", "b", "e", "h", "l", "o", "t", "s", "n", " ", " ", "  ", "   ", "\n", "\n\n", "\n\n\n", "\t",
         "\r\n", "the", "The", " the", "token", "izer", "hello", "world", ".", ",", "!", "?", "'", "\"",
         "(", ")", "{", "}", "[", "]", "<", ">", "|", "/", "=", "_", "-", "0", "1", "42", "3.14",
         "é", "ü", "ß", "ñ", "ç", "e\u0301", "\u0308", "Ω", "π", "Привет", "мир", "你好", "世界", "中文", "日本語",
         "カタカナ", "한국어", "مرحبا", "שלום", "नमस्ते", "ไทย", "😀", "🎉", "👍🏽", "👨‍👩‍👧", "🇫🇷", "❤️",
         "\U0001F980", "\u200f", "\u200d", "\ufeff", "\u00a0", "\u3000", "→", "∑", "…", "—",
         "<|turn>", "<turn|>", "<|channel>", "<|\"|>", "<bos>", "<eos>", "<|tur", "turn|>", "<0x41>", "▁"]

HAND = [
    "", " ", "  ", "   ", "a", " a", "a ", "  a", "a  ", " a b ", "hello world", "Hello world", "Hello, world!",
    "The quick brown fox jumps over the lazy dog.",
    "the the the the the", "tokenizer tokenization tokens", "aaaaaaaaaaaaaaaa", "ababababab",
    "\t", "\t\t", "\ta", "a\tb", " \t \t ", "\n", "\n\n", "\n\n\n", "\n" * 4, "\n" * 5, "\n" * 7, "\n" * 8,
    "\n" * 9, "\n" * 13, "\n" * 16, "\n" * 31, "\n" * 32, "\n" * 40, "a\nb", "a\n\nb", "a\n\n\nb", "\na", "a\n",
    "\n a \n", " \n ", "\r\n", "a\r\nb\r\n", "line one\nline two\n\nparagraph\n\n\nend\n",
    "    four spaces", "        eight spaces\n", "a" + " " * 20 + "b", " " * 33, "trailing   ", "   leading",
    "def f(x):\n    return x * 2\n", "for (int i = 0; i < n; ++i) {\n\tsum += a[i];\n}\n",
    "#include <stdio.h>\nint main(void) { return 0; }\n", "{\"a\": [1, 2, 3], \"b\": {\"c\": null}}",
    "<div class=\"x\">&lt;b&gt;</div>", "SELECT * FROM t WHERE x = 'y';", "x += 1; y -= 2; z *= 3;",
    "https://example.com/a/b?c=d&e=f#g", "user@example.org", "C:\\Users\\name\\file.txt", "a\\nb",
    "0", "42", "3.14159", "1,000,000", "-1e-10", "2024-01-15T12:30:45Z", "v1.2.3",
    "Straße", "naïve café", "Größe", "¿Dónde está el niño?", "À bientôt!", "façade",
    "Привет, мир!", "Москва", "Ωμέγα", "αβγδε",
    "你好", "你好，世界！", "中文文本和日本語のテキスト", "東京は大きな都市です。", "ひらがな", "カタカナ",
    "한국어 텍스트", "안녕하세요", "مرحبا بالعالم", "שלום עולם", "abc שלום def", "\u200fمرحبا\u200e",
    "नमस्ते", "สวัสดี", "ᚠᛇᚻ", "𝔘𝔫𝔦𝔠𝔬𝔡𝔢", "\U00020000\U0002A6D6",
    "😀", "😀😀😀", "🎉 party", "👍🏽", "👨‍👩‍👧", "🇫🇷🇯🇵", "❤️", "🦀 rust", "a😀b",
    "e\u0301", "cafe\u0301", "z\u0335\u0321\u0317a\u0336l\u0338g\u0337o\u0334", "\u0301", "o\u0308\u0304",
    "\u00a0", "a\u00a0b", "\u3000", "\ufeffBOM", "\u200b", "\ufffd", "a\x00b", "\x7f", "\x01\x02\x03",
    "▁", "▁a", "a▁b", " ▁ ", "<0x41>", "<0xE4>",
    "∑ ∫ √ ∞ ≈ ≠", "“curly” ‘quotes’ – — …", "© ® ™ § ¶",
    "<|turn>", "<turn|>", "<|turn>user\nHello!<turn|>\n<|turn>model\n", "<bos>", "<bos><bos>", "<eos>",
    "<pad><unk><mask>", "text<eos>more", "<|channel>thought<channel|>", "<|tool_call>call:f{}<tool_call|>",
    "<|tool_response>ok<tool_response|>", "<|\"|>quoted<|\"|>", "say <|\"|> and <|turn>",
    "<|tur", "<turn|", "<|turn", "turn|>", "<<|turn>>", "<|turn><|turn>", "<|turn>\n\n", " <|turn> ",
    "<start_of_turn>", "<end_of_turn>", "<|im_start|>", "<s>", "</s>",
]


def cut_user_defined(text, user_defined):
    """llama.cpp's partition for parse_special = false: (piece, id or None) in order."""
    out, start, i = [], 0, 0
    longest = sorted(user_defined, key=len, reverse=True)
    while i < len(text):
        hit = next((u for u in longest if text.startswith(u, i)), None)
        if hit is None:
            i += 1
            continue
        if i > start:
            out.append((text[start:i], None))
        out.append((hit, user_defined[hit]))
        i += len(hit)
        start = i
    if start < len(text):
        out.append((text[start:], None))
    return out


def encode_cases(tok, user_defined, rng):
    texts = list(HAND)
    for k in range(220):
        texts.append("".join(rng.choice(UNITS) for _ in range(rng.randint(1, 4 + k % 20))))
    texts.append(" ".join(PARAGRAPHS))  # one long text
    seen, cases = set(), []

    def add(text, parse_special, add_bos):
        if (text, parse_special, add_bos) in seen:
            return
        seen.add((text, parse_special, add_bos))
        if parse_special:
            tok.encode_special_tokens = False
            ids = tok.encode(text, add_special_tokens=add_bos).ids
        else:
            tok.encode_special_tokens = True
            ids = [tok.token_to_id("<bos>")] if add_bos else []
            for piece, uid in cut_user_defined(text, user_defined):
                ids += [uid] if uid is not None else tok.encode(piece, add_special_tokens=False).ids
            tok.encode_special_tokens = False
        cases.append({"text": text, "parse_special": parse_special, "add_bos": add_bos, "ids": ids})

    for i, text in enumerate(texts):
        add(text, True, i % 3 == 0)
        if "<" in text or i % 5 == 0:
            add(text, False, i % 2 == 0)
    return cases


def decode_cases(tok, types, encoded, rng):
    n = tok.get_vocab_size()
    hidden = {i for i in range(n) if types[i] in (int(gguf.TokenType.CONTROL), int(gguf.TokenType.UNKNOWN))}
    normal = [i for i in range(n) if types[i] == int(gguf.TokenType.NORMAL)]
    specials = [i for i in range(n) if types[i] in (int(gguf.TokenType.CONTROL), int(gguf.TokenType.USER_DEFINED))]
    byte_id = lambda b: tok.token_to_id(f"<0x{b:02X}>")

    def token_bytes(i):
        t = tok.id_to_token(i)
        if types[i] == int(gguf.TokenType.BYTE):
            return bytes([int(t[3:5], 16)])
        return t.replace("▁", " ").encode()

    seqs = [c["ids"] for c in encoded[::4] if c["ids"]]
    seqs += [[], [byte_id(0x41)], [byte_id(0xC3), byte_id(0xA9)], [byte_id(b) for b in "😀".encode()]]
    for _ in range(120):  # random NORMAL pieces, specials and whole characters spelled as bytes
        seq = []
        for _ in range(rng.randint(1, 14)):
            r = rng.random()
            if r < 0.6:
                seq.append(rng.choice(normal))
            elif r < 0.75:
                seq.append(rng.choice(specials))
            else:
                seq += [byte_id(b) for b in rng.choice("é你😀ß\n ab🇫🇷\u0301").encode()]
        seqs.append(seq)
    cases = []
    for seq in seqs:
        try:
            b"".join(token_bytes(i) for i in seq).decode("utf-8")
        except UnicodeDecodeError:
            continue
        for render in (True, False):
            kept = seq if render else [i for i in seq if i not in hidden]
            cases.append({"ids": seq, "render_special": render,
                          "text": tok.decode(kept, skip_special_tokens=False)})
    return cases


def dumps(fixture):
    """One line per case and per long array, so the file stays diffable."""
    c = lambda v: json.dumps(v, ensure_ascii=False, separators=(",", ":"))
    lines = ["{"]
    lines += [f" {json.dumps(k)}: {c(v)}," for k, v in fixture.items() if k not in ("gguf", "encode", "decode")]
    lines.append(' "gguf": {')
    items = list(fixture["gguf"].items())
    lines += [f"  {json.dumps(k)}: {c(v)}" + ("," if i + 1 < len(items) else "") for i, (k, v) in enumerate(items)]
    lines.append(" },")
    for key in ("encode", "decode"):
        lines.append(f' "{key}": [')
        cases = fixture[key]
        lines += ["  " + c(v) + ("," if i + 1 < len(cases) else "") for i, v in enumerate(cases)]
        lines.append(" ]," if key == "encode" else " ]")
    return "\n".join(lines + ["}"]) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--check-converter", action="store_true",
                    help="also run gguf-py's LlamaHfVocab (needs transformers) on the tokenizer")
    ap.add_argument("--save-tokenizer", type=Path, help="also keep tokenizer.json and its config here")
    args = ap.parse_args()

    tok = build()
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(args.save_tokenizer) if args.save_tokenizer else Path(tmp)
        d.mkdir(parents=True, exist_ok=True)
        save_hf_dir(tok, d)
        fields, tokens, types = gguf_fields(tok, d)
        if args.check_converter:
            check_converter(d, tokens, types)
        tok = Tokenizer.from_file(str(d / "tokenizer.json"))  # exactly what was saved

    types = [int(gguf.TokenType.CONTROL) if t in EOG_TOKENS else ty for t, ty in zip(tokens, types)]  # on load
    user_defined = {t: i for i, t in enumerate(tokens) if types[i] == int(gguf.TokenType.USER_DEFINED)}
    rng = random.Random(2024)
    encoded = encode_cases(tok, user_defined, rng)
    decoded = decode_cases(tok, types, encoded, rng)
    fixture = {
        "source": "tests/tools/gemma4_tokenizer_cases.py (HF tokenizers; see its docstring for the rules)",
        "tokenizers_version": tokenizers.__version__,
        "gguf_version": importlib.metadata.version("gguf"),
        "gguf": fields,
        "encode": encoded,
        "decode": decoded,
    }
    OUT.write_text(dumps(fixture), encoding="utf-8")
    print(f"{OUT.relative_to(ROOT)}: {len(tokens)} tokens, {len(fields['tokenizer.ggml.merges'])} merges, "
          f"{len(encoded)} encode cases, {len(decoded)} decode cases")


if __name__ == "__main__":
    sys.exit(main())
