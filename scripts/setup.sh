#!/usr/bin/env bash
# Installs what kvshare's commands need, and only what is missing: Debian packages
# (apt-get as root, through `sudo -n` when that needs no password, else it stops and
# prints the exact `apt-get install` line), Python modules (pip, into python3 or,
# where Debian's python3 is externally managed, into a .venv of the project) and
# the default model. Quick and silent when everything is already there.
#
# This file is the one list of kvshare's dependencies; .ci/run, scripts/run.sh,
# scripts/test.sh, CMakeLists.txt (`pip install .`) and the README use it.
#
# Usage: scripts/setup.sh [options] GROUP...
#   GROUPs (several may be given):
#     build    Debian packages to build everything: library, CLI, server, tests, benchmarks
#     run      build + the default model (scripts/run.sh)
#     tests    build + Python test modules + the default model (scripts/test.sh)
#     ci       tests + clang (fuzzer) + the onnxruntime peer suite's modules (.ci/run)
#     pylib    what `pip install .` needs: compiler, libraries, Python headers
#     model    the default model only (scripts/fetch_model.py)
#   Options:
#     --check         install nothing: print what is missing, exit 1 if anything is
#     --plan          print what would be installed and how, one line each, exit 0
#     --print-python  print the Python interpreter the commands should use (stdout)
#     --list          print the Debian packages and Python modules of the GROUPs
# Env: KVSHARE_PYTHON (the interpreter to use; default .venv/bin/python if an earlier
#      run made it, else python3), KVSHARE_SETUP_ROOT (project root; default: here).
# Exit status: 0 when everything is there (or --plan / --list), 1 when something is
# missing and cannot be installed here (the message says what to run), 2 on bad usage.
set -euo pipefail

# ---- The lists -----------------------------------------------------------------
# Debian packages, per piece of the build. ocl-icd-opencl-dev: Debian's oneDNN
# CMake config requires OpenCL (its GPU runtime) even for a CPU-only user.
readonly APT_COMPILER="g++ cmake ninja-build"
readonly APT_LIBS="libhwy-dev libsentencepiece-dev libstb-dev libwebp-dev libjpeg-dev libdnnl-dev ocl-icd-opencl-dev libsndfile1-dev libsoxr-dev libfftw3-dev"
readonly APT_CLI="libcli11-dev nlohmann-json3-dev"
readonly APT_SERVER="libcpp-httplib-dev pkg-config"
readonly APT_TESTS="libgtest-dev libgmock-dev"
readonly APT_BENCH="libbenchmark-dev"
readonly APT_CI="clang libclang-rt-14-dev ccache"
# The server's tests: the chat page in headless Chromium, nginx in front of two servers.
readonly APT_SERVE_TESTS="chromium nginx"
# Python modules as pip-name:import-name (openai: the official client drives the server's tests;
# jsonschema: validates the structured-output tests' JSON; jinja2: renders the Gemma 4 chat template that
# the tool-calling prompt tests compare with).
readonly PIP_TESTS="numpy:numpy pytest:pytest gguf:gguf openai:openai jsonschema:jsonschema jinja2:jinja2"
# CI also drives the server with LangChain and the OpenAI Agents SDK (tests/python/test_server_clients.py).
readonly PIP_CI="onnxruntime:onnxruntime onnx:onnx ml_dtypes:ml_dtypes pybind11:pybind11 scikit-build-core:scikit_build_core
  langchain-openai:langchain_openai openai-agents:agents"

die_usage() { echo "setup.sh: $*" >&2; echo "usage: scripts/setup.sh [--check|--plan|--print-python|--list] GROUP..." >&2; exit 2; }
say() { echo "setup: $*" >&2; }

mode=install print_python=0
groups=()
for a in "$@"; do
  case "$a" in
    --check) mode=check ;;
    --plan) mode=plan ;;
    --list) mode=list ;;
    --print-python) print_python=1 ;;
    build | run | tests | ci | pylib | model) groups+=("$a") ;;
    *) die_usage "unknown argument '$a'" ;;
  esac
done
[ ${#groups[@]} -gt 0 ] || die_usage "no GROUP given"

root=${KVSHARE_SETUP_ROOT:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)}

apt_want="" pip_want="" want_model=0 want_pip=0 want_headers=0
for g in "${groups[@]}"; do
  case "$g" in
    build) apt_want+=" $APT_COMPILER $APT_LIBS $APT_CLI $APT_SERVER $APT_TESTS $APT_BENCH" ;;
    run) apt_want+=" $APT_COMPILER $APT_LIBS $APT_CLI $APT_SERVER $APT_TESTS $APT_BENCH"; want_model=1 ;;
    tests) apt_want+=" $APT_COMPILER $APT_LIBS $APT_CLI $APT_SERVER $APT_TESTS $APT_BENCH $APT_SERVE_TESTS"
           pip_want+=" $PIP_TESTS"; want_model=1 ;;
    ci) apt_want+=" $APT_COMPILER $APT_LIBS $APT_CLI $APT_SERVER $APT_TESTS $APT_BENCH $APT_SERVE_TESTS $APT_CI"
        pip_want+=" $PIP_TESTS $PIP_CI"; want_model=1 ;;
    pylib) apt_want+=" g++ $APT_LIBS"; want_headers=1 ;;
    model) want_model=1 ;;
  esac
