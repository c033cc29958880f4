"""scripts/gpu_check.sh without a GPU (docs/gpu_check.md): its report on synthetic
device runs (failures, a timeout cut, the model join), and its device mode as a
dry run on the build tree named by KVSHARE_GPU_CHECK_BUILD (skipped without it)."""
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "gpu_check.sh"
spec = importlib.util.spec_from_file_location("gpu_check_report", ROOT / "scripts" / "gpu_check_report.py")
rep = importlib.util.module_from_spec(spec)
spec.loader.exec_module(rep)

ALLOWED = {"report.md", *rep.OUT_FILES}


def test_bench_key_joins_kvshare_and_peer_names():
    assert rep.bench_key("cuda/model/gemma3_270m_shapes/decode/real_time") == "model/gemma3_270m_shapes/decode/C:1"
    assert rep.bench_key("cuda/model/g4/decode/B:8/real_time") == "model/g4/decode/C:8"
    assert rep.bench_key("cuda/model/g4/decode/c64") == "model/g4/decode/C:64"
    assert rep.bench_key("cuda/model/g4/decode/batch:2") == "model/g4/decode/C:2"
    assert rep.bench_key("model/g4/decode/C:8") == "model/g4/decode/C:8"
    assert rep.bench_key("cuda/model/g4/prefill512/iterations:3/real_time") == "model/g4/prefill512"


def test_load_bench_closes_a_file_cut_by_a_timeout(tmp_path):
    rows = [{"name": f"cuda/x/{i}", "run_type": "iteration", "real_time": 1.0, "time_unit": "ms"} for i in range(3)]
    full = json.dumps({"context": {}, "benchmarks": rows}, indent=1)
    cut = full[:full.index('"cuda/x/2"')]  # the third row half written
    p = tmp_path / "b.json"
    p.write_text(cut)
    assert [b["name"] for b in rep.load_bench(p)["benchmarks"]] == ["cuda/x/0", "cuda/x/1"]
    p.write_text('{"context": {}, "benchmarks": [')
    assert rep.load_bench(p)["benchmarks"] == []
    assert rep.load_bench(tmp_path / "absent.json") is None


