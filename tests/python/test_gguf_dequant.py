"""Compares kvshare's reference dequantizer with the PyPI `gguf` package
(`gguf.quants.dequantize`), bit-exact float32 equality:

- random blocks of every weight type kvshare supports, written to a GGUF file
  by gguf's own GGUFWriter: raw random bytes with finite fp16 scale fields of
  any magnitude (zero, subnormal, up to 65504, both signs), plus blocks that
  gguf.quants.quantize makes from normal floats where gguf can quantize the
  type (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, BF16);
- the real model file: at least one tensor of every ggml type in it (several
  per type, and the first rows of token_embd);
- the reader's type table (names, block sizes and bytes of every ggml type id)
  against gguf's GGML_QUANT_SIZES, and gguf-written tensors of types kvshare
  does not compute with (Q8_K, ggml's activation format): read, then
  refused with an error naming the tensor and the type.

gguf-py has no dequantizer for Q1_0 and Q2_0 (nor Q2_0 in its type table):
tests/quant_test.cc checks those against ggml's formulas on hand-built
blocks.

Needs: pip install gguf numpy pytest; the gguf_dequant_dump binary
(KVSHARE_DEQUANT_DUMP, or build/tests/gguf_dequant_dump); the real-model
tests also need the model (scripts/fetch_model.py). Skips cleanly when any of
these is missing.
"""
import os
import subprocess
import tempfile
import warnings
from collections import defaultdict
from pathlib import Path

import pytest

np = pytest.importorskip("numpy")
gguf = pytest.importorskip("gguf")

ROOT = Path(os.environ.get("KVSHARE_SOURCE_DIR", Path(__file__).resolve().parents[2]))
from default_model import DEFAULT_MODEL as MODEL  # noqa: E402
DUMP = Path(os.environ.get("KVSHARE_DEQUANT_DUMP", ROOT / "build" / "tests" / "gguf_dequant_dump"))
PER_TYPE = 3          # tensors compared per type
MAX_ROWS = 4096       # rows compared per tensor (token_embd has 262144)

if not DUMP.is_file():
    pytest.skip(f"{DUMP} absent; build the project first", allow_module_level=True)

Q = gguf.GGMLQuantizationType

# Weight types kvshare computes with, and the byte offsets of each block's
# fp16 scale fields (d, and m / dmin where the type has one).
FP16_FIELDS = {
    Q.Q4_0: [0], Q.Q4_1: [0, 2], Q.Q5_0: [0], Q.Q5_1: [0, 2], Q.Q8_0: [0],
    Q.Q4_K: [0, 2], Q.Q5_K: [0, 2], Q.Q6_K: [208],
    Q.Q2_K: [80, 82], Q.Q3_K: [108], Q.IQ4_NL: [0], Q.IQ4_XS: [0], Q.TQ1_0: [52], Q.TQ2_0: [64],
    Q.MXFP4: [],  # its E8M0 scale byte takes every value
    Q.NVFP4: [],  # so do its four UE4M3 sub-block scales
    Q.IQ2_XXS: [0], Q.IQ2_XS: [0], Q.IQ2_S: [0], Q.IQ3_XXS: [0], Q.IQ3_S: [0], Q.IQ1_S: [0],
    Q.IQ1_M: [],  # its fp16 d is spread over four nibbles (_random_rows)
}
# IQ1_M's d: the top nibble of each of the four u16 scale words at byte 48.
IQ1_M_SCALES = 48
FLOAT_TYPES = {Q.F32: (np.uint32, 0x7F800000), Q.F16: (np.uint16, 0x7C00), Q.BF16: (np.uint16, 0x7F80)}
QUANTIZABLE = [Q.Q4_0, Q.Q4_1, Q.Q5_0, Q.Q5_1, Q.Q8_0, Q.BF16]
ROWS, BLOCKS_PER_ROW = 64, 3


def _finite(bits, exp_mask):
    """Random float bit patterns made finite: an all-ones exponent loses its top bit."""
    top = exp_mask & ~(exp_mask >> 1)
    bits = bits.copy()
    bits[(bits & exp_mask) == exp_mask] &= ~np.asarray(top, dtype=bits.dtype)
    return bits


