#!/usr/bin/env bash
# Side by side with the reference implementation (PyPI llm-in-sandbox 0.2.0), in one run,
# with the harness in ../shared/peer (copied to a scratch folder: shared/ is read-only).
#
#   bash benchmarks/peer_compare.sh            # both systems, every scenario, then the table
#   ONLY=insandbox bash benchmarks/peer_compare.sh   # just ours
# Env: PEER_SRC (default ../shared/peer), PEER_WORK (default /tmp/insandbox-peer), and the
# harness's own: REPEAT, SKIP_TIMEOUT, SKIP_CONC, CONC_NS.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
SRC=${PEER_SRC:-$ROOT/../shared/peer}
WORK=${PEER_WORK:-/tmp/insandbox-peer}
[ -f "$SRC/harness.py" ] || { echo "no harness at $SRC" >&2; exit 1; }
mkdir -p "$WORK"
cp -r "$SRC/." "$WORK/"
chmod -R u+w "$WORK"
cat >"$WORK/sut/insandbox.json" <<JSON
{
 "name": "insandbox",
 "about": "this checkout: $ROOT",
 "image": "insandbox:latest",
 "env": {},
 "run": "$ROOT/.venv/bin/insandbox run {query} --model {model} --base-url {base_url} --api-key x --max-steps {max_steps} --out {outdir} --image {image} -q",
 "batch": "$ROOT/.venv/bin/python $ROOT/benchmarks/peer_batch.py --n {n} --workers {workers} --model {model} --base-url {base_url} --image {image} --max-steps {max_steps} --out {outdir}/driver.json"
}
JSON
cd "$WORK"
if [ "${ONLY:-}" != "insandbox" ]; then bash run_all.sh sut/official.json; fi
bash run_all.sh sut/insandbox.json
