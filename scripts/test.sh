#!/usr/bin/env bash
# Installs what is missing (scripts/setup.sh: Debian packages, Python test modules,
# the default model), builds kvshare and runs the whole test suite through ctest
# (GoogleTest binaries and the pytest entries that compare with peers).
# Env: KVSHARE_BUILD_DIR (default build), KVSHARE_CMAKE_ARGS (extra cmake args),
# KVSHARE_CTEST_ARGS (extra ctest args, e.g. -LE LABEL).
set -euo pipefail
cd "$(dirname "$0")/.."
python=$(bash scripts/setup.sh --print-python tests)
build=${KVSHARE_BUILD_DIR:-build}
# shellcheck disable=SC2086
cmake -S . -B "$build" -G Ninja -DPython3_EXECUTABLE="$(command -v "$python")" \
  ${KVSHARE_CMAKE_ARGS:--DCMAKE_BUILD_TYPE=Release} >/dev/null
cmake --build "$build" -j"$(nproc)"
# shellcheck disable=SC2086
ctest --test-dir "$build" --output-on-failure -j"$(nproc)" ${KVSHARE_CTEST_ARGS:-}
