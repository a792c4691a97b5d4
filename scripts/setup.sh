#!/usr/bin/env bash
# Install everything insandbox needs on a Debian or Ubuntu machine (run as root), idempotently:
#   system packages (Docker engine, debootstrap, Python venv) -> a running Docker engine
#   -> .venv with insandbox -> the sandbox image.
# Re-running it only does what is missing.
#
# Env: INSANDBOX_EXTRAS   pip extras to install (default: dev)
#      INSANDBOX_SKIP_IMAGE=1  do not build the sandbox image
set -euo pipefail
cd "$(dirname "$0")/.."

log() { printf '\033[1m[setup]\033[0m %s\n' "$*"; }

# --- 1. system packages -------------------------------------------------------------------
need=()
command -v dockerd >/dev/null 2>&1 || need+=(docker.io)
command -v debootstrap >/dev/null 2>&1 || [ -x /usr/sbin/debootstrap ] || need+=(debootstrap)
command -v python3 >/dev/null 2>&1 || need+=(python3)
python3 -c "import venv, ensurepip" >/dev/null 2>&1 || need+=(python3-venv)
command -v git >/dev/null 2>&1 || need+=(git)
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
    log "starting dockerd in the background (log: /var/log/insandbox-dockerd.log)"
    nohup dockerd >/var/log/insandbox-dockerd.log 2>&1 &
    for _ in $(seq 60); do docker info >/dev/null 2>&1 && break; sleep 0.5; done
  fi
  docker info >/dev/null 2>&1 || { tail -20 /var/log/insandbox-dockerd.log; echo "dockerd did not start" >&2; exit 1; }
fi

# --- 3. the Python environment ------------------------------------------------------------
if [ ! -x .venv/bin/python ]; then
  log "creating .venv"
  python3 -m venv .venv
fi
stamp=.venv/.insandbox-installed
extras=${INSANDBOX_EXTRAS:-dev}
want="$(sha256sum pyproject.toml | cut -c1-16) $extras"
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  log "installing insandbox[$extras] into .venv"
  .venv/bin/pip install -q --upgrade pip 2>&1 | grep -v "is ignored" || true
  .venv/bin/pip install -q -e ".[$extras]" 2>&1 | grep -v "is ignored" || true
  .venv/bin/python -c "import insandbox.cli" || { echo "insandbox did not install" >&2; exit 1; }
  echo "$want" >"$stamp"
fi

# --- 4. the sandbox image -----------------------------------------------------------------
if [ -z "${INSANDBOX_SKIP_IMAGE:-}" ] && ! docker image inspect insandbox:latest >/dev/null 2>&1; then
  log "building the sandbox image insandbox:latest (once; about 2 minutes)"
  .venv/bin/insandbox image build
fi
log "ready: .venv/bin/insandbox"
