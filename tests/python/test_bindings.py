"""The kvshare Python package itself: dtypes (float32, float16, bfloat16 as
ml_dtypes arrays or uint16 bits + bfloat16=True), errors (kvshare.Error is a
ValueError carrying the C++ message; nothing is written on error), non-contiguous
inputs, kernels and thread counts, docstrings. Checked against the NumPy reference
in peers.py, independent of onnxruntime."""
from __future__ import annotations

import numpy as np
import pytest

from peers import reference_attention, need

kvshare = need("kvshare")


def _case(dtype=np.float32, B=2, S=5, N=4, Nkv=2, H=32, seed=0):
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((B, S, N * H)).astype(dtype)
    k = rng.standard_normal((B, S, Nkv * H)).astype(dtype)
    v = rng.standard_normal((B, S, Nkv * H)).astype(dtype)
    return q, k, v, dict(seqlens_k=[S - 1] * B, total_sequence_length=S, num_heads=N, kv_num_heads=Nkv)


def _expected(q, k, v, N, Nkv):
    B, S, _ = q.shape
    H = q.shape[-1] // N
    kk = np.asarray(k, np.float64).reshape(B, S, Nkv, H).transpose(0, 2, 1, 3)
    vv = np.asarray(v, np.float64).reshape(B, S, Nkv, H).transpose(0, 2, 1, 3)
    out = reference_attention(np.asarray(q, np.float64).reshape(B, S, N, H), kk, vv, [S] * B, [0] * B)
    return out.reshape(B, S, N * H)


def test_float32_matches_numpy_reference():
    q, k, v, kw = _case()
    res = kvshare.group_query_attention(q, k, v, **kw)
    assert res.output.dtype == np.float32 and res.output.shape == q.shape
    np.testing.assert_allclose(res.output, _expected(q, k, v, 4, 2), rtol=1e-5, atol=1e-5)
    assert res.present_key.shape == (2, 2, 5, 32) and res.output_qk is None


def test_float16_matches_numpy_reference():
    q, k, v, kw = _case(np.float16)
    res = kvshare.group_query_attention(q, k, v, **kw)
    assert res.output.dtype == np.float16 and res.present_key.dtype == np.float16
    np.testing.assert_allclose(res.output.astype(np.float64), _expected(q, k, v, 4, 2), rtol=1e-2, atol=1e-2)


def _to_bf16_bits(x):
    """float32 -> bfloat16 bits (uint16), round to nearest even."""
    u = np.asarray(x, np.float32).view(np.uint32)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def _from_bf16_bits(b):
    return (b.astype(np.uint32) << 16).view(np.float32)


def test_bfloat16_as_uint16_bits():
    q, k, v, kw = _case()
    qb, kb, vb = (_to_bf16_bits(x) for x in (q, k, v))
    res = kvshare.group_query_attention(qb, kb, vb, bfloat16=True, **kw)
    assert res.output.dtype == np.uint16 and res.present_key.dtype == np.uint16
    want = _expected(_from_bf16_bits(qb), _from_bf16_bits(kb), _from_bf16_bits(vb), 4, 2)
    np.testing.assert_allclose(_from_bf16_bits(res.output), want, rtol=4e-2, atol=4e-2)  # bf16 (docs/architecture.md §8)
    np.testing.assert_array_equal(res.present_key.reshape(2, 2, 5, 32),
                                  kb.reshape(2, 5, 2, 32).transpose(0, 2, 1, 3))


def test_bfloat16_via_ml_dtypes_gives_the_same_bits():
    ml_dtypes = pytest.importorskip("ml_dtypes")
    q, k, v, kw = _case()
    qb, kb, vb = (_to_bf16_bits(x) for x in (q, k, v))
    bits = kvshare.group_query_attention(qb, kb, vb, bfloat16=True, **kw)
    typed = kvshare.group_query_attention(qb.view(ml_dtypes.bfloat16), kb.view(ml_dtypes.bfloat16),
                                          vb.view(ml_dtypes.bfloat16), **kw)
    assert typed.output.dtype == ml_dtypes.bfloat16
    np.testing.assert_array_equal(typed.output.view(np.uint16), bits.output)


