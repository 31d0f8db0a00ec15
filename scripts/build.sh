#!/usr/bin/env bash
# Configures and builds turbokv in build/ (Release). Extra arguments go to cmake's configure step.
# Uses Ninja when it is installed (scripts/setup.sh installs it), else Make.
set -euo pipefail
cd "$(dirname "$0")/.."
generator=()
if command -v ninja >/dev/null && [[ ! -f build/CMakeCache.txt ]]; then generator=(-G Ninja); fi
# ccache (from scripts/setup.sh) makes a rebuild, and the Python wheel's build of the same sources
# (setup.py), cheap.
launcher=()
if command -v ccache >/dev/null; then launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache); fi
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release "${generator[@]}" "${launcher[@]}" "$@"
cmake --build build -j"$(nproc)"
