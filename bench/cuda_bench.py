#!/usr/bin/env python3
"""GPU attention benchmark: kvshare's CUDA GroupQueryAttention against PyTorch's
scaled_dot_product_attention on the same shapes, in one run (issue 19).

Runs `kvshare_bench --benchmark_filter=cuda/...` (bench/cuda_attention_bench.cc:
the public op in static-scatter mode, fp16 / bf16, decode at B in {1, 16, 64},
T in {4096, 32768}; prefill at S = T in {1024, 4096, 16384}, causal and with a
1024-key window), then times torch SDPA with each backend that accepts the
shape (flash, cuDNN, memory-efficient; GQA through enable_gqa, a window through
a boolean mask) and prints per case:
  prefill  TFLOP/s (4 * N * H * visible keys summed over queries)
  decode   K/V GB/s read and the fraction of the device-to-device copy
           bandwidth measured by kvshare_bench in the same run
and kvshare / the best torch backend. Targets (issue 19): prefill >= SDPA at
H = 128 and well ahead at H = 256 / 512; decode >= 80 % of the copy bandwidth
at B = 64, T = 32768.

Needs a CUDA build (nvcc found at configure) and a GPU; torch is optional
(without it only kvshare's numbers print). With --kvshare-json it reads a
saved kvshare_bench JSON output instead of running the binary (scripts/gpu_check.sh).
  python3 bench/cuda_bench.py --bench build/bench/kvshare_bench [--filter decode] [--json out.json]
"""
import argparse
import json
import re
import subprocess
import sys

CASE = re.compile(r"cuda/(?P<kind>decode|prefill)/n(?P<N>\d+)_kv(?P<Nkv>\d+)_h(?P<H>\d+)/"
                  r"(?:B:(?P<B>\d+)/)?T:(?P<T>\d+)/(?:(?P<causal>causal)/|W:(?P<W>\d+)/)?(?P<dtype>\w+)")


def parse(name):
    m = CASE.match(name)
    if not m:
        return None
    g = m.groupdict()
    return {"kind": g["kind"], "N": int(g["N"]), "Nkv": int(g["Nkv"]), "H": int(g["H"]),
            "B": int(g["B"] or 1), "T": int(g["T"]), "W": int(g["W"] or 0), "dtype": g["dtype"]}


def flops(c):
    S = 1 if c["kind"] == "decode" else c["T"]
    vis = 0
    for s in range(S):
        pos = c["T"] - S + s
        vis += min(pos + 1, c["W"]) if c["W"] else pos + 1
    return 4.0 * c["B"] * c["N"] * c["H"] * vis


def kv_bytes(c):
    return 2.0 * c["B"] * c["Nkv"] * c["T"] * c["H"] * 2


def run_kvshare(bench, filt, saved=None):
    """kvshare's rows: from `saved` (a kvshare_bench JSON output file) when given, else a run of `bench`."""
    if saved:
        with open(saved) as f:
            doc = json.load(f)
    else:
        doc = json.loads(subprocess.run([bench, f"--benchmark_filter=cuda/{filt}", "--benchmark_format=json"],
                                        check=True, capture_output=True, text=True).stdout)
    rows = []
    for b in doc["benchmarks"]:
        if saved and not re.search(f"cuda/{filt}", b["name"]):
            continue
        c = parse(b["name"])
        if c is None:
            continue
        if b.get("error_occurred"):
            c["kvshare_error"] = b.get("error_message", "error")
        else:
            sec = b["real_time"] * {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0}[b["time_unit"]]
            c["kvshare_s"] = sec
            if "d2d_bytes/s" in b:
                c["d2d_bytes_s"] = b["d2d_bytes/s"]
        rows.append(c)
    return rows


