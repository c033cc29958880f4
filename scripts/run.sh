#!/usr/bin/env bash
# The main job: installs what is missing (scripts/setup.sh: Debian packages, the
# default model), builds the kvshare CLI (Release) and runs it. Arguments go to
# `kvshare`; with none it continues a prompt with the default model.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh run
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j"$(nproc)" --target kvshare_cli >/dev/null
if [ $# -eq 0 ]; then set -- generate --prompt "The capital of France is Paris. The capital of Germany is" -n 48 --threads "$(nproc)"; fi
exec ./build/bin/kvshare "$@"
