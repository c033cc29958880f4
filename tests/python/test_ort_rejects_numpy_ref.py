"""Cases kvshare supports and onnxruntime rejects (or cannot express): compared with
the plain NumPy reference in peers.py instead, and the rejection itself is checked,
so this file notices when onnxruntime starts supporting a case.

- omitted key/value with a past (borrowed KV, ORT issue #28318): ORT reads the
  query as packed QKV and fails on the head size;
- batch > 1 static scatter with right-padded query rows and RoPE: ONNX Attention
  aligns the queries bottom-right (offset nonpad_kv_seqlen - S) and has no RoPE,
  so a right-padded chunk cannot be expressed; and the read-only scatter
  form of KV-shared layers, which has no ONNX counterpart.
"""
from __future__ import annotations

import itertools

import numpy as np
import pytest

from peers import NP_DTYPE, apply_rope, assert_close, need, ort_gqa, reference_attention, rope_cache

kvshare = need("kvshare")
need("onnxruntime")
need("onnx")


def _bsnh(x, heads):
    B, S, D = x.shape
    return np.asarray(x, np.float64).reshape(B, S, heads, D // heads)


@pytest.mark.parametrize("dtype,S,rotary", list(itertools.product(["float32", "float16"], [1, 24], [False, True])))
def test_borrowed_omitted_kv_vs_numpy_ort_rejects(dtype, S, rotary):
    rng = np.random.default_rng(S + 2 * rotary)
    dt = NP_DTYPE[dtype]
    B, N, Nkv, H, P = 2, 16, 2, 64, 40
    total = np.array([P - 3, 30]) if S == 1 else np.array([S, S])
    tsl = P if S == 1 else S
    q = (rng.standard_normal((B, S, N * H)) * 2).astype(dt)
    pk = rng.standard_normal((B, Nkv, P, H)).astype(dt)
    pv = rng.standard_normal((B, Nkv, P, H)).astype(dt)
    kw = dict(seqlens_k=(total - 1).astype(np.int32), total_sequence_length=np.array(tsl, np.int32),
              num_heads=N, kv_num_heads=Nkv)
    qr = _bsnh(q, N)
    if rotary:
        cos, sin = rope_cache(P + 8, H, dt)
        kw.update(cos_cache=cos, sin_cache=sin, do_rotary=1)
        off = total - S if S != tsl else np.zeros(B, int)
        qr = apply_rope(qr, (off[:, None] + np.arange(S)[None, :])[:, :, None], cos, sin, False)
    assert kvshare.detect_kv_mode(q, past_key=pk, past_value=pv, **kw) == "borrowed_omitted_kv"
    ours = kvshare.group_query_attention(q, past_key=pk, past_value=pv, **kw)
    want = reference_attention(qr, pk, pv, total, total - S if S != tsl else np.zeros(B, int))
    assert_close(ours.output, want.reshape(B, S, N * H), dtype, "output vs NumPy")
    # Same math as the empty-K/V form, which test_gqa_ort.py checks against ORT.
    empty = np.zeros((B, 0, Nkv * H), dt)
    np.testing.assert_array_equal(ours.output,
                                  kvshare.group_query_attention(q, empty, empty, pk, pv, **kw).output)
    attrs = {k: v for k, v in kw.items() if k in ("num_heads", "kv_num_heads", "do_rotary")}
    feeds = {k: v for k, v in kw.items() if k not in attrs}
    with pytest.raises(Exception, match="head_size|packed|dimension"):
        ort_gqa(dict(query=q, past_key=pk, past_value=pv, **feeds), attrs)


SCATTER = list(itertools.product(["float32", "float16"], ["3d", "bnsh"], [False, True], [-1, 5]))


@pytest.mark.parametrize("dtype,layout,rotary,window", SCATTER,
                         ids=[f"{d}-{l}-{'rope' if r else 'norope'}-W{w}" for d, l, r, w in SCATTER])
def test_static_scatter_padded_queries_vs_numpy(dtype, layout, rotary, window):
    """B = 3 rows, ragged lengths and ragged new-token counts n_b < S (right-padded
    query rows), two steps on one linear cache, then a KV-shared layer reading the
    same cache read-only."""
    rng = np.random.default_rng(SCATTER.index((dtype, layout, rotary, window)))
    dt = NP_DTYPE[dtype]
    B, N, Nkv, H, C, S = 3, 8, 2, 32, 24, 5
    shape = (B, C, Nkv * H) if layout == "3d" else (B, Nkv, C, H)
    kc = np.zeros(shape, dt)
    vc = np.zeros(shape, dt)
    ref_k = np.zeros((B, Nkv, C, H))  # the reference cache, BNSH, rotated K
    ref_v = np.zeros((B, Nkv, C, H))
    length = np.array([0, 4, 9])
    extra = {}
    cos = sin = None
    if rotary:
        cos, sin = rope_cache(C + 4, H, dt)
        extra = dict(cos_cache=cos, sin_cache=sin, do_rotary=1)
    for n_new in ([5, 3, 1], [2, 5, 4]):
        n_new = np.array(n_new)
        q = (rng.standard_normal((B, S, N * H)) * 2).astype(dt)
        k = rng.standard_normal((B, S, Nkv * H)).astype(dt)
        v = rng.standard_normal((B, S, Nkv * H)).astype(dt)
        wi, nonpad = length.copy(), length + n_new
        res = kvshare.group_query_attention(q, k, v, write_indices=wi, nonpad_kv_seqlen=nonpad, present_key=kc,
                                            present_value=vc, num_heads=N, kv_num_heads=Nkv,
                                            local_window_size=window, **extra)
        pos = (wi[:, None] + np.arange(S)[None, :])[:, :, None]  # (B, S, 1)
        qr, kr = _bsnh(q, N), _bsnh(k, Nkv)
        if rotary:
            qr = apply_rope(qr, pos, cos, sin, False)
            kr = apply_rope(kr, pos, cos, sin, False)
        for b in range(B):
            for s in range(n_new[b]):
                ref_k[b, :, wi[b] + s] = kr[b, s]
                ref_v[b, :, wi[b] + s] = _bsnh(v, Nkv)[b, s]
        want = reference_attention(qr, ref_k, ref_v, nonpad, wi, window=window, valid_q=n_new)
        assert_close(res.output, want.reshape(B, S, N * H), dtype, "output vs NumPy")
        got_k = kc if layout == "bnsh" else kc.reshape(B, C, Nkv, H).transpose(0, 2, 1, 3)
        assert_close(got_k, ref_k, dtype, "key cache vs NumPy")  # padded rows write nothing
        # A KV-shared layer: query only, reads this step's rows, writes nothing.
        q2 = (rng.standard_normal((B, S, N * H)) * 2).astype(dt)
        before = kc.copy()
        shared = kvshare.group_query_attention(q2, write_indices=wi, nonpad_kv_seqlen=nonpad, present_key=kc,
                                               present_value=vc, num_heads=N, kv_num_heads=Nkv,
                                               local_window_size=window, **extra)
        np.testing.assert_array_equal(kc, before)
        q2r = apply_rope(_bsnh(q2, N), pos, cos, sin, False) if rotary else _bsnh(q2, N)
        want2 = reference_attention(q2r, ref_k, ref_v, nonpad, wi, window=window, valid_q=n_new)
        assert_close(shared.output, want2.reshape(B, S, N * H), dtype, "read-only scatter output vs NumPy")
        length = nonpad
