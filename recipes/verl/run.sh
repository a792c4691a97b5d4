#!/usr/bin/env bash
# LLM-in-Sandbox-RL with verl on a multi-node Ray cluster (see recipes/verl/README.md).
# Run from the repository root, checked out at the same path on every node.
#
#   recipes/verl/run.sh setup               every node: checks Docker, builds the sandbox image, imports verl
#   recipes/verl/run.sh data TASKS.jsonl    once: task rows -> $INSANDBOX_VERL_DATA/{train,val}.parquet
#   recipes/verl/run.sh head                the head node: ray start --head
#   recipes/verl/run.sh worker HEAD_IP      every other node: ray start, joining the head
#   recipes/verl/run.sh train [KEY=VALUE]   the head node, once every node joined: verl's trainer
#   recipes/verl/run.sh train-async [KEY=VALUE]  instead of train: verl's fully asynchronous trainer,
#                                           TRAIN_NODES (1) nodes training, ROLLOUT_NODES (1) serving rollouts
#
# Settings (environment): NNODES (2), GPUS_PER_NODE (8), MODEL (Qwen/Qwen3-4B-Instruct-2507),
# INSANDBOX_VERL_DATA (data/verl), VAL_SIZE (64), MAX_PROMPT_LENGTH (8192), RAY_PORT (6379),
# INSANDBOX_RECORDS_DIR (unset: no per-rollout records; set it before `head` and `worker`),
# INSANDBOX_VERL_CKPT (checkpoints); train-async: TRAIN_NODES (1), ROLLOUT_NODES (1).
set -euo pipefail

RECIPE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
NNODES=${NNODES:-2}
GPUS_PER_NODE=${GPUS_PER_NODE:-8}
MODEL=${MODEL:-Qwen/Qwen3-4B-Instruct-2507}
RAY_PORT=${RAY_PORT:-6379}
VAL_SIZE=${VAL_SIZE:-64}
MAX_PROMPT_LENGTH=${MAX_PROMPT_LENGTH:-8192}
PYTHON=${PYTHON:-python3}
export INSANDBOX_VERL_RECIPE=$RECIPE  # the agent-loop YAML, by absolute path (workers on other nodes read it)
# `import verl` imports these in every process (Ray starts its workers with this environment): the
# trainer finds the recipe's advantage estimator, insandbox_rloo, there
export VERL_USE_EXTERNAL_MODULES=${VERL_USE_EXTERNAL_MODULES:+$VERL_USE_EXTERNAL_MODULES,}insandbox.rl.trainers.verl_advantage
export INSANDBOX_VERL_DATA=${INSANDBOX_VERL_DATA:-data/verl}

die() { echo "run.sh: $*" >&2; exit 2; }
# GPU nodes alive in the Ray cluster this node belongs to
gpu_nodes() {
  "$PYTHON" -c "import ray; ray.init(address='auto', logging_level='ERROR'); \
print(sum(1 for n in ray.nodes() if n['Alive'] and n['Resources'].get('GPU', 0) > 0))"
}

cmd=${1:-}
[[ -n $cmd ]] || die "which step? setup | data TASKS.jsonl | head | worker HEAD_IP | train [KEY=VALUE ...] | train-async [KEY=VALUE ...]"
shift

case $cmd in
  setup)
    docker info >/dev/null 2>&1 || die "no Docker engine here: every node runs its rollouts' sandboxes"
    insandbox image status >/dev/null 2>&1 || insandbox image build
    "$PYTHON" -c "import verl, vllm, insandbox.rl.trainers.verl_agent_loop" \
      || die "install: pip install -e '.[rl,verl]' 'verl[vllm]==0.9.1' (see docs/rl/verl.md)"
    echo "ready: Docker, the sandbox image, verl and the insandbox agent loop"
    ;;
  data)
    [[ $# -ge 1 ]] || die "data TASKS.jsonl (the tasks.jsonl of insandbox rl build-data)"
    "$PYTHON" -m insandbox.rl.trainers.verl_data --data "$1" --out "$INSANDBOX_VERL_DATA" --val-size "$VAL_SIZE" \
      --tokenizer "$MODEL" --max-prompt-length "$MAX_PROMPT_LENGTH"
    ;;
  head)
    ray start --head --port="$RAY_PORT" --dashboard-host=0.0.0.0 --num-gpus="$GPUS_PER_NODE"
    ;;
  worker)
    [[ $# -ge 1 ]] || die "worker HEAD_IP"
    ray start --address="$1:$RAY_PORT" --num-gpus="$GPUS_PER_NODE"
    ;;
  train)
    [[ -f $INSANDBOX_VERL_DATA/train.parquet ]] || die "no $INSANDBOX_VERL_DATA/train.parquet: run.sh data first"
    joined=$(gpu_nodes)
    [[ $joined -ge $NNODES ]] || die "$joined of $NNODES GPU nodes joined the cluster"
    export RAY_ADDRESS=auto
    "$PYTHON" -m verl.trainer.main_ppo --config-path "$RECIPE" --config-name rloo_qwen3_4b \
      trainer.nnodes="$NNODES" trainer.n_gpus_per_node="$GPUS_PER_NODE" actor_rollout_ref.model.path="$MODEL" "$@"
    ;;
  train-async)
    # verl's fully async trainer: its own config (fully_async_ppo_trainer), ours on top (fully_async/)
    TRAIN_NODES=${TRAIN_NODES:-1}
    ROLLOUT_NODES=${ROLLOUT_NODES:-1}
    [[ -f $INSANDBOX_VERL_DATA/train.parquet ]] || die "no $INSANDBOX_VERL_DATA/train.parquet: run.sh data first"
    joined=$(gpu_nodes)
    want=$((TRAIN_NODES + ROLLOUT_NODES))
    [[ $joined -ge $want ]] || die "$joined of $want GPU nodes joined the cluster (TRAIN_NODES + ROLLOUT_NODES)"
    export RAY_ADDRESS=auto
    "$PYTHON" -m verl.experimental.fully_async_policy.fully_async_main --config-dir "$RECIPE" \
      +fully_async=rloo_qwen3_4b trainer.nnodes="$TRAIN_NODES" trainer.n_gpus_per_node="$GPUS_PER_NODE" \
      rollout.nnodes="$ROLLOUT_NODES" rollout.n_gpus_per_node="$GPUS_PER_NODE" actor_rollout_ref.model.path="$MODEL" "$@"
    ;;
  *)
    die "unknown step $cmd"
    ;;
esac