def synthetic_run(tmp_path):
    """A device run with a GPU: a failed test, CUDA CLI errors, a bench cut by its timeout,
    memcheck errors, the peer's rows."""
    work, out = tmp_path / "work", tmp_path / "out"
    work.mkdir()
    out.mkdir()
    steps = [("env", "env", "0", "2.0", "env.log", ""), ("tests", "tests", "1", "30.5", "tests.log", "timeout 150"),
             ("cli", "tests", "0", "5.0", "tests.log", "timeout 60"),
             ("memcheck", "sanitize", "3", "60.0", "sanitize.log", "timeout 90"),
             ("racecheck", "sanitize", "-", "0", "sanitize.log", "not in --only"),
             ("bench", "bench", "124", "150.0", "bench.log", "timeout 150"),
             ("sdpa", "bench", "0", "20.0", "bench.log", "timeout 90"),
             ("hf", "bench", "-", "0", "bench.log", "skipped: the --budget was spent")]
    (work / "steps.tsv").write_text("".join("\t".join(s) + "\n" for s in steps))
    (work / "env.log").write_text("NVIDIA H200, 580.159.04, 143771 MiB\ntorch 2.11 (CUDA 13.0): NVIDIA H200, sm_90\n"
                                  "gpu: 1\n")
    gtest = {"testsuites": [{"name": "CudaGqaDevice", "testsuite": [
        {"name": "Sweep", "result": "COMPLETED",
         "failures": [{"failure": "cuda_gqa_test.cc:80\nfirst wrong element 17: 0.5 vs 0.25\nmore"}]},
        {"name": "Edge", "result": "COMPLETED"}, {"name": "Odd", "result": "SKIPPED"}]}]}
    (work / "gtest_test_cuda.json").write_text(json.dumps(gtest))
    (out / "tests.log").write_text("===== step tests (at most 150 s) =====\n[  FAILED  ] CudaGqaDevice.Sweep\n"
                                   "===== step cli (at most 60 s) =====\n--- m.gguf\n")
    (work / "cli.tsv").write_text("tests/fixtures/vision/gemma3.f32.gguf\t0\t0\t1\t\n"
                                  "tests/fixtures/gemma4/e2b.f32.gguf\t0\t1\t-\tkvshare: error: no GPU forward pass\n")
    bench = {"benchmarks": [
        {"name": "cuda/model/gemma3_270m_shapes/prefill512/real_time", "run_type": "iteration", "real_time": 20.0,
         "time_unit": "ms", "tok/s": 25600.0},
        {"name": "cuda/model/gemma3_270m_shapes/decode/real_time", "run_type": "iteration", "real_time": 2.0,
         "time_unit": "ms", "tok/s": 500.0}]}
    text = json.dumps(bench, indent=1)
    (work / "bench.json").write_text(text[:-3])  # cut by the timeout
    (out / "bench.log").write_text("===== step bench (at most 150 s) =====\nRunning kvshare_bench\n")
    hf = {"device": "NVIDIA H200", "tiny": False, "rows": [
        {"name": "model/gemma3_270m_shapes/prefill512", "tok_s": 12800.0, "setup": "vocab 262144, prompt 512"},
        {"name": "model/gemma3_270m_shapes/decode/C:1", "tok_s": 100.0},
        {"name": "model/gemma3_270m_shapes/decode/C:8", "tok_s": 700.0}]}
    (work / "hf.json").write_text(json.dumps(hf))
    case = {"kind": "prefill", "N": 32, "Nkv": 8, "H": 128, "B": 1, "W": 0, "dtype": "bfloat16"}
    sdpa = {"device": "NVIDIA H200", "cases": [
        {**case, "T": 4096, "kvshare_s": 0.001, "torch": {"flash": 0.002}},
        {**case, "T": 16384, "kvshare_s": 0.010, "torch": {"flash": 0.009, "cudnn": 0.008, "efficient": None}}]}
    (work / "sdpa.json").write_text(json.dumps(sdpa))
    (out / "sanitize.log").write_text("===== step memcheck (at most 90 s) =====\n========= Invalid __global__ read of size 4\n"
                                      "========= ERROR SUMMARY: 2 errors\n")
    return work, out


def test_report_of_a_synthetic_device_run(tmp_path, capsys):
    work, out = synthetic_run(tmp_path)
    args = type("A", (), {"work": str(work), "out": str(out), "budget": 420, "elapsed": 300})
    assert rep.report(args) == 0
    printed = capsys.readouterr().out
    md = (out / "report.md").read_text()
    status = {r.split("|")[1].strip(): r.split("|")[2].strip() for r in md.split("## Steps")[1].splitlines()
              if r.startswith("| ") and not r.startswith("| step")}
    assert status == {"env": "pass", "tests": "fail", "cli": "fail", "memcheck": "fail", "racecheck": "skip",
                      "bench": "timeout", "sdpa": "pass", "hf": "skip"}
    assert "1 passed, 1 failed, 1 skipped of 3" in md
    assert "first wrong element 17" in md  # the failure's first lines
    assert "e2b.f32.gguf: cuda exit 1: kvshare: error: no GPU forward pass" in md
    assert "2 errors" in md and "Invalid __global__ read" in md
    # The bench rows that finished before the cut, joined with the peer's by name.
    assert "| model/gemma3_270m_shapes/prefill512 | 25,600 | 12,800 | 2.00 | vocab 262144, prompt 512 |" in md
    assert "| model/gemma3_270m_shapes/decode/C:1 | 500 | 100 | 5.00 | - |" in md
    assert "| model/gemma3_270m_shapes/decode/C:8 | - | 700 | - | - |" in md
    assert json.loads((out / "bench.json").read_text())["benchmarks"][1]["tok/s"] == 500.0
    # The attention summary: the largest case of the shape, torch's time over kvshare's per backend.
    assert "| prefill N32/8 H128 B1 T16384 bfloat16 | ok | 0.90 | 0.80 | n/a | flash >= 0.9 |" in printed
    assert "T4096" not in printed
    # The steps table is the last thing printed (the device tool returns the output's tail).
    assert printed.rstrip().splitlines()[-1].startswith("| hf | skip | 0 | skipped: the --budget was spent |")
    assert set(os.listdir(out)) <= ALLOWED


