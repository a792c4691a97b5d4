#!/usr/bin/env bash
# Time the README's two commands on a fresh clone of this repository, and print a table:
#   main  `bash scripts/setup.sh && .venv/bin/insandbox run "..." --max-steps 10` (the run profile)
#   test  `bash scripts/test.sh [ARGS]` (the full profile, then ruff, lint-imports and pytest)
# Each command gets its own clone (of HEAD, into a temp folder) with its own .venv, so neither
# profits from the other's install.
#
# What "fresh" means here, honestly:
#   - pip's cache is off (PIP_NO_CACHE_DIR=1): every package is downloaded, every sdist built again.
#   - the llama-cpp-python wheel cache and the llama-server cache are setup.sh's own
#     (INSANDBOX_WHEEL_CACHE, INSANDBOX_BIN_CACHE), not pip's: by default each clone gets empty ones,
#     so both builds are timed; TIME_SETUP_WARM=1 keeps this machine's (~/.cache/insandbox), which
#     times a second checkout on a machine that built them once.
#   - system packages (apt) already installed stay installed, and the Docker engine keeps its
#     images: the sandbox image insandbox:latest is shared by every checkout on the machine and is
#     never removed here (other work may use it). The table says whether it was there beforehand; if
#     it was, its build (about 90 s, overlapped with the wheel build) is not in the numbers.
#
# Usage: bash benchmarks/time_setup.sh [main|test|both] [pytest args for the test command...]
#        (default: main; `test` with no pytest args runs the whole suite: ~22 minutes once set up)
# Env:   TIME_SETUP_DIR  where the clones go (default: a new temp folder, removed at the end unless
#                        TIME_SETUP_KEEP=1)
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
which=${1:-main}
shift || true
case "$which" in main | test | both) ;; *) echo "usage: $0 [main|test|both] [pytest args...]" >&2; exit 2 ;; esac

root=${TIME_SETUP_DIR:-$(mktemp -d /tmp/insandbox-time-setup.XXXXXX)}
mkdir -p "$root"
[ -n "${TIME_SETUP_KEEP:-}" ] || [ -n "${TIME_SETUP_DIR:-}" ] || trap 'rm -rf "$root"' EXIT
export PIP_NO_CACHE_DIR=1
task="Write a Python script that prints the first 10 prime numbers, run it, and save the output to /testbed/output/primes.txt"
image_before=$(docker image inspect insandbox:latest >/dev/null 2>&1 && echo "present (not rebuilt)" || echo "absent (built)")

rows=()
# time_step NAME DIR CMD...: run CMD in DIR, log to $root/NAME.log, record its seconds and status
time_step() {
  local name=$1 dir=$2 start rc=0
  shift 2
  start=$(date +%s.%N)
  (cd "$dir" && "$@") >"$root/$name.log" 2>&1 || rc=$?
  rows+=("$(printf '%-22s %9.1f  %s' "$name" "$(awk "BEGIN { print $(date +%s.%N) - $start }")" \
    "$([ $rc = 0 ] && echo ok || echo "FAILED rc=$rc (log: $root/$name.log)")")")
  return $rc
}

clone() {  # a fresh clone of HEAD into $root/NAME, and the setup caches it uses: sets $dir
  dir="$root/$1"
  git clone -q --no-hardlinks "$repo" "$dir"
  if [ -z "${TIME_SETUP_WARM:-}" ]; then
    export INSANDBOX_WHEEL_CACHE="$root/$1-cache/wheels" INSANDBOX_BIN_CACHE="$root/$1-cache/bin"
  fi
}

if [ "$which" = main ] || [ "$which" = both ]; then
  clone main
  echo "[time_setup] main command in $dir (logs in $root)" >&2
  time_step "main: setup.sh (run)" "$dir" bash scripts/setup.sh \
    && time_step "main: insandbox run" "$dir" .venv/bin/insandbox run "$task" --max-steps 10 || true
fi
if [ "$which" = test ] || [ "$which" = both ]; then
  clone test
  echo "[time_setup] test command in $dir (logs in $root)" >&2
  # the setup half on its own first, so the table splits install time from test time
  time_step "test: setup.sh (full)" "$dir" env INSANDBOX_PROFILE=full bash scripts/setup.sh \
    && time_step "test: test.sh $*" "$dir" bash scripts/test.sh "$@" || true
fi

echo
echo "sandbox image insandbox:latest beforehand: $image_before; pip cache: off;" \
  "llama wheel and llama-server caches: $([ -n "${TIME_SETUP_WARM:-}" ] && echo "this machine's (warm)" || echo "empty (cold)")"
printf '%-22s %9s  %s\n' step seconds result
for row in "${rows[@]}"; do echo "$row"; done
