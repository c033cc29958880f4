#!/usr/bin/env python3
"""The layer rule of docs/architecture.md §1, checked on every #include:

- a file of src/<layer>/ includes internal headers (`<folder>/x.h`) and
  public ones (`kvshare/<folder>/x.h`) of its own layer or lower ones only;
- a public header, include/kvshare/<layer>/x.h, includes only public headers
  of its own layer or lower ones (never src/);
- the front ends (server/, tools/, python/src/) include public headers and
  their own folder's, never src/.

Exits 1 and names every include that breaks the rule (file, line, what it
reaches, why). Run by ctest as `layers`. With --graph it also prints, per
folder, the layers its #include lines reach (internal headers named), bottom
to top: the include graph docs/architecture.md §1 shows.
"""
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# Bottom to top; a layer may include its own rank and lower ones. cuda/ is the
# op's device backend (it includes attention/'s plan headers; cache/ allocates
# through it); cuda_model/ is the GPU forward pass above model/.
LAYERS = ["common", "attention", "cuda", "cache", "gguf", "quant", "model", "cuda_model", "vision", "audio",
          "tokenizer", "grammar", "runtime", "server", "tools"]
RANK = {name: i for i, name in enumerate(LAYERS)}
RANK["python"] = RANK["tools"]
SRC_FOLDERS = {p.name for p in (ROOT / "src").iterdir() if p.is_dir()}
FRONT_ENDS = {"server": ROOT / "server", "tools": ROOT / "tools", "python": ROOT / "python" / "src"}
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
SOURCES = (".h", ".cc", ".cu", ".cuh")


def files(folder: Path):
    return sorted(p for p in folder.rglob("*") if p.suffix in SOURCES and p.is_file())


def includes(path: Path):
    text = path.read_text(errors="replace")
    for m in INCLUDE.finditer(text):
        yield text.count("\n", 0, m.start()) + 1, m.group(1)


def check_file(path: Path, layer: str, kind: str, errors: list):
    """kind: 'src' (a layer's own files), 'public' (include/kvshare/<layer>/), 'front' (a front end)."""
    rel = path.relative_to(ROOT)
    for line, inc in includes(path):
        parts = inc.split("/")
        if parts[0] == "kvshare":
            if len(parts) != 3 or parts[1] not in RANK:
                errors.append(f"{rel}:{line}: \"{inc}\" is not a public header of a layer (kvshare/<layer>/x.h)")
            elif RANK[parts[1]] > RANK[layer]:
                errors.append(f"{rel}:{line}: \"{inc}\" climbs from {layer} to {parts[1]}")
        elif parts[0] in SRC_FOLDERS and len(parts) > 1:
            if kind != "src":
                errors.append(f"{rel}:{line}: \"{inc}\" is an internal header of src/{parts[0]}/; "
                              f"a {'public header' if kind == 'public' else 'front end'} includes public headers only")
            elif RANK[parts[0]] > RANK[layer]:
                errors.append(f"{rel}:{line}: \"{inc}\" climbs from {layer} to {parts[0]}")


def graph() -> None:
    """Per layer (its src/ folder and its public headers): the other layers its files include, public
    (kvshare/<layer>/) or internal ([names])."""
    places = [(f, [ROOT / "src" / f, ROOT / "include" / "kvshare" / f])
              for f in sorted(SRC_FOLDERS, key=lambda f: RANK.get(f, 99))]
    places += [(layer, [folder]) for layer, folder in FRONT_ENDS.items()]
    for name, folders in places:
        reached = {}
        for path in (p for folder in folders if folder.is_dir() for p in files(folder)):
            for _, inc in includes(path):
                parts = inc.split("/")
                if parts[0] == "kvshare" and len(parts) == 3 and parts[1] != name:
                    reached.setdefault(parts[1], set())
                elif parts[0] in SRC_FOLDERS and len(parts) > 1 and parts[0] != name:
                    reached.setdefault(parts[0], set()).add("/".join(parts[1:]))
        text = ", ".join(f"{k} [{', '.join(sorted(v))}]" if v else k
                         for k, v in sorted(reached.items(), key=lambda kv: RANK.get(kv[0], 99)))
        label = name if name in FRONT_ENDS else f"src/{name}"
        print(f"{label:15s}-> {text or '(nothing)'}")


def main() -> int:
    if "--graph" in sys.argv[1:]:
        graph()
    errors = []
    for folder in sorted(SRC_FOLDERS):
        if folder not in RANK:
            errors.append(f"src/{folder}/ is in no layer: add it to LAYERS in {Path(__file__).relative_to(ROOT)} "
                          "and to docs/architecture.md §1")
            continue
        for path in files(ROOT / "src" / folder):
            check_file(path, folder, "src", errors)
    for folder in sorted(p for p in (ROOT / "include" / "kvshare").iterdir()):
        if folder.is_file():
            errors.append(f"{folder.relative_to(ROOT)}: public headers live in include/kvshare/<layer>/")
            continue
        if folder.name not in RANK:
            errors.append(f"{folder.relative_to(ROOT)}/ names no layer")
            continue
        for path in files(folder):
            check_file(path, folder.name, "public", errors)
    for layer, folder in FRONT_ENDS.items():
        for path in files(folder):
            check_file(path, layer, "front", errors)
    for e in errors:
        print(e)
    print(f"{len(errors)} include(s) break the layer rule" if errors else "every include keeps the layer rule")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
