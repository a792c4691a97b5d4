#!/usr/bin/env bash
# Install what is missing for the tests (scripts/setup.sh's full profile: every extra, llama-server,
# Chromium), lint with ruff, check the import contracts, build the manual strictly (mkdocs), then run
# the test suite against a real Docker engine. Extra arguments go to pytest, e.g. `bash scripts/test.sh -k editor`.
set -euo pipefail
cd "$(dirname "$0")/.."
INSANDBOX_PROFILE=full INSANDBOX_GVISOR=1 bash scripts/setup.sh  # everything; the tests also run sandboxes under gVisor
echo "[test] ruff check"
.venv/bin/ruff check .
echo "[test] import contracts (lint-imports)"
.venv/bin/lint-imports --no-cache
echo "[test] the manual (mkdocs build --strict, into site/)"
NO_MKDOCS_2_WARNING=1 .venv/bin/mkdocs build --strict  # not --quiet: it hides warnings from --strict; the variable: the theme's end-of-life banner
exec .venv/bin/python -m pytest -q "$@"
