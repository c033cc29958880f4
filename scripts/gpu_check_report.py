#!/usr/bin/env python3
"""The report of scripts/gpu_check.sh (docs/gpu_check.md); standard library only
(and bench/cuda_bench.py's verdict functions, standard library too).

  gpu_check_report.py report --work DIR --out DIR [--budget S] [--elapsed S]
      Reads the step records (steps.tsv) and raw outputs a device run left in
      --work and the step logs it wrote into --out; writes --out/report.md and
      the raw JSON files (8 files in all: the device tool returns 8) and prints
      the report's tables, the steps table and the command for the steps left last.
  gpu_check_report.py repair-bench IN OUT
      Copies a kvshare_bench JSON output, closing the JSON of a run cut short by
      its timeout (the rows it finished stay).
  gpu_check_report.py bench-lines FILE
      One line per row of a kvshare_bench JSON output (the step logs).

Step status: pass, fail, timeout, skip (nothing to run: no GPU, no tool, not in
--only, budget spent) or warn (ran, but a result needs a look: the CLI's text on
the GPU differs from the CPU's; no test ran under a sanitizer).
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import re
import sys
import xml.etree.ElementTree as ET

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))
import cuda_bench  # noqa: E402  (bench/cuda_bench.py: the attention cases' verdicts and tables)

OUT_FILES = ("tests.json", "tests.log", "sanitize.log", "bench.json", "bench.log", "sdpa.json", "hf.json")
NO_DEVICE = re.compile(r"no usable CUDA device|no CUDA device|built without CUDA", re.I)
ERRORISH = re.compile(r"error|fail|abort|exception|terminate|not found|fault|invalid", re.I)
STDOUT_BUDGET = 11000  # the device tool returns the output's last 12,000 characters


# ------------------------------------------------------------------ inputs


def load_bench(path):
    """A Google Benchmark JSON output, closed if a timeout cut it; None when absent or empty."""
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


def merged_bench(work):
    """Every kvshare_bench output of the run (bench_attn.json, bench_model_*.json) in one document."""
    docs = [d for d in (load_bench(p) for p in sorted(glob.glob(os.path.join(work, "bench_*.json")))
                        if not p.endswith("_fixed.json")) if d]
    if not docs:
        return None
    return {"context": docs[0].get("context", {}), "benchmarks": [b for d in docs for b in d.get("benchmarks", [])]}


def merged_hf(work):
    """The transformers peer's outputs of the hf_* steps in one document."""
    docs = [d for d in (load_json(p) for p in sorted(glob.glob(os.path.join(work, "hf_*.json")))) if d]
    if not docs:
        return None
    info = {k: v for d in docs for k, v in d.items() if k != "rows"}
    return {**info, "rows": [r for d in docs for r in d.get("rows", [])]}


# ------------------------------------------------------------ benchmark rows

_SUFFIX = re.compile(r"(/(real_time|manual_time|process_time|iterations:\d+|min_time:[\d.]+s?|repeats:\d+|threads:\d+))+$")


def bench_key(name):
    """The join key of a model row: kvshare's 'cuda/model/<shape>/decode/C:8/real_time' and the
    peer's 'model/<shape>/decode/C:8' both become 'model/<shape>/decode/C:8' (B:8, c8 and
    batch:8 read as C:8; a decode row that names no row count is C:1)."""
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


def bench_lines(doc):
    """One line per row: name, time, the counters that matter here, or its error."""
    out = []
    for b in (doc or {}).get("benchmarks", []):
        if b.get("error_occurred"):
            out.append(f"{b['name']}: ERROR {b.get('error_message', '')}")
            continue
        extra = [f"{k} {b[k]:.4g}" for k in ("tok/s", "FLOPS", "kv_bytes/s", "bw_ratio", "hopper_kernel") if k in b]
        out.append(f"{b['name']}: {b.get('real_time', 0):.4g} {b.get('time_unit', '')}"
                   f"{', ' if extra else ''}{', '.join(extra)}")
    return out


def model_table(bench_doc, hf_doc):
    """Rows of (key, kvshare tok/s or error, transformers tok/s or error, ratio, the peer's setup)."""
    # model_eager/: the same decode rows with CUDA graphs off (no peer row).
    ours = {bench_key(n): r for n, r in bench_rows(bench_doc).items()
            if bench_key(n).startswith(("model/", "model_eager/"))}
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
        table.append((key, cell_o[:60], str(cell_p)[:60], ratio, p.get("setup", "-")))
    return table


