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
bench = rep.cuda_bench  # bench/cuda_bench.py, as the report imports it

ALLOWED = {"report.md", *rep.OUT_FILES}


def test_bench_key_joins_kvshare_and_peer_names():
    assert rep.bench_key("cuda/model/gemma3_270m_shapes/decode/real_time") == "model/gemma3_270m_shapes/decode/C:1"
    assert rep.bench_key("cuda/model/g4/decode/B:8/real_time") == "model/g4/decode/C:8"
    assert rep.bench_key("cuda/model/g4/decode/c64") == "model/g4/decode/C:64"
    assert rep.bench_key("cuda/model/g4/decode/batch:2") == "model/g4/decode/C:2"
    assert rep.bench_key("model/g4/decode/C:8") == "model/g4/decode/C:8"
    assert rep.bench_key("cuda/model/g4/prefill512/iterations:3/real_time") == "model/g4/prefill512"
    assert rep.bench_key("cuda/model/gemma4_e2b_geometry/decode/C:64/real_time") == \
        "model/gemma4_e2b_geometry/decode/C:64"


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


def row(name, ms, **counters):
    return {"name": name, "run_type": "iteration", "real_time": ms, "time_unit": "ms", **counters}


def synthetic_run(tmp_path):
    """A device run with a GPU: a failed test, a test binary that died, the serve case failing,
    CUDA CLI errors, memcheck errors, the attention rows with torch's times, a model bench cut
    by its timeout, the peer's rows, the E2B steps left by the budget."""
    work, out = tmp_path / "work", tmp_path / "out"
    work.mkdir()
    out.mkdir()
    steps = [("env", "env", "0", "2.0", "env.log", "", "-"),
             ("gtest", "tests", "1", "30.5", "tests.log", "timeout 150", "150"),
             ("serve", "tests", "1", "9.0", "tests.log", "timeout 60", "60"),
             ("cli", "tests", "0", "5.0", "tests.log", "timeout 45", "45"),
             ("memcheck", "sanitize", "3", "60.0", "sanitize.log", "timeout 60", "60"),
             ("racecheck", "sanitize", "-", "0", "sanitize.log", "not in --only", "45"),
             ("attn", "bench", "0", "50.0", "bench.log", "timeout 90", "90"),
             ("sdpa", "bench", "0", "20.0", "bench.log", "timeout 75", "75"),
             ("model_270m", "bench", "124", "60.0", "bench.log", "timeout 60", "60"),
             ("hf_270m", "bench", "0", "30.0", "bench.log", "timeout 60", "60"),
             ("model_e2b", "bench", "-", "0", "bench.log", "skipped: the --budget was spent", "180"),
             ("hf_e2b", "bench", "-", "0", "bench.log", "skipped: the --budget was spent", "75")]
    (work / "steps.tsv").write_text("".join("\t".join(s) + "\n" for s in steps))
    (work / "env.log").write_text("NVIDIA H200, 580.159.04, 143771 MiB\ntorch 2.11 (CUDA 13.0): NVIDIA H200, sm_90\n"
                                  "gpu: 1\n")
    gtest = {"testsuites": [{"name": "CudaGqaDevice", "testsuite": [
        {"name": "Sweep", "result": "COMPLETED",
         "failures": [{"failure": "cuda_gqa_test.cc:80\nfirst wrong element 17: 0.5 vs 0.25\nmore"}]},
        {"name": "Edge", "result": "COMPLETED", "measured_1": "largest relative output error 3e-3"},
        {"name": "Odd", "result": "SKIPPED"}]}]}
    (work / "gtest_test_cuda.json").write_text(json.dumps(gtest))
    (work / "test_bins").write_text("test_runtime\ntest_cuda\n")  # test_runtime wrote no JSON
    (out / "tests.log").write_text("===== step gtest (at most 150 s) =====\n[  FAILED  ] CudaGqaDevice.Sweep\n"
                                   "===== step serve (at most 60 s) =====\n1 failed, 4 passed\n"
                                   "===== step cli (at most 45 s) =====\n--- m.gguf\n")
    (work / "pytest_serve.xml").write_text(
        '<testsuites><testsuite name="pytest">'
        '<testcase classname="t" name="test_device_values_are_listed_when_one_is_wrong"/>'
        '<testcase classname="t" name="test_device_cuda_without_a_gpu_fails_fast_naming_it">'
        '<skipped message="a GPU is usable here"/></testcase>'
        '<testcase classname="t" name="test_device_cuda_serves_text_on_a_gpu">'
        '<failure message="AssertionError: texts differ">...</failure></testcase>'
        '</testsuite></testsuites>')
    (work / "cli.tsv").write_text("tests/fixtures/vision/gemma3.f32.gguf\t0\t0\t1\t\n"
                                  "tests/fixtures/gemma4/e2b.f32.gguf\t0\t1\t-\tkvshare: error: no GPU forward pass\n")
    attn = {"benchmarks": [
        row("cuda/prefill/n32_kv8_h128/T:16384/causal/bfloat16/real_time", 10.0, hopper_kernel=1.0),
        row("cuda/prefill_mma/n32_kv8_h128/T:16384/causal/bfloat16/real_time", 25.0, hopper_kernel=0.0)]}
    (work / "bench_attn.json").write_text(json.dumps(attn))
    model = {"benchmarks": [row("cuda/model/gemma3_270m_shapes/prefill512/real_time", 20.0, **{"tok/s": 25600.0}),
                            row("cuda/model/gemma3_270m_shapes/decode/C:1/real_time", 2.0, **{"tok/s": 500.0})]}
    (work / "bench_model_270m.json").write_text(json.dumps(model, indent=1)[:-3])  # cut by the timeout
    (out / "bench.log").write_text("===== step attn (at most 90 s) =====\nok\n"
                                   "===== step model_270m (at most 60 s) =====\nRunning kvshare_bench\n")
    hf = {"device": "NVIDIA H200", "tiny": False, "rows": [
        {"name": "model/gemma3_270m_shapes/prefill512", "tok_s": 12800.0, "setup": "vocab 262144, prompt 512"},
        {"name": "model/gemma3_270m_shapes/decode/C:1", "tok_s": 100.0},
        {"name": "model/gemma3_270m_shapes/decode/C:8", "tok_s": 700.0}]}
    (work / "hf_270m.json").write_text(json.dumps(hf))
    cases = bench.merge_rows(attn["benchmarks"])
    cases[0]["torch"] = {"flash": 0.0095, "cudnn": 0.008, "efficient": None}
    (work / "sdpa.json").write_text(json.dumps({"device": "NVIDIA H200", "cases": cases}))
    (out / "sanitize.log").write_text("===== step memcheck (at most 60 s) =====\n"
                                      "========= Invalid __global__ read of size 4\n"
                                      "========= ERROR SUMMARY: 2 errors\n")
    return work, out


