"""What the conformance suite's cases write and run in a sandbox; the backends' own tests reuse them
(the Docker engine's archive stream, bwrap's host-side walk) rather than import each other's."""
from __future__ import annotations

import os
from pathlib import Path

# files that break naive transfers: empty, a leading dash, tabs, CRLF, no final newline, UTF-8 and
# Latin-1, shell syntax, and past the in-sandbox server's 1 MiB (the backends' other way)
FIDELITY_CASES = {
    "empty.txt": b"",
    "dash_e.txt": b"-e",
    "tabs.py": b"def f(x):\n\tif x:\n\t\treturn 1\t# tab\n",
    "crlf.csv": b"a,b\r\n1,2\r\n",
    "nonl.txt": b"first\nlast line without newline",
    "utf8.txt": "h\u00e9llo \u2014 \u2713 \u65e5\u672c\u8a9e \U0001f600 e\u0301\n".encode(),
    "latin1.txt": "caf\xe9\n".encode("latin-1"),
    "shell.txt": b"$HOME `echo hi` $(echo hi) \\n '\"' !! \\\n",
    "big300k.txt": (b"0123456789abcdef" * 64 + b"\n") * 300,
    "big5m.bin": bytes(range(256)) * (5 * 1024 * 1024 // 256),
}

# ps without procps: count processes whose command line starts with `sleep`
COUNT_SLEEPS = ("n=0; for p in /proc/[0-9]*; do c=$(tr '\\0' ' ' < $p/cmdline 2>/dev/null); "
                "case \"$c\" in sleep*) n=$((n+1));; esac; done; echo sleeps=$n")

# 60 empty folders, 60 symbolic links, 60 FIFOs, then 10 files (sorted after all of them)
KINDS = """python3 - <<'EOF'
import os
os.makedirs("/testbed/output", exist_ok=True)
os.chdir("/testbed/output")
for i in range(60):
    os.mkdir("d%03d" % i)
    os.symlink("/etc/passwd", "l%03d" % i)
    os.mkfifo("p%03d" % i)
for i in range(10):
    open("z%d" % i, "w").write("z")
EOF"""
# 100 files at the end of 12 nested folders: paths of ~3,100 characters
LONG_PATHS = """python3 - <<'EOF'
import os
d = "/testbed/output"
for i in range(12):
    d = os.path.join(d, "d%02d" % i + "x" * 237)
os.makedirs(d)
for i in range(100):
    open(os.path.join(d, "f%03d" % i + "y" * 196), "w").write("f")
EOF"""
# 1,000 symbolic links with 200-character names and 3,000-character targets
LONG_LINKS = """python3 - <<'EOF'
import os
os.makedirs("/testbed/output", exist_ok=True)
os.chdir("/testbed/output")
for i in range(1000):
    os.symlink("/" + "t" * 3000, "l%04d" % i + "n" * 195)
EOF"""


def on_host(folder: Path) -> list[str]:
    """Every entry below folder (folders, files, anything), relative."""
    out = []
    for top, dirs, files in os.walk(folder):
        out += [os.path.relpath(os.path.join(top, n), folder) for n in dirs + files]
    return out
