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
