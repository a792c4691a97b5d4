#!/usr/bin/env bash
# Install everything insandbox needs on a Debian or Ubuntu machine (run as root), idempotently:
#   system packages (Docker engine, debootstrap, Python venv, a C++ toolchain, Chromium) -> a running Docker
#   engine -> the llama.cpp wheel for the embedded model (built once, cached) -> .venv with
#   insandbox[dev,local,bench,rl,verl,ray] (torch pinned first) -> with `dev`, llama.cpp's llama-server
#   for the tests against real third-party servers (built once, cached) -> the sandbox image and the
#   registries proxy's.
# Re-running it only does what is missing.
#
# Env: INSANDBOX_EXTRAS        pip extras to install (default: dev,local,bench,rl,verl,ray)
#      INSANDBOX_TORCH         the torch to install before the rl/verl extras (default torch==2.13.0, the CPU
#                              build on this kind of machine; a plain `torch` pulls several GB of CUDA packages)
#      INSANDBOX_WHEEL_CACHE   where the built llama-cpp-python wheel is kept (default ~/.cache/insandbox/wheels)
#      INSANDBOX_LLAMA_VERSION llama-cpp-python version to build, and whose llama.cpp llama-server is
#                              built from (default 0.3.36)
#      INSANDBOX_BIN_CACHE     where the built llama-server is kept (default ~/.cache/insandbox/bin)
#      INSANDBOX_SKIP_LLAMA_SERVER=1  do not build llama-server (scripts/build_llama_server.sh; ~10 minutes
#                              on 2 cores the first time; the third_party_server tests need it)
#      INSANDBOX_SKIP_IMAGE=1  do not build the sandbox image (nor the registries proxy's)
#      INSANDBOX_GVISOR=1      also install gVisor (Debian's runsc) and register it with the engine as `runsc`
#                              (`--runtime gvisor`); the tests under gVisor need it
set -euo pipefail
cd "$(dirname "$0")/.."

log() { printf '\033[1m[setup]\033[0m %s\n' "$*"; }
# pip, quiet when it works, its whole output (minus this machine's index warnings) when it fails
pipq() {
  local out
  if ! out=$(.venv/bin/pip "$@" 2>&1); then
    grep -v "is ignored: it is neither" <<<"$out" >&2
    echo "pip $* failed" >&2
    return 1
  fi
}

# --- 1. system packages -------------------------------------------------------------------
need=()
command -v dockerd >/dev/null 2>&1 || need+=(docker.io)
command -v debootstrap >/dev/null 2>&1 || [ -x /usr/sbin/debootstrap ] || need+=(debootstrap)
command -v python3 >/dev/null 2>&1 || need+=(python3)
python3 -c "import venv, ensurepip" >/dev/null 2>&1 || need+=(python3-venv)
command -v git >/dev/null 2>&1 || need+=(git)
command -v g++ >/dev/null 2>&1 || need+=(build-essential)
command -v cmake >/dev/null 2>&1 || need+=(cmake)
# the sandbox backends beyond Docker's runc: bubblewrap and slirp4netns (--backend bwrap, no engine),
# Podman and newuidmap (the Docker backend on Podman's service, rootful and rootless)
command -v bwrap >/dev/null 2>&1 || need+=(bubblewrap)
command -v slirp4netns >/dev/null 2>&1 || need+=(slirp4netns)
command -v podman >/dev/null 2>&1 || need+=(podman)
command -v newuidmap >/dev/null 2>&1 || need+=(uidmap)
# headless Chromium for the viewer's browser tests (tests/viewer, driven by Playwright's Python client).
# Ubuntu's `chromium` package is only a stub that installs a snap: there, step 4 fetches Playwright's build.
distro=$(. /etc/os-release 2>/dev/null && echo "${ID:-}")
if [ "$distro" != ubuntu ]; then
  command -v chromium >/dev/null 2>&1 || need+=(chromium)
