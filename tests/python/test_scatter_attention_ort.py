"""kvshare's static scatter mode against the standard ONNX ops run in onnxruntime:
TensorScatter-24 (linear and circular) writing the new K/V into a cache, then
Attention-24 over that cache with `nonpad_kv_seqlen` (docs/architecture.md §6).

Each configuration runs several steps (prefill and decode, B = 3 rows with ragged
lengths) through both pipelines on one evolving cache per side, and compares the
attention output and the whole cache after every step. Caches are 3-D
(B, C, N_kv*H) or BNSH (B, N_kv, C, H); TensorScatter's axis is -2 in both.

Circular (window-sized ring) caches: Attention sees ring slots, not positions, so
the graph gets a boolean attn_mask built from the slots' absolute positions (and
nonpad_kv_seqlen = resident count); for S = 1 with C = W every resident key is
visible and nonpad_kv_seqlen alone is the whole mask, which is tested too.

Also here: kvshare's external K/V mode (key/value are the whole cache, no past)
against Attention with nonpad_kv_seqlen on the same cache: opset 24, and opset 25's
left_window_size for local windows (onnxruntime >= 1.32 runs it).
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np
import pytest

from peers import NP_DTYPE, assert_close, make_session, need, reference_attention

kvshare = need("kvshare")
need("onnxruntime")
onnx = need("onnx")
from onnx import helper  # noqa: E402


@dataclass(frozen=True)
class ScatterCfg:
    layout: str      # "3d" or "bnsh"
    mode: str        # "linear" or "circular"
    dtype: str
    steps: tuple     # new tokens per step (the same for every row)
    heads: tuple = (4, 2)
    head_size: int = 32
    window: int = -1  # circular: W (C = W + max(S) - 1)
    mask: bool = False  # circular only: an explicit attn_mask (else nonpad_kv_seqlen alone)
    seed: int = 0

    def id(self):
        return (f"{self.layout}-{self.mode}-{self.dtype}-steps{'_'.join(map(str, self.steps))}-"
                f"N{self.heads[0]}K{self.heads[1]}H{self.head_size}" + (f"-W{self.window}" if self.window > 0 else "")
                + ("-mask" if self.mask else "") + f"-seed{self.seed}")


def scatter_configs():
    out = []
    seed = 0
    heads = [(4, 2), (8, 1), (6, 6), (6, 3)]
    for layout, dtype in itertools.product(["3d", "bnsh"], ["float32", "float16"]):
        for steps in [(5, 1, 1, 1), (3, 3, 3), (1, 1, 1, 1, 1, 1), (7, 2, 1)]:
            seed += 1
            out.append(ScatterCfg(layout, "linear", dtype, steps, heads[seed % 4], [16, 32, 64][seed % 3], seed=seed))
        # Ring of C = W: decode steps wrap it; nonpad_kv_seqlen alone masks.
        seed += 1
        out.append(ScatterCfg(layout, "circular", dtype, (1,) * 9, heads[seed % 4], 32, window=4, seed=seed))
        # Ring of C = W + S - 1 with multi-token steps: the mask comes from positions.
        for steps, w in [((3, 3, 3, 3), 4), ((2, 1, 2, 1, 2), 3), ((4, 1, 1, 1, 1, 1), 6)]:
            seed += 1
            out.append(ScatterCfg(layout, "circular", dtype, steps, heads[seed % 4], 16, window=w, mask=True,
                                  seed=seed))
    return out


CONFIGS = scatter_configs()


def _graph(cfg: ScatterCfg, dt):
    n, nkv = cfg.heads
    use_nonpad = not cfg.mask
    attn_in = ["q", "kc2", "vc2", "mask" if cfg.mask else "", "", "", "nonpad" if use_nonpad else ""]
    while attn_in[-1] == "":
        attn_in.pop()
    attrs = dict(is_causal=0 if cfg.mask else 1)
    if cfg.layout == "3d":
        attrs.update(q_num_heads=n, kv_num_heads=nkv)
    nodes = [
        helper.make_node("TensorScatter", ["kc", "k", "wi"], ["kc2"], mode=cfg.mode, axis=-2),
        helper.make_node("TensorScatter", ["vc", "v", "wi"], ["vc2"], mode=cfg.mode, axis=-2),
        helper.make_node("Attention", attn_in, ["y"], **attrs),
    ]
    inputs = {"q": dt, "k": dt, "v": dt, "kc": dt, "vc": dt, "wi": np.int64}
    if use_nonpad:
        inputs["nonpad"] = np.int64
    if cfg.mask:
        inputs["mask"] = np.bool_
    return make_session(nodes, inputs, {"y": dt, "kc2": dt, "vc2": dt}, opset=24)


@pytest.mark.parametrize("cfg", CONFIGS, ids=[c.id() for c in CONFIGS])
def test_static_scatter_vs_tensorscatter_attention(cfg: ScatterCfg):
    rng = np.random.default_rng(cfg.seed)
    dt = NP_DTYPE[cfg.dtype]
    B = 3
    N, Nkv = cfg.heads
    H = cfg.head_size
    smax = max(cfg.steps)
    if cfg.mode == "circular":
        C = cfg.window + smax - 1
    else:
        C = 6 + sum(cfg.steps) + 4
    shape = (B, C, Nkv * H) if cfg.layout == "3d" else (B, Nkv, C, H)
    # Ragged rows: different lengths already cached (written by an earlier prefill).
    length = np.array([0, 3, 6], np.int64) if cfg.mode == "linear" else np.array([0, 2, 5], np.int64)
    init_k = rng.standard_normal(shape).astype(dt)
    init_v = rng.standard_normal(shape).astype(dt)
    ours_k, ours_v = init_k.copy(), init_v.copy()
    ort_k, ort_v = init_k.copy(), init_v.copy()
    sess = _graph(cfg, dt)
    for S in cfg.steps:
        q = (rng.standard_normal((B, S, N * H)) * 2).astype(dt)
        k = rng.standard_normal((B, S, Nkv * H)).astype(dt)
        v = rng.standard_normal((B, S, Nkv * H)).astype(dt)
        wi = length.copy()
        total = length + S
        res = kvshare.group_query_attention(
            q, k, v, write_indices=wi, nonpad_kv_seqlen=total, present_key=ours_k, present_value=ours_v,
            num_heads=N, kv_num_heads=Nkv, local_window_size=cfg.window, scatter_mode=cfg.mode)
        assert kvshare.detect_kv_mode(q, k, v, write_indices=wi, nonpad_kv_seqlen=total, present_key=ours_k,
                                      present_value=ours_v, num_heads=N, kv_num_heads=Nkv,
                                      local_window_size=cfg.window, scatter_mode=cfg.mode) == "static_scatter"
        if cfg.layout == "3d":
            feeds = dict(q=q, k=k, v=v)
        else:
            feeds = dict(q=q.reshape(B, S, N, H).transpose(0, 2, 1, 3).copy(),
                         k=k.reshape(B, S, Nkv, H).transpose(0, 2, 1, 3).copy(),
                         v=v.reshape(B, S, Nkv, H).transpose(0, 2, 1, 3).copy())
        feeds.update(kc=ort_k, vc=ort_v, wi=wi)
        if cfg.mode == "linear":
            feeds["nonpad"] = total
        elif not cfg.mask:
            # Ring of C = W, S = 1: all resident slots are exactly the visible keys.
            assert S == 1 and C == cfg.window
            feeds["nonpad"] = np.minimum(total, C)
        else:
            # Slot c holds the newest position p' < total with p' = c (mod C).
            slot = np.arange(C)[None, :]
            newest = total[:, None] - 1 - ((total[:, None] - 1 - slot) % C)  # (B, C)
            p = wi[:, None] + np.arange(S)[None, :]  # (B, S) query positions
            vis = (newest[:, None, :] >= 0) & (newest[:, None, :] <= p[:, :, None]) & \
                  (p[:, :, None] - newest[:, None, :] < cfg.window)
            feeds["mask"] = vis[:, None, :, :]
        y, ort_k, ort_v = sess.run(None, feeds)
        if cfg.layout == "bnsh":
            y = y.transpose(0, 2, 1, 3).reshape(B, S, N * H)
        assert_close(res.output, y, cfg.dtype, f"output at lengths {length.tolist()} + {S}")
        assert_close(ours_k, ort_k, cfg.dtype, "key cache")
        assert_close(ours_v, ort_v, cfg.dtype, "value cache")
        length = total


# ---------------------------------------------------------------------------
# External K/V mode (kvshare) == Attention-24 with nonpad_kv_seqlen over the cache.

EXTERNAL = [dict(dtype=dt, S=s, heads=h, window=w, seed=i) for i, (dt, s, h, w) in enumerate(
    itertools.product(["float32", "float16"], [1, 4], [(4, 2), (8, 1)], [-1, 1, 3, 8]))]


@pytest.mark.parametrize("p", EXTERNAL, ids=[f"{p['dtype']}-S{p['S']}-N{p['heads'][0]}K{p['heads'][1]}-W{p['window']}"
                                              for p in EXTERNAL])
def test_external_kv_vs_attention_nonpad(p):
    """External K/V against Attention with nonpad_kv_seqlen: opset 24 without a
    window; with local_window_size = W, opset 25 with left_window_size = W - 1,
    right_window_size = 0 (W keys including the current one). Also checked
    against the float64 NumPy reference."""
    rng = np.random.default_rng(p["seed"])
    dt = NP_DTYPE[p["dtype"]]
    B, S, T, H = 3, p["S"], 20, 32
    N, Nkv = p["heads"]
    W = p["window"]
    total = np.array([20, 7, 13], np.int64)
    q = (rng.standard_normal((B, S, N * H)) * 2).astype(dt)
    k = rng.standard_normal((B, T, Nkv * H)).astype(dt)
    v = rng.standard_normal((B, T, Nkv * H)).astype(dt)
    kw = dict(seqlens_k=(total - 1).astype(np.int32), total_sequence_length=np.array(T, np.int32), num_heads=N,
              kv_num_heads=Nkv, local_window_size=W)
    assert kvshare.detect_kv_mode(q, k, v, **kw) == "external_kv"
    ours = kvshare.group_query_attention(q, k, v, **kw)
    kk = np.asarray(k, np.float64).reshape(B, T, Nkv, H).transpose(0, 2, 1, 3)
    vv = np.asarray(v, np.float64).reshape(B, T, Nkv, H).transpose(0, 2, 1, 3)
    want = reference_attention(np.asarray(q, np.float64).reshape(B, S, N, H), kk, vv, total, total - S, window=W)
    assert_close(ours.output, want.reshape(B, S, N * H), p["dtype"], "output vs NumPy")
    attrs = dict(is_causal=1, q_num_heads=N, kv_num_heads=Nkv)
    if W > 0:
        attrs.update(left_window_size=W - 1, right_window_size=0)
    node = helper.make_node("Attention", ["q", "k", "v", "", "", "", "nonpad"], ["y"], **attrs)
    sess = make_session([node], {"q": dt, "k": dt, "v": dt, "nonpad": np.int64}, {"y": dt},
                        opset=25 if W > 0 else 24)
    (y,) = sess.run(None, dict(q=q, k=k, v=v, nonpad=total))
    assert_close(ours.output, y, p["dtype"], "output vs onnxruntime Attention")
    # present: a BNSH copy of key/value.
    np.testing.assert_array_equal(ours.present_key, k.reshape(B, T, Nkv, H).transpose(0, 2, 1, 3))


def test_scatter_config_count():
    """The issue asks for at least 20 static-scatter configurations."""
    assert len(CONFIGS) >= 20
