#!/usr/bin/env bash
# The GPU check of issue 44 in one device call (docs/gpu_check.md): build and pack
# here, run on the lent GPU machine, read one report.
#
#   scripts/gpu_check.sh pack [--build-dir DIR] [--jobs N] [--no-cli] [--test-target test_X]...
#       Here, no GPU needed: builds test_cuda (and each --test-target),
#       kvshare_bench and the kvshare CLI with CUDA on (Release, the CUDA targets
#       CMakeLists.txt sets), packs them with the shared libraries the device
#       machine lacks into gpu-pack/ (git-ignored) and prints the device tool
#       call to make.
#   scripts/gpu_check.sh device [--pack DIR] [--out DIR] [--budget S] [--only LIST] [...]
#       On the device machine, from the repository root: unpacks the pack, checks
#       the GPU, runs the steps, writes report.md and the raw logs to --out
#       (default $OUT), at most 8 files; prints the report's tables last.
#   scripts/gpu_check.sh local [--build-dir DIR] [device options]
#       The device mode here on a build tree (CUDA on or off): a dry run in which
#       the device tests skip and the benchmarks report no device.
#
# Device options:
#   --budget S            seconds for all steps (default 420); each step also has
#                         its own timeout, cut to what is left of the budget
#   --only LIST           comma list of tests (device tests, CLI cuda vs cpu),
#                         sanitize (compute-sanitizer memcheck, racecheck),
#                         bench (kvshare_bench cuda/ and the PyTorch peers)
#   --no-peers            bench without the PyTorch / transformers peers
#   --bench-filter RE     kvshare_bench --benchmark_filter (default cuda/)
#   --bench-min-time S    kvshare_bench --benchmark_min_time (default 0.2)
#   --gtest-filter F      the device tests' --gtest_filter (default *)
#   --memcheck-filter F   --gtest_filter under memcheck (default below)
#   --racecheck-filter F  --gtest_filter under racecheck (default below)
#   --peer-shapes LIST    bench/peer_hf_gpu_models.py --shapes
#   --peer-args "ARGS"    more options of bench/peer_hf_gpu_models.py (e.g.
#                         "--gemma4-vocab 262144 --decode-steps 64")
#   --python PY           the Python of the peers (default python3)
set -uo pipefail

SELF=$(readlink -f "${BASH_SOURCE[0]}")
ROOT=$(cd "$(dirname "$SELF")/.." && pwd)
REPORT_PY=$ROOT/scripts/gpu_check_report.py
MIB64=67108864                      # the device call's working tree + carry limit
# Defaults; a step's shell (`_step`) inherits the values device() set.
MEMCHECK_FILTER=${MEMCHECK_FILTER:-'*Device*EdgeCases*:*Device*/0-*Sweep*'}
RACECHECK_FILTER=${RACECHECK_FILTER:-'*Device*EdgeCases*'}
CLI_MODELS=${CLI_MODELS:-"tests/fixtures/vision/gemma3.f32.gguf tests/fixtures/gemma4/e2b.f32.gguf tests/fixtures/gemma3n/e2b.f32.gguf"}

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
  echo "compressing (xz -9)..."
  tar -C "$stage" -cf - . | nice -n 19 xz -9 -T2 >"$out/kvshare-gpu.tar.xz" || die "pack: tar | xz failed"
  local raw packed tree total
  raw=$(du -sb "$stage" | cut -f1)
  packed=$(stat -c %s "$out/kvshare-gpu.tar.xz")
  (cd "$stage" && find bin lib -type f -printf '%10s %p\n' | sort -k2) >"$out/CONTENTS"
  cp "$stage/MANIFEST" "$out/"
  rm -rf "$stage"
  tree=$(tree_bytes)
  total=$((tree + packed + $(stat -c %s "$out/CONTENTS" "$out/MANIFEST" | awk '{ s += $1 } END { print s }')))
  cat "$out/MANIFEST"
  printf 'pack: %s (%.1f MB unpacked, %.1f MB packed); tree %.1f MB; sent in all %.1f of 64 MiB (%.1f MB)\n' \
    "$out/kvshare-gpu.tar.xz" "$(awk -v x="$raw" 'BEGIN { print x / 1e6 }')" "$(awk -v x="$packed" 'BEGIN { print x / 1e6 }')" \
    "$(awk -v x="$tree" 'BEGIN { print x / 1e6 }')" "$(awk -v x="$total" 'BEGIN { print x / 1e6 }')" \
    "$(awk -v x="$MIB64" 'BEGIN { print x / 1e6 }')"
  if ((total > MIB64)); then
    if ((cli)); then
      echo "pack: over the device call's 64 MiB: packing again without the kvshare CLI"
      local again=(--build-dir "$build" --jobs "$jobs" --no-cli)
      for t in "${tests[@]:1}"; do again+=(--test-target "$t"); done
      pack "${again[@]}"
      return
    fi
    die "pack: the tree and the pack together exceed 64 MiB: ignore or remove large untracked files"
  fi
  cat <<EOF