fi
if [ ${#need[@]} -gt 0 ]; then
  log "installing ${need[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq "${need[@]}" >/dev/null
fi

# --- 2. a Docker engine that answers ------------------------------------------------------
if ! docker info >/dev/null 2>&1; then
  if [ -d /run/systemd/system ] && command -v systemctl >/dev/null 2>&1; then
    log "starting docker (systemd)"
    systemctl start docker || true
  fi
  if ! docker info >/dev/null 2>&1; then
    # Without systemd the root mount is private, and dockerd then bind-mounts its data folder onto
    # itself when it starts and removes that bind when it stops. A sandbox's disk (a loop mount in
    # there, src/insandbox/sandbox/disk.py) made while the engine restarts would end up hidden under
    # the next bind, and its container could never be removed. A data folder that already is a
    # shared mount point is left alone by dockerd: make it one, once.
    mkdir -p /var/lib/docker
    mountpoint -q /var/lib/docker || mount --bind /var/lib/docker /var/lib/docker
    mount --make-shared /var/lib/docker
    log "starting dockerd in the background (log: /var/log/insandbox-dockerd.log)"
    nohup dockerd >/var/log/insandbox-dockerd.log 2>&1 &
    for _ in $(seq 60); do docker info >/dev/null 2>&1 && break; sleep 0.5; done
  fi
  docker info >/dev/null 2>&1 || { tail -20 /var/log/insandbox-dockerd.log; echo "dockerd did not start" >&2; exit 1; }
fi

# --- 2b. gVisor, when asked ---------------------------------------------------------------
if [ "${INSANDBOX_GVISOR:-}" = 1 ]; then
  command -v runsc >/dev/null 2>&1 || { log "installing gVisor (runsc)"; DEBIAN_FRONTEND=noninteractive apt-get install -y -qq runsc >/dev/null; }
  if ! docker info --format '{{json .Runtimes}}' 2>/dev/null | grep -q '"runsc"'; then
    # --network=host hands gVisor the container's own network namespace (its own stack will not start in
    # the root namespace of some VMs); the sandbox's packet filter then applies as under runc
    log "registering runsc with the Docker engine (/etc/docker/daemon.json)"
    python3 - <<'PY'
import json, pathlib
p = pathlib.Path("/etc/docker/daemon.json")
cfg = json.loads(p.read_text()) if p.exists() and p.read_text().strip() else {}
cfg.setdefault("runtimes", {})["runsc"] = {"path": "/usr/bin/runsc", "runtimeArgs": ["--network=host"]}
p.parent.mkdir(parents=True, exist_ok=True)
p.write_text(json.dumps(cfg, indent=2) + "\n")
PY
    kill -HUP "$(pidof dockerd)"  # the engine reads its runtimes again, nothing restarts
    for _ in $(seq 20); do docker info --format '{{json .Runtimes}}' | grep -q '"runsc"' && break; sleep 0.5; done
  fi
fi

# --- 3. the Python environment ------------------------------------------------------------
if [ ! -x .venv/bin/python ]; then
  log "creating .venv"
  python3 -m venv .venv
fi
extras=${INSANDBOX_EXTRAS:-dev,local,bench,rl,verl,ray}
wheel=""
if [[ ",$extras," == *",local,"* ]]; then
  # llama.cpp for the embedded model. A native build crashes on machines whose CPU reports
  # AMX/AVX-512 the VM does not enable, so build a portable one; it takes ~5 minutes on 2
  # cores, so the wheel is cached and reused. (scripts/build_llama_server.sh uses the same flags.)
  export CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX512=OFF -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF"
  cache=${INSANDBOX_WHEEL_CACHE:-$HOME/.cache/insandbox/wheels}
  version=${INSANDBOX_LLAMA_VERSION:-0.3.36}
  wheel=$(ls "$cache"/llama_cpp_python-"$version"-*.whl 2>/dev/null | head -1 || true)
  if [ -z "$wheel" ]; then
    log "building llama-cpp-python $version (once, about 5 minutes; cached in $cache)"
    mkdir -p "$cache"
    pipq wheel --no-deps -w "$cache" "llama-cpp-python==$version"
    wheel=$(ls "$cache"/llama_cpp_python-"$version"-*.whl 2>/dev/null | head -1 || true)
    [ -n "$wheel" ] || { echo "building llama-cpp-python failed" >&2; exit 1; }
  fi
fi
stamp=.venv/.insandbox-installed
want="$(sha256sum pyproject.toml | cut -c1-16) $extras $(basename "${wheel:-none}")"
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  log "installing insandbox[$extras] into .venv"
  pipq install --upgrade pip
  if [ -n "$wheel" ]; then pipq install "$wheel"; fi
  constraints=.venv/.insandbox-constraints.txt
  : >"$constraints"
  if [[ ",$extras," == *",rl,"* || ",$extras," == *",verl,"* ]]; then
    # the RL stack needs torch; install the chosen build first and hold it there, so that no
    # dependency replaces it with a CUDA build
    if ! .venv/bin/python -c "import torch" >/dev/null 2>&1; then
      log "installing ${INSANDBOX_TORCH:-torch==2.13.0}"
      pipq install "${INSANDBOX_TORCH:-torch==2.13.0}"
    fi
    .venv/bin/python -c "import torch; print('torch==' + torch.__version__)" >"$constraints"
  fi
  pipq install -c "$constraints" -e ".[$extras]"
  .venv/bin/python -c "import insandbox.cli${wheel:+, llama_cpp}" || { echo "insandbox did not install" >&2; exit 1; }
  if grep -q "torch" "$constraints"; then
    .venv/bin/python -c "import torch, trl, transformers" || { echo "the RL extras did not install" >&2; exit 1; }
  fi
  echo "$want" >"$stamp"
fi

if [[ ",$extras," == *",dev,"* ]] && [ "$distro" = ubuntu ] && ! ls ~/.cache/ms-playwright/chromium-* >/dev/null 2>&1; then
  log "installing Playwright's Chromium for the viewer's browser tests (Ubuntu has no Chromium package)"
  .venv/bin/python -m playwright install --with-deps chromium >/dev/null
fi

# --- 4. llama.cpp's own server, for the tests against real third-party servers ---------------
if [[ ",$extras," == *",dev,"* ]] && [ -z "${INSANDBOX_SKIP_LLAMA_SERVER:-}" ]; then
  bash scripts/build_llama_server.sh >/dev/null  # says what it builds; silent when it is built
fi

# --- 5. the sandbox image -----------------------------------------------------------------
if [ -z "${INSANDBOX_SKIP_IMAGE:-}" ] && ! docker image inspect insandbox:latest >/dev/null 2>&1; then
  log "building the sandbox image insandbox:latest (once; about 2 minutes)"
  .venv/bin/insandbox image build
fi
if [ -z "${INSANDBOX_SKIP_IMAGE:-}" ] && ! .venv/bin/python -c "import sys
from insandbox.sandbox import image, proxy
sys.exit(0 if image.image_exists(proxy.image_tag()) else 1)" 2>/dev/null; then
  log "building the proxy image of --network registries (once; about 10 s)"
  .venv/bin/insandbox image build-proxy >/dev/null
fi
log "ready: .venv/bin/insandbox"
