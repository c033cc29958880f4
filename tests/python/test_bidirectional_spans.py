"""bidirectional_spans (include/kvshare/attention/gqa.h, "Bidirectional spans")
through kvshare.group_query_attention, against a NumPy float64 reference that
builds the dense [S, T] mask from the rule (causal OR same span, AND the
window) and takes a plain softmax. onnxruntime has no such input
(docs/compatibility.md), so NumPy is the only peer."""
from __future__ import annotations

import numpy as np
import pytest

from peers import need

kvshare = need("kvshare")


def _dense_mask(T, positions, spans, window):
    """[S, T] bool: key j visible to the query at positions[s]."""
    j = np.arange(T)[None, :]
    p = np.asarray(positions)[:, None]
    same = np.zeros((len(positions), T), dtype=bool)
    for st, en in spans:
        same |= (st <= p) & (p < en) & (st <= j) & (j < en)
    vis = (j <= p) | same
    if window > 0:
        vis &= p - j < window
    return vis


def _reference(q, k, v, T, offsets, spans, window=0, softcap=0.0, sink=None):
    """q (B, S, N, H), k / v (B, Nkv, >= T_b, H) as float64; row b has T[b] keys,
    query s at offsets[b] + s. Returns (B, S, N, H)."""
    B, S, N, H = q.shape
    G = N // k.shape[1]
    out = np.zeros_like(q)
    for b in range(B):
        mask = _dense_mask(T[b], offsets[b] + np.arange(S), spans[b], window)
        for h in range(N):
            x = q[b, :, h] @ k[b, h // G, :T[b]].T / np.sqrt(H)
            if softcap > 0:
                x = softcap * np.tanh(x / softcap)
            m = np.where(mask, x, -np.inf).max(axis=1, keepdims=True, initial=-np.inf)
            if sink is not None:
                m = np.maximum(m, sink[h])
            m = np.where(np.isfinite(m), m, 0.0)  # a query that sees no key outputs zeros
            e = np.where(mask, np.exp(x - m), 0.0)
            den = e.sum(axis=1, keepdims=True) + (np.exp(sink[h] - m) if sink is not None else 0.0)
            out[b, :, h] = (e / np.where(den > 0, den, 1.0)) @ v[b, h // G, :T[b]]
    return out


def _bnsh(x, n_kv):
    B, S, D = x.shape
    return np.asarray(x, np.float64).reshape(B, S, n_kv, D // n_kv).transpose(0, 2, 1, 3)


@pytest.mark.parametrize("n,n_kv,window,softcap,sink", [(4, 4, -1, 0.0, False), (8, 2, 3, 0.0, True),
                                                         (4, 1, 9, 30.0, False), (6, 2, -1, 5.0, True)])
@pytest.mark.parametrize("kernel", ["reference", "optimized"])
def test_first_prompt_ragged_rows(n, n_kv, window, softcap, sink, kernel):
    rng = np.random.default_rng(n * 100 + n_kv * 10 + max(window, 0))
    B, S, H = 3, 20, 32
    T = [20, 13, 1]
    spans = [[(0, 1), (3, 9), (9, 12), (19, 20)], [(5, 13)], [(0, 1)]]
    q = rng.standard_normal((B, S, n * H)).astype(np.float32)
    k = rng.standard_normal((B, S, n_kv * H)).astype(np.float32)
    v = rng.standard_normal((B, S, n_kv * H)).astype(np.float32)
    head_sink = rng.standard_normal(n).astype(np.float32) if sink else None
    res = kvshare.group_query_attention(q, k, v, seqlens_k=[t - 1 for t in T], total_sequence_length=S,
                                        head_sink=head_sink, bidirectional_spans=spans, num_heads=n,
                                        kv_num_heads=n_kv, local_window_size=window, softcap=softcap,
                                        kernel=kernel, kv_block_size=3, num_threads=2)
    want = _reference(np.asarray(q, np.float64).reshape(B, S, n, H), _bnsh(k, n_kv), _bnsh(v, n_kv), T, [0] * B,
                      spans, max(window, 0), softcap, head_sink)
    np.testing.assert_allclose(res.output.reshape(B, S, n, H), want, rtol=1e-5, atol=1e-5)
    # and without spans the queries inside them differ (the spans took effect)
    plain = kvshare.group_query_attention(q, k, v, seqlens_k=[t - 1 for t in T], total_sequence_length=S,
                                          head_sink=head_sink, num_heads=n, kv_num_heads=n_kv,
                                          local_window_size=window, softcap=softcap, kernel=kernel,
                                          kv_block_size=3, num_threads=2)
    assert not np.array_equal(plain.output[0, 3], res.output[0, 3])
    np.testing.assert_array_equal(plain.output[0, 12:19], res.output[0, 12:19])  # outside every span


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_static_scatter_chunk_with_past_spans(dtype):
    """A second chunk of a prompt in static scatter mode: a span wholly in the
    earlier chunk (rows already in the cache) and one inside this chunk."""
    rng = np.random.default_rng(7)
    B, N, Nkv, H, C = 2, 4, 2, 64, 48
    wi, S = [10, 4], 12
    cache_k = rng.standard_normal((B, C, Nkv * H)).astype(dtype)
    cache_v = rng.standard_normal((B, C, Nkv * H)).astype(dtype)
    q = rng.standard_normal((B, S, N * H)).astype(dtype)
    k = rng.standard_normal((B, S, Nkv * H)).astype(dtype)
    v = rng.standard_normal((B, S, Nkv * H)).astype(dtype)
    nonpad = [wi[0] + S, wi[1] + 9]  # row 1: 9 valid new tokens, 3 padding queries
    spans = np.array([[[2, 8], [14, 22]], [[6, 13], [0, 0]]], dtype=np.int64)
    pk, pv = cache_k.copy(), cache_v.copy()
    res = kvshare.group_query_attention(q, k, v, write_indices=np.array(wi, np.int64),
                                        nonpad_kv_seqlen=np.array(nonpad, np.int64), bidirectional_spans=spans,
                                        present_key=pk, present_value=pv, num_heads=N, kv_num_heads=Nkv)
    full_k, full_v = cache_k.astype(np.float64), cache_v.astype(np.float64)
    for b in range(B):
        n = nonpad[b] - wi[b]
        full_k[b, wi[b]:nonpad[b]] = k[b, :n]
        full_v[b, wi[b]:nonpad[b]] = v[b, :n]
    row_spans = [[(int(s), int(e)) for s, e in r if e > s] for r in spans]
    want = _reference(np.asarray(q, np.float64).reshape(B, S, N, H), _bnsh(full_k, Nkv), _bnsh(full_v, Nkv), nonpad,
                      wi, row_spans)
    got = res.output.astype(np.float64).reshape(B, S, N, H)
    tol = 1e-5 if dtype == np.float32 else 1e-2
    np.testing.assert_allclose(got[0], want[0], rtol=tol, atol=tol)
    np.testing.assert_allclose(got[1, :9], want[1, :9], rtol=tol, atol=tol)
    assert not got[1, 9:].any()  # padding queries


def test_bad_spans_name_the_row_and_pair():
    rng = np.random.default_rng(0)
    q = rng.standard_normal((1, 6, 64)).astype(np.float32)
    k = v = rng.standard_normal((1, 6, 32)).astype(np.float32)
    kw = dict(seqlens_k=[5], total_sequence_length=6, num_heads=2, kv_num_heads=1)
    with pytest.raises(kvshare.Error, match=r"bidirectional_spans\[0, 1\] = \[2, 4\) starts before the previous"):
        kvshare.group_query_attention(q, k, v, bidirectional_spans=[[(1, 3), (2, 4)]], **kw)
    with pytest.raises(kvshare.Error, match=r"must lie in row 0's keys \[0, 6\)"):
        kvshare.group_query_attention(q, k, v, bidirectional_spans=[[(4, 7)]], **kw)
    with pytest.raises(kvshare.Error, match=r"needs causal = 1"):
        kvshare.group_query_attention(q, k, v, bidirectional_spans=[[(1, 3)]], causal=0, **kw)
    with pytest.raises(kvshare.Error, match=r"must be int64, got int32"):
        kvshare.group_query_attention(q, k, v, bidirectional_spans=np.array([[[1, 3]]], np.int32), **kw)
    assert kvshare.detect_kv_mode(q, k, v, bidirectional_spans=[[(1, 3)]], **kw) == "append"


def test_ort_needs_a_dense_bias_for_the_same_mask():
    """onnxruntime's GroupQueryAttention has no spans input; the same visibility
    there is causal = 0 plus an additive (B, 1, S, T) bias that hides every key
    the rule hides (causal, window and spans folded in). Both give one result."""
    need("onnxruntime")
    from peers import ort_gqa
    rng = np.random.default_rng(3)
    B, S, N, Nkv, H, W = 2, 16, 4, 2, 32, 5
    spans = [[(2, 9), (9, 10), (12, 16)], [(0, 4), (6, 13)]]
    q = rng.standard_normal((B, S, N * H)).astype(np.float32)
    k = rng.standard_normal((B, S, Nkv * H)).astype(np.float32)
    v = rng.standard_normal((B, S, Nkv * H)).astype(np.float32)
    ours = kvshare.group_query_attention(q, k, v, seqlens_k=[S - 1] * B, total_sequence_length=S,
                                         bidirectional_spans=spans, num_heads=N, kv_num_heads=Nkv,
                                         local_window_size=W).output
    bias = np.stack([np.where(_dense_mask(S, np.arange(S), spans[b], W), 0.0, -1e30) for b in range(B)])
    feeds = dict(query=q, key=k, value=v, seqlens_k=np.full(B, S - 1, np.int32),
                 total_sequence_length=np.array(S, np.int32), attention_bias=bias[:, None].astype(np.float32))
    theirs = ort_gqa(feeds, dict(num_heads=N, kv_num_heads=Nkv, causal=0), outputs=("output",))["output"]
    np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-5)