def _random_rows(qtype, rng):
    """ROWS rows of BLOCKS_PER_ROW random blocks, as uint8 [ROWS, row_bytes]."""
    block, size = gguf.GGML_QUANT_SIZES[qtype]
    if qtype in FLOAT_TYPES:
        dt, exp_mask = FLOAT_TYPES[qtype]
        n = ROWS * BLOCKS_PER_ROW * 32
        bits = rng.integers(0, np.iinfo(dt).max, size=n, dtype=dt, endpoint=True)
        return _finite(bits, exp_mask).view(np.uint8).reshape(ROWS, -1)
    nb = ROWS * BLOCKS_PER_ROW
    raw = rng.integers(0, 256, size=(nb, size), dtype=np.uint8)
    for off in FP16_FIELDS[qtype]:
        h = _finite(rng.integers(0, 0xFFFF, size=nb, dtype=np.uint16, endpoint=True), 0x7C00)
        raw[:, off:off + 2] = h.view(np.uint8).reshape(nb, 2)
    if qtype == Q.IQ1_M:
        h = _finite(rng.integers(0, 0xFFFF, size=nb, dtype=np.uint16, endpoint=True), 0x7C00)
        words = raw[:, IQ1_M_SCALES:IQ1_M_SCALES + 8].copy().view(np.uint16)
        for k in range(4):
            words[:, k] = (words[:, k] & 0x0FFF) | (((h >> (4 * k)) & 0xF) << 12)
        raw[:, IQ1_M_SCALES:IQ1_M_SCALES + 8] = words.view(np.uint8)
    return raw.reshape(ROWS, -1)


def _quantized_rows(qtype, rng):
    block, _ = gguf.GGML_QUANT_SIZES[qtype]
    x = rng.standard_normal((ROWS, BLOCKS_PER_ROW * block)).astype(np.float32)
    x[:, ::7] *= 40.0  # outliers: blocks with a wide range
    return gguf.quants.quantize(x, qtype)


def _dump(path, name):
    with tempfile.TemporaryDirectory() as d:
        out = Path(d) / "t.f32"
        subprocess.run([str(DUMP), str(path), name, str(out), str(MAX_ROWS)], check=True)
        return np.fromfile(out, dtype="<f4")


def _assert_bit_equal(ours, ref):
    assert ours.shape == ref.shape
    diff = np.flatnonzero(ours.view(np.uint32) != ref.view(np.uint32))
    assert diff.size == 0, (
        f"{diff.size} of {ours.size} elements differ; first at {diff[0]}: "
        f"ours {ours.ravel()[diff[0]]!r} gguf {ref.ravel()[diff[0]]!r}")