done
# The model is fetched with pip (scripts/fetch_model.py).
[ $want_model = 1 ] && want_pip=1
dedup() { printf '%s\n' $1 | awk 'NF && !seen[$0]++' | tr '\n' ' ' | sed 's/ $//'; }
apt_want=$(dedup "$apt_want")
pip_want=$(dedup "$pip_want")

if [ $mode = list ]; then
  echo "debian: $apt_want"
  echo "python: $(for p in $pip_want; do printf '%s ' "${p%%:*}"; done | sed 's/ $//')"
  [ $want_model = 1 ] && echo "model: gemma-3-270m-q4_k_m.gguf in \$KVSHARE_MODEL_DIR, \$XDG_CACHE_HOME/kvshare or ~/.cache/kvshare (scripts/fetch_model.py)"
  exit 0
fi

# ---- What is there -------------------------------------------------------------
is_debian=0
command -v dpkg-query >/dev/null 2>&1 && is_debian=1

# Debian packages of $1 that are not installed (all of them are checked in one call).
apt_missing() {
  [ $is_debian = 1 ] || return 0
  local pkgs=$1 p status
  [ -n "$pkgs" ] || return 0
  declare -A ok=()
  while read -r p status; do
    [ "$status" = "ii" ] && ok[$p]=1
  done < <(dpkg-query -W -f='${Package} ${db:Status-Abbrev}\n' $pkgs 2>/dev/null || true)
  for p in $pkgs; do [ -n "${ok[$p]:-}" ] || printf '%s ' "$p"; done
}

# Python: which interpreter, which of the wanted modules it lacks, and its kind.
py=${KVSHARE_PYTHON:-}
if [ -z "$py" ]; then
  if [ -x "$root/.venv/bin/python" ]; then py=$root/.venv/bin/python
  elif command -v python3 >/dev/null 2>&1; then py=python3
  fi
fi
need_python=0
[ -n "$pip_want" ] || [ $want_pip = 1 ] || [ $want_headers = 1 ] && need_python=1
py_missing="" py_managed=0 py_pip=0 py_headers=0 py_system=0 py_version=""
probe_python() {
  local imports="" p out
  for p in $pip_want; do imports+=" ${p##*:}"; done
  # One interpreter start: find_spec does not import the modules.
  out=$("$1" - $imports <<'EOF'
import importlib.util, os, sys, sysconfig
paths = sysconfig.get_paths()
missing = [m for m in sys.argv[1:] if importlib.util.find_spec(m) is None]
in_venv = sys.prefix != sys.base_prefix
print("missing=" + " ".join(missing))
print("managed=%d" % (not in_venv and os.path.exists(os.path.join(paths["stdlib"], "EXTERNALLY-MANAGED"))))
print("pip=%d" % (importlib.util.find_spec("pip") is not None))
print("headers=%d" % os.path.exists(os.path.join(paths["include"], "Python.h")))
print("system=%d" % (sys.base_prefix == "/usr"))
print("version=%d.%d" % sys.version_info[:2])
EOF
  ) || return 1
  py_missing=$(sed -n 's/^missing=//p' <<<"$out")
  py_managed=$(sed -n 's/^managed=//p' <<<"$out")
  py_pip=$(sed -n 's/^pip=//p' <<<"$out")
  py_headers=$(sed -n 's/^headers=//p' <<<"$out")
  py_system=$(sed -n 's/^system=//p' <<<"$out")
  py_version=$(sed -n 's/^version=//p' <<<"$out")
}

# ---- The plan ------------------------------------------------------------------
apt_need=$(apt_missing "$apt_want")
use_venv=0 pip_need="" python_absent=0
if [ $need_python = 1 ]; then
  if [ -z "$py" ]; then
    # No python3 yet: Debian's will come, externally managed and without pip.
    python_absent=1
    apt_need+=" python3"
    [ $want_headers = 1 ] && apt_need+=" python3-dev"
    if [ -n "$pip_want" ] || [ $want_pip = 1 ]; then use_venv=1; apt_need+=" python3-venv"; fi
    for p in $pip_want; do pip_need+=" ${p%%:*}"; done
  else
    probe_python "$py" || { say "cannot run the Python interpreter '$py' (set KVSHARE_PYTHON to a working one)"; exit 1; }
    for m in $py_missing; do
      for p in $pip_want; do [ "${p##*:}" = "$m" ] && pip_need+=" ${p%%:*}"; done
    done
    if [ -n "$pip_need" ] || { [ $want_pip = 1 ] && [ "$py_pip" = 0 ]; }; then
      if [ "$py_managed" = 1 ]; then
        # Debian's own python3 refuses pip installs (PEP 668): use a venv of the project
        # that still sees the system's modules.
        use_venv=1
        [ -n "$(apt_missing "python${py_version}-venv")" ] && apt_need+=" python${py_version}-venv"
      elif [ "$py_pip" = 0 ]; then
        say "'$py' has no pip; install pip for it (python3 -m ensurepip) or set KVSHARE_PYTHON to another interpreter"
        exit 1
      fi
    fi
    if [ $want_headers = 1 ] && [ "$py_headers" = 0 ]; then
      if [ "$py_system" = 1 ]; then apt_need+=" python${py_version}-dev"
      else say "Python.h is missing for '$py' (not Debian's python3): install that Python's development headers"; exit 1
      fi
    fi
  fi
