#!/usr/bin/env bash
# The main job: builds kvshare (Release) and runs it. Arguments go to `kvshare`;
# with none it runs the attention demo.
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j"$(nproc)" --target kvshare_cli >/dev/null
if [ $# -eq 0 ]; then set -- demo; fi
exec ./build/bin/kvshare "$@"
