"""CompileJsonSchema against the official JSON-Schema-Test-Suite (json/tests/ in
the jsonschema sdist on PyPI, pinned below and downloaded into a cache at test
time: the suite is over 1 MB, so nothing of it is vendored).

For every test group whose schema compiles, every instance is written as the
grammar writes documents (compact separators ", " and ": ", non-ASCII raw,
object members in the instance's order and in the schema's declared order) and
run byte by byte through the matcher (tests/tools/schema_suite_check.cc):
  - an invalid instance accepted in any of these forms fails the test (the
    grammar would let an invalid output through);
  - a valid instance may be refused: the output shape is narrower than the
    spec on purpose (kvshare/grammar/grammar.h: declared properties only,
    implied types, no exponent on bounded numbers, ...); the rate is checked
    against a floor so that a regression shows.
Drafts 4, 6, 7, 2019-09 and 2020-12, with optional/format/ for the formats the
compiler enforces. `python3 tests/python/test_json_schema_suite.py --table`
prints the per-draft, per-keyword table of docs/serving.md.
"""

import hashlib
import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

VERSION = "4.26.0"
SHA256 = "0c26707e2efad8aa1bfc5b7ce170f3fccc2e4918ff85989ba9ffa9facb2be326"
DRAFTS = ["draft4", "draft6", "draft7", "draft2019-09", "draft2020-12"]
FORMATS = ["date-time", "date", "time", "duration", "email", "hostname", "ipv4", "ipv6", "uuid", "uri"]
# Valid instances of compiled groups that the grammar takes, at least (what
# it takes today, 53%, less a margin; 63% before uniqueItems compiled to at
# most one item and the format stand-ins implied strings); see the module
# docstring.
VALID_FLOOR = 0.50


def suite_dir():
    if os.environ.get("KVSHARE_SCHEMA_SUITE_DIR"):
        return Path(os.environ["KVSHARE_SCHEMA_SUITE_DIR"])
    cache = Path(os.environ.get("KVSHARE_CACHE_DIR", Path.home() / ".cache" / "kvshare"))
    root = cache / f"jsonschema-{VERSION}"
    tests = root / "json" / "tests"
    if tests.is_dir():
        return tests
    cache.mkdir(parents=True, exist_ok=True)
    sdist = cache / f"jsonschema-{VERSION}.tar.gz"
    if not sdist.exists():
        r = subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--no-binary", ":all:",
                            f"jsonschema=={VERSION}", "-d", str(cache)], capture_output=True, text=True)
        if r.returncode != 0 or not sdist.exists():
            return None
    if hashlib.sha256(sdist.read_bytes()).hexdigest() != SHA256:
        raise RuntimeError(f"{sdist}: sha256 differs from the pinned {SHA256}")
    with tarfile.open(sdist) as t:
        members = [m for m in t.getmembers() if f"/json/tests/" in m.name and m.isfile()]
        t.extractall(cache, members=members)
    return tests


def ordered(value, schema, root, depth=0):
    """value with object members in the order `schema` declares them (following
    local $refs, allOf and items); members it does not declare keep theirs."""
    if depth > 20 or not isinstance(schema, dict):
        return value
    ref = schema.get("$ref")
    if isinstance(ref, str) and ref.startswith("#"):
        target = root
        for part in [p for p in ref[1:].split("/") if p]:
            part = part.replace("~1", "/").replace("~0", "~")
            if isinstance(target, dict) and part in target:
                target = target[part]
            else:
                target = None
                break
        if target is not None and len(schema) == 1:
            return ordered(value, target, root, depth + 1)
    if isinstance(value, dict):
        props = {}
        for s in [schema] + [b for b in schema.get("allOf", []) if isinstance(b, dict)]:
            if isinstance(s.get("properties"), dict):
                for k, v in s["properties"].items():
                    props.setdefault(k, v)
        out = {k: ordered(value[k], props[k], root, depth + 1) for k in props if k in value}
        for k, v in value.items():
            out.setdefault(k, v)
        return out
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        return [ordered(v, schema["items"], root, depth + 1) for v in value]
    return value


def forms(value, schema):
    texts = []
    for v in (value, ordered(value, schema, schema)):
        t = json.dumps(v, ensure_ascii=False, separators=(", ", ": "))
        if t not in texts:
            texts.append(t)
    return texts


def groups(tests):
    for draft in DRAFTS:
        files = sorted((tests / draft).glob("*.json"))
        files += [tests / draft / "optional" / "format" / f"{f}.json" for f in FORMATS]
        for path in files:
            if not path.exists():
                continue
            keyword = path.stem if path.parent.name == draft else f"format:{path.stem}"
            for group in json.loads(path.read_text()):
                yield draft, keyword, group


