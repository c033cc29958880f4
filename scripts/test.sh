#!/usr/bin/env bash
# Builds kvshare and runs the whole test suite (GoogleTest through ctest).
# Env: KVSHARE_BUILD_DIR (default build), KVSHARE_CMAKE_ARGS (extra cmake args).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${KVSHARE_BUILD_DIR:-build}
# shellcheck disable=SC2086
cmake -S . -B "$build" -G Ninja ${KVSHARE_CMAKE_ARGS:--DCMAKE_BUILD_TYPE=Release} >/dev/null
cmake --build "$build" -j"$(nproc)"
ctest --test-dir "$build" --output-on-failure -j"$(nproc)"
