"""The cache API from Python: create, reserve / commit / rewind / reset, memory
reports, zero-copy buffer views, and attend() on full, sliding (ring) and KV-shared
layers, checked step by step against the NumPy reference over the explicit history."""
from __future__ import annotations

import numpy as np
import pytest

from peers import apply_rope, need, reference_attention, rope_cache

kvshare = need("kvshare")

H, NKV, N, W = 32, 2, 4, 4


def _spec():
    sliding = kvshare.LayerSpec(type="sliding", window=W, kv_heads=NKV, head_size=H)
    full = kvshare.LayerSpec(type="full", kv_heads=NKV, head_size=H)
    # Layers 3 (sliding) and 4 (full) are KV-shared: they read layers 1 and 2.
    return kvshare.ModelKvSpec([sliding, sliding, full, sliding, full], num_kv_shared_layers=2)


def test_plan_and_memory_report_match_buffers():
    spec = _spec()
    plan = kvshare.build_layer_plan(spec)
    assert [e.owns_cache for e in plan.layers] == [True, True, True, False, False]
    assert [e.source_layer for e in plan.layers] == [0, 1, 2, 1, 2]
    cache = kvshare.KvCache(spec, max_batch=2, max_seq=32, max_step=3, dtype="float16")
    mem = cache.memory()
    est = kvshare.estimate_kv_memory(spec, max_batch=2, max_seq=32, max_step=3, dtype="float16")
    assert mem.total_bytes == est.total_bytes
    owned = 0
    for layer in range(5):
        buf = cache.layer_buffers(layer)
        if plan.layers[layer].owns_cache:
            owned += buf["key"].nbytes + buf["value"].nbytes
        assert buf["key"].dtype == np.float16
    assert owned == mem.total_bytes
    ring = W + 3 - 1
    assert cache.layer_buffers(0)["key"].shape == (2, NKV, ring, H)
    assert cache.layer_buffers(2)["key"].shape == (2, NKV, 32, H)
    assert mem.saved_by_sharing == mem.layers[3].bytes_if_owned + mem.layers[4].bytes_if_owned
    # Two owning sliding layers x (K + V) x 2 rows x N_kv x H x 2 bytes x positions saved.
    assert mem.saved_by_rings == 2 * 2 * 2 * NKV * H * 2 * (32 - ring)
    assert "saved by sharing" in str(mem)


def test_row_state_and_errors():
    cache = kvshare.KvCache(_spec(), max_batch=2, max_seq=16, max_step=3)
    assert cache.reserve(0, 3) == 0
    with pytest.raises(ValueError, match="already has 3 reserved tokens"):
        cache.reserve(0, 1)
    cache.commit_all()
    assert cache.length(0) == 3 and cache.length(1) == 0
    assert cache.reserve(1, 2) == 0
    np.testing.assert_array_equal(cache.write_indices, [3, 0])
    np.testing.assert_array_equal(cache.nonpad_kv_seqlen, [3, 2])
    cache.commit(1)
    cache.rewind(0, 1)
    assert cache.length(0) == 1
    cache.reset(1)
    assert cache.length(1) == 0
    with pytest.raises(kvshare.Error, match="max_step"):
        cache.reserve(0, 4)
    with pytest.raises(kvshare.Error):
        kvshare.KvCache(_spec(), max_batch=0, max_seq=16)
    with pytest.raises(ValueError, match="attention type"):
        kvshare.LayerSpec(type="global", kv_heads=1, head_size=16)


def test_attend_steps_match_reference_over_history():
    """Two rows with different prompt lengths, then decode steps; every layer's
    output equals the NumPy reference over the explicit (rotated) K/V history, the
    ring layer sees only its window, shared layers read their source's rows."""
    rng = np.random.default_rng(5)
    spec = _spec()
    cache = kvshare.KvCache(spec, max_batch=2, max_seq=24, max_step=3)
    cos, sin = rope_cache(32, H, np.float32)
    hist_k = {l: [[], []] for l in range(3)}  # per owning layer and row: rotated K rows (NKV, H)
    hist_v = {l: [[], []] for l in range(3)}
    steps = [(3, 2), (1, 1), (2, 1), (1, 0), (1, 1), (3, 1)]  # new tokens per row
    for n0, n1 in steps:
        S = max(n0, n1)
        wi = [cache.reserve(0, n0), cache.reserve(1, n1)]
        n_new = [n0, n1]
        for layer in range(5):
            src = [0, 1, 2, 1, 2][layer]
            q = rng.standard_normal((2, S, N * H)).astype(np.float32)
            kw = dict(num_heads=N, do_rotary=1, cos_cache=cos, sin_cache=sin)
            if layer < 3:
                k = rng.standard_normal((2, S, NKV * H)).astype(np.float32)
                v = rng.standard_normal((2, S, NKV * H)).astype(np.float32)
                out = cache.attend(layer, q, k, v, **kw)
                for b in range(2):
                    for s in range(n_new[b]):
                        pos = wi[b] + s
                        hist_k[layer][b].append(apply_rope(k[b, s].reshape(NKV, H), pos, cos, sin, False))
                        hist_v[layer][b].append(v[b, s].reshape(NKV, H).astype(np.float64))
            else:
                out = cache.attend(layer, q, **kw)
            window = W if spec.layers[layer].type == "sliding" else -1
            T = max(len(hist_k[src][b]) for b in range(2))
            kk = np.zeros((2, NKV, T, H))
            vv = np.zeros((2, NKV, T, H))
            for b in range(2):
                for j, (kr, vr) in enumerate(zip(hist_k[src][b], hist_v[src][b])):
                    kk[b, :, j], vv[b, :, j] = kr, vr
            pos = (np.array(wi)[:, None] + np.arange(S)[None, :])[:, :, None]
            qr = apply_rope(q.reshape(2, S, N, H), pos, cos, sin, False)
            want = reference_attention(qr, kk, vv, [len(hist_k[src][b]) for b in range(2)], wi, window=window,
                                       valid_q=n_new)
            np.testing.assert_allclose(out, want.reshape(2, S, N * H), rtol=1e-5, atol=1e-5,
                                       err_msg=f"layer {layer} step {(n0, n1)}")
        cache.commit_all()
    # Zero-copy views: the full layer's buffer holds the rotated K history.
    key = cache.layer_buffers(2)["key"]
    np.testing.assert_allclose(key[1, :, :cache.length(1)], np.stack(hist_k[2][1], axis=1), rtol=1e-6, atol=1e-6)