fi
apt_need=$(dedup "$apt_need")
pip_need=$(dedup "$pip_need")

# The default model's directory (scripts/fetch_model.py and the CLI use the same rule).
model_dir() {
  if [ -n "${KVSHARE_MODEL_DIR:-}" ]; then echo "$KVSHARE_MODEL_DIR"; return; fi
  case "${XDG_CACHE_HOME:-}" in
    /*) echo "$XDG_CACHE_HOME/kvshare" ;;
    *) echo "$HOME/.cache/kvshare" ;;  # unset, or relative (the XDG spec ignores those)
  esac
}
model_path=$(model_dir)/gemma-3-270m-q4_k_m.gguf
model_need=0
if [ $want_model = 1 ] && ! [ -f "$model_path" ]; then model_need=1; fi

venv_dir=$root/.venv
final_py=$py
[ $use_venv = 1 ] && final_py=$venv_dir/bin/python

# How apt-get would run here: as root, through sudo without a password, or not at all.
apt_via=none
if [ -n "$apt_need" ]; then
  if [ $is_debian = 0 ]; then apt_via=none
  elif [ "$(id -u)" = 0 ]; then apt_via=root
  elif command -v sudo >/dev/null 2>&1 && sudo -n true >/dev/null 2>&1; then apt_via=sudo
  fi
fi

if [ $mode = plan ]; then
  [ -n "$apt_need" ] && echo "apt ($apt_via): $apt_need"
  [ $use_venv = 1 ] && [ ! -x "$venv_dir/bin/python" ] && echo "venv: $venv_dir (--system-site-packages)"
  [ -n "$pip_need" ] && echo "pip ($final_py): $pip_need"
  [ $model_need = 1 ] && echo "model: $model_path"
  [ $print_python = 1 ] && [ $need_python = 1 ] && echo "python: $final_py"
  exit 0
fi

apt_line="sudo apt-get install -y --no-install-recommends $apt_need"
if [ $mode = check ]; then
  bad=0
  if [ -n "$apt_need" ]; then say "missing Debian packages: $apt_need"; say "install them with: $apt_line"; bad=1; fi
  if [ -n "$pip_need" ]; then say "missing Python modules for $final_py: $pip_need"; bad=1; fi
  [ $model_need = 1 ] && { say "missing model $model_path (scripts/fetch_model.py fetches it)"; bad=1; }
  [ $bad = 0 ] && [ $print_python = 1 ] && [ $need_python = 1 ] && echo "$final_py"
  exit $bad
fi

# ---- Install -------------------------------------------------------------------
if [ -n "$apt_need" ]; then
  case $apt_via in
    root) sudo_cmd=() ;;
    sudo) sudo_cmd=(sudo -n) ;;
    none)
      if [ $is_debian = 0 ]; then
        say "this is not a Debian system (no dpkg-query); install the equivalents of: $apt_need"
      else
        say "kvshare needs these Debian packages, which are not installed: $apt_need"
        say "installing them needs root; run:"
        echo "    $apt_line" >&2
        say "then run this command again."
      fi
      exit 1 ;;
  esac
  say "installing Debian packages: $apt_need"
  export DEBIAN_FRONTEND=noninteractive
  "${sudo_cmd[@]}" apt-get update -qq >&2
  # shellcheck disable=SC2086
  "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends $apt_need >/dev/null
fi

if [ $use_venv = 1 ] && [ ! -x "$venv_dir/bin/python" ]; then
  say "creating $venv_dir (Debian's python3 is externally managed)"
  "${py:-python3}" -m venv --system-site-packages "$venv_dir"
fi
if [ $python_absent = 1 ] && [ $use_venv = 0 ]; then final_py=python3; fi
if [ -n "$pip_need" ]; then
  say "installing Python modules into $final_py: $pip_need"
  # shellcheck disable=SC2086
  "$final_py" -m pip install -q --disable-pip-version-check --root-user-action=ignore $pip_need >&2
fi

if [ $want_model = 1 ]; then
  # Quiet when the file is there and verified (a stamp spares the hash on later runs).
  "$final_py" "$root/scripts/fetch_model.py" --quiet >&2
fi

if [ $print_python = 1 ] && [ $need_python = 1 ]; then
  echo "$final_py"
fi
exit 0
