#!/usr/bin/env bash
# The GPU check of issue 44 in one device call (docs/gpu_check.md): build and pack
# here, run on the lent GPU machine, read one report.
#
#   scripts/gpu_check.sh pack [--build-dir DIR] [--jobs N] [--no-cli] [--test-target test_X]...
#       Here, no GPU needed: builds test_cuda (the runtime's DeviceSupportGpu
#       cases included), each --test-target, kvshare_bench and the kvshare CLI with CUDA on
#       (Release, the CUDA targets CMakeLists.txt sets), packs them with the
#       shared libraries the device machine lacks into gpu-pack/ (git-ignored),
#       runs them with this host's libraries hidden (unshare -m, where it works),
#       fails if the tree and the pack exceed the call's 64 MiB, and prints the
#       device tool call to make.
#   scripts/gpu_check.sh device [--pack DIR] [--out DIR] [--budget S] [--only LIST] [...]
#       On the device machine, from the repository root: unpacks the pack, checks
#       the GPU, runs the steps, writes report.md and the raw logs to --out
#       (default $OUT), at most 8 files; prints the report's tables last.
#   scripts/gpu_check.sh local [--build-dir DIR] [device options]
#       The device mode here on a build tree (CUDA on or off): a dry run in which
#       the device tests skip and the benchmarks report no device.
#
# Steps, in order (group, cap in seconds): gtest (tests, 150), serve (tests, 60),
# cli (tests, 45), memcheck (sanitize, 60), racecheck (sanitize, 45), attn
# (bench, 90), sdpa (bench, 75), model_270m (bench, 60), hf_270m (bench, 60),
# model_e2b (bench, 180), hf_e2b (bench, 75); docs/gpu_check.md says what each runs.
#
# Device options:
#   --budget S            seconds for all steps (default 420); each step also has
#                         its cap, cut to what is left of the budget
#   --only LIST           comma list of groups (tests, sanitize, bench) and step
#                         names (e.g. model_e2b,hf_e2b)
#   --cap STEP=S          another cap for a step (repeatable)
#   --no-peers            without the PyTorch / transformers steps (sdpa, hf_*)
#   --bench-filter RE     the attn step's --benchmark_filter (default
#                         ^cuda/(decode|prefill): attention, old and new prefill)
#   --bench-min-time S    kvshare_bench --benchmark_min_time (default 0.2)
#   --gtest-filter F      the gtest step's --gtest_filter for every binary
#                         (default *)
#   --memcheck-filter F   --gtest_filter of test_cuda under memcheck (default below)
#   --racecheck-filter F  --gtest_filter of test_cuda under racecheck (default below)
#   --peer-args "ARGS"    more options of bench/peer_hf_gpu_models.py (e.g.
#                         "--gemma4-vocab 262144 --decode-steps 64")
#   --python PY           the Python of the peers and pytest (default python3)
set -uo pipefail

SELF=$(readlink -f "${BASH_SOURCE[0]}")
ROOT=$(cd "$(dirname "$SELF")/.." && pwd)
REPORT_PY=$ROOT/scripts/gpu_check_report.py
MIB64=67108864                      # the device call's working tree + carry limit
# Defaults; a step's shell (`_step`) inherits the values device() set. The
# sanitizers run a short subset: the op's edge cases, the Hopper kernel's stage
# cases (every prefill path), one cache decode case, one Gemma 4 / 3n model
# each (their kernels and cuBLAS products) and one with image rows and
# bidirectional spans (the rows' scatter, the spans' causal bound).
MEMCHECK_FILTER=${MEMCHECK_FILTER:-'CudaGqaDevice.EdgeCases*:CudaGqaDevice.HopperPrefillStages*:CacheDtypes/CudaCacheDevice.*/0:Fixtures/CudaGemma4Device.LogitsFollowTheCpuModel/ple_shared_bf16:Weights/CudaGemma3nDevice.LogitsFollowTheCpuModel/bfloat16:Fixtures/CudaModelMediaDevice.SpansFollowTheCpuModel/gemma4_large_bf16'}
RACECHECK_FILTER=${RACECHECK_FILTER:-'CudaGqaDevice.HopperPrefillStages*:CudaGqaDevice.EdgeCases*'}
CLI_MODELS=${CLI_MODELS:-"tests/fixtures/vision/gemma3.f32.gguf tests/fixtures/gemma4/e2b.f32.gguf tests/fixtures/gemma3n/e2b.f32.gguf"}
# name group cap log: the order they run in (correctness first, the benchmarks
# last: their times are the least known, and a second call can rerun them).
STEPS=("gtest tests 150 tests.log" "serve tests 60 tests.log" "cli tests 45 tests.log"
  "memcheck sanitize 60 sanitize.log" "racecheck sanitize 45 sanitize.log"
  "attn bench 90 bench.log" "sdpa bench 75 bench.log"
  "model_270m bench 60 bench.log" "hf_270m bench 60 bench.log"
  "model_e2b bench 180 bench.log" "hf_e2b bench 75 bench.log")
PEER_STEPS=" sdpa hf_270m hf_e2b "

