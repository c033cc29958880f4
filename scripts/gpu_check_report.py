#!/usr/bin/env python3
"""The report of scripts/gpu_check.sh (docs/gpu_check.md); standard library only.

  gpu_check_report.py report --work DIR --out DIR [--budget S] [--elapsed S]
      Reads the step records (steps.tsv) and raw outputs a device run left in
      --work and the step logs it wrote into --out; writes --out/report.md and
      the raw JSON files (8 files in all: the device tool returns 8) and prints
      the report's tables, the steps table last.
  gpu_check_report.py repair-bench IN OUT
      Copies a kvshare_bench --benchmark_out file, closing the JSON of a run cut
      short by its timeout (the rows it finished stay).

Step status: pass, fail, timeout, skip (nothing to run: no GPU, no tool, not in
--only, budget spent) or warn (ran, but a result needs a look: the CLI's text on
the GPU differs from the CPU's).
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import re
import shutil
import statistics
import sys

OUT_FILES = ("tests.json", "tests.log", "sanitize.log", "bench.json", "bench.log", "sdpa.json", "hf.json")
NO_DEVICE = re.compile(r"no usable CUDA device|no CUDA device|built without CUDA", re.I)
ERRORISH = re.compile(r"error|fail|abort|exception|terminate|not found|fault|invalid", re.I)


# ------------------------------------------------------------------ inputs


def load_bench(path):
    """A Google Benchmark JSON file, closed if a timeout cut it; None when absent or empty."""
    try:
        text = open(path).read()
    except OSError:
        return None
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        pass
    # Cut after the last complete row of "benchmarks" and close the document.
    at = text.find('"benchmarks"')
    if at < 0:
        return None
    end = text.rfind("}", at)
    while end > at:
        try:
            return json.loads(text[:end + 1] + "]}")
        except json.JSONDecodeError:
            end = text.rfind("}", at, end)
    try:
        return json.loads(text[:text.index("[", at) + 1] + "]}")
    except (ValueError, json.JSONDecodeError):
        return None


def read(path, default=""):
    try:
        with open(path, errors="replace") as f:
            return f.read()
    except OSError:
        return default


def load_json(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, json.JSONDecodeError):
        return None


def section(log, step):
    """The part of a shared log that one step wrote (run_step heads each with '===== step NAME')."""
    m = re.search(rf"^===== step {re.escape(step)} .*?$(.*?)(?=^===== step |\Z)", log, re.M | re.S)
    return m.group(1) if m else ""


def no_device_lines(log):
    return list(dict.fromkeys(ln for ln in log.splitlines() if NO_DEVICE.search(ln)))[:3]


def excerpt(text, lines=6):
    """The first lines that look like the failure, else the last lines."""
    rows = [r for r in text.splitlines() if r.strip()]
    hits = list(dict.fromkeys(r for r in rows if ERRORISH.search(r)))  # each distinct line once
    pick = hits[:lines] if hits else rows[-lines:]
    return [r[:200] for r in pick]


# ------------------------------------------------------------ benchmark rows

_SUFFIX = re.compile(r"(/(real_time|manual_time|process_time|iterations:\d+|min_time:[\d.]+s?|repeats:\d+|threads:\d+))+$")


def bench_key(name):
    """The join key of a model row: kvshare's 'cuda/model/<shape>/decode/B:8/real_time' and the
    peer's 'model/<shape>/decode/C:8' both become 'model/<shape>/decode/C:8' (a decode row
    that names no row count is C:1)."""
    key = _SUFFIX.sub("", name)
    if key.startswith("cuda/"):
        key = key[len("cuda/"):]
    key = re.sub(r"/(?:[BbCc]|rows|batch):?(\d+)(?=/|$)", r"/C:\1", key)
    if re.search(r"/decode(/|$)", key) and "/C:" not in key:
        key = key.rstrip("/") + "/C:1"
    return key


def bench_rows(doc):
    """kvshare's rows: name -> {'tok_s', 'ms', 'error'} (aggregates left out)."""
    rows = {}
    for b in (doc or {}).get("benchmarks", []):
        if b.get("run_type") == "aggregate":
            continue
        r = {}
        if b.get("error_occurred"):
            r["error"] = b.get("error_message", "error")
        else:
            unit = {"ns": 1e-6, "us": 1e-3, "ms": 1.0, "s": 1e3}.get(b.get("time_unit", "ns"), 1e-6)
            r["ms"] = b.get("real_time", 0.0) * unit
            for k in ("tok/s", "tok_s", "tokens/s", "items_per_second"):
                if k in b:
                    r["tok_s"] = b[k]
                    break
        rows[b["name"]] = r
    return rows