def test_tests_skipped_on_a_machine_with_a_gpu_fail(tmp_path):
    work, out = synthetic_run(tmp_path)
    gtest = {"testsuites": [{"name": "D", "testsuite": [{"name": "A", "result": "SKIPPED"}]}]}
    (work / "gtest_test_cuda.json").write_text(json.dumps(gtest))
    (out / "tests.log").write_text("===== step tests (at most 9 s) =====\nno usable CUDA device: driver too old\n")
    step = {"name": "tests", "log": "tests.log", "note": ""}
    logs = {"tests.log": (out / "tests.log").read_text()}
    assert rep.judge(step, 0, str(work), logs, gpu=True)[0] == "fail"
    assert rep.judge(step, 0, str(work), logs, gpu=False)[0] == "skip"


def run_script(*args, timeout=60):
    return subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True, timeout=timeout, cwd=ROOT)


def test_unknown_group_is_refused():
    r = run_script("device", "--only", "tests,speed")
    assert r.returncode == 2
    assert "--only: unknown group 'speed'; expected a comma list of tests, sanitize, bench" in r.stderr


def build_dir():
    b = os.environ.get("KVSHARE_GPU_CHECK_BUILD")
    if not b or not (Path(b) / "tests" / "test_cuda").exists():
        pytest.skip("KVSHARE_GPU_CHECK_BUILD names no build tree with tests/test_cuda")
    return b


def peers_python_args():
    """The peers run with this Python; where it has torch they are left out (a CPU run takes a minute)."""
    has_torch = importlib.util.find_spec("torch") is not None
    return ["--python", sys.executable] + (["--no-peers"] if has_torch else [])


def test_local_dry_run_writes_the_report(tmp_path):
    r = run_script("local", "--build-dir", build_dir(), "--out", str(tmp_path), "--budget", "60",
                   "--only", "tests,bench,sanitize", *peers_python_args())
    assert r.returncode == 0, r.stdout + r.stderr
    tail = r.stdout.rstrip().splitlines()
    assert tail[-1].startswith("| hf | skip |") or tail[-1].startswith("| bench | skip |"), r.stdout
    md = (tmp_path / "report.md").read_text()
    assert "## Environment" in md and "## Steps" in md
    rows = {ln.split("|")[1].strip(): ln.split("|")[2].strip() for ln in tail if ln.startswith("| ")}
    assert rows["tests"] in ("pass", "skip"), r.stdout  # the device cases skip without a GPU
    assert rows["bench"] == "skip", r.stdout  # every cuda/ benchmark reports no device
    assert set(os.listdir(tmp_path)) <= ALLOWED
    assert (tmp_path / "tests.json").exists()


def test_spent_budget_skips_every_step_and_still_reports(tmp_path):
    r = run_script("local", "--build-dir", build_dir(), "--out", str(tmp_path), "--budget", "0",
                   "--python", sys.executable)
    assert r.returncode == 0, r.stdout + r.stderr
    md = (tmp_path / "report.md").read_text()
    for step in ("tests", "cli", "bench", "memcheck", "racecheck"):
        assert f"| {step} | skip | 0 | skipped: the --budget was spent |" in md


def test_shellcheck_is_clean():
    import shutil
    if not shutil.which("shellcheck"):
        pytest.skip("shellcheck not installed")
    r = subprocess.run(["shellcheck", str(SCRIPT)], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout


def test_a_hung_test_binary_is_named(tmp_path):
    log = ("===== step tests (at most 150 s) =====\n[ RUN      ] CudaGqaDevice.Edge\n[       OK ] CudaGqaDevice.Edge\n"
           "[ RUN      ] CudaGqaDevice.Sweep\n")
    step = {"name": "tests", "log": "tests.log", "note": "timeout 150"}
    status, key, lines = rep.judge(step, 124, str(tmp_path), {"tests.log": log}, gpu=True)
    assert status == "timeout" and "timeout 150" in key
    assert lines[0] == "running: CudaGqaDevice.Sweep"