def steps_status(md):
    return {r.split("|")[1].strip(): r.split("|")[2].strip() for r in md.split("## Steps")[1].splitlines()
            if r.startswith("| ") and not r.startswith("| step")}


def test_report_of_a_synthetic_device_run(tmp_path, capsys):
    work, out = synthetic_run(tmp_path)
    args = type("A", (), {"work": str(work), "out": str(out), "budget": 420, "elapsed": 300})
    assert rep.report(args) == 0
    printed = capsys.readouterr().out
    md = (out / "report.md").read_text()
    assert steps_status(md) == {"env": "pass", "gtest": "fail", "serve": "fail", "cli": "fail", "memcheck": "fail",
                                "racecheck": "skip", "attn": "pass", "sdpa": "pass", "model_270m": "timeout",
                                "hf_270m": "pass", "model_e2b": "skip", "hf_e2b": "skip"}
    assert "1 passed, 1 failed, 1 skipped of 3" in md
    assert "first wrong element 17" in md  # the failure's first lines
    assert "test_runtime: no JSON result (it crashed or was killed" in md
    assert "test_device_cuda_serves_text_on_a_gpu: AssertionError: texts differ" in md
    assert "CudaGqaDevice.Edge: largest relative output error 3e-3" in md  # the tests' measured properties
    assert "e2b.f32.gguf: cuda exit 1: kvshare: error: no GPU forward pass" in md
    assert "2 errors" in md and "Invalid __global__ read" in md
    # The bench rows that finished before the cut, joined with the peer's by name.
    assert "| model/gemma3_270m_shapes/prefill512 | 25,600 | 12,800 | 2.00 | vocab 262144, prompt 512 |" in md
    assert "| model/gemma3_270m_shapes/decode/C:1 | 500 | 100 | 5.00 | - |" in md
    assert "| model/gemma3_270m_shapes/decode/C:8 | - | 700 | - | - |" in md
    names = [b["name"] for b in json.loads((out / "bench.json").read_text())["benchmarks"]]
    assert len(names) == 4 and names[-1].startswith("cuda/model/gemma3_270m_shapes/decode/C:1")
    # Prefill: new path (Hopper kernel ran) against the old mma path and torch, and the target per shape.
    flops = bench.flops({"kind": "prefill", "N": 32, "H": 128, "B": 1, "T": 16384, "W": 0}) / 1e12
    assert (f"| prefill N32/8 H128 B1 T16384 bfloat16 | {flops / 0.010:.1f} | yes | {flops / 0.025:.1f} | 2.50 "
            "| 0.95 | 0.80 | - | flash >= 0.9 | pass (0.950) |") in printed
    assert ("| N32/8 H128 | flash >= 0.9 | 1 of 1 | 1 | 0.950 (prefill N32/8 H128 B1 T16384 bfloat16) | 1 of 1 "
            "| pass |") in printed
    # The steps table, then the second call for what the budget and the timeout left, come last.
    lines = printed.rstrip().splitlines()
    assert lines[-2].startswith("| hf_e2b | skip | 0 | skipped: the --budget was spent |")
    assert lines[-1] == ("second call for the steps left: command `PYTHONUNBUFFERED=1 bash scripts/gpu_check.sh "
                         "device --only model_270m,model_e2b,hf_e2b --cap model_270m=120 --budget 300`, carry "
                         "[\"gpu-pack\"], timeout_s 350")
    assert len(printed) < 12000
    assert set(os.listdir(out)) <= ALLOWED


