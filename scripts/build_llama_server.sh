#!/usr/bin/env bash
# Build llama.cpp's own HTTP server, `llama-server`, once per machine, idempotently:
#   the llama-cpp-python sdist from PyPI (the llama.cpp it vendors, so the server and the embedded
#   model's bindings are the same llama.cpp) -> a portable static Release build of that one target
#   -> ~/.cache/insandbox/bin/llama-server-VERSION. Re-running it only checks the cached binary.
# The tests that talk to real third-party servers (tests/servers.py) start this binary.
#
# Env: INSANDBOX_LLAMA_VERSION llama-cpp-python version whose llama.cpp is built (default 0.3.36)
#      INSANDBOX_BIN_CACHE     where the binary is kept (default ~/.cache/insandbox/bin)
#      INSANDBOX_BUILD_JOBS    parallel compile jobs (default 2)
#      PYTHON                  the Python whose pip fetches the sources (default .venv/bin/python, else python3)
# Prints the binary's path on stdout (progress goes to stderr).
set -euo pipefail
cd "$(dirname "$0")/.."

log() { printf '\033[1m[llama-server]\033[0m %s\n' "$*" >&2; }

version=${INSANDBOX_LLAMA_VERSION:-0.3.36}
cache=${INSANDBOX_BIN_CACHE:-$HOME/.cache/insandbox/bin}
bin="$cache/llama-server-$version"
jobs=${INSANDBOX_BUILD_JOBS:-2}
python=${PYTHON:-}
if [ -z "$python" ]; then
  if [ -x .venv/bin/python ]; then python=.venv/bin/python; else python=python3; fi
fi

works() { [ -x "$1" ] && "$1" --version >/dev/null 2>&1; }

if works "$bin"; then  # built already: nothing to do, nothing said
  echo "$bin"
  exit 0
fi
command -v cmake >/dev/null 2>&1 && command -v g++ >/dev/null 2>&1 \
  || { echo "cmake and g++ are needed (scripts/setup.sh installs them)" >&2; exit 1; }

mkdir -p "$cache"
# two setups at once build it once: the second waits, then finds the binary
exec 9>"$cache/.llama-server-$version.lock"
flock 9
if works "$bin"; then
  log "llama-server $version was built meanwhile: $bin"
  echo "$bin"
  exit 0
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/insandbox-llama-server.XXXXXX")
trap 'rm -rf "$work"' EXIT

log "fetching llama-cpp-python $version's sources (llama.cpp vendored in its sdist)"
# --no-binary for this one package only: its build backend still comes as a wheel (seconds, not a build)
if ! fetched=$("$python" -m pip download --quiet --no-deps --no-binary llama-cpp-python \
    "llama-cpp-python==$version" -d "$work" 2>&1); then
  grep -v "is ignored: it is neither" <<<"$fetched" >&2
  echo "could not fetch the llama-cpp-python $version sdist" >&2
  exit 1
fi
sdist=$(ls "$work"/llama_cpp_python-*.tar.gz)
tar xzf "$sdist" -C "$work" --wildcards "*/vendor/llama.cpp/*"
src=$(ls -d "$work"/llama_cpp_python-*/vendor/llama.cpp)

log "building llama-server $version (once, a few minutes on 2 cores; cached in $cache)"
start=$SECONDS
# Portable: a native build crashes on machines whose CPU reports AMX/AVX-512 the VM does not
# enable (the same flags scripts/setup.sh gives the wheel). Static libraries and a static C++
# runtime so the one file runs wherever it is copied; no OpenMP (ggml's own thread pool), no
# OpenSSL (it serves plain HTTP and never downloads models), no web UI (it would be fetched).
cmake -S "$src" -B "$work/build" -DCMAKE_BUILD_TYPE=Release \
  -DGGML_NATIVE=OFF -DGGML_AVX512=OFF -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF \
  -DBUILD_SHARED_LIBS=OFF -DGGML_OPENMP=OFF -DLLAMA_OPENSSL=OFF \
  -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_APP=OFF \
  -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF \
  -DCMAKE_EXE_LINKER_FLAGS="-static-libgcc -static-libstdc++" \
  >"$work/configure.log" 2>&1 || { tail -30 "$work/configure.log" >&2; echo "cmake configure failed" >&2; exit 1; }
cmake --build "$work/build" --target llama-server -j "$jobs" >"$work/build.log" 2>&1 \
  || { grep -E "error|Error" "$work/build.log" | head -30 >&2; tail -10 "$work/build.log" >&2; echo "the build failed" >&2; exit 1; }

built="$work/build/bin/llama-server"
works "$built" || { "$built" --version >&2 || true; echo "the built llama-server does not run" >&2; exit 1; }
strip "$built" 2>/dev/null || true
cp "$built" "$bin.tmp.$$"
mv -f "$bin.tmp.$$" "$bin"  # whole or not at all: a half-copied binary is never used
log "built in $((SECONDS - start)) s: $bin ($(du -h "$bin" | cut -f1))"
echo "$bin"