def attention_cases(sdpa_doc, bench_doc):
    """The attention cases with their verdicts: sdpa.json's (torch timed) when the sdpa step
    wrote it, else kvshare's rows alone (new vs old still shows)."""
    cases = (sdpa_doc or {}).get("cases")
    if cases is None:
        cases = cuda_bench.merge_rows((bench_doc or {}).get("benchmarks", []))
    for c in cases:
        if c["kind"] == "prefill":
            c["target"] = cuda_bench.prefill_target(c)
    return cases


# ------------------------------------------------------------------- steps


def gtest_summary(work):
    docs = {os.path.basename(p)[len("gtest_"):-len(".json")]: load_json(p)
            for p in sorted(glob.glob(os.path.join(work, "gtest_*.json")))}
    n = passed = failed = skipped = 0
    failures, measured = [], []
    for binary, doc in docs.items():
        for suite in (doc or {}).get("testsuites", []):
            for t in suite.get("testsuite", []):
                n += 1
                name = f"{suite['name']}.{t['name']}"
                measured += [f"{name}: {t[k]}" for k in sorted(t, key=lambda k: (len(k), k))
                             if k.startswith("measured_")]
                if t.get("failures"):
                    failed += 1
                    msg = t["failures"][0].get("failure", "").strip().splitlines()
                    failures.append(f"{name}: " + " | ".join(m.strip() for m in msg[:3])[:300])
                elif t.get("result") == "SKIPPED":
                    skipped += 1
                else:
                    passed += 1
    ran = read(os.path.join(work, "test_bins")).split()
    failures += [f"{b}: no JSON result (it crashed or was killed: see tests.log)" for b in ran if b not in docs]
    return docs, {"n": n, "passed": passed, "failed": failed, "skipped": skipped, "failures": failures,
                  "measured": measured, "missing": [b for b in ran if b not in docs]}


def pytest_summary(path):
    """(passed, failed, skipped, {test name: (outcome, message)}) of a pytest --junitxml file."""
    try:
        root = ET.parse(path).getroot()
    except (OSError, ET.ParseError):
        return None
    cases = {}
    for tc in root.iter("testcase"):
        outcome, msg = "passed", ""
        for tag in ("failure", "error", "skipped"):
            e = tc.find(tag)
            if e is not None:
                outcome, msg = {"failure": "failed", "error": "failed", "skipped": "skipped"}[tag], e.get("message", "")
                break
        cases[tc.get("name")] = (outcome, (msg or "").strip()[:200])
    count = lambda o: sum(1 for v in cases.values() if v[0] == o)  # noqa: E731
    return count("passed"), count("failed"), count("skipped"), cases


def judge_bench(rc, log, rows, gpu, timed_out):
    errs = {n: r["error"] for n, r in rows.items() if "error" in r}
    key = f"{len(rows) - len(errs)} of {len(rows)} benchmarks ran"
    if rc == 77:
        return "skip", (log.strip().splitlines() or ["skipped"])[-1], []
    if timed_out:
        return "timeout", key + " (the finished rows are kept)", excerpt(log)
    if not gpu and rows and len(errs) == len(rows) and all(NO_DEVICE.search(e) for e in errs.values()):
        return "skip", f"no device: {len(rows)} benchmarks reported '{next(iter(errs.values()))}'", []
    if rc or errs or not rows:
        return "fail", key, [f"{n}: {e}" for n, e in list(errs.items())[:6]] or excerpt(log)
    return "pass", key, []