def test_uint16_without_flag_is_rejected():
    q, k, v, kw = _case()
    with pytest.raises(ValueError, match="pass bfloat16=True"):
        kvshare.group_query_attention(_to_bf16_bits(q), _to_bf16_bits(k), _to_bf16_bits(v), **kw)


def test_float64_is_rejected_not_converted():
    q, k, v, kw = _case()
    with pytest.raises(kvshare.Error, match="'query' has dtype float64"):
        kvshare.group_query_attention(q.astype(np.float64), k, v, **kw)


def test_error_carries_the_cpp_message_and_is_a_value_error():
    q, k, v, kw = _case()
    kw.update(num_heads=3)
    with pytest.raises(ValueError) as err:
        kvshare.group_query_attention(q, k, v, **kw)
    assert isinstance(err.value, kvshare.Error)
    assert "num_heads must be a multiple of kv_num_heads" in str(err.value)
    _, _, _, kw = _case()
    with pytest.raises(ValueError, match=r"seqlens_k\[1\] = 9 is out of range"):
        kvshare.group_query_attention(q, k, v, **{**kw, "seqlens_k": [4, 9]})


def test_missing_total_sequence_length_with_qk_output_names_the_input():
    """The wrapper sizes output_qk from total_sequence_length; without it the op's
    own error names the input (it was a TypeError from int(None))."""
    q, k, v, kw = _case(S=1)
    kw.pop("total_sequence_length")
    with pytest.raises(kvshare.Error, match="Input 'total_sequence_length' is required"):
        kvshare.group_query_attention(q, k, v, **kw, qk_output=1)


def test_output_too_large_to_allocate_names_total_sequence_length():
    """A huge total_sequence_length sizes a present buffer no machine holds: a
    kvshare.Error naming the output and total_sequence_length, not MemoryError."""
    try:
        with open("/proc/sys/vm/overcommit_memory") as f:
            always_overcommit = f.read().strip() == "1"
    except OSError:
        always_overcommit = True
    if always_overcommit:  # a 1 TiB calloc would succeed and the op would then fill it
        pytest.skip("vm.overcommit_memory = 1 (or unknown): a 1 TiB allocation may succeed here")
    q, k, v, kw = _case(S=1)  # present (2, 2, 2**31 - 1, 32) float32: 1 TiB
    with pytest.raises(kvshare.Error, match="cannot allocate output 'present_key'.*total_sequence_length"):
        kvshare.group_query_attention(q, k, v, **{**kw, "total_sequence_length": 2**31 - 1})


def test_nothing_is_written_on_error():
    """Share-buffer call with a bad attention_bias: the buffers stay untouched."""
    q, k, v, kw = _case(S=1)
    rng = np.random.default_rng(3)
    past_k = rng.standard_normal((2, 2, 8, 32)).astype(np.float32)
    past_v = rng.standard_normal((2, 2, 8, 32)).astype(np.float32)
    before = past_k.copy(), past_v.copy()
    with pytest.raises(kvshare.Error, match="attention_bias dimension 3"):
        kvshare.group_query_attention(q, k, v, past_k, past_v, seqlens_k=[3, 5], total_sequence_length=8,
                                      attention_bias=np.zeros((1, 1, 1, 7), np.float32), present_key=past_k,
                                      present_value=past_v, num_heads=4, kv_num_heads=2)
    np.testing.assert_array_equal(past_k, before[0])
    np.testing.assert_array_equal(past_v, before[1])