def model_table(bench_doc, hf_doc):
    """Rows of (key, kvshare tok/s or error, transformers tok/s or error, ratio, the peer's setup)."""
    ours = {bench_key(n): r for n, r in bench_rows(bench_doc).items() if bench_key(n).startswith("model/")}
    peer = {}
    for r in (hf_doc or {}).get("rows", []):
        if "name" in r:
            peer[bench_key(r["name"])] = r
    table = []
    natural = lambda k: [int(x) if x.isdigit() else x for x in re.split(r"(\d+)", k)]  # noqa: E731
    for key in sorted(set(ours) | set(peer), key=natural):
        o, p = ours.get(key, {}), peer.get(key, {})
        ok = o.get("tok_s")
        pk = p.get("tok_s")
        cell_o = f"{ok:,.0f}" if ok else (o.get("error", "-") if o else "-")
        cell_p = f"{pk:,.0f}" if pk else (p.get("error") or p.get("skipped") or "-")
        ratio = f"{ok / pk:.2f}" if ok and pk else "-"
        table.append((key, cell_o, str(cell_p)[:60], ratio, p.get("setup", "-")))
    return table


def attention_summary(sdpa_doc):
    """The largest case of each shape / kind / mask / dtype: kvshare against torch's backends."""
    cases = (sdpa_doc or {}).get("cases", [])
    best = {}
    for c in cases:
        g = (c["kind"], c["N"], c["Nkv"], c["H"], c["W"] > 0, c["dtype"])
        size = (c["T"], c["B"])
        if g not in best or size > best[g][0]:
            best[g] = (size, c)
    rows = []
    for g in sorted(best):
        c = best[g][1]
        ks, t = c.get("kvshare_s"), c.get("torch", {})
        name = (f"{c['kind']} N{c['N']}/{c['Nkv']} H{c['H']} B{c['B']} T{c['T']}"
                f"{' W' + str(c['W']) if c['W'] else ''} {c['dtype']}")

        def r(b):
            return f"{t[b] / ks:.2f}" if ks and t.get(b) else "n/a"
        if c["kind"] == "prefill":
            target = "flash >= 0.9" if c["H"] == 128 else "cuDNN >= 1.0"
        else:
            target = "-"
        rows.append((name, "ok" if ks else c.get("kvshare_error", "-")[:40], r("flash"), r("cudnn"),
                     r("efficient"), target))
    return rows


# ------------------------------------------------------------------- steps


def gtest_summary(work):
    docs = {os.path.basename(p)[len("gtest_"):-len(".json")]: load_json(p)
            for p in sorted(glob.glob(os.path.join(work, "gtest_*.json")))}
    n = passed = failed = skipped = 0
    failures = []
    for binary, doc in docs.items():
        for suite in (doc or {}).get("testsuites", []):
            for t in suite.get("testsuite", []):
                n += 1
                name = f"{suite['name']}.{t['name']}"
                if t.get("failures"):
                    failed += 1
                    msg = t["failures"][0].get("failure", "").strip().splitlines()
                    failures.append(f"{name}: " + " | ".join(m.strip() for m in msg[:3])[:300])
                elif t.get("result") == "SKIPPED":
                    skipped += 1
                else:
                    passed += 1
    return docs, {"n": n, "passed": passed, "failed": failed, "skipped": skipped, "failures": failures}