def test_prefill_targets_per_case_and_shape():
    rows = [row("cuda/prefill/n32_kv8_h128/T:4096/causal/float16/real_time", 1.0, hopper_kernel=1.0),
            row("cuda/prefill_mma/n32_kv8_h128/T:4096/causal/float16/real_time", 2.0),
            row("cuda/prefill/n32_kv8_h128/T:4096/W:1024/float16/real_time", 1.0, hopper_kernel=1.0),
            row("cuda/prefill/n16_kv8_h256/T:4096/causal/bfloat16/real_time", 1.0, hopper_kernel=0.0),
            row("cuda/prefill/n16_kv2_h512/T:4096/causal/bfloat16/real_time", 1.0, hopper_kernel=1.0),
            {**row("cuda/prefill/n16_kv2_h512/T:1024/causal/bfloat16/real_time", 0.0), "error_occurred": True,
             "error_message": "launch failed"},
            row("cuda/decode/n32_kv8_h128/B:1/T:4096/f16/real_time", 0.01),
            row("cuda/model/g/prefill512/real_time", 5.0)]
    cases = bench.merge_rows(rows)
    assert [(c["kind"], c["H"], c["W"], c["T"]) for c in cases] == [
        ("prefill", 128, 0, 4096), ("prefill", 128, 1024, 4096), ("prefill", 256, 0, 4096), ("prefill", 512, 0, 4096),
        ("prefill", 512, 0, 1024), ("decode", 128, 0, 4096)]
    h128, h128w, h256, h512, h512e, _ = cases
    assert (h128["kvshare_s"], h128["mma_s"], h128["hopper_kernel"]) == (1e-3, 2e-3, 1)
    h128["torch"] = {"flash": 0.00095}  # 0.95x: passes 0.9
    h128w["torch"] = {"flash": None, "flash_why": "No available kernel", "cudnn": 0.002}
    h256["torch"] = {"flash": 0.002, "cudnn": 0.00099}  # 0.99x cuDNN: fails 1.0
    h512["torch"] = {"cudnn": 0.0015}
    verdicts = [bench.prefill_target(c) for c in (h128, h128w, h256, h512, h512e)]
    assert [v["verdict"] for v in verdicts] == ["pass", "n/a", "fail", "pass", "n/a"]
    assert [v["backend"] for v in verdicts] == ["flash", "flash", "cudnn", "cudnn", "cudnn"]
    assert verdicts[1]["why"] == "flash refused: No available kernel"
    assert verdicts[4]["why"] == "kvshare: launch failed"
    shapes = {s["shape"]: s for s in bench.shape_verdicts(cases)}
    assert {k: (s["verdict"], s["judged"], s["passed"], s["hopper"]) for k, s in shapes.items()} == {
        "N32/8 H128": ("pass", 1, 1, 2), "N16/8 H256": ("fail", 1, 0, 0), "N16/2 H512": ("pass", 1, 1, 1)}
    assert shapes["N16/8 H256"]["worst"] == pytest.approx(0.99)
    table = "\n".join(bench.prefill_table(cases))
    assert "| prefill N32/8 H128 B1 T4096 W1024 float16 | " in table and "| n/a (flash refused: No available" in table
    assert "| flash >= 0.9 | pass (0.950) |" in table and "| cuDNN >= 1.0 | fail (0.990) |" in table
    assert "| launch failed | - | - | - |" in table  # H 512 T 1024: the new row failed, no old row


