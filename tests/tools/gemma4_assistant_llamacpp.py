"""The llamacpp stage of gemma4_assistant_fixtures.py (llama-server and llama-speculative-simple runs
on the GGUFs, written as llamacpp.json) and the check stage (the GGUFs read back with llama.cpp's
gguf-py)."""
import hashlib
import json
import os
import re
import signal
import subprocess
import time
import urllib.request
from pathlib import Path

from gemma4_assistant_common import K_DRAFT, OUT, PROMPTS, STEPS, THREADS, prompt_ids, tokenizer
from gemma4_fixtures import dump_lines, vendored_gguf  # (same JSON style and llama.cpp tools)


# ----------------------------------------------------------------------------------------------
# llama.cpp
# ----------------------------------------------------------------------------------------------
# --no-repack: this host's CPU has AMX-INT8, and llama.cpp@0c1e57098's AMX Q8_0 matmul
# (ggml_backend_amx_mul_mat) segfaults on target.q8_0.gguf (128/64-wide rows); F32 never uses it.
LLAMA_COMMON = ["-c", "256", "-t", str(THREADS), "-tb", str(THREADS), "-fa", "off", "-ctk", "f32", "-ctv", "f32",
                "-s", "0", "--no-repack"]
LLAMA_SPEC = ["--spec-type", "draft-mtp", "--spec-draft-n-max", str(K_DRAFT), "--spec-draft-n-min", "0",
              "--spec-draft-p-min", "0"]


def _rel(path):
    return str(Path(path).name)


def error_lines(log):
    """The error lines of a llama.cpp log ("E" level), without their timestamps."""
    lines = [re.sub(r"^\d+\.\d+\.\d+\.\d+ E ", "", l) for l in log.splitlines()
             if re.match(r"^\d+\.\d+\.\d+\.\d+ E ", l)]
    return "\n".join(lines) if lines else log[-600:]


class Server:
    """llama-server started (and stopped, by its pid) by this script."""

    def __init__(self, llama_bin, args, log: Path, port):
        self.port, self.log = port, log
        env = dict(os.environ, LLAMA_TRACE="1")
        self.cmd = [str(llama_bin / "llama-server"), *args, "--host", "127.0.0.1", "--port", str(port), "-np", "1"]
        self.fh = open(log, "w")
        self.proc = subprocess.Popen(self.cmd, stdout=self.fh, stderr=subprocess.STDOUT, env=env)
        t0 = time.time()
        while True:
            if self.proc.poll() is not None:
                self.fh.close()
                raise RuntimeError(f"llama-server exited {self.proc.returncode}: " + log.read_text()[-3000:])
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
                    if r.status == 200:
                        break
            except Exception:
                pass
            if time.time() - t0 > 300:
                self.stop()
                raise RuntimeError("llama-server did not come up")
            time.sleep(0.5)

    def post(self, path, body):
        req = urllib.request.Request(f"http://127.0.0.1:{self.port}{path}", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=600) as r:
            return json.loads(r.read())

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.fh.close()


