"""Where kvshare and onnxruntime disagree (docs/compatibility.md): each test pins
kvshare's behaviour (a failure) and checks onnxruntime's documented behaviour on
the same inputs (a warning when it changes: the suite runs against whatever
onnxruntime release is current, and a fix on their side must not turn CI red;
the warning says which section of docs/compatibility.md to update). Section
numbers refer to docs/compatibility.md."""
from __future__ import annotations

import contextlib
import warnings

import numpy as np
import pytest

from peers import apply_rope, assert_close, make_session, need, ort_gqa, reference_attention, rope_cache

kvshare = need("kvshare")
need("onnxruntime")
need("onnx")
from onnx import helper  # noqa: E402

RNG = np.random.default_rng(2026)


@contextlib.contextmanager
def ort_documented(section):
    """Checks of onnxruntime's documented behaviour: a mismatch warns (naming the
    docs/compatibility.md section to revisit) instead of failing."""
    try:
        yield
    except AssertionError as e:
        warnings.warn(f"onnxruntime no longer behaves as docs/compatibility.md {section} says: {e}")


def _normal(*shape, scale=1.0):
    return (RNG.standard_normal(shape) * scale).astype(np.float32)


def _bsnh(x, heads):
    B, S, D = x.shape
    return np.asarray(x, np.float64).reshape(B, S, heads, D // heads)


@pytest.mark.parametrize("qk_output", [1, 2])
def test_1_output_qk_columns_beyond_row_length_are_zero(qk_output):
    """§1. Ragged decode: row b has T_b < total_sequence_length keys. kvshare writes
    0 to output_qk[b, :, :, T_b:]; onnxruntime leaves those columns uninitialized
    (scratch memory: they change with earlier runs, and may be NaN in float16), so
    only the defined columns are compared with it."""
    B, S, N, Nkv, H, P = 3, 1, 4, 2, 16, 12
    total = np.array([12, 3, 7])
    feeds = dict(query=_normal(B, S, N * H), key=_normal(B, S, Nkv * H), value=_normal(B, S, Nkv * H),
                 past_key=_normal(B, Nkv, P, H), past_value=_normal(B, Nkv, P, H),
                 seqlens_k=(total - 1).astype(np.int32), total_sequence_length=np.array(P + S, np.int32))
    attrs = dict(num_heads=N, kv_num_heads=Nkv, qk_output=qk_output)
    ours = kvshare.group_query_attention(**feeds, **attrs).output_qk
    theirs = ort_gqa(feeds, attrs, ("output", "present_key", "present_value", "output_qk"))["output_qk"]
    for b, t in enumerate(total):
        assert not np.any(ours[b, :, :, t:]), "kvshare: columns j >= T_b are 0"
        assert_close(ours[b, :, :, :t], theirs[b, :, :, :t], "float32", "defined columns")


@pytest.mark.parametrize("ort_path", ["flash", "unfused"])
def test_2_padded_prompt_rows_with_a_window(ort_path):
    """§2. Right-padded batched prompt with a window W: padding query rows s >= T_b.
    kvshare applies its visibility rule at the row's own position p = s (keys
    p - W < j <= p, j < T_b; zeros when none is left). onnxruntime's float32 flash
    path does the same; its unfused path (float16, softcap, sinks, smooth softmax or
    qk_output, here forced with qk_output = 1, which changes no math) first caps the
    causal length at L = min(s + 1, T_b), then takes the W keys before L. Valid rows
    agree (test_gqa_ort.py); padding rows are not tokens."""
    B, S, N, Nkv, H, W = 2, 12, 4, 2, 16, 3
    total = np.array([12, 5])
    q, k, v = _normal(B, S, N * H), _normal(B, S, Nkv * H), _normal(B, S, Nkv * H)
    feeds = dict(query=q, key=k, value=v, seqlens_k=(total - 1).astype(np.int32),
                 total_sequence_length=np.array(S, np.int32))
    attrs = dict(num_heads=N, kv_num_heads=Nkv, local_window_size=W)
    if ort_path == "unfused":
        attrs["qk_output"] = 1
    ours = kvshare.group_query_attention(**feeds, **attrs).output
    outputs = ("output", "present_key", "present_value") + (("output_qk",) if ort_path == "unfused" else ())
    theirs = ort_gqa(feeds, attrs, outputs)["output"]
    kk = _bsnh(k, Nkv).transpose(0, 2, 1, 3)
    vv = _bsnh(v, Nkv).transpose(0, 2, 1, 3)
    ours_rule = reference_attention(_bsnh(q, N), kk, vv, total, [0, 0], window=W).reshape(B, S, N * H)
    assert_close(ours, ours_rule, "float32", "kvshare: window at the row's own position")
    assert not np.any(ours[1, total[1] + W - 1:]), "kvshare: padding rows past the window see no key"
    if ort_path == "flash":
        assert_close(theirs, ours, "float32", "onnxruntime flash path: the same rule")
        return
    # onnxruntime's unfused rule, row by row: keys [L - min(W, L), L), L = min(s + 1, T_b).
    with ort_documented("§2"):
        for s in range(S):
            L = min(s + 1, total[1])
            m = min(W, L)
            row = reference_attention(_bsnh(q[1:2, s:s + 1], N), kk[1:2, :, L - m:L], vv[1:2, :, L - m:L], [m],
                                      [m - 1])
            assert_close(theirs[1, s], row.reshape(N * H), "float32", f"onnxruntime unfused rule, row {s}")


def test_3_borrowed_present_copy_keeps_rows_beyond_valid_length():
    """§3. Borrowed empty K/V with a separate present buffer: kvshare's present is
    a copy of the whole past buffer (what aliasing present to past gives);
    onnxruntime copies rows [0, T_b) and zero-fills the rest."""
    B, S, N, Nkv, H, P = 2, 1, 8, 1, 32, 10
    total = np.array([10, 4])
    feeds = dict(query=_normal(B, S, N * H), key=np.zeros((B, 0, Nkv * H), np.float32),
                 value=np.zeros((B, 0, Nkv * H), np.float32), past_key=_normal(B, Nkv, P, H),
                 past_value=_normal(B, Nkv, P, H), seqlens_k=(total - 1).astype(np.int32),
                 total_sequence_length=np.array(P, np.int32))
    attrs = dict(num_heads=N, kv_num_heads=Nkv)
    ours = kvshare.group_query_attention(**feeds, **attrs)
    theirs = ort_gqa(feeds, attrs)
    np.testing.assert_array_equal(ours.present_key, feeds["past_key"])
    np.testing.assert_array_equal(theirs["present_key"][1, :, :4], feeds["past_key"][1, :, :4])
    with ort_documented("§3"):
        assert not np.any(theirs["present_key"][1, :, 4:]), "onnxruntime zero-fills rows >= T_b"
    assert_close(ours.output, theirs["output"], "float32", "output")


def test_4_first_prompt_position_ids_per_row():
    """§4. First prompt (S == total_sequence_length) with position_ids whose rows
    start at different positions: kvshare rotates row b at position_ids[b, 0] + s;
    onnxruntime uses position_ids[0, 0] + s for every row. Visible in present_key
    (attention itself only sees position differences)."""
    B, S, N, Nkv, H = 2, 6, 4, 2, 32
    cos, sin = rope_cache(64, H, np.float32)
    pos = np.array([np.arange(S), 20 + np.arange(S)], np.int64)
    k = _normal(B, S, Nkv * H)
    feeds = dict(query=_normal(B, S, N * H), key=k, value=_normal(B, S, Nkv * H),
                 seqlens_k=np.full(B, S - 1, np.int32), total_sequence_length=np.array(S, np.int32),
                 cos_cache=cos, sin_cache=sin, position_ids=pos)
    attrs = dict(num_heads=N, kv_num_heads=Nkv, do_rotary=1)
    ours = kvshare.group_query_attention(**feeds, **attrs).present_key
    theirs = ort_gqa(feeds, attrs)["present_key"]
    kb = _bsnh(k, Nkv)  # (B, S, Nkv, H)
    per_row = apply_rope(kb, pos[:, :, None], cos, sin, False).transpose(0, 2, 1, 3)
    row0_base = apply_rope(kb, np.broadcast_to(pos[0][None, :, None], (B, S, 1)), cos, sin, False) \
        .transpose(0, 2, 1, 3)
    assert_close(ours, per_row, "float32", "kvshare: position_ids[b, 0] + s")
    with ort_documented("§4"):
        assert_close(theirs, row0_base, "float32", "onnxruntime: position_ids[0, 0] + s")


def test_5_past_without_present_outputs():
    """§5. Decode with past_key/past_value given and no present outputs. kvshare
    attends over past + new without writing; onnxruntime ignores the past and reads
    T_b keys from the S-row new K/V chunk (beyond it when T_b > S)."""
    B, S, N, Nkv, H, P = 2, 1, 4, 2, 16, 8
    total = np.array([6, 8])
    q, k, v = _normal(B, S, N * H), _normal(B, S, Nkv * H), _normal(B, S, Nkv * H)
    pk, pv = _normal(B, Nkv, P, H), _normal(B, Nkv, P, H)
    feeds = dict(query=q, key=k, value=v, past_key=pk, past_value=pv, seqlens_k=(total - 1).astype(np.int32),
                 total_sequence_length=np.array(P + S, np.int32))
    attrs = dict(num_heads=N, kv_num_heads=Nkv)
    ours = kvshare.group_query_attention(**feeds, **attrs, present=False)
    assert ours.present_key is None
    with_present = kvshare.group_query_attention(**feeds, **attrs)
    np.testing.assert_array_equal(ours.output, with_present.output)
    kk = np.concatenate([pk.astype(np.float64), np.zeros((B, Nkv, S, H))], axis=2)
    vv = np.concatenate([pv.astype(np.float64), np.zeros((B, Nkv, S, H))], axis=2)
    for b in range(B):
        kk[b, :, total[b] - S:total[b]] = _bsnh(k, Nkv)[b].transpose(1, 0, 2)
        vv[b, :, total[b] - S:total[b]] = _bsnh(v, Nkv)[b].transpose(1, 0, 2)
    want = reference_attention(_bsnh(q, N), kk, vv, total, total - S).reshape(B, S, N * H)
    assert_close(ours.output, want, "float32", "kvshare: past + new")
    # onnxruntime is run only where T_b == S: with T_b > S it reads beyond the
    # S-row chunk (undefined memory), which a test must not do.
    one = dict(feeds, seqlens_k=np.zeros(B, np.int32))  # T_b == S: only the new rows exist
    new_only = reference_attention(_bsnh(q, N), _bsnh(k, Nkv).transpose(0, 2, 1, 3),
                                   _bsnh(v, Nkv).transpose(0, 2, 1, 3), [S] * B, [0] * B).reshape(B, S, N * H)
    theirs = ort_gqa(one, attrs, ("output",))["output"]
    with ort_documented("§5"):
        assert_close(theirs, new_only, "float32", "onnxruntime: new K/V only, the past ignored")
    ours_one = kvshare.group_query_attention(**one, **attrs, present=False).output
    assert_close(ours_one, new_only, "float32", "kvshare at T_b = S: the new rows only, like onnxruntime")


def test_6_static_scatter_query_alignment_vs_attention24():
    """§6. A chunk with n_b < S valid rows. kvshare's static scatter mode takes the
    queries right-padded (valid rows first, at positions write_indices[b] + s), like
    the K/V rows TensorScatter writes. ONNX Attention-24 with nonpad_kv_seqlen aligns
    the queries bottom-right (offset nonpad_kv_seqlen - S): the same result needs the
    query rows left-padded while K/V stay right-padded."""
    B, S, N, Nkv, H, C = 3, 4, 4, 2, 16, 16
    length = np.array([0, 5, 9])
    n_new = np.array([4, 2, 1])
    q, k, v = _normal(B, S, N * H), _normal(B, S, Nkv * H), _normal(B, S, Nkv * H)
    cache_k, cache_v = _normal(B, C, Nkv * H), _normal(B, C, Nkv * H)
    ours_k, ours_v = cache_k.copy(), cache_v.copy()
    res = kvshare.group_query_attention(q, k, v, write_indices=length, nonpad_kv_seqlen=length + n_new,
                                        present_key=ours_k, present_value=ours_v, num_heads=N, kv_num_heads=Nkv)
    nodes = [helper.make_node("TensorScatter", ["kc", "k", "wi"], ["kc2"], axis=-2),
             helper.make_node("TensorScatter", ["vc", "v", "wi"], ["vc2"], axis=-2),
             helper.make_node("Attention", ["q", "kc2", "vc2", "", "", "", "nonpad"], ["y"], is_causal=1,
                              q_num_heads=N, kv_num_heads=Nkv)]
    f = np.float32
    sess = make_session(nodes, {"q": f, "k": f, "v": f, "kc": f, "vc": f, "wi": np.int64, "nonpad": np.int64},
                        {"y": f, "kc2": f, "vc2": f})
    q_left = np.zeros_like(q)
    for b in range(B):
        q_left[b, S - n_new[b]:] = q[b, :n_new[b]]
    y, kc2, _ = sess.run(None, dict(q=q_left, k=k, v=v, kc=cache_k, vc=cache_v, wi=length, nonpad=length + n_new))
    for b in range(B):
        assert_close(res.output[b, :n_new[b]], y[b, S - n_new[b]:], "float32", f"row {b} valid queries")
        assert not np.any(res.output[b, n_new[b]:]), "kvshare: padding query rows give zeros"
        np.testing.assert_array_equal(ours_k[b, :length[b] + n_new[b]], kc2[b, :length[b] + n_new[b]])
    # With the queries right-padded, Attention-24 places them at the wrong positions.
    y_right, _, _ = sess.run(None, dict(q=q, k=k, v=v, kc=cache_k, vc=cache_v, wi=length, nonpad=length + n_new))
    assert np.abs(y_right[1, :n_new[1]] - res.output[1, :n_new[1]]).max() > 1e-3


def test_8_head_sink_with_smooth_softmax_is_rejected():
    """§8. head_sink given together with smooth_softmax = 1. kvshare rejects it
    with the message of onnxruntime's shared input check (its WebGPU / JS kernels
    set use_smooth_softmax before that check and reject too); onnxruntime's CPU
    kernel runs the check before setting the flag, so it accepts the pair and the
    sink wins (smooth_softmax changes nothing)."""
    B, S, N, Nkv, H = 2, 4, 4, 2, 16
    feeds = dict(query=_normal(B, S, N * H), key=_normal(B, S, Nkv * H), value=_normal(B, S, Nkv * H),
                 seqlens_k=np.full(B, S - 1, np.int32), total_sequence_length=np.array(S, np.int32),
                 head_sink=_normal(N, scale=2.0))
    attrs = dict(num_heads=N, kv_num_heads=Nkv, smooth_softmax=1)
    with pytest.raises(kvshare.Error, match="head_sink should not be provided when use_smooth_softmax is true"):
        kvshare.group_query_attention(**feeds, **attrs)
    sink_only = kvshare.group_query_attention(**feeds, num_heads=N, kv_num_heads=Nkv).output
    try:
        theirs = ort_gqa(feeds, attrs)["output"]
    except Exception as e:  # noqa: BLE001 (onnxruntime's own error type)
        warnings.warn(f"onnxruntime no longer behaves as docs/compatibility.md §8 says: it rejects now ({e})")
        return
    with ort_documented("§8"):
        assert_close(theirs, sink_only, "float32", "onnxruntime CPU: head_sink wins over smooth_softmax")


def test_9_seqlens_k_beyond_total_sequence_length_is_rejected():
    """§9. seqlens_k[b] + 1 > total_sequence_length, within the past buffer
    (here P = 8, total_sequence_length = 7, T_b = 8). kvshare rejects it:
    total_sequence_length is the key count that attention_bias and output_qk
    columns index, so key 7 would have no column. onnxruntime bounds seqlens_k
    by the present length max(total_sequence_length, P) and attends over T_b
    keys (what kvshare would compute), reading past the end of a bias row when
    one is given (into the next head's row here)."""
    B, S, N, Nkv, H, P = 1, 1, 2, 1, 16, 8
    pk, pv = _normal(B, Nkv, P, H), _normal(B, Nkv, P, H)
    q, k, v = _normal(B, S, N * H), _normal(B, S, Nkv * H), _normal(B, S, Nkv * H)
    feeds = dict(query=q, key=k, value=v, past_key=pk, past_value=pv, seqlens_k=np.array([7], np.int32),
                 total_sequence_length=np.array(7, np.int32))
    attrs = dict(num_heads=N, kv_num_heads=Nkv)
    with pytest.raises(kvshare.Error, match=r"seqlens_k\[0\] = 7 is out of range \[0, total_sequence_length = 7\)"):
        kvshare.group_query_attention(**feeds, **attrs)
    # The same step with total_sequence_length = T_b = 8, which both accept.
    ours = kvshare.group_query_attention(**dict(feeds, total_sequence_length=np.array(8, np.int32)), **attrs).output
    try:
        theirs = ort_gqa(feeds, attrs)["output"]
    except Exception as e:  # noqa: BLE001
        warnings.warn(f"onnxruntime no longer behaves as docs/compatibility.md §9 says: it rejects now ({e})")
        return
    with ort_documented("§9"):
        assert_close(theirs, ours, "float32", "onnxruntime: attention over T_b = 8 keys")
    # With a (1, N, 1, 7) bias, head 0's key 7 reads head 1's first bias column.
    bias = np.zeros((1, N, S, 7), np.float32)
    bias[0, 1, 0, 0] = 50.0
    theirs = ort_gqa(dict(feeds, attention_bias=bias), attrs)["output"]
    wide = np.zeros((1, N, S, 8), np.float32)
    wide[..., :7] = bias
    wide[0, 0, 0, 7] = 50.0  # what onnxruntime reads for head 0, key 7
    want = kvshare.group_query_attention(**dict(feeds, total_sequence_length=np.array(8, np.int32),
                                                attention_bias=wide), **attrs).output
    with ort_documented("§9"):
        assert_close(theirs[..., :H], want[..., :H], "float32", "onnxruntime: head 0 reads head 1's bias row")


def test_10_float16_rotated_query_is_not_rounded():
    """§10. float16 with RoPE: onnxruntime rounds the rotated query to float16
    before the scores; kvshare keeps it in float32 (the rotated K is float16 in
    both: it is the present cache). With large scores (query std 4, H = 128,
    scale 0.5) the outputs then differ by 0.015, beyond the float16 tolerance;
    each matches float64 attention over its own query to 1e-3 (the output's
    float16 rounding)."""
    rng = np.random.default_rng(5)
    B, S, N, Nkv, H = 1, 32, 4, 1, 128
    q = (rng.standard_normal((B, S, N * H)) * 4).astype(np.float16)
    k = rng.standard_normal((B, S, Nkv * H)).astype(np.float16)
    v = rng.standard_normal((B, S, Nkv * H)).astype(np.float16)
    cos, sin = rope_cache(S, H, np.float16)
    feeds = dict(query=q, key=k, value=v, seqlens_k=np.array([S - 1], np.int32),
                 total_sequence_length=np.array(S, np.int32), cos_cache=cos, sin_cache=sin)
    attrs = dict(num_heads=N, kv_num_heads=Nkv, do_rotary=1, scale=0.5)
    pos = np.arange(S)[None, :, None]
    qr = apply_rope(_bsnh(q, N), pos, cos, sin, False)
    kr = apply_rope(_bsnh(k, Nkv), pos, cos, sin, False).astype(np.float16).transpose(0, 2, 1, 3)
    vv = _bsnh(v, Nkv).transpose(0, 2, 1, 3)

    def exact(query):
        return reference_attention(query, kr, vv, [S], [0], scale=0.5).reshape(B, S, N * H)

    ours = kvshare.group_query_attention(**feeds, **attrs).output
    assert_close(ours, exact(qr), "float16", "kvshare: float32 rotated query")
    assert np.abs(ours - exact(qr)).max() < 2e-3
    theirs = ort_gqa(feeds, attrs)["output"]
    with ort_documented("§10"):
        assert np.abs(theirs - exact(qr.astype(np.float16))).max() < 2e-3, "onnxruntime: float16 rotated query"
        assert np.abs(theirs.astype(np.float64) - ours).max() > 1e-2