def test_model_rows_of_kvshare_bench_and_the_peer_share_names():
    peer = importlib.util.spec_from_file_location("peer_hf", ROOT / "bench" / "peer_hf_gpu_models.py")
    hf = importlib.util.module_from_spec(peer)
    peer.loader.exec_module(hf)
    # As bench/cuda_model_bench.cc registers them (checked against the binary below when built).
    ours = [f"cuda/model/{s}/{w}/real_time" for s in hf.SHAPES for w in ("prefill512", "decode/C:1", "decode/C:8",
                                                                            "decode/C:64")]
    theirs = [n for s in hf.SHAPES for n in hf.row_names(s, 512, [1, 8, 64])]
    assert sorted(rep.bench_key(n) for n in ours) == sorted(theirs)
    b = os.environ.get("KVSHARE_GPU_CHECK_BUILD")
    binary = Path(b or "/nonexistent") / "bench" / "kvshare_bench"
    if binary.exists():
        listed = subprocess.run([str(binary), "--benchmark_list_tests", "--benchmark_filter=^cuda/model/"],
                                capture_output=True, text=True, timeout=30).stdout.split()
        assert sorted(listed) == sorted(ours)


def test_eager_decode_rows_join_the_model_table():
    doc = {"benchmarks": [row("cuda/model_eager/gemma3_270m_shapes/decode/C:8/real_time", 2.0, **{"tok/s": 4000.0}),
                          row("cuda/model/gemma3_270m_shapes/decode/C:8/real_time", 1.0, **{"tok/s": 8000.0})]}
    table = rep.model_table(doc, None)
    assert [(t[0], t[1]) for t in table] == [("model/gemma3_270m_shapes/decode/C:8", "8,000"),
                                             ("model_eager/gemma3_270m_shapes/decode/C:8", "4,000")]


def test_a_second_call_is_named_for_the_steps_left():
    step = lambda n, note, cap: {"name": n, "note": note, "cap": cap}  # noqa: E731
    results = [(step("gtest", "timeout 150", "150"), "pass", "", []),
               (step("attn", "timeout 90", "90"), "timeout", "", []),
               (step("sdpa", "not in --only", "75"), "skip", "", []),
               (step("hf_e2b", "skipped: the --budget was spent", "75"), "skip", "", [])]
    assert rep.rerun_hint(results) == ("PYTHONUNBUFFERED=1 bash scripts/gpu_check.sh device --only attn,hf_e2b "
                                       "--cap attn=180 --budget 285", 335)
    assert rep.rerun_hint(results[:1] + results[2:3]) is None


def test_tests_skipped_on_a_machine_with_a_gpu_fail(tmp_path):
    work, out = synthetic_run(tmp_path)
    gtest = {"testsuites": [{"name": "D", "testsuite": [{"name": "A", "result": "SKIPPED"}]}]}
    (work / "gtest_test_cuda.json").write_text(json.dumps(gtest))
    (work / "test_bins").write_text("test_cuda\n")
    (out / "tests.log").write_text("===== step gtest (at most 9 s) =====\nno usable CUDA device: driver too old\n")
    step = {"name": "gtest", "log": "tests.log", "note": ""}
    logs = {"tests.log": (out / "tests.log").read_text()}
    assert rep.judge(step, 0, str(work), logs, gpu=True)[0] == "fail"
    assert rep.judge(step, 0, str(work), logs, gpu=False)[0] == "skip"