def time_torch(c):
    """Seconds per call of each SDPA backend on c's shape (None where refused)."""
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel
    dt = {"f16": torch.float16, "float16": torch.float16, "bfloat16": torch.bfloat16}[c["dtype"]]
    S = 1 if c["kind"] == "decode" else c["T"]
    g = torch.Generator(device="cuda").manual_seed(1)
    q = torch.rand(c["B"], c["N"], S, c["H"], device="cuda", dtype=dt, generator=g) * 2 - 1
    k = torch.rand(c["B"], c["Nkv"], c["T"], c["H"], device="cuda", dtype=dt, generator=g) * 2 - 1
    v = torch.rand_like(k) * 2 - 1
    mask = None
    if c["W"]:
        pos_q = torch.arange(c["T"] - S, c["T"], device="cuda")[:, None]
        pos_k = torch.arange(c["T"], device="cuda")[None, :]
        mask = (pos_k <= pos_q) & (pos_q - pos_k < c["W"])
    causal = c["kind"] == "prefill" and not c["W"]
    res = {}
    for name, be in (("flash", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION),
                     ("efficient", SDPBackend.EFFICIENT_ATTENTION)):
        try:
            with sdpa_kernel([be]):
                def call():
                    return torch.nn.functional.scaled_dot_product_attention(
                        q, k, v, attn_mask=mask, is_causal=causal, enable_gqa=c["N"] != c["Nkv"])
                call()
                torch.cuda.synchronize()
                reps = 3 if c["kind"] == "prefill" and c["T"] >= 16384 else 20
                t0, t1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                t0.record()
                for _ in range(reps):
                    call()
                t1.record()
                torch.cuda.synchronize()
                res[name] = t0.elapsed_time(t1) * 1e-3 / reps
        except RuntimeError as e:  # backend refuses the shape / dtype / mask
            res[name] = None
            res[name + "_why"] = str(e).splitlines()[0][:120]
    return res


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bench", default="build/bench/kvshare_bench")
    ap.add_argument("--filter", default="", help="regex after cuda/ (e.g. decode, prefill/n32)")
    ap.add_argument("--kvshare-json", help="read kvshare's rows from this kvshare_bench --benchmark_out file "
                    "(its cuda/ cases matching --filter) instead of running --bench")
    ap.add_argument("--json")
    a = ap.parse_args()
    rows = run_kvshare(a.bench, a.filter, a.kvshare_json)
    try:
        import torch
        have_torch = torch.cuda.is_available()
        device = torch.cuda.get_device_name() if have_torch else None
    except ImportError:
        have_torch, device = False, None
    if not have_torch:
        print("(torch with CUDA not available: kvshare only)", file=sys.stderr)
    print(f"device: {device}")
    print("| case | kvshare | torch flash | torch cuDNN | torch efficient | kvshare / best torch |")
    print("|---|---|---|---|---|---|")
    for c in rows:
        name = (f"{c['kind']} N{c['N']}/{c['Nkv']} H{c['H']} B{c['B']} T{c['T']}"
                f"{' W' + str(c['W']) if c['W'] else ''} {c['dtype']}")
        if have_torch:
            c["torch"] = time_torch(c)
        unit = (lambda s: f"{kv_bytes(c) / s / 1e9:.0f} GB/s") if c["kind"] == "decode" else \
               (lambda s: f"{flops(c) / s / 1e12:.1f} TFLOP/s")
        ks = c.get("kvshare_s")
        cell = unit(ks) if ks else c.get("kvshare_error", "-")
        if ks and c.get("d2d_bytes_s"):
            cell += f" ({kv_bytes(c) / ks / c['d2d_bytes_s']:.0%} of d2d)"
        t = c.get("torch", {})
        cells = [unit(t[b]) if t.get(b) else "n/a" for b in ("flash", "cudnn", "efficient")]
        best = min([t[b] for b in ("flash", "cudnn", "efficient") if t.get(b)], default=None)
        ratio = f"{best / ks:.2f}" if ks and best else "-"
        print(f"| {name} | {cell} | {' | '.join(cells)} | {ratio} |")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"device": device, "cases": rows}, f, indent=1)


if __name__ == "__main__":
    main()