def run(tests, tool):
    """(draft, keyword, group, error or None, [(test, [accepted per form])])"""
    items = list(groups(tests))
    lines, shapes = [], []
    for draft, keyword, group in items:
        docs, shape = [], []
        for t in group["tests"]:
            f = forms(t["data"], group["schema"])
            shape.append(len(f))
            docs += f
        lines.append(json.dumps({"schema": group["schema"], "docs": docs}))
        shapes.append(shape)
    r = subprocess.run([tool], input="\n".join(lines) + "\n", capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    outs = [json.loads(line) for line in r.stdout.splitlines()]
    assert len(outs) == len(items)
    results = []
    for (draft, keyword, group), shape, out in zip(items, shapes, outs):
        if "error" in out:
            results.append((draft, keyword, group, out["error"], []))
            continue
        acc, at = [], 0
        for t, n in zip(group["tests"], shape):
            acc.append((t, out["accepted"][at:at + n]))
            at += n
        results.append((draft, keyword, group, None, acc))
    return results


def tool_path():
    tool = os.environ.get("KVSHARE_SCHEMA_SUITE_CHECK")
    if not tool:
        here = Path(__file__).resolve().parents[2]
        tool = str(here / "build" / "tests" / "schema_suite_check")
    return tool


def test_suite_compiled_groups_accept_no_invalid_instance():
    tool = tool_path()
    if not Path(tool).exists():
        pytest.skip(f"{tool} is not built")
    tests = suite_dir()
    if tests is None:
        pytest.skip("the jsonschema sdist could not be downloaded (offline)")
    wrong, valid, valid_ok, compiled = [], 0, 0, 0
    for draft, keyword, group, error, acc in run(tests, tool):
        if error is not None:
            # A refusal names a keyword or a reason, never crashes.
            assert error, group["description"]
            continue
        compiled += 1
        for t, accepted in acc:
            if t["valid"]:
                valid += 1
                valid_ok += any(accepted)
            elif any(accepted):
                wrong.append(f"{draft}/{keyword}: {group['description']} / {t['description']}: "
                             f"{json.dumps(t['data'])}")
    assert not wrong, "invalid instances accepted:\n" + "\n".join(wrong)
    assert compiled > 500
    assert valid_ok / valid >= VALID_FLOOR, f"{valid_ok} of {valid} valid instances accepted"


def table(tests, tool):
    rows = {}
    totals = {d: [0, 0, 0, 0, 0] for d in DRAFTS}
    for draft, keyword, group, error, acc in run(tests, tool):
        row = rows.setdefault(keyword, {d: [0, 0] for d in DRAFTS})
        row[draft][0 if error is None else 1] += 1
        tot = totals[draft]
        tot[0 if error is None else 1] += 1
        for t, accepted in acc:
            if t["valid"]:
                tot[2] += 1
                tot[3] += any(accepted)
            else:
                tot[4] += not any(accepted)
    print("| keyword (file) | " + " | ".join(DRAFTS) + " |")
    print("|---|" + "---|" * len(DRAFTS))
    for k in sorted(rows):
        cells = [f"{c}/{r}" if c + r else "" for c, r in (rows[k][d] for d in DRAFTS)]
        print(f"| {k} | " + " | ".join(cells) + " |")
    cells = [f"**{t[0]}/{t[1]}**" for t in (totals[d] for d in DRAFTS)]
    print("| **groups compiled/refused** | " + " | ".join(cells) + " |")
    cells = [f"{t[3]}/{t[2]}" for t in (totals[d] for d in DRAFTS)]
    print("| valid instances accepted | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    if "--table" in sys.argv:
        table(suite_dir(), tool_path())
    elif "--refusals" in sys.argv:
        for draft, keyword, group, error, acc in run(suite_dir(), tool_path()):
            if error is not None:
                print(f"{draft}/{keyword}: {group['description']}: {error}")
    elif "--wrong" in sys.argv:
        for draft, keyword, group, error, acc in run(suite_dir(), tool_path()):
            for t, accepted in acc:
                if error is None and t["valid"] != any(accepted):
                    print(f"{'INVALID-ACCEPTED' if not t['valid'] else 'valid-refused'} {draft}/{keyword}: "
                          f"{group['description']} / {t['description']}: {json.dumps(t['data'])[:100]} "
                          f"schema={json.dumps(group['schema'])[:200]}")
