"""What the host and the in-container server say to each other: newline-delimited JSON over the
container's stdin and stdout, one reply per request, matched by `id`.

    -> {"id": 1, "op": "run", "cmd": "cd /tmp", "timeout": 120, "limit": 16000}
    <- {"id": 1, "ok": true, "output": "", "exit_code": 0, "timed_out": false, ...}

Both sides take the operations' names from here: the host imports this module, and the source of
this file goes into the sandbox ahead of server.py's (so, like server.py, it is standard library
only and runs on Python 3.6).
"""

# the container's command: read the server's source from the first line of stdin and run it
BOOTSTRAP = "import sys,json;exec(json.loads(sys.stdin.readline()))"
STATE_DIR = "/run/insandbox"  # the server's own in-memory folder in the sandbox

RUN = "run"  # a command in the persistent shell
EXEC = "exec"  # a program, directly (no shell state): the host's own helpers
READ = "read"  # one small regular file
READ_MANY = "read_many"  # several small regular files (copy-back)
WRITE = "write"  # one small file
LIST_TREE = "list_tree"  # every entry under a folder, links not followed (copy-back)
STAT = "stat"  # a path as the model sees it
RESET = "reset"  # between two samples: everything of the last one ended (recycling)
FRESH_SHELL = "fresh_shell"  # a new shell, after a reset
PING = "ping"