def server_runs(llama_bin: Path, work: Path, tgt: Path, asst, greedy, port):
    """One llama-server (target [+ assistant]); every prompt as token ids, greedy, 32 tokens."""
    args = ["-m", str(tgt), *LLAMA_COMMON]
    if asst is not None:
        args += ["-md", str(asst), *LLAMA_SPEC, "-ctkd", "f32", "-ctvd", "f32"]
    log = work / f"server_{tgt.stem}_{asst.stem if asst else 'none'}.log"
    name = f"server_{tgt.stem}" + (f"+{asst.stem}" if asst else "")
    cmd = " ".join(["llama-server", *[_rel(a) if a.endswith(".gguf") else a for a in args]])
    try:
        srv = Server(llama_bin, args, log, port)
    except RuntimeError as e:
        return [{"name": name, "tool": "llama-server", "command": cmd, "error": error_lines(str(e))}]
    runs = []
    try:
        for pname, text in PROMPTS:
            ids = prompt_ids(text)
            before = log.stat().st_size
            body = {"prompt": ids, "n_predict": STEPS, "temperature": 0.0, "top_k": 1, "return_tokens": True,
                    "cache_prompt": False, "seed": 0}
            if asst is not None:
                body.update({"speculative.n_max": K_DRAFT, "speculative.n_min": 0, "speculative.p_min": 0.0})
            r = srv.post("/completion", body)
            tim = r.get("timings", {})
            for _ in range(40):  # the log is written by an async logger: wait until it has every round
                time.sleep(0.25)
                with open(log, errors="replace") as fh:
                    fh.seek(before)
                    new_log = fh.read()
                found = re.findall(r"accepted\s+(\d+)/\s*(\d+) draft tokens", new_log)
                rounds = [int(a) for a, _ in found]
                drafted_r = [int(b) for _, b in found]
                if asst is None or (sum(rounds) == tim.get("draft_n_accepted") and sum(drafted_r) == tim.get("draft_n")):
                    break
            run = {"name": name, "tool": "llama-server", "prompt": pname, "command": cmd,
                   "request": {k: v for k, v in body.items() if k != "prompt"},
                   "tokens_evaluated": r.get("tokens_evaluated"), "tokens": r.get("tokens"),
                   "equals_hf_greedy": r.get("tokens") == greedy[pname]}
            if asst is not None:
                run.update(draft_n=tim.get("draft_n"), draft_n_accepted=tim.get("draft_n_accepted"),
                           rounds=[{"drafted": d, "accepted": a} for a, d in zip(rounds, drafted_r)])
            runs.append(run)
            print(f"  {name} {pname}: equal {run['equals_hf_greedy']}, draft {run.get('draft_n')} "
                  f"accepted {run.get('draft_n_accepted')}")
    finally:
        srv.stop()
    return runs


def spec_simple_runs(llama_bin: Path, work: Path, tgt: Path, asst: Path, greedy):
    runs = []
    tok = tokenizer()
    for pname, text in PROMPTS:
        args = ["-m", str(tgt), "-md", str(asst), *LLAMA_COMMON, *LLAMA_SPEC, "-ctkd", "f32", "-ctvd", "f32",
                "-n", str(STEPS), "--temp", "0", "--top-k", "1", "-lv", "5", "-p", text]
        cmd = [str(llama_bin / "llama-speculative-simple"), *args]
        for attempt in range(3):  # its async logger has once lost a line: retry until the log is whole
            r = subprocess.run(cmd, capture_output=True, timeout=600)
            r.stdout = r.stdout.decode("utf-8", errors="replace")
            r.stderr = r.stderr.decode("utf-8", errors="replace")
            out = r.stdout + r.stderr
            rounds = re.findall(r"accepted (\d+)/(\d+) draft tokens, the last target token is: \((\d+)\)", out)
            m_d = re.search(r"n_drafted\s*=\s*(\d+)", out)
            m_a = re.search(r"n_accept\s*=\s*(\d+)", out)
            if r.returncode != 0 or (m_d and m_a and int(m_d.group(1)) == sum(int(d) for _, d, _ in rounds)
                                     and int(m_a.group(1)) == sum(int(a) for a, _, _ in rounds)):
                break
        name = f"speculative-simple_{tgt.stem}+{asst.stem}"
        shown = " ".join(["llama-speculative-simple", *[_rel(a) if a.endswith(".gguf") else a for a in args[:-1]],
                          json.dumps(text)])
        run = {"name": name, "tool": "llama-speculative-simple", "prompt": pname, "command": shown, "rc": r.returncode}
        if r.returncode != 0:
            run["error"] = error_lines(out)
            runs.append(run)
            continue
        m_p = re.search(r"n_predict\s*=\s*(\d+)", out)
        # HF's 32 tokens may end inside a UTF-8 sequence (byte tokens): drop the trailing U+FFFD
        hf_text = tok.decode(greedy[pname], skip_special_tokens=False).rstrip("\ufffd")
        gen = r.stdout
        run.update(stdout=gen, hf_greedy_text=hf_text,
                   text_starts_with_hf_greedy_text=None,
                   n_predict=int(m_p.group(1)) if m_p else None,
                   draft_n=int(m_d.group(1)) if m_d else None, draft_n_accepted=int(m_a.group(1)) if m_a else None,
                   rounds=[{"accepted": int(a), "drafted": int(d), "last_token": int(t)} for a, d, t in rounds])
        # stdout is "<bos>" + the prompt text followed by the generated text (after blank lines)
        at = gen.find(text)
        body = gen[at + len(text):] if at >= 0 else gen
        body = body.rstrip("\n")
        run["generated_text"] = body
        del run["stdout"]
        n = min(len(body), len(hf_text))
        run["text_starts_with_hf_greedy_text"] = body[:n] == hf_text[:n] and n > 0
        runs.append(run)
        print(f"  {name} {pname}: rounds {len(rounds)}, draft {run['draft_n']} accepted {run['draft_n_accepted']}, "
              f"text agrees {run['text_starts_with_hf_greedy_text']}")
    return runs