def test_the_serve_case_skipped_on_a_machine_with_a_gpu_fails(tmp_path):
    (tmp_path / "pytest_serve.xml").write_text(
        '<testsuite><testcase name="test_device_values_are_listed_when_one_is_wrong"/>'
        '<testcase name="test_device_cuda_serves_text_on_a_gpu"><skipped message="no usable GPU here: x"/></testcase>'
        '</testsuite>')
    step = {"name": "serve", "log": "tests.log", "note": ""}
    status, key, lines = rep.judge(step, 0, str(tmp_path), {}, gpu=True)
    assert (status, key) == ("fail", "1 passed, 0 failed, 1 skipped of 2")
    assert lines == ["serve --device cuda: skipped: no usable GPU here: x"]
    assert rep.judge(step, 0, str(tmp_path), {}, gpu=False)[0] == "skip"


def run_script(*args, timeout=60):
    return subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True, timeout=timeout, cwd=ROOT)


def test_unknown_groups_steps_and_caps_are_refused():
    r = run_script("device", "--only", "tests,speed")
    assert r.returncode == 2
    assert "--only: unknown group or step 'speed'; expected a comma list of tests, sanitize, bench or of the " \
        "steps: gtest serve cli memcheck racecheck attn sdpa model_270m hf_270m model_e2b hf_e2b" in r.stderr
    r = run_script("device", "--cap", "model_e3b=300")
    assert r.returncode == 2 and "--cap: unknown step 'model_e3b'" in r.stderr


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
    # Every step but serve (CI runs tests/python/test_server_lifecycle.py itself).
    r = run_script("local", "--build-dir", build_dir(), "--out", str(tmp_path), "--budget", "60",
                   "--only", "gtest,cli,sanitize,bench", *peers_python_args())
    assert r.returncode == 0, r.stdout + r.stderr
    tail = r.stdout.rstrip().splitlines()
    assert tail[-1].startswith("| hf_e2b | skip |"), r.stdout
    md = (tmp_path / "report.md").read_text()
    assert "## Environment" in md and "## Steps" in md
    rows = {ln.split("|")[1].strip(): ln.split("|")[2].strip() for ln in tail if ln.startswith("| ")}
    assert rows["gtest"] in ("pass", "skip"), r.stdout  # the device cases skip without a GPU
    assert rows["serve"] == "skip", r.stdout
    for step in ("attn", "model_270m", "model_e2b"):
        assert rows[step] == "skip", r.stdout  # every cuda/ benchmark reports no device
    assert set(os.listdir(tmp_path)) <= ALLOWED
    assert (tmp_path / "tests.json").exists()


def test_spent_budget_skips_every_step_and_still_reports(tmp_path):
    r = run_script("local", "--build-dir", build_dir(), "--out", str(tmp_path), "--budget", "0",
                   "--python", sys.executable)
    assert r.returncode == 0, r.stdout + r.stderr
    md = (tmp_path / "report.md").read_text()
    for step in ("gtest", "serve", "cli", "attn", "memcheck", "racecheck", "model_e2b"):
        assert f"| {step} | skip | 0 | skipped: the --budget was spent |" in md
    assert r.stdout.rstrip().splitlines()[-1].startswith(
        "second call for the steps left: command `PYTHONUNBUFFERED=1 bash scripts/gpu_check.sh device --only "
        "gtest,serve,cli,memcheck,racecheck,attn,sdpa,model_270m,hf_270m,model_e2b,hf_e2b --budget 300`")


def test_shellcheck_is_clean():
    import shutil
    if not shutil.which("shellcheck"):
        pytest.skip("shellcheck not installed")
    r = subprocess.run(["shellcheck", str(SCRIPT)], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout


def test_a_hung_test_binary_is_named(tmp_path):
    log = ("===== step gtest (at most 150 s) =====\n[ RUN      ] CudaGqaDevice.Edge\n[       OK ] CudaGqaDevice.Edge\n"
           "[ RUN      ] CudaGqaDevice.Sweep\n")
    step = {"name": "gtest", "log": "tests.log", "note": "timeout 150"}
    status, key, lines = rep.judge(step, 124, str(tmp_path), {"tests.log": log}, gpu=True)
    assert status == "timeout" and "timeout 150" in key
    assert lines[0] == "running: CudaGqaDevice.Sweep"