die() { echo "gpu_check: $*" >&2; exit 2; }
now() { date +%s.%N; }
secs() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.1f", b - a }'; }

usage() { sed -n '2,/^set -uo/p' "$SELF" | sed '$d; s/^# \{0,1\}//'; }

# ---------------------------------------------------------------- pack (here)

# Libraries the device machine has or must not take from us: glibc's, the
# driver's, and cuBLAS (found there: the CUDA toolkit or torch's nvidia wheels).
is_system_lib() {
  case $1 in
    linux-vdso.so.*|ld-linux-x86-64.so.*|libc.so.*|libm.so.*|libpthread.so.*|libdl.so.*|librt.so.*|libutil.so.*|libresolv.so.*) return 0 ;;
    libcuda.so.*|libcublas.so.*|libcublasLt.so.*|libnvidia-*) return 0 ;;
  esac
  return 1
}

needed() { readelf -d "$1" 2>/dev/null | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p'; }

# lib/libdnnl.so.2 as a stub whose functions abort with a message: oneDNN (40 MB)
# does not fit the call's 64 MiB, and only the CPU bf16 paths (GqaMatMulPrecision::kBf16,
# src/vision/) call it, which the device steps never run.
make_dnnl_stub() {
  local stage=$1 c=$1/dnnl_stub.c syms
  syms=$(for f in "$stage"/bin/*; do nm -D --undefined-only "$f"; done | awk '$2 ~ /^dnnl_/ { print $2 }' | sort -u)
  {
    cat <<'EOF'
#include <stdio.h>
#include <stdlib.h>
static void stub(const char* f) {
  fprintf(stderr, "kvshare GPU pack: %s called, but libdnnl.so.2 here is a stub (scripts/gpu_check.sh pack); "
          "the CPU bf16 kernels do not run from the pack\n", f);
  abort();
}
EOF
    for s in $syms; do echo "void $s(void) { stub(\"$s\"); }"; done
  } >"$c"
  cc -shared -fPIC -O1 -Wl,-soname,libdnnl.so.2 -o "$stage/lib/libdnnl.so.2" "$c" || die "building the oneDNN stub failed"
  rm -f "$c"
  echo "  libdnnl.so.2: stub of $(wc -w <<<"$syms") functions"
}

# Copies the shared libraries of stage/bin that the device lacks into stage/lib
# (libstdc++ and libgcc_s into stage/lib/fallback: used there only when the
# device's own are older than ours).
copy_libs() {
  local stage=$1 f soname name p
  declare -A where=() seen=()
  while read -r soname _ p _; do [[ ${p:-} == /* ]] && where[$soname]=$p; done < <(ldd "$stage"/bin/* 2>/dev/null | grep '=>')
  local queue=()
  for f in "$stage"/bin/*; do mapfile -t -O ${#queue[@]} queue < <(needed "$f"); done
  while ((${#queue[@]})); do
    name=${queue[0]}
    queue=("${queue[@]:1}")
    [[ -n ${seen[$name]:-} ]] && continue
    seen[$name]=1
    is_system_lib "$name" && continue
    [[ $name == libdnnl.so.* ]] && continue # the stub
    p=${where[$name]:-}
    [[ -n $p ]] || die "pack: no path for $name (ldd of the binaries)"
    case $name in
      libstdc++.so.*|libgcc_s.so.*) cp -L "$p" "$stage/lib/fallback/$name" ;;
      *) cp -L "$p" "$stage/lib/$name" ;;
    esac
    mapfile -t -O ${#queue[@]} queue < <(needed "$p")
  done
}

# The C++ / CUDA sources and build files of the pack, hashed: the device run
# warns when the tree it runs in is not the one the pack was built from.
source_files() {
  git -C "$ROOT" ls-files -co --exclude-standard -- '*.cc' '*.h' '*.cu' '*.cuh' '*.cmake' '*CMakeLists.txt' |
    grep -v '^gpu-pack/' | sort
}
source_digest() { # reads the file list on stdin, run from ROOT
  while read -r f; do [[ -f $f ]] && cat "$f"; done | sha256sum | cut -c1-16
}

tree_bytes() { # what the device call sends besides carry: tracked + untracked-not-ignored files
  git -C "$ROOT" ls-files -co --exclude-standard -z | (cd "$ROOT" && xargs -0 stat -c %s 2>/dev/null) |
    awk '{ s += $1 } END { print s + 0 }'
}
untracked_bytes() { # the untracked, not ignored part of it (they travel too)
  git -C "$ROOT" ls-files -o --exclude-standard -z | (cd "$ROOT" && xargs -0 -r stat -c %s 2>/dev/null) |
    awk '{ s += $1 } END { print s + 0 }'
}
mb() { awk -v x="$1" 'BEGIN { printf "%.2f", x / 1e6 }'; }

# The pack's binaries run with this host's libraries hidden, as on the device
# machine, which has glibc, the driver and (found at run time) cuBLAS but none
# of our Debian libraries: in a mount namespace /usr/lib/x86_64-linux-gnu holds
# glibc alone; the binaries list their tests, test_cuda runs its plan tests and
# the host-side DeviceSupport cases (the CPU model of DeviceSupportGpu: oneDNN's
# stub must not be reached), and the CLI generates on the CPU and
# says "no CUDA device" on --device cuda. Needs root (unshare -m); skipped otherwise.
verify_pack() {
  local tarball=$1 cli=$2 dir l
  if ! unshare -m true 2>/dev/null; then
    echo "verify: skipped (unshare -m not permitted here: the pack was not run with the host's libraries hidden)"
    return 0
  fi
  dir=$(mktemp -d /tmp/gpu_verify.XXXXXX)
  tar -xJf "$tarball" -C "$dir" || die "verify: unpacking $tarball failed"
  mkdir -p "$dir/glibc"
  for l in libc.so.6 libm.so.6 libpthread.so.0 libdl.so.2 librt.so.1 libresolv.so.2 ld-linux-x86-64.so.2; do
    [[ -e /lib/x86_64-linux-gnu/$l ]] && cp -L "/lib/x86_64-linux-gnu/$l" "$dir/glibc/"
  done
  # After the mount only bash builtins and the pack's binaries run: every other
  # program's libraries are hidden with ours.
  # shellcheck disable=SC2016 # expanded by the inner bash
  unshare -m bash -c '
    d=$1 root=$2 cli=$3 fail=0
    mount --bind "$d/glibc" /usr/lib/x86_64-linux-gnu || { echo "verify: mount failed"; exit 3; }
    export LD_LIBRARY_PATH=$d/lib:$d/lib/fallback:/usr/local/cuda/lib64 KVSHARE_SOURCE_DIR=$root
    cd "$root" || exit 3
    check() { # what, then the command; its output only when it fails
      local out rc
      out=$("${@:2}" 2>&1)
      rc=$?
      if ((rc)); then echo "verify: FAILED (exit $rc): $1"; echo "${out:0:3000}"; fail=1; else echo "verify: ok: $1"; fi
    }
    check "test_cuda lists its tests" "$d/bin/test_cuda" --gtest_list_tests
    check "test_cuda host-side plan tests" "$d/bin/test_cuda" --gtest_filter="CudaWgmmaPlan.*:CudaModelPlan.*:CudaModelHarness.*:CudaGraphPolicy.*"
    check "test_cuda DeviceSupport host cases (the CPU model: no oneDNN call)" "$d/bin/test_cuda" --gtest_filter="DeviceSupport*"
    check "kvshare_bench lists its benchmarks" "$d/bin/kvshare_bench" --benchmark_list_tests
    if ((cli)); then
      check "kvshare generate on the CPU" "$d/bin/kvshare" generate --model tests/fixtures/vision/gemma3.f32.gguf --raw -n 4 --prompt Hi
      out=$("$d/bin/kvshare" generate --model tests/fixtures/vision/gemma3.f32.gguf -n 1 --device cuda --prompt Hi 2>&1)
      if [[ $out == *"no CUDA device is usable"* ]]; then echo "verify: ok: kvshare --device cuda without a GPU says so"
      else echo "verify: FAILED: kvshare --device cuda without a GPU: ${out:0:500}"; fail=1; fi
    fi
    exit $fail' _ "$dir" "$ROOT" "$cli"
  local rc=$?
  rm -rf "$dir"
  ((rc == 0)) || die "verify: the packed binaries do not run with this host's libraries hidden (above)"
}

pack() {
  local build=$ROOT/build-gpu jobs=2 cli=1 tests=(test_cuda)
  while (($#)); do
    case $1 in
      --build-dir) build=$(readlink -m "$2"); shift 2 ;;
      --jobs) jobs=$2; shift 2 ;;
      --no-cli) cli=0; shift ;;
      --test-target)
        [[ $2 == test_* ]] || die "pack: --test-target $2: expected a test binary target (test_<layer>)"
        tests+=("$2"); shift 2 ;;
      *) die "pack: unknown option $1 (see scripts/gpu_check.sh --help)" ;;
    esac
  done
  if [[ ! -f $build/CMakeCache.txt ]]; then
    local launch=()
    command -v ccache >/dev/null && launch=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
    nice -n 19 cmake -S "$ROOT" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DKVSHARE_CUDA=ON \
      -DKVSHARE_BUILD_PYTHON=OFF "${launch[@]}" || die "pack: cmake configure of $build failed"
  fi
  grep -q '^KVSHARE_CUDA:BOOL=ON' "$build/CMakeCache.txt" ||
    die "pack: $build is not a CUDA build (KVSHARE_CUDA=ON); use another --build-dir"
  local targets=("${tests[@]}" kvshare_bench)
  ((cli)) && targets+=(kvshare_cli)
  nice -n 19 cmake --build "$build" -j"$jobs" --target "${targets[@]}" || die "pack: build failed"

  local stage
  stage=$(mktemp -d /tmp/gpu_pack.XXXXXX)
  mkdir -p "$stage/bin" "$stage/lib/fallback"
  local t
  for t in "${tests[@]}"; do cp "$build/tests/$t" "$stage/bin/"; done
  cp "$build/bench/kvshare_bench" "$stage/bin/"
  ((cli)) && cp "$build/bin/kvshare" "$stage/bin/"
  strip --strip-unneeded "$stage"/bin/*
  make_dnnl_stub "$stage"
  copy_libs "$stage"
  {
    echo "commit $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null)$(git -C "$ROOT" diff --quiet HEAD 2>/dev/null || echo ' (with uncommitted changes)')"
    echo "built $(date -u +%FT%TZ) on $(uname -n), $(cc --version | head -1), $(nvcc --version 2>/dev/null | tail -1)"
    echo "cuda_targets $(grep -o -- '--generate-code=[^ ]*\|-gencode[= ][^ ]*' "$build/build.ninja" | sort -u | tr '\n' ' ')"
    echo "source_digest $(cd "$ROOT" && source_files | source_digest)"
  } >"$stage/MANIFEST"
  (cd "$ROOT" && source_files) >"$stage/SOURCES"

  local out=$ROOT/gpu-pack
  rm -rf "$out"
  mkdir -p "$out"
  # The x86 branch filter and a dictionary larger than the input (the binaries
  # share much of their code): 4 % smaller than plain xz -9.
  echo "compressing (xz, x86 filter, preset 9e: about a minute)..."
  tar -C "$stage" -cf - . | nice -n 19 xz --x86 --lzma2=preset=9e,dict=128MiB -T1 >"$out/kvshare-gpu.tar.xz" ||
    die "pack: tar | xz failed"
  local raw packed tree untracked total
  raw=$(du -sb "$stage" | cut -f1)
  (cd "$stage" && find bin lib -type f -printf '%10s %p\n' | sort -k2) >"$out/CONTENTS"
  cp "$stage/MANIFEST" "$out/"
  rm -rf "$stage"
  packed=$(stat -c %s "$out/kvshare-gpu.tar.xz")
  tree=$(tree_bytes)
  untracked=$(untracked_bytes)
  total=$((tree + packed + $(stat -c %s "$out/CONTENTS" "$out/MANIFEST" | awk '{ s += $1 } END { print s }')))
  cat "$out/MANIFEST"
  echo "pack: $out/kvshare-gpu.tar.xz: $(mb "$packed") MB ($(mb "$raw") MB unpacked)"
  echo "tree: $(mb "$tree") MB ($(mb "$untracked") MB of it untracked, not ignored: they travel too)"
  echo "sent in all: $total bytes = $(mb "$total") MB of the call's 64 MiB ($MIB64 bytes); $(mb $((MIB64 - total))) MB to spare"
  if ((total > MIB64)); then
    rm -f "$out/kvshare-gpu.tar.xz"
    cat >&2 <<EOF

=====================================================================
gpu_check pack: TOO LARGE: the tree ($(mb "$tree") MB) and the pack ($(mb "$packed") MB)
exceed the device call's 64 MiB by $(mb $((total - MIB64))) MB: the device tool would refuse
the call, so the pack was removed. Remove or ignore large untracked files
($(mb "$untracked") MB now), or pack less: --no-cli (no CLI: the serve and cli
steps skip), or fewer --test-target.
=====================================================================
EOF
    exit 2
  fi
  ((MIB64 - total < 1000000)) && echo "pack: WARNING: under 1 MB to spare: a file added to the tree before the call can push it over"
  verify_pack "$out/kvshare-gpu.tar.xz" "$cli"
  cat <<EOF

Device tool call (run), from this checkout:
  command:   PYTHONUNBUFFERED=1 bash scripts/gpu_check.sh device --budget 420
  carry:     ["gpu-pack"]
  timeout_s: 480
A second, shorter call: the report's last lines name the steps left and the
command for them (--only STEP,...); docs/gpu_check.md lists others.
EOF
}

# ------------------------------------------------------------- device (there)

# Why a step does not run ('' when it does): --only names neither its group nor
# its name, or --no-peers leaves it out.
left_out() {
  if ! [[ ,$ONLY, == *,$1,* || ,$ONLY, == *,$2,* ]]; then echo "not in --only"
  elif ((!PEERS)) && [[ $PEER_STEPS == *" $1 "* ]]; then echo "--no-peers"; fi
}

# One step: its body (`_step NAME`, a fresh shell of this script) under timeout,
# cut to what is left of the budget; a row of steps.tsv either way:
# name, group, exit code (- when it did not run), seconds, log, note, cap.
run_step() {
  local name=$1 group=$2 max=$3 log=$OUTDIR/$4 left t t0 rc dt why
  [[ -n ${CAPS[$name]:-} ]] && max=${CAPS[$name]}
  why=$(left_out "$name" "$group")
  if [[ -n $why ]]; then
    printf '%s\t%s\t-\t0\t%s\t%s\t%s\n' "$name" "$group" "$4" "$why" "$max" >>"$WORK/steps.tsv"
    return
  fi
  left=$((DEADLINE - $(date +%s) - 5))
  if ((left < 10)); then
    printf '%s\t%s\t-\t0\t%s\t%s\t%s\n' "$name" "$group" "$4" "skipped: the --budget was spent" "$max" >>"$WORK/steps.tsv"
    echo "-- $name: skipped (budget spent)"
    return
  fi
  t=$((max < left ? max : left))
  echo "== $name (at most ${t} s)"
  echo "===== step $name (at most ${t} s) =====" >>"$log"
  t0=$(now)
  timeout -k 10 "$t" bash "$SELF" _step "$name" >>"$log" 2>&1
  rc=$?
  dt=$(secs "$t0" "$(now)")
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$name" "$group" "$rc" "$dt" "$4" "timeout ${t}" "$max" >>"$WORK/steps.tsv"
  echo "   $name: exit $rc in ${dt} s"
}

find_tool() { # name, then folders to look in besides PATH (globs allowed)
  local n=$1 d
  shift
  command -v "$n" 2>/dev/null && return 0
  for d in "$@"; do [[ -x $d/$n ]] && { echo "$d/$n"; return 0; }; done
  return 1
}
SANITIZER_DIRS=(/usr/local/cuda/bin /usr/local/cuda/compute-sanitizer /usr/local/cuda-*/compute-sanitizer /opt/nvidia/*/compute-sanitizer)

find_cublas() {
  local d
  ldconfig -p 2>/dev/null | grep -q 'libcublas.so.13 ' && { echo "(the loader's path)"; return 0; }
  for d in /usr/local/cuda/lib64 /usr/local/cuda/lib /usr/local/cuda/targets/x86_64-linux/lib; do
    [[ -e $d/libcublas.so.13 ]] && { echo "$d"; return 0; }
  done
  d=$("$PY" - 2>/dev/null <<'EOF'
import glob, site, sys
dirs = site.getsitepackages() + [site.getusersitepackages()] + [p for p in sys.path if p.endswith("-packages")]
for d in dirs:
    hits = sorted(glob.glob(f"{d}/nvidia/**/libcublas.so.13*", recursive=True))
    if hits:
        print(hits[0].rsplit("/", 1)[0])
        break
EOF
)
  [[ -n $d ]] && { echo "$d"; return 0; }
  d=$(timeout 20 find / -xdev -name 'libcublas.so.13*' -print 2>/dev/null | head -1)
  [[ -n $d ]] && { dirname "$d"; return 0; }
  return 1
}

# Where the model benchmarks write their random GGUF files (E2B geometry: about
# 8 GB, written by kvshare_bench itself): the first of /dev/shm, /tmp, the
# tree's parent with 12 GB free (TMPDIR for std::filesystem::temp_directory_path).
bench_tmp() {
  local d free
  for d in /dev/shm "${TMPDIR:-/tmp}" "$ROOT/.."; do
    free=$(df -Pk "$d" 2>/dev/null | awk 'NR == 2 { print $4 }')
    [[ -n $free ]] && ((free > 12 * 1024 * 1024)) && { readlink -f "$d"; return 0; }
  done
  return 1
}

# The environment, the libraries the binaries resolve, the GPU: report.md's
# first section. Sets LD_LIBRARY_PATH (written to $WORK/ldpath for the steps).
prepare() {
  local pack=$1 bin_dir=$2
  if [[ -z $bin_dir ]]; then
    [[ -f $pack/kvshare-gpu.tar.xz ]] || die "device: no $pack/kvshare-gpu.tar.xz: run 'scripts/gpu_check.sh pack' here first and carry gpu-pack"
    mkdir -p "$WORK/pack"
    tar -xJf "$pack/kvshare-gpu.tar.xz" -C "$WORK/pack" 2>/dev/null ||
      "$PY" -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' "$pack/kvshare-gpu.tar.xz" "$WORK/pack" ||
      die "device: unpacking $pack/kvshare-gpu.tar.xz failed"
    bin_dir=$WORK/pack/bin
  fi
  BIN=$(readlink -f "$bin_dir")
  local lib
  lib=$(readlink -f "$BIN/../lib" 2>/dev/null || true)
  {
    echo "date: $(date -u +%FT%TZ); host $(uname -n); $(uname -srm); $(ldd --version 2>&1 | head -1); $(nproc) CPUs"
    [[ -f $BIN/../MANIFEST ]] && sed 's/^/pack: /' "$BIN/../MANIFEST"
    if [[ -f $BIN/../SOURCES ]]; then
      local here built
      here=$(cd "$ROOT" && source_digest <"$BIN/../SOURCES")
      built=$(sed -n 's/^source_digest //p' "$BIN/../MANIFEST")
      if [[ $here == "$built" ]]; then echo "sources: same as the pack's ($here)"
      else echo "sources: WARNING: this tree's C++ / CUDA sources ($here) differ from the pack's ($built): pack again"; fi
    fi
    echo "binaries: $(cd "$BIN" && printf '%s ' *)"
    local smi cublas
    if smi=$(find_tool nvidia-smi /usr/local/nvidia/bin /usr/bin); then
      "$smi" --query-gpu=name,driver_version,memory.total,memory.used,clocks.sm,clocks.max.sm,power.draw,temperature.gpu,utilization.gpu --format=csv 2>&1
    else
      echo "nvidia-smi: not found"
    fi
    "$PY" - <<'EOF' 2>&1
try:
    import torch
    if torch.cuda.is_available():
        p = torch.cuda.get_device_properties(0)
        print(f"torch {torch.__version__} (CUDA {torch.version.cuda}): {p.name}, sm_{p.major}{p.minor}, "
              f"{p.multi_processor_count} SMs, {p.total_memory / 2**30:.1f} GiB, "
              f"L2 {getattr(p, 'L2_cache_size', 0) / 2**20:.0f} MiB")
    else:
        print(f"torch {torch.__version__}: no CUDA device")
    print(f"torch_cuda: {int(torch.cuda.is_available())}")
except Exception as e:  # noqa: BLE001
    print(f"torch: {type(e).__name__}: {e}")
from importlib import metadata
def version(name):
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return "not installed"
print("python packages: " + ", ".join(f"{n} {version(n)}" for n in ("transformers", "pytest")))
EOF
    local nvcc cs cuobj tmp
    nvcc=$(find_tool nvcc /usr/local/cuda/bin) && echo "nvcc: $("$nvcc" --version | tail -1)"
    cs=$(find_tool compute-sanitizer "${SANITIZER_DIRS[@]}") &&
      echo "compute-sanitizer: $cs ($("$cs" --version 2>&1 | tail -1))" || echo "compute-sanitizer: not found"
    if cuobj=$(find_tool cuobjdump /usr/local/cuda/bin); then
      echo "test_cuda device code: $("$cuobj" --list-elf "$BIN/test_cuda" 2>&1 | sed -n 's/.*\(sm_[0-9a-z]*\).*/\1/p' | sort | uniq -c | tr -s ' \n' ' ')"
    fi
    if tmp=$(bench_tmp); then
      echo "model benchmark files in: $tmp ($(df -Ph "$tmp" | awk 'NR == 2 { print $4 }') free)"
      echo "$tmp" >"$WORK/bench_tmp"
    else
      echo "model benchmark files: WARNING: no folder with 12 GB free (/dev/shm, /tmp, $ROOT/..): the E2B row may fail to write its 8 GB file"
    fi
    local ld=${lib:+$lib}
    if cublas=$(find_cublas); then
      echo "cuBLAS: $cublas"
      [[ $cublas == /* ]] && ld=${ld:+$ld:}$cublas
    else
      echo "cuBLAS: libcublas.so.13 not found (the GPU model and its tests will not load)"
    fi
    # Our libstdc++ / libgcc_s only where the device's are missing or older
    # (a GLIBCXX / CXXABI / GCC_ version it lacks).
    local probe
    probe=$(LD_LIBRARY_PATH=$ld${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} "$BIN/test_cuda" --gtest_list_tests 2>&1 >/dev/null)
    if grep -q 'GLIBCXX\|CXXABI\|GCC_[0-9]\|libstdc++\|libgcc_s' <<<"$probe" && [[ -d $lib/fallback ]]; then
      ld=$ld:$lib/fallback
      echo "libstdc++: the device's is missing or older than the build's: the pack's is used"
    fi
    echo "LD_LIBRARY_PATH for the binaries: $ld"
    echo "unresolved libraries: $(LD_LIBRARY_PATH=$ld${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} ldd "$BIN"/* 2>/dev/null | grep 'not found' | sort -u | tr -s ' \t\n' ' ')"
    echo "$ld" >"$WORK/ldpath"
  } >"$WORK/env.log" 2>&1
  HAVE_GPU=0
  if smi=$(find_tool nvidia-smi /usr/local/nvidia/bin /usr/bin) && "$smi" -L 2>/dev/null | grep -q '^GPU '; then HAVE_GPU=1; fi
  grep -q '^torch_cuda: 1' "$WORK/env.log" && HAVE_GPU=1
  echo "gpu: $HAVE_GPU" >>"$WORK/env.log"
  cat "$WORK/env.log"
}

bins() { LD_LIBRARY_PATH=$(cat "$WORK/ldpath")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} "$@"; }

# kvshare_bench's rows matching $1 as JSON into $2, line-buffered (stdbuf): a
# run cut by its timeout keeps every row it finished (its --benchmark_out file
# would lose the last 8 KB); each row's one-line summary into the log.
run_bench() {
  [[ -x $BIN/kvshare_bench ]] || { echo "no kvshare_bench"; exit 77; }
  local line=()
  command -v stdbuf >/dev/null && line=(stdbuf -oL)
  bins "${line[@]}" "$BIN/kvshare_bench" --benchmark_filter="$1" --benchmark_min_time="$BENCH_MIN_TIME" \
    --benchmark_format=json >"$2"
  local rc=$?
  "$PY" "$REPORT_PY" bench-lines "$2"
  return $rc
}

model_shape() { case $1 in *_270m) echo gemma3_270m_shapes ;; *_e2b) echo gemma4_e2b_geometry ;; esac; }

step_body() {
  cd "$ROOT" || exit 1
  export KVSHARE_SOURCE_DIR=$ROOT
  case $1 in
    gtest)
      local rc=0 t
      for t in "$BIN"/test_*; do
        t=${t##*/}
        echo "$t" >>"$WORK/test_bins"
        echo "--- $t --gtest_filter=${GTEST_FILTER:-*}"
        bins "$BIN/$t" --gtest_filter="${GTEST_FILTER:-*}" --gtest_output="json:$WORK/gtest_$t.json" || rc=$?
      done
      exit $rc ;;
    serve)
      [[ -x $BIN/kvshare ]] || { echo "no kvshare CLI in the pack (packed with --no-cli)"; exit 77; }
      "$PY" -c 'import pytest' 2>/dev/null || { echo "pytest is not installed for $PY"; exit 77; }
      # The CLI's `--device` tests, test_device_cuda_serves_text_on_a_gpu among
      # them: `serve --device cuda` end to end (standard library and pytest only).
      KVSHARE_CLI=$BIN/kvshare bins "$PY" -m pytest -q -rA -p no:cacheprovider tests/python/test_server_lifecycle.py \
        -k device --junitxml="$WORK/pytest_serve.xml" ;;
    cli)
      local m cpu cuda rc_cpu rc_cuda same
      [[ -x $BIN/kvshare ]] || { echo "no kvshare CLI in the pack (packed with --no-cli)"; exit 77; }
      for m in $CLI_MODELS; do
        [[ -f $m ]] || { printf '%s\t-\t-\t-\tmissing\n' "$m" >>"$WORK/cli.tsv"; continue; }
        cpu=$(bins "$BIN/kvshare" generate --model "$m" --raw -n 16 --prompt "The quick brown fox" 2>"$WORK/cli_err")
        rc_cpu=$?
        echo "--- $m, device cpu (exit $rc_cpu): $(printf '%q' "$cpu")"
        cat "$WORK/cli_err"
        rc_cuda=- same=-
        if ((HAVE_GPU)); then
          cuda=$(bins "$BIN/kvshare" generate --model "$m" --raw -n 16 --device cuda --prompt "The quick brown fox" 2>"$WORK/cli_err")
          rc_cuda=$?
          echo "--- $m, device cuda (exit $rc_cuda): $(printf '%q' "$cuda")"
          cat "$WORK/cli_err"
          [[ $rc_cpu == 0 && $rc_cuda == 0 ]] && { [[ $cpu == "$cuda" ]] && same=1 || same=0; }
        fi
        printf '%s\t%s\t%s\t%s\t%s\n' "$m" "$rc_cpu" "$rc_cuda" "$same" \
          "$(grep -m1 -i 'error' "$WORK/cli_err" | cut -c1-200)" >>"$WORK/cli.tsv"
      done ;;
    memcheck|racecheck)
      local cs filter
      cs=$(find_tool compute-sanitizer "${SANITIZER_DIRS[@]}") ||
        { echo "compute-sanitizer not found"; exit 77; }
      ((HAVE_GPU)) || { echo "no GPU"; exit 77; }
      if [[ $1 == memcheck ]]; then filter=$MEMCHECK_FILTER; else filter=$RACECHECK_FILTER; fi
      bins "$cs" --tool "$1" --error-exitcode 3 --print-limit 30 "$BIN/test_cuda" --gtest_filter="$filter" ;;
    attn) run_bench "$BENCH_FILTER" "$WORK/bench_attn.json" ;;
    sdpa)
      [[ -s $WORK/bench_attn.json ]] || { echo "no attention rows (the attn step did not run)"; exit 77; }
      "$PY" "$REPORT_PY" repair-bench "$WORK/bench_attn.json" "$WORK/bench_attn_fixed.json" || exit 1
      ((HAVE_GPU)) || { echo "no GPU: kvshare's rows only"; }
      "$PY" bench/cuda_bench.py --kvshare-json "$WORK/bench_attn_fixed.json" --json "$WORK/sdpa.json" | tee "$WORK/sdpa.md" ;;
    model_*)
      local tmp
      tmp=$(cat "$WORK/bench_tmp" 2>/dev/null) && export TMPDIR=$tmp
      run_bench "^cuda/model(_eager)?/$(model_shape "$1")/" "$WORK/bench_$1.json" ;;
    hf_*)
      local extra=(--shapes "$(model_shape "$1")")
      ((HAVE_GPU)) || extra+=(--tiny --device cpu)
      local more=()
      read -ra more <<<"$PEER_ARGS"
      extra+=("${more[@]}")
      "$PY" bench/peer_hf_gpu_models.py --json "$WORK/$1.json" "${extra[@]}" ;;
    *) echo "unknown step $1"; exit 2 ;;
  esac
}