def judge(step, rc, work, logs, gpu):
    """(status, key numbers, failure lines) of one step from its exit code and outputs;
    gpu: whether the environment step saw a GPU (then 'no usable CUDA device' is a failure)."""
    log = section(logs.get(step["log"], ""), step["name"])
    name = step["name"]
    if rc is None:
        return "skip", step["note"], []
    timed_out = rc in (124, 137)
    if name == "gtest":
        _, s = gtest_summary(work)
        key = f"{s['passed']} passed, {s['failed']} failed, {s['skipped']} skipped of {s['n']}"
        # The test that was running when the binary hung or died (gtest writes its JSON at the end).
        running = [f"running: {ln[12:].strip()}" for ln in log.splitlines() if ln.startswith("[ RUN      ]")][-1:]
        if timed_out:
            return "timeout", key + f" ({step['note']})", running + excerpt(log)
        if s["n"] == 0:
            return "fail", "no test results (crashed before writing its JSON?)", running + excerpt(log)
        if s["failed"] or s["missing"] or rc:
            return "fail", key, s["failures"][:8] or excerpt(log)
        if gpu and NO_DEVICE.search(log):
            return "fail", key + ": skipped on a machine with a GPU", no_device_lines(log)
        return ("skip" if s["skipped"] == s["n"] else "pass"), key, []
    if name == "serve":
        if rc == 77:
            return "skip", (log.strip().splitlines() or ["skipped"])[-1], []
        res = pytest_summary(os.path.join(work, "pytest_serve.xml"))
        if res is None:
            return ("timeout" if timed_out else "fail"), "no pytest result", excerpt(log)
        passed, failed, skipped, cases = res
        key = f"{passed} passed, {failed} failed, {skipped} skipped of {len(cases)}"
        gpu_case = cases.get("test_device_cuda_serves_text_on_a_gpu", ("missing", "not run"))
        fails = [f"{n}: {m}" for n, (o, m) in cases.items() if o == "failed"]
        if timed_out:
            return "timeout", key, fails or excerpt(log)
        if rc or failed:
            return "fail", key, fails or excerpt(log)
        if gpu_case[0] != "passed":
            why = f"serve --device cuda: {gpu_case[0]}: {gpu_case[1]}"
            return ("fail" if gpu else "skip"), key + ("" if gpu else " (no GPU: the serve case skipped)"), \
                [why] if gpu else []
        return "pass", key, []
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
    if name == "attn" or name.startswith("model_"):
        data = "bench_attn.json" if name == "attn" else f"bench_{name}.json"
        return judge_bench(rc, log, bench_rows(load_bench(os.path.join(work, data))), gpu, timed_out)
    if name == "sdpa":
        doc = load_json(os.path.join(work, "sdpa.json"))
        cases = (doc or {}).get("cases", [])
        timed = [c for c in cases if c.get("torch") and c.get("kvshare_s")]
        key = f"{len(timed)} of {len(cases)} cases timed on both sides"
        if rc == 77:
            return "skip", (log.strip().splitlines() or ["skipped"])[-1], []
        if timed_out:
            return "timeout", key + " (the timed cases are kept)", excerpt(log)
        if rc:
            return "fail", key, excerpt(log)
        if not cases:
            return "skip", "no kvshare attention rows to compare", []
        if not (doc or {}).get("device"):
            why = "torch saw no CUDA device: bench/cuda_bench.py timed kvshare's rows only"
            return ("fail" if gpu else "skip"), "no GPU for torch: " + key, [why] if gpu else []
        return "pass", key, []
    if name.startswith("hf_"):
        doc = load_json(os.path.join(work, f"{name}.json")) or {}
        rows = doc.get("rows", [])
        errs = [r for r in rows if "error" in r]
        skipped = [r for r in rows if "skipped" in r]
        key = f"{len(rows) - len(errs) - len(skipped)} of {len(rows)} rows" + (" (tiny, CPU)" if doc.get("tiny") else "")
        if timed_out:
            return "timeout", key + " (the finished rows are kept)", excerpt(log)
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


def rerun_hint(results):
    """The second call for the steps a budget or a timeout left undone: (command, timeout_s) or None."""
    left = [(s, st) for s, st, _, _ in results
            if st == "timeout" or (st == "skip" and s["note"].startswith("skipped: the --budget"))]
    if not left:
        return None
    caps = []
    for s, st in left:
        cap = int(s["cap"]) if str(s.get("cap", "")).isdigit() else 120
        caps.append(cap * 2 if st == "timeout" else cap)  # a step its cap cut gets twice as long
    names = ",".join(s["name"] for s, _ in left)
    extra = "".join(f" --cap {s['name']}={c}" for (s, st), c in zip(left, caps) if st == "timeout")
    b = min(max(sum(caps) + 30, 60), 300)  # a second call's size; cut it to what the lease has left
    return f"PYTHONUNBUFFERED=1 bash scripts/gpu_check.sh device --only {names}{extra} --budget {b}", b + 50


# ------------------------------------------------------------------ output


def md_table(header, rows):
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(out)


def read_steps(work):
    steps = []
    for line in read(os.path.join(work, "steps.tsv")).splitlines():
        f = line.split("\t")
        if len(f) >= 6:
            steps.append({"name": f[0], "group": f[1], "rc": None if f[2] == "-" else int(f[2]),
                          "seconds": float(f[3]), "log": f[4], "note": f[5], "cap": f[6] if len(f) > 6 else ""})
    return steps