def judge(step, rc, work, logs, gpu):
    """(status, key numbers, failure lines) of one step from its exit code and outputs;
    gpu: whether the environment step saw a GPU (then 'no usable CUDA device' is a failure)."""
    log = section(logs.get(step["log"], ""), step["name"])
    name = step["name"]
    if rc is None:
        return "skip", step["note"], []
    timed_out = rc in (124, 137)
    if name == "tests":
        _, s = gtest_summary(work)
        key = f"{s['passed']} passed, {s['failed']} failed, {s['skipped']} skipped of {s['n']}"
        # The test that was running when the binary hung or died (gtest writes its JSON at the end).
        running = [f"running: {ln[12:].strip()}" for ln in log.splitlines() if ln.startswith("[ RUN      ]")][-1:]
        if timed_out:
            return "timeout", key + f" ({step['note']})", running + excerpt(log)
        if s["n"] == 0:
            return "fail", "no test results (crashed before writing its JSON?)", running + excerpt(log)
        if s["failed"] or rc:
            return "fail", key, s["failures"][:8] or excerpt(log)
        if gpu and NO_DEVICE.search(log):
            return "fail", key + ": skipped on a machine with a GPU", no_device_lines(log)
        return ("skip" if s["skipped"] == s["n"] else "pass"), key, []
    if name == "cli":
        rows = [r.split("\t") for r in read(os.path.join(work, "cli.tsv")).splitlines() if r]
        if rc == 77:
            return "skip", log.strip().splitlines()[-1] if log.strip() else "skipped", []
        bad = [r for r in rows if r[2] not in ("-", "0")]
        same = [r for r in rows if r[3] == "1"]
        ran = [r for r in rows if r[2] == "0"]
        key = f"cuda ran {len(ran)} of {len(rows)} models, text = cpu's in {len(same)}"
        fails = [f"{os.path.basename(r[0])}: cuda exit {r[2]}: {r[4] if len(r) > 4 else ''}" for r in bad]
        if timed_out:
            return "timeout", key, fails or excerpt(log)
        if not rows or any(r[1] not in ("0",) for r in rows if r[1] != "-"):
            fails += [f"{os.path.basename(r[0])}: cpu exit {r[1]}" for r in rows if r[1] not in ("0", "-")]
            return "fail", key, fails or excerpt(log)
        if bad:
            return "fail", key, fails
        if all(r[2] == "-" for r in rows):
            return "skip", "no GPU: the CPU side ran", []
        return ("pass" if len(same) == len(ran) else "warn"), key, \
            [f"{os.path.basename(r[0])}: cuda text differs from cpu (tests.log)" for r in ran if r[3] != "1"]
    if name in ("memcheck", "racecheck"):
        if rc == 77:
            return "skip", (log.strip().splitlines() or ["skipped"])[-1], []
        m = re.search(r"ERROR SUMMARY: (\d+) error", log)
        h = re.search(r"RACECHECK SUMMARY: (\d+) hazard", log)
        key = []
        if m:
            key.append(f"{m.group(1)} errors")
        if h:
            key.append(f"{h.group(1)} hazards")
        g = re.search(r"\[  PASSED  \] (\d+) test", log)
        k = re.search(r"\[  SKIPPED \] (\d+) test", log)
        if g:
            key.append(f"{g.group(1)} tests passed" + (f", {k.group(1)} skipped" if k else ""))
        key = ", ".join(key) or "no summary"
        if timed_out:
            return "timeout", key, excerpt(log)
        if rc:
            return "fail", key, excerpt(log, 10)
        if gpu and NO_DEVICE.search(log):
            return "fail", key + ": the tests saw no device under the sanitizer", no_device_lines(log)
        if not g or g.group(1) == "0":
            return "warn", key + ": no test ran under it (see --memcheck-filter / --racecheck-filter)", []
        return "pass", key, []
    if name == "bench":
        if rc == 77:
            return "skip", (log.strip().splitlines() or ["skipped"])[-1], []
        rows = bench_rows(load_bench(os.path.join(work, "bench.json")))
        errs = {n: r["error"] for n, r in rows.items() if "error" in r}
        key = f"{len(rows) - len(errs)} of {len(rows)} benchmarks ran"
        if timed_out:
            return "timeout", key + " (the finished rows are kept)", excerpt(log)
        if not gpu and rows and len(errs) == len(rows) and all(NO_DEVICE.search(e) for e in errs.values()):
            return "skip", f"no device: {len(rows)} benchmarks reported '{next(iter(errs.values()))}'", []
        if rc or errs or not rows:
            return "fail", key, [f"{n}: {e}" for n, e in list(errs.items())[:6]] or excerpt(log)
        return "pass", key, []
    if name == "sdpa":
        doc = load_json(os.path.join(work, "sdpa.json"))
        cases = (doc or {}).get("cases", [])
        timed = [c for c in cases if c.get("torch") and c.get("kvshare_s")]
        key = f"{len(timed)} of {len(cases)} cases timed on both sides"
        if timed_out:
            return "timeout", key, excerpt(log)
        if rc:
            return "fail", key, excerpt(log)
        if not cases:
            return "skip", "no kvshare attention rows to compare", []
        if not (doc or {}).get("device"):
            why = "torch saw no CUDA device: bench/cuda_bench.py timed kvshare's rows only"
            return ("fail" if gpu else "skip"), "no GPU for torch: " + key, [why] if gpu else []
        return "pass", key, []
    if name == "hf":
        doc = load_json(os.path.join(work, "hf.json")) or {}
        rows = doc.get("rows", [])
        errs = [r for r in rows if "error" in r]
        skipped = [r for r in rows if "skipped" in r]
        key = f"{len(rows) - len(errs) - len(skipped)} of {len(rows)} rows" + (" (tiny, CPU)" if doc.get("tiny") else "")
        if timed_out:
            return "timeout", key, excerpt(log)
        if rc or errs:
            return "fail", key, [f"{r['name']}: {r['error']}" for r in errs[:6]] or excerpt(log)
        if skipped or not rows:
            why = (skipped[0]["skipped"] if skipped else "no rows")[:120]
            return ("fail" if gpu else "skip"), why, [why] if gpu else []
        return ("skip" if doc.get("tiny") else "pass"), key, []
    return ("pass" if rc == 0 else "fail"), "", ([] if rc == 0 else excerpt(log))