device() {
  local pack=$ROOT/gpu-pack bin_dir="" out=${OUT:-$ROOT/gpu-out} budget=420 g
  ONLY=tests,sanitize,bench PEERS=1 BENCH_FILTER='^cuda/(decode|prefill)' BENCH_MIN_TIME=0.2 GTEST_FILTER="" PEER_ARGS="" PY=python3
  declare -gA CAPS=()
  while (($#)); do
    case $1 in
      --pack) pack=$(readlink -m "$2"); shift 2 ;;
      --bin-dir) bin_dir=$2; shift 2 ;;
      --out) out=$(readlink -m "$2"); shift 2 ;;
      --budget) budget=$2; shift 2 ;;
      --only) ONLY=$2; shift 2 ;;
      --cap)
        [[ $2 =~ ^[a-z0-9_]+=[0-9]+$ ]] || die "--cap $2: expected STEP=SECONDS (e.g. model_e2b=300)"
        CAPS[${2%%=*}]=${2#*=}; shift 2 ;;
      --no-peers) PEERS=0; shift ;;
      --bench-filter) BENCH_FILTER=$2; shift 2 ;;
      --bench-min-time) BENCH_MIN_TIME=$2; shift 2 ;;
      --gtest-filter) GTEST_FILTER=$2; shift 2 ;;
      --memcheck-filter) MEMCHECK_FILTER=$2; shift 2 ;;
      --racecheck-filter) RACECHECK_FILTER=$2; shift 2 ;;
      --peer-args) PEER_ARGS=$2; shift 2 ;;
      --python) PY=$2; shift 2 ;;
      *) die "device: unknown option $1 (see scripts/gpu_check.sh --help)" ;;
    esac
  done
  local names=" " s
  for s in "${STEPS[@]}"; do names+="${s%% *} "; done
  for g in ${ONLY//,/ }; do
    [[ $g == tests || $g == sanitize || $g == bench || $names == *" $g "* ]] ||
      die "--only: unknown group or step '$g'; expected a comma list of tests, sanitize, bench or of the steps:$names"
  done
  for g in "${!CAPS[@]}"; do [[ $names == *" $g "* ]] || die "--cap: unknown step '$g'; the steps:$names"; done
  [[ $budget =~ ^[0-9]+$ ]] || die "--budget: '$budget' is not a number of seconds"
  command -v "$PY" >/dev/null || die "--python: '$PY' not found"
  local start
  start=$(date +%s)
  DEADLINE=$((start + budget))
  WORK=$(mktemp -d /tmp/gpu_check.XXXXXX)
  OUTDIR=$out
  mkdir -p "$OUTDIR" || die "cannot create --out $OUTDIR"
  rm -f "$OUTDIR"/{report.md,tests.json,tests.log,sanitize.log,bench.json,bench.log,sdpa.json,hf.json}
  : >"$WORK/steps.tsv"
  local t0
  t0=$(now)
  prepare "$pack" "$bin_dir"
  printf 'env\tenv\t0\t%s\tenv.log\t\t-\n' "$(secs "$t0" "$(now)")" >>"$WORK/steps.tsv"
  # The logs are written into --out as the steps run, and report.md starts as
  # the environment: if the call is cut short, what ran still comes back.
  { echo "# scripts/gpu_check.sh: cut short before the report; the environment:"; cat "$WORK/env.log"; } >"$OUTDIR/report.md"
  # The peers build their models from configs: nothing to fetch, and no network there.
  export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 SELF ROOT WORK OUTDIR BIN HAVE_GPU PY REPORT_PY \
    GTEST_FILTER BENCH_FILTER BENCH_MIN_TIME PEER_ARGS MEMCHECK_FILTER RACECHECK_FILTER CLI_MODELS
  local step
  for step in "${STEPS[@]}"; do
    # shellcheck disable=SC2086 # name group cap log
    run_step $step
  done
  "$PY" "$REPORT_PY" report --work "$WORK" --out "$OUTDIR" --budget "$budget" --elapsed $(($(date +%s) - start))
  local rc=$?
  rm -rf "$WORK"
  return $rc
}

