"""Every default that more than one layer shows or applies, declared once (the sandbox's spec, the
agent's environment, a run's settings, RL rollouts and the command line's options all take them
from here)."""
from __future__ import annotations

IMAGE = "insandbox:latest"
BACKEND = "docker"
WORKDIR = "/testbed"
MEMORY = "4g"  # per sandbox, no swap on top
CPUS = 2.0
PIDS = 1024
NETWORK = "bridge"
DISK = "10g"  # what a sandbox may write to its own filesystem
COMMAND_TIMEOUT_S = 120.0  # a command running longer is killed with everything it started
OUTPUT_LIMIT = 16000  # characters of one tool output the model sees (head and tail)
MAX_STEPS = 100
STUCK_AFTER = 5  # identical steps in a row that end an episode as `stuck`
# tool calls of one reply that run; the rest are answered "not run" (a reply of 50 calls is a loop, not a plan)
MAX_TOOL_CALLS_PER_REPLY = 16
# the model client
MAX_RETRIES = 5  # of one failed model request
REQUEST_TIMEOUT_S = 600.0  # one model request
STALL_TIMEOUT_S = 120.0  # a streamed reply silent this long has stalled
TOOL_CHOICE = "auto"  # sent whenever tools are offered
TOOL_FORMAT = "native"  # tools as the API's structured tools (text: in the system prompt)
# copy-back of the output folder
COPY_MAX_FILE_BYTES = 512 * 1024 ** 2
COPY_MAX_TOTAL_BYTES = 1024 ** 3
COPY_MAX_ENTRIES = 10_000  # files, folders, links and special files alike
COPY_MAX_LISTING_BYTES = 4 * 1024 ** 2  # the folder's listing (its paths, as JSON), whatever the other limits
# benchmarks (and RL's rollouts, which share the pool)
CONCURRENCY = 8  # samples (or rollouts) in flight at once, each in its own sandbox
SAMPLE_RETRIES = 2  # of a sample whose model server or sandbox failed
RETRY_BACKOFF_S = 2.0  # before a sample's first retry, doubled at each (at most 30 s)
ENGINE_WAIT_S = 300.0  # how long samples (and the pool's removals) wait for an engine that went away
POOL_MAX_USES = 100  # samples one recycled sandbox serves before a fresh one replaces it
POOL_EXTRA = 8  # sandboxes a pool keeps started beyond those in use, at most: size = n + min(n, POOL_EXTRA)


def pool_size(concurrency: int) -> int:
    """The sandboxes a pool keeps alive for `concurrency` in flight: those, and a few started ahead."""
    return concurrency + min(concurrency, POOL_EXTRA)
# RL rollouts: an episode of a context task, its documents read from files (a `cat` of one is thousands
# of tokens), as `insandbox rl rollout` and the Python API run it unless told otherwise
ROLLOUT_MAX_STEPS = 16  # model turns
ROLLOUT_RESPONSE_TOKENS = 8192  # model and environment tokens after the prompt
ROLLOUT_MAX_TOKENS = 2048  # sampled per turn
ROLLOUT_TIME_LIMIT_S = 900.0  # a whole rollout
ROLLOUT_TEMPERATURE = 1.0  # on-policy sampling