@pytest.fixture(scope="module")
def random_file(tmp_path_factory):
    """A GGUF written by gguf.GGUFWriter: random and quantized tensors per type."""
    rng = np.random.default_rng(20240516)
    path = tmp_path_factory.mktemp("dequant") / "random.gguf"
    w = gguf.GGUFWriter(str(path), "kvshare-test")
    tensors = {}
    for qtype in list(FP16_FIELDS) + list(FLOAT_TYPES):
        tensors[f"random.{qtype.name}"] = (qtype, _random_rows(qtype, rng))
    for qtype in QUANTIZABLE:
        tensors[f"quantized.{qtype.name}"] = (qtype, _quantized_rows(qtype, rng))
    for name, (qtype, rows) in tensors.items():
        w.add_tensor(name, rows, raw_dtype=qtype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path, tensors


RANDOM_IDS = [f"random.{t.name}" for t in list(FP16_FIELDS) + list(FLOAT_TYPES)] + \
             [f"quantized.{t.name}" for t in QUANTIZABLE]


@pytest.mark.filterwarnings("ignore:overflow encountered in multiply:RuntimeWarning")  # MXFP4 scales up to 2^127
@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")
@pytest.mark.parametrize("name", RANDOM_IDS)
def test_random_blocks_match_gguf(random_file, name):
    path, tensors = random_file
    qtype, rows = tensors[name]
    ref = gguf.quants.dequantize(rows, qtype).astype(np.float32).ravel()
    _assert_bit_equal(_dump(path, name), ref)


# ---- type table and types kvshare does not compute with ----
# gguf-py's GGML_QUANT_SIZES still lists Q8_1 as (32, 40), from when its d and s
# were float32; ggml-common.h's block_q8_1 is two halves + 32 int8 = 36 bytes.
STALE_IN_GGUF_PY = {"Q8_1": (32, 36)}
# Types of the llama.cpp release kvshare follows (the llama-cpp-python 0.3.36
# sdist) that gguf-py does not know yet: ggml-common.h's block_q2_0.
NEWER_THAN_GGUF_PY = {42: ("Q2_0", 64, 18)}


def _our_types():
    out = subprocess.run([str(DUMP), "--types"], check=True, capture_output=True, text=True).stdout
    rows = {}
    for line in out.splitlines():
        tid, name, block, size, supported = line.split()
        rows[int(tid)] = (name, int(block), int(size), supported == "1")
    return rows


def test_type_table_matches_gguf():
    ours = _our_types()
    theirs = {int(t.value): t for t in Q}
    supported = {name for name, _, _, s in ours.values() if s}
    for tid, facts in NEWER_THAN_GGUF_PY.items():
        if tid not in theirs:
            assert ours.pop(tid)[:3] == facts
    assert set(ours) <= set(theirs), f"ids gguf does not know: {sorted(set(ours) - set(theirs))}"
    if newer := sorted(t.name for tid, t in theirs.items() if tid not in ours):
        warnings.warn(f"the installed gguf knows types the reader does not (add them to "
                      f"kGgmlTypes in include/kvshare/gguf/gguf.h so errors can name them): {newer}")
    for tid, (name, block, size, _) in ours.items():
        t = theirs[tid]
        assert name == t.name
        assert (block, size) == STALE_IN_GGUF_PY.get(name, gguf.GGML_QUANT_SIZES[t]), name
    assert supported == {"F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q2_K", "Q3_K", "Q4_K", "Q5_K",
                         "Q6_K", "IQ1_S", "IQ1_M", "IQ2_XXS", "IQ2_XS", "IQ2_S", "IQ3_XXS", "IQ3_S", "IQ4_NL",
                         "IQ4_XS", "TQ1_0", "TQ2_0", "MXFP4", "NVFP4", "Q1_0", "Q2_0"}


@pytest.mark.parametrize("qtype", [Q.Q8_K])
def test_unsupported_type_is_read_and_refused(tmp_path, qtype):
    """A gguf-written file with such a tensor is read (sizes agree with gguf's
    writer) and refused with an error naming the tensor and the type."""
    block, size = gguf.GGML_QUANT_SIZES[qtype]
    rows = np.random.default_rng(1).integers(0, 256, size=(4, 256 // block * size), dtype=np.uint8)
    path = tmp_path / "t.gguf"
    w = gguf.GGUFWriter(str(path), "kvshare-test")
    w.add_tensor("blk.0.ffn_up.weight", rows, raw_dtype=qtype)
    w.add_tensor("ok.weight", np.ones((4, 32), dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    listed = subprocess.run([str(DUMP), str(path), "--list"], check=True, capture_output=True, text=True).stdout
    assert f"blk.0.ffn_up.weight {qtype.name} 256 4" in listed.splitlines()
    r = subprocess.run([str(DUMP), str(path), "blk.0.ffn_up.weight", str(tmp_path / "o.f32")],
                       capture_output=True, text=True)
    assert r.returncode == 1
    assert f"tensor 'blk.0.ffn_up.weight' has type {qtype.name}, which kvshare does not support" in r.stderr


# ---- the real model file ----
def _selected():
    if not MODEL.is_file():
        return None, [], []
    reader = gguf.GGUFReader(str(MODEL))
    by_type = defaultdict(list)
    for t in reader.tensors:
        by_type[t.tensor_type.name].append(t)
    picks = []
    for name, ts in sorted(by_type.items()):
        picks += ts[:PER_TYPE]
    return reader, picks, sorted(by_type)


READER, PICKS, TYPES = _selected()
need_model = pytest.mark.skipif(READER is None, reason=f"{MODEL} absent; run scripts/fetch_model.py")


@need_model
def test_types_present():
    assert {"F32", "Q8_0", "Q5_0", "Q4_K", "Q6_K"} <= set(TYPES), TYPES


@need_model
@pytest.mark.parametrize("tensor", PICKS, ids=[f"{t.tensor_type.name}:{t.name}" for t in PICKS])
def test_dequant_matches_gguf(tensor):
    ne0 = int(tensor.shape[0])
    data = np.asarray(tensor.data)
    rows = data.reshape(-1, data.shape[-1]) if data.ndim > 1 else data.reshape(1, -1)
    rows = rows[:MAX_ROWS]
    ref = gguf.quants.dequantize(rows, tensor.tensor_type).astype(np.float32).reshape(-1, ne0)
    ours = _dump(MODEL, tensor.name).reshape(-1, ne0)
    _assert_bit_equal(ours, ref)