run_local() {
  local build="" args=()
  while (($#)); do
    case $1 in
      --build-dir) build=$(readlink -m "$2"); shift 2 ;;
      *) args+=("$1"); shift ;;
    esac
  done
  if [[ -z $build ]]; then
    for build in "$ROOT/build-gpu" "$ROOT/build"; do [[ -x $build/tests/test_cuda ]] && break; done
  fi
  [[ -x $build/tests/test_cuda ]] || die "local: no tests/test_cuda in $build: build it first (cmake --build $build --target test_cuda kvshare_bench kvshare_cli) or give --build-dir"
  local dir
  dir=$(mktemp -d /tmp/gpu_check_bin.XXXXXX)
  mkdir -p "$dir/bin" "$dir/lib"
  ln -s "$build/tests/test_cuda" "$dir/bin/test_cuda"
  [[ -x $build/bench/kvshare_bench ]] && ln -s "$build/bench/kvshare_bench" "$dir/bin/kvshare_bench"
  [[ -x $build/bin/kvshare ]] && ln -s "$build/bin/kvshare" "$dir/bin/kvshare"
  local has_out=0 a
  for a in "${args[@]}"; do [[ $a == --out ]] && has_out=1; done
  ((has_out)) || args+=(--out "$ROOT/gpu-out-local")
  device --bin-dir "$dir/bin" "${args[@]}"
  local rc=$?
  rm -rf "$dir"
  return $rc
}

case ${1:-} in
  pack) shift; pack "$@" ;;
  device) shift; device "$@" ;;
  local) shift; run_local "$@" ;;
  _step) step_body "$2" ;;
  -h|--help) usage ;;
  *) usage >&2; exit 2 ;;
esac
