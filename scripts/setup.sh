#!/usr/bin/env bash
# Installs every build and test dependency from Debian's archive. Idempotent; run as root (or
# with sudo) on Debian 12. Skips apt entirely when everything is already installed.
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config git ccache
  libeigen3-dev libhwy-dev libcli11-dev nlohmann-json3-dev libfmt-dev libpcre2-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  libmicrohttpd-dev             # turbokv serve's HTTP/1.1 front end (server/http/http_server.hpp)
  libcpp-httplib-dev            # serve-bench's HTTP client
  libxxhash-dev                 # XXH3 checksums of saved caches
  libhiredis-dev                # serve --prefix-store (Redis client)
  liblmdb-dev                   # serve --prefix-disk (the local disk tier of prompt prefixes)
  redis-server nginx            # the shared prefix store's tests (a store, a load balancer)
  clang-14 libclang-rt-14-dev   # libFuzzer and sanitizer builds
  gnuplot-nox                   # docs/ plots
  bible-kjv fortunes            # evaluation texts (see README)
  pybind11-dev python3-dev python3-numpy python3-pytest   # the Python package (python/), for /usr/bin/python3
  python3-venv python3-pip python3-setuptools python3-wheel  # `pip install .` into a venv, offline (pyproject.toml)
  python3-jinja2                # the reference renderer chat templates are tested against (tests/server/jinja_reference.py)
)

# The server's end-to-end tests run the official openai npm client: node and npm from Debian
# unless the machine already has them (e.g. NodeSource's nodejs, which bundles npm).
command -v npm >/dev/null || packages+=(nodejs npm)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  echo "setup: installing ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
  echo "setup: all dependencies present"
fi

# The end-to-end tests' npm packages (the official openai client, @huggingface/gguf for GGUF
# interoperability), exactly as locked.
(cd "$(dirname "$0")/../tests/e2e" && npm ci --no-audit --no-fund --loglevel=error)