def env_key(env):
    gpu = re.search(r"^torch .*?: (.*)$", env, re.M)
    smi = re.search(r"^(NVIDIA[^,\n]*), ([\d.]+),", env, re.M)
    parts = [gpu.group(1) if gpu else "torch: none"]
    if smi:
        parts.append(f"driver {smi.group(2)}")
    if "sources: WARNING" in env:
        parts.append("STALE PACK")
    return "; ".join(parts)[:150]


# ------------------------------------------------------------------ output


def md_table(header, rows):
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(out)


def report(a):
    work, out = a.work, a.out
    steps = []
    for line in read(os.path.join(work, "steps.tsv")).splitlines():
        f = line.split("\t")
        if len(f) >= 6:
            steps.append({"name": f[0], "group": f[1], "rc": None if f[2] == "-" else int(f[2]),
                          "seconds": float(f[3]), "log": f[4], "note": f[5]})
    logs = {n: read(os.path.join(out, n)) for n in ("tests.log", "sanitize.log", "bench.log")}
    env = read(os.path.join(work, "env.log"))
    gpu = re.search(r"^gpu: 1$", env, re.M) is not None
    results = []
    for s in steps:
        if s["name"] == "env":
            results.append((s, "pass" if gpu else "skip", env_key(env) if gpu else "no GPU: " + env_key(env), []))
        else:
            results.append((s, *judge(s, s["rc"], work, logs, gpu)))

    os.makedirs(out, exist_ok=True)
    docs, _ = gtest_summary(work)
    if docs:
        with open(os.path.join(out, "tests.json"), "w") as f:
            json.dump(docs, f, indent=1)
    bench_doc = load_bench(os.path.join(work, "bench.json"))
    if bench_doc is not None:
        with open(os.path.join(out, "bench.json"), "w") as f:
            json.dump(bench_doc, f, indent=1)
    for n in ("sdpa.json", "hf.json"):  # the logs are in `out` already
        if os.path.exists(os.path.join(work, n)):
            shutil.copyfile(os.path.join(work, n), os.path.join(out, n))

    models = model_table(bench_doc, load_json(os.path.join(work, "hf.json")))
    attn = attention_summary(load_json(os.path.join(work, "sdpa.json")))
    step_rows = [(s["name"], st, f"{s['seconds']:.0f}", key) for s, st, key, _ in results]
    failed = [(s["name"], st, lines) for s, st, _, lines in results if st in ("fail", "timeout", "warn") and lines]

    md = ["# scripts/gpu_check.sh report", "",
          f"Steps ran {a.elapsed} s of a {a.budget} s budget. Raw files: {', '.join(OUT_FILES)}.", "",
          "## Environment", "", "```", env.strip(), "```", ""]
    if models:
        md += ["## Model throughput, tok/s (kvshare_bench cuda/model/ vs transformers, SDPA, static cache, eager)", "",
               md_table(("row", "kvshare", "transformers", "kvshare / transformers", "transformers setup"), models),
               ""]
    sdpa_md = read(os.path.join(work, "sdpa.md")).strip()
    if sdpa_md:
        md += ["## Attention vs torch SDPA (bench/cuda_bench.py; ratios = torch time / kvshare time)", "", sdpa_md, ""]
    if failed:
        md += ["## Failures (first lines)", ""]
        for name, st, lines in failed:
            md += [f"- **{name}** ({st}):"] + [f"    - `{ln.replace('`', '')}`" for ln in lines]
        md.append("")
    md += ["## Steps", "", md_table(("step", "status", "s", "key numbers"), step_rows), ""]
    with open(os.path.join(out, "report.md"), "w") as f:
        f.write("\n".join(md))

    # stdout: the device tool returns the last 12,000 characters; the steps table last.
    if any(r[3] != "-" or r[1][:1].isdigit() or r[2][:1].isdigit() for r in models):
        print("\nmodel tok/s:")
        print(md_table(("row", "kvshare", "transformers", "ratio", "transformers setup"), models))
    if any(r[1] == "ok" for r in attn):
        print("\nattention, largest case per shape (torch time / kvshare time):")
        print(md_table(("case", "kvshare", "flash", "cuDNN", "efficient", "target"), attn))
    for name, st, lines in failed:
        print(f"\n{name} ({st}):")
        for ln in lines[:6]:
            print("  " + ln)
    print(f"\nreport: {os.path.join(out, 'report.md')} ({a.elapsed} s of {a.budget} s)")
    print(md_table(("step", "status", "s", "key numbers"), step_rows))
    left = sorted(set(os.listdir(out)) - set(OUT_FILES) - {"report.md"})
    if left:
        print(f"note: {out} holds other files too ({', '.join(left[:5])}): the device tool returns 8 at most")
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("report")
    r.add_argument("--work", required=True)
    r.add_argument("--out", required=True)
    r.add_argument("--budget", type=int, default=0)
    r.add_argument("--elapsed", type=int, default=0)
    b = sub.add_parser("repair-bench")
    b.add_argument("src")
    b.add_argument("dst")
    a = ap.parse_args()
    if a.cmd == "repair-bench":
        doc = load_bench(a.src)
        if doc is None:
            print(f"repair-bench: {a.src} holds no benchmark rows", file=sys.stderr)
            doc = {"benchmarks": []}
        with open(a.dst, "w") as f:
            json.dump(doc, f)
        return 0
    return report(a)


if __name__ == "__main__":
    sys.exit(main())
