#!/usr/bin/env bash
# Install what is missing for the tests (scripts/setup.sh's full profile: every extra, llama-server,
# Chromium), lint with ruff, then run the test suite against a real
# Docker engine. Extra arguments go to pytest, e.g. `bash scripts/test.sh -k editor`.
set -euo pipefail
cd "$(dirname "$0")/.."
INSANDBOX_PROFILE=full INSANDBOX_GVISOR=1 bash scripts/setup.sh  # everything; the tests also run sandboxes under gVisor
echo "[test] ruff check"
.venv/bin/ruff check .
echo "[test] import contracts (lint-imports)"
.venv/bin/lint-imports --no-cache
exec .venv/bin/python -m pytest -q "$@"