def test_share_buffer_writes_in_place():
    q, k, v, _ = _case(S=1)
    rng = np.random.default_rng(4)
    past_k = rng.standard_normal((2, 2, 8, 32)).astype(np.float32)
    past_v = rng.standard_normal((2, 2, 8, 32)).astype(np.float32)
    kw = dict(seqlens_k=[3, 5], total_sequence_length=8, num_heads=4, kv_num_heads=2)
    assert kvshare.detect_kv_mode(q, k, v, past_k, past_v, present_key=past_k, present_value=past_v, **kw) == \
        "share_buffer"
    res = kvshare.group_query_attention(q, k, v, past_k, past_v, present_key=past_k, present_value=past_v, **kw)
    assert res.present_key is past_k
    np.testing.assert_array_equal(past_k[0, :, 3], k[0, 0].reshape(2, 32))
    np.testing.assert_array_equal(past_k[1, :, 5], k[1, 0].reshape(2, 32))


def test_readonly_or_strided_output_is_rejected():
    q, k, v, kw = _case(S=1)
    cache = np.zeros((2, 2, 16, 32), np.float32)
    strided = cache[:, :, ::2]
    with pytest.raises(kvshare.Error, match="'present_key' must be C-contiguous"):
        kvshare.group_query_attention(q, k, v, write_indices=np.array([0, 0]), nonpad_kv_seqlen=np.array([1, 1]),
                                      present_key=strided, present_value=strided.copy(), num_heads=4,
                                      kv_num_heads=2)
    frozen = np.zeros((2, 2, 8, 32), np.float32)
    frozen.setflags(write=False)
    with pytest.raises(kvshare.Error, match="'present_key' must be writable"):
        kvshare.group_query_attention(q, k, v, write_indices=np.array([0, 0]), nonpad_kv_seqlen=np.array([1, 1]),
                                      present_key=frozen, present_value=np.zeros_like(frozen), num_heads=4,
                                      kv_num_heads=2)


def test_non_contiguous_inputs_are_copied():
    q, k, v, kw = _case()
    big = np.zeros((2, 5, 2 * q.shape[-1]), np.float32)
    big[:, :, ::2] = q
    view = big[:, :, ::2]
    assert not view.flags.c_contiguous
    np.testing.assert_array_equal(kvshare.group_query_attention(view, k, v, **kw).output,
                                  kvshare.group_query_attention(q, k, v, **kw).output)


def test_kernels_and_threads():
    q, k, v, kw = _case(B=3, S=40, N=8, Nkv=2, H=64, seed=9)
    ref = kvshare.group_query_attention(q, k, v, kernel="reference", **kw).output
    one = kvshare.group_query_attention(q, k, v, kernel="optimized", num_threads=1, **kw).output
    two = kvshare.group_query_attention(q, k, v, kernel="optimized", num_threads=2, **kw).output
    np.testing.assert_array_equal(one, two)  # bitwise identical for any thread count
    np.testing.assert_allclose(one, ref, rtol=1e-5, atol=1e-5)
    with pytest.raises(kvshare.Error, match="kernel must be"):
        kvshare.group_query_attention(q, k, v, kernel="fast", **kw)


def test_qk_output_buffer_dtype():
    q, k, v, kw = _case()
    res = kvshare.group_query_attention(q.astype(np.float16), k.astype(np.float16), v.astype(np.float16),
                                        qk_output=2, **kw)
    assert res.output_qk.dtype == np.float16 and res.output_qk.shape == (2, 4, 5, 5)
    qk32 = np.zeros((2, 4, 5, 5), np.float32)
    res = kvshare.group_query_attention(q.astype(np.float16), k.astype(np.float16), v.astype(np.float16),
                                        qk_output=2, output_qk=qk32, **kw)
    assert res.output_qk is qk32
    np.testing.assert_allclose(qk32.sum(-1), 1.0, rtol=1e-5)  # probabilities, causal rows


def test_docstrings_give_shapes_and_dtypes():
    doc = kvshare.group_query_attention.__doc__
    for needle in ("(B, S, N*H)", "BNSH (B, N_kv, P, H)", "int32 (B,)", "bfloat16", "ValueError"):
        assert needle in doc