def report(a):
    work, out = a.work, a.out
    steps = read_steps(work)
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
    docs, tests = gtest_summary(work)
    bench_doc, hf_doc, sdpa_doc = merged_bench(work), merged_hf(work), load_json(os.path.join(work, "sdpa.json"))
    for name, doc in (("tests.json", docs or None), ("bench.json", bench_doc), ("hf.json", hf_doc),
                      ("sdpa.json", sdpa_doc)):
        if doc is not None:  # the logs are in `out` already
            with open(os.path.join(out, name), "w") as f:
                json.dump(doc, f, indent=1)

    models = model_table(bench_doc, hf_doc)
    cases = attention_cases(sdpa_doc, bench_doc)
    prefill = cuda_bench.prefill_table(cases) if any(c["kind"] == "prefill" for c in cases) else []
    targets = cuda_bench.targets_table(cases) if prefill else []
    decode = cuda_bench.decode_table(cases) if any(c["kind"] == "decode" for c in cases) else []
    step_rows = [(s["name"], st, f"{s['seconds']:.0f}", key) for s, st, key, _ in results]
    failed = [(s["name"], st, lines) for s, st, _, lines in results if st in ("fail", "timeout", "warn") and lines]
    hint = rerun_hint(results)

    md = ["# scripts/gpu_check.sh report", "",
          f"Steps ran {a.elapsed} s of a {a.budget} s budget. Raw files: {', '.join(OUT_FILES)}.", "",
          "## Environment", "", "```", env.strip(), "```", ""]
    if models:
        md += ["## Model throughput, tok/s (kvshare_bench cuda/model/ vs transformers, SDPA, static cache, eager)", "",
               md_table(("row", "kvshare", "transformers", "kvshare / transformers", "transformers setup"), models),
               ""]
    if prefill:
        md += ["## Prefill attention: new path (Hopper kernel) vs old (mma) vs torch SDPA", "",
               "TFLOP/s; ratios = torch time / kvshare new-path time; issue 44's targets: >= 0.9x flash at H 128, "
               ">= 1.0x cuDNN at H 256 and 512.", "", *targets, "", *prefill, ""]
    if decode:
        md += ["## Decode attention vs torch SDPA", "", *decode, ""]
    if tests["measured"]:
        md += ["## Measured by the device tests (gtest properties)", ""] + [f"- {m}" for m in tests["measured"]] + [""]
    if failed:
        md += ["## Failures (first lines)", ""]
        for name, st, lines in failed:
            md += [f"- **{name}** ({st}):"] + [f"    - `{ln.replace('`', '')}`" for ln in lines]
        md.append("")
    md += ["## Steps", "", md_table(("step", "status", "s", "key numbers"), step_rows), ""]
    if hint:
        md += [f"Steps left: a second call `{hint[0]}` with carry `[\"gpu-pack\"]`, timeout_s {hint[1]}.", ""]
    with open(os.path.join(out, "report.md"), "w") as f:
        f.write("\n".join(md))

    # stdout: the device tool returns the last 12,000 characters, so the most
    # important comes last (the steps table, the rerun command) and the earlier
    # blocks are dropped first when the whole is too long (report.md has them all).
    blocks = []
    if tests["measured"]:
        blocks.append("\nmeasured by the device tests:\n" + "\n".join(tests["measured"][:20]))
    if any(c.get("kvshare_s") or c.get("mma_s") for c in cases):
        blocks.append("\nprefill attention (TFLOP/s; vs = torch time / kvshare new-path time):\n" + "\n".join(prefill))
    if any(r[3] != "-" or r[1][:1].isdigit() or r[2][:1].isdigit() for r in models):
        blocks.append("\nmodel tok/s:\n" + md_table(("row", "kvshare", "transformers", "ratio", "transformers setup"),
                                                    models))
    if targets and any(c.get("kvshare_s") or c.get("mma_s") for c in cases):
        blocks.append("\nissue 44's prefill targets:\n" + "\n".join(targets))
    for name, st, lines in failed:
        blocks.append(f"\n{name} ({st}):\n" + "\n".join("  " + ln for ln in lines[:6]))
    tail = [f"\nreport: {os.path.join(out, 'report.md')} ({a.elapsed} s of {a.budget} s)",
            md_table(("step", "status", "s", "key numbers"), step_rows)]
    if hint:
        tail.append(f"second call for the steps left: command `{hint[0]}`, carry [\"gpu-pack\"], timeout_s {hint[1]}")
    left = sorted(set(os.listdir(out)) - set(OUT_FILES) - {"report.md"})
    if left:
        tail.append(f"note: {out} holds other files too ({', '.join(left[:5])}): the device tool returns 8 at most")
    room = STDOUT_BUDGET - sum(len(t) + 1 for t in tail)
    kept = []
    for b in reversed(blocks):  # the last blocks are kept first
        if len(b) + 1 <= room:
            kept.insert(0, b)
            room -= len(b) + 1
        else:
            kept.insert(0, f"\n({b.strip().splitlines()[0]} left out of this output: see report.md)")
    print("\n".join(kept + tail))
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
    lines = sub.add_parser("bench-lines")
    lines.add_argument("src")
    a = ap.parse_args()
    if a.cmd == "bench-lines":
        print("\n".join(bench_lines(load_bench(a.src))))
        return 0
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
