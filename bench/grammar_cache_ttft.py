"""Time to first token of a structured-output request with a slow-to-compile
schema of the corpus (tests/tools/schema_corpus.py), first (the grammar is
compiled) and then again (the server's grammar cache, --grammar-cache,
hands back the compiled grammar), on a model of your choice.
By hand, not in CI; the figures are in docs/serving.md "Grammar cache".

    python3 bench/grammar_cache_ttft.py [--cli build/bin/kvshare]
        [--model tests/fixtures/gemma4/e2b.f32.gguf] [--schemas azure-pipelines.json,gitlab-ci.json]
        [--repeats 3] [--grammar-cache 256] [--json out.json]

Each schema: one server started with the given --grammar-cache, then
`--repeats` streamed chat requests in a row (max_tokens 4, greedy); TTFT is
the time from sending the request to the first content chunk. With
--grammar-cache 0 every request compiles (the control)."""
import argparse
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "python"))
sys.path.insert(0, str(ROOT / "tests" / "tools"))


def ttft(server, model_id, schema):
    from server_util import Stream
    body = {"model": model_id, "max_tokens": 4, "temperature": 0, "stream": True,
            "messages": [{"role": "user", "content": "Write a configuration file."}],
            "response_format": {"type": "json_schema", "json_schema": {"name": "s", "schema": schema}}}
    start = time.perf_counter()
    s = Stream(server, "/v1/chat/completions", body, timeout=600)
    assert s.status == 200, s.status
    first = None
    for data in s:
        if data == "[DONE]":
            break
        for c in json.loads(data)["choices"]:
            if first is None and c.get("delta", {}).get("content"):
                first = time.perf_counter() - start
    return first


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cli", default=str(ROOT / "build" / "bin" / "kvshare"))
    ap.add_argument("--model", default=str(ROOT / "tests" / "fixtures" / "gemma4" / "e2b.f32.gguf"))
    ap.add_argument("--schemas", default="azure-pipelines.json,gitlab-ci.json")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--grammar-cache", type=int, default=256)
    ap.add_argument("--json")
    args = ap.parse_args()
    os.environ["KVSHARE_CLI"] = args.cli
    import schema_corpus
    from server_util import Server, request
    wanted = args.schemas.split(",")
    schemas = {name: s for _, name, s in schema_corpus.from_wheels() if name in wanted}
    model_id = Path(args.model).name.removesuffix(".gguf")
    rows = []
    for name in wanted:
        with Server(args.model, "--slots", 1, "--grammar-cache", args.grammar_cache) as server:
            times = [ttft(server, model_id, schemas[name]) for _ in range(args.repeats)]
            m = request(server, "GET", "/metrics").text
            cache = dict(line.split(" ") for line in m.splitlines() if line.startswith("kvshare_grammar_cache_"))
        row = {"schema": name, "bytes": len(json.dumps(schemas[name])), "grammar_cache": args.grammar_cache,
               "ttft_s": [round(t, 4) for t in times], "metrics": cache}
        rows.append(row)
        print(json.dumps(row))
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