Device tool call (run), from this checkout:
  command:   PYTHONUNBUFFERED=1 bash scripts/gpu_check.sh device --budget 420
  carry:     ["gpu-pack"]
  timeout_s: 480
A second, shorter call (warm machine or >= 4 min left): add --only tests (or
--only sanitize, --only bench --no-peers) and --budget 150 with timeout_s 200.
EOF
}

# ------------------------------------------------------------- device (there)

wanted() { [[ ,$ONLY, == *,$1,* ]]; }

# One step: its body (`_step NAME`, a fresh shell of this script) under timeout,
# cut to what is left of the budget; a row of steps.tsv either way.
run_step() {
  local name=$1 group=$2 max=$3 log=$OUTDIR/$4 left t t0 rc
  if ! wanted "$group"; then
    printf '%s\t%s\t-\t0\t%s\t%s\n' "$name" "$group" "$4" "not in --only" >>"$WORK/steps.tsv"
    return
  fi
  left=$((DEADLINE - $(date +%s) - 5))
  if ((left < 10)); then
    printf '%s\t%s\t-\t0\t%s\t%s\n' "$name" "$group" "$4" "skipped: the --budget was spent" >>"$WORK/steps.tsv"
    echo "-- $name: skipped (budget spent)"
    return
  fi
  t=$((max < left ? max : left))
  echo "== $name (at most ${t} s)"
  echo "===== step $name (at most ${t} s) =====" >>"$log"
  t0=$(now)
  timeout -k 10 "$t" bash "$SELF" _step "$name" >>"$log" 2>&1
  rc=$?
  local dt
  dt=$(secs "$t0" "$(now)")
  printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$name" "$group" "$rc" "$dt" "$4" "timeout ${t}" >>"$WORK/steps.tsv"
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
    echo "date: $(date -u +%FT%TZ); host $(uname -n); $(uname -srm); $(ldd --version 2>&1 | head -1)"
    [[ -f $BIN/../MANIFEST ]] && sed 's/^/pack: /' "$BIN/../MANIFEST"
    if [[ -f $BIN/../SOURCES ]]; then
      local here built
      here=$(cd "$ROOT" && source_digest <"$BIN/../SOURCES")
      built=$(sed -n 's/^source_digest //p' "$BIN/../MANIFEST")
      if [[ $here == "$built" ]]; then echo "sources: same as the pack's ($here)"
      else echo "sources: WARNING: this tree's C++ / CUDA sources ($here) differ from the pack's ($built): pack again"; fi
    fi
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
EOF
    local nvcc cs cuobj
    nvcc=$(find_tool nvcc /usr/local/cuda/bin) && echo "nvcc: $("$nvcc" --version | tail -1)"
    cs=$(find_tool compute-sanitizer "${SANITIZER_DIRS[@]}") &&
      echo "compute-sanitizer: $cs ($("$cs" --version 2>&1 | tail -1))" || echo "compute-sanitizer: not found"
    if cuobj=$(find_tool cuobjdump /usr/local/cuda/bin); then
      echo "test_cuda device code: $("$cuobj" --list-elf "$BIN/test_cuda" 2>&1 | sed -n 's/.*\(sm_[0-9a-z]*\).*/\1/p' | sort | uniq -c | tr -s ' \n' ' ')"
    fi
    local ld=${lib:+$lib}
    if cublas=$(find_cublas); then
      echo "cuBLAS: $cublas"
      [[ $cublas == /* ]] && ld=${ld:+$ld:}$cublas
    else
      echo "cuBLAS: libcublas.so.13 not found (the GPU model and its tests will not load)"
    fi
    # Our libstdc++ only where the device's is older (a GLIBCXX version missing).
    local probe
    probe=$(LD_LIBRARY_PATH=$ld${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} "$BIN/test_cuda" --gtest_list_tests 2>&1 >/dev/null)
    if grep -q 'GLIBCXX\|CXXABI\|GCC_[0-9]' <<<"$probe" && [[ -d $lib/fallback ]]; then
      ld=$ld:$lib/fallback
      echo "libstdc++: the device's is older than the build's: the pack's is used"
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

step_body() {
  cd "$ROOT" || exit 1
  export KVSHARE_SOURCE_DIR=$ROOT
  case $1 in
    tests)
      local rc=0 t
      for t in "$BIN"/test_*; do
        bins "$t" --gtest_filter="$GTEST_FILTER" --gtest_output="json:$WORK/gtest_$(basename "$t").json" || rc=$?
      done
      exit $rc ;;
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
    bench)
      [[ -x $BIN/kvshare_bench ]] || { echo "no kvshare_bench"; exit 77; }
      bins "$BIN/kvshare_bench" --benchmark_filter="$BENCH_FILTER" --benchmark_min_time="$BENCH_MIN_TIME" \
        --benchmark_out="$WORK/bench.json" --benchmark_out_format=json ;;
    sdpa)
      "$PY" "$REPORT_PY" repair-bench "$WORK/bench.json" "$WORK/bench_fixed.json" || exit 1
      ((HAVE_GPU)) || { echo "no GPU: kvshare's rows only"; }
      "$PY" bench/cuda_bench.py --kvshare-json "$WORK/bench_fixed.json" --json "$WORK/sdpa.json" | tee "$WORK/sdpa.md" ;;
    hf)
      local extra=()
      ((HAVE_GPU)) || extra=(--tiny --device cpu)
      [[ -n $PEER_SHAPES ]] && extra+=(--shapes "$PEER_SHAPES")
      local more=()
      read -ra more <<<"$PEER_ARGS"
      extra+=("${more[@]}")
      "$PY" bench/peer_hf_gpu_models.py --json "$WORK/hf.json" "${extra[@]}" ;;
    *) echo "unknown step $1"; exit 2 ;;
  esac
}

device() {
  local pack=$ROOT/gpu-pack bin_dir="" out=${OUT:-$ROOT/gpu-out} budget=420 peers=1
  ONLY=tests,sanitize,bench BENCH_FILTER=cuda/ BENCH_MIN_TIME=0.2 GTEST_FILTER='*' PEER_SHAPES="" PEER_ARGS="" PY=python3
  while (($#)); do
    case $1 in
      --pack) pack=$(readlink -m "$2"); shift 2 ;;
      --bin-dir) bin_dir=$2; shift 2 ;;
      --out) out=$(readlink -m "$2"); shift 2 ;;
      --budget) budget=$2; shift 2 ;;
      --only) ONLY=$2; shift 2 ;;
      --no-peers) peers=0; shift ;;
      --bench-filter) BENCH_FILTER=$2; shift 2 ;;
      --bench-min-time) BENCH_MIN_TIME=$2; shift 2 ;;
      --gtest-filter) GTEST_FILTER=$2; shift 2 ;;
      --memcheck-filter) MEMCHECK_FILTER=$2; shift 2 ;;
      --racecheck-filter) RACECHECK_FILTER=$2; shift 2 ;;
      --peer-shapes) PEER_SHAPES=$2; shift 2 ;;
      --peer-args) PEER_ARGS=$2; shift 2 ;;
      --python) PY=$2; shift 2 ;;
      *) die "device: unknown option $1 (see scripts/gpu_check.sh --help)" ;;
    esac
  done
  local g
  for g in ${ONLY//,/ }; do
    case $g in tests|sanitize|bench) ;; *) die "--only: unknown group '$g'; expected a comma list of tests, sanitize, bench" ;; esac
  done
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
  printf 'env\tenv\t0\t%s\tenv.log\t\n' "$(secs "$t0" "$(now)")" >>"$WORK/steps.tsv"
  # The logs are written into --out as the steps run, and report.md starts as
  # the environment: if the call is cut short, what ran still comes back.
  { echo "# scripts/gpu_check.sh: cut short before the report; the environment:"; cat "$WORK/env.log"; } >"$OUTDIR/report.md"
  # The peers build their models from configs: nothing to fetch, and no network there.
  export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 SELF ROOT WORK OUTDIR BIN HAVE_GPU PY REPORT_PY GTEST_FILTER BENCH_FILTER BENCH_MIN_TIME \
    PEER_SHAPES PEER_ARGS MEMCHECK_FILTER RACECHECK_FILTER CLI_MODELS
  # Correctness first, speed last: the benchmarks' times are the least known
  # (bench/cuda_model_bench.cc writes multi-GB models), and a second call can
  # rerun them alone. Each step takes at most its cap and what is left.
  run_step tests tests 150 tests.log
  run_step cli tests 60 tests.log
  run_step memcheck sanitize 90 sanitize.log
  run_step racecheck sanitize 60 sanitize.log
  run_step bench bench 180 bench.log
  if ((peers)); then
    run_step sdpa bench 90 bench.log
    run_step hf bench 150 bench.log
  fi
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
