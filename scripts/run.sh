#!/usr/bin/env bash
# The main job: builds kvshare (Release) and runs it. Arguments go to `kvshare`;
# with none it generates text from the default model (downloaded when missing).
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j"$(nproc)" --target kvshare_cli >/dev/null
# The CLI finds scripts/fetch_model.py and models/ relative to the project.
if [ $# -eq 0 ]; then set -- generate --raw --prompt "The capital of France is Paris. The capital of Germany is" -n 48 --threads "$(nproc)"; fi
exec ./build/bin/kvshare "$@"