def stage_llamacpp(work: Path, llama_bin: Path):
    tj = json.loads((OUT / "target.hf.json").read_text())
    greedy = {p["name"]: p["tokens"] for p in tj["prompts"]}
    runs = []
    port = 18431
    tf, tq = OUT / "target.f32.gguf", OUT / "target.q8_0.gguf"
    ap, ao = OUT / "assistant_plain.f32.gguf", OUT / "assistant_ordered.f32.gguf"
    runs += server_runs(llama_bin, work, tf, None, greedy, port)
    runs += server_runs(llama_bin, work, tq, None, greedy, port)
    runs += server_runs(llama_bin, work, tf, ap, greedy, port)
    runs += server_runs(llama_bin, work, tq, ap, greedy, port)
    runs += server_runs(llama_bin, work, tf, ao, greedy, port)
    runs += spec_simple_runs(llama_bin, work, tf, ap, greedy)
    # the same round structure as this script's clean loops (speculative.hf.json)?
    spec = json.loads((OUT / "speculative.hf.json").read_text())
    clean = {(p["prompt"], r["name"]): [x["accepted"] for x in r["rounds"]] for p in spec["prompts"] for r in p["runs"]}
    for run in runs:
        if "rounds" not in run or "+assistant_plain" not in run["name"]:
            continue
        got = [x["accepted"] for x in run["rounds"]]
        cmp = {}
        for sim in ("clean_hf_hf_assistant_plain", "clean_hf_llamacpp_assistant_plain",
                    "clean_lcpp_llamacpp_assistant_plain", "hf_generate_assistant_plain"):
            ref = clean[(run["prompt"], sim)]
            cmp[sim] = "equal" if got == ref else ("prefix" if got[:len(ref)] == ref else "differs")
        run["rounds_vs_hf_json"] = cmp
    sysinfo = subprocess.run([str(llama_bin / "llama-cli"), "--version"], capture_output=True, text=True)
    head = {
        "source": "llama.cpp ggml-org/llama.cpp@0c1e57098 (llama-cpp-python 0.3.36 sdist's vendor/llama.cpp), "
                  "CPU build, tools run by this script",
        "version": (sysinfo.stdout + sysinfo.stderr).strip().splitlines()[-2:],
        "k": K_DRAFT,
        "steps": STEPS,
        "notes": "server: prompt as token ids (tokens_evaluated = its length), temperature 0, per-request "
                 "speculative.n_max/p_min; rounds parsed from the LLAMA_TRACE=1 log ('accepted a/d draft tokens'). "
                 "speculative-simple: text prompt (tokenizes to the same ids), stdout = prompt + generated text, "
                 "rounds from its -lv 5 log.",
    }
    compact = lambda v: json.dumps(v, separators=(",", ":"), ensure_ascii=False)
    text = dump_lines(head, {"runs": [compact(r) for r in runs]})
    (OUT / "llamacpp.json").write_text(text)
    print(f"  llamacpp.json: {len(text)} bytes")


# ----------------------------------------------------------------------------------------------
# Checks
# ----------------------------------------------------------------------------------------------
def check_ggufs(llama_cpp: Path):
    gguf = vendored_gguf(llama_cpp)
    GGUFReader, GGUFValueType = gguf.GGUFReader, gguf.GGUFValueType

    for path in sorted(OUT.glob("*.gguf")):
        r = GGUFReader(str(path))
        print(f"== {path.name}: {path.stat().st_size} bytes, sha256 {hashlib.sha256(path.read_bytes()).hexdigest()[:16]}")
        for f in r.fields.values():
            if f.name.startswith("tokenizer.ggml.") and f.types and f.types[0] == GGUFValueType.ARRAY:
                print(f"  {f.name}: [{len(f.data)} items]")
            elif f.name == "tokenizer.chat_template":
                print(f"  {f.name}: [{len(f.contents())} chars]")
            else:
                print(f"  {f.name}: {f.contents()}")
        for t in r.tensors:
            print(f"    {t.name} {list(map(int, t.shape))} {t.tensor_type.name}")