def test_shared_layer_before_its_source_is_an_error():
    cache = kvshare.KvCache(_spec(), max_batch=1, max_seq=8)
    cache.reserve(0, 1)
    q = np.zeros((1, 1, N * H), np.float32)
    with pytest.raises(kvshare.Error, match="run layer 2 first"):
        cache.attend(4, q, num_heads=N)


def test_rewind_then_decode_equals_fresh_run():
    rng = np.random.default_rng(8)
    spec = kvshare.ModelKvSpec([kvshare.LayerSpec(type="full", kv_heads=NKV, head_size=H)])
    toks = [(rng.standard_normal((1, 1, N * H)).astype(np.float32),
             rng.standard_normal((1, 1, NKV * H)).astype(np.float32),
             rng.standard_normal((1, 1, NKV * H)).astype(np.float32)) for _ in range(6)]

    def run(cache, items):
        outs = []
        for q, k, v in items:
            cache.reserve(0, 1)
            outs.append(cache.attend(0, q, k, v, num_heads=N))
            cache.commit(0)
        return outs

    a = kvshare.KvCache(spec, max_batch=1, max_seq=8)
    first = run(a, toks)
    a.rewind(0, 3)
    again = run(a, toks[3:])
    for x, y in zip(first[3:], again):
        np.testing.assert_array_equal(x, y)


def _dequantize_q8_0(raw, H):
    """NumPy decode of a q8_0 view (uint8, last dim H / 32 * 34): per block the
    fp16 scale bits, then 32 int8 codes (llama.cpp's block_q8_0)."""
    blocks = raw.reshape(*raw.shape[:-1], H // 32, 34)
    d = blocks[..., :2].copy().view(np.float16).astype(np.float32)
    q = blocks[..., 2:].copy().view(np.int8).astype(np.float32)
    return (d * q).reshape(*raw.shape[:-1], H)


def test_q8_0_cache_views_memory_and_attend():
    """A q8_0 cache: raw block views (34 bytes per 32 values) whose decode is the
    rotated K within the per-block bound max|x|/254 (+ fp16 scale rounding), the
    memory report counts those bytes, and attend() stays close to a float32 cache."""
    rng = np.random.default_rng(11)
    spec = _spec()
    q8 = kvshare.KvCache(spec, max_batch=2, max_seq=16, max_step=3, dtype="q8_0")
    f32 = kvshare.KvCache(spec, max_batch=2, max_seq=16, max_step=3, dtype="float32")
    ring = W + 3 - 1
    assert q8.layer_buffers(0)["key"].shape == (2, NKV, ring, H // 32 * 34)
    assert q8.layer_buffers(0)["key"].dtype == np.uint8
    owned = sum(q8.layer_buffers(l)["key"].nbytes * 2 for l in range(3))
    assert owned == q8.memory().total_bytes == f32.memory().total_bytes * 34 // 128
    cos, sin = rope_cache(32, H, np.float32)
    worst = 0.0
    for step in range(4):
        for c in (q8, f32):
            c.reserve(0, 3 if step == 0 else 1)
            c.reserve(1, 2 if step == 0 else 1)
        S = 3 if step == 0 else 1
        for layer in range(5):
            q = rng.standard_normal((2, S, N * H)).astype(np.float32)
            kw = dict(num_heads=N, do_rotary=1, cos_cache=cos, sin_cache=sin)
            args = (q,)
            if layer < 3:
                args += (rng.standard_normal((2, S, NKV * H)).astype(np.float32),
                         rng.standard_normal((2, S, NKV * H)).astype(np.float32))
            a, b = q8.attend(layer, *args, **kw), f32.attend(layer, *args, **kw)
            worst = max(worst, float(np.max(np.abs(a - b))))
        for c in (q8, f32):
            c.commit_all()
    assert 0 < worst < 0.05
    kf = f32.layer_buffers(2)["key"][:, :, :5]
    kq = _dequantize_q8_0(q8.layer_buffers(2)["key"][:, :, :5], H)
    amax = np.abs(kf.reshape(*kf.shape[:-1], H // 32, 32)).max(axis=-1, keepdims=True)
    bound = (1 + 2.0 ** -10) * amax / 254 + 2.0 ** -17
    assert np.all(np.abs(kq - kf).reshape(bound.shape[:-1] + (32,)) <= bound)
    with pytest.raises(kvshare.Error, match="multiple of 32"):
        kvshare.KvCache(kvshare.ModelKvSpec([kvshare.LayerSpec(type="full", kv_heads=1, head_size=16)]),
                        max_seq=4, dtype="q8_0")
