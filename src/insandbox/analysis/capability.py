"""Which capabilities of the computer a model used, turn by turn (the paper's Table 15).

Each turn (one model reply) is classified by pattern rules on what it ran or wrote: the
shell commands of its execute_bash calls, and the text it wrote with the editor (code
that runs later). A turn can count for several capabilities:

- external resources: installing packages (pip, apt, npm, conda, cargo), downloading
  (curl, wget, git clone), network libraries or calls in code (requests, urllib, httpx,
  socket, urlopen);
- file management: shell file commands (ls, cat, grep, sed, find, head, ...), file I/O in
  code (open(), read_text, read_csv, listdir, glob), the task's input folder, and every
  str_replace_editor call;
- computation: running programs (python, scripts, compilers) and numeric libraries
  (numpy, scipy, sympy, pandas, math, ...).

Usage rate = turns that used a capability / all turns.
"""
from __future__ import annotations

import re
from collections import Counter

from ..core import model_json

CAPABILITIES = ("external", "file", "computation")

_EXTERNAL = re.compile(
    r"\b(?:pip3?|uv\s+pip|conda|mamba|apt(?:-get)?|npm|yarn|cargo|gem)\s+install\b|\bpython3?\s+-m\s+pip\s+install\b"
    r"|(?:^|[\s;&|(`$])(?:curl|wget)\s|\bgit\s+clone\b"
    r"|\b(?:import|from)\s+(?:requests|urllib|urllib3|httpx|aiohttp|socket|http\.client)\b|\burlopen\(")
_FILE_COMMANDS = {"ls", "cat", "head", "tail", "grep", "egrep", "rg", "sed", "awk", "find", "wc", "cp", "mv", "mkdir",
                  "rm", "touch", "less", "more", "file", "tree", "du", "stat", "sort", "uniq", "cut", "diff", "tee",
                  "chmod", "ln", "tar", "unzip", "zip", "xxd", "od", "strings", "iconv"}
_FILE_CODE = re.compile(r"\bopen\(|\.read_text\(|\.write_text\(|\bread_csv\(|\bread_json\(|\blistdir\(|\bglob\b"
                        r"|\bos\.walk\(|/testbed/(?:input|documents)\b")
_RUN = re.compile(r"(?:^|[\s;&|(])(?:python3?|ipython|node|gcc|g\+\+|cc|make|java|Rscript|julia|bc)(?:\s|$)"
                  r"|(?:^|[\s;&|(])\./[\w./-]+|\bbash\s+[\w./-]+\.sh\b")
_NUMERIC = re.compile(r"\b(?:import|from)\s+(?:numpy|scipy|sympy|pandas|math|mpmath|statistics|fractions|decimal"
                      r"|networkx|sklearn|torch|statsmodels|rdkit|itertools)\b")
_SEGMENT = re.compile(r"[;&|\n()`]+|\$\(")


def _shell_words(command: str) -> set[str]:
    """The command word of each pipeline / list segment (after sudo, env, time)."""
    words = set()
    for seg in _SEGMENT.split(command):
        toks = [t for t in seg.strip().split() if "=" not in t or t.startswith(("-", "/"))]
        while toks and toks[0] in ("sudo", "env", "time", "nohup", "xargs", "!"):
            toks = toks[1:]
        if toks:
            words.add(toks[0].rsplit("/", 1)[-1])
    return words


def classify_call(name: str, arguments: str) -> set[str]:
    try:
        args = model_json.loads(arguments or "{}")
    except ValueError:  # not JSON, or nested past reading (the model's text, whatever it is)
        return set()
    if not isinstance(args, dict):
        return set()
    found = set()
    if name == "execute_bash":
        cmd = str(args.get("command", ""))
        if _EXTERNAL.search(cmd):
            found.add("external")
        if _shell_words(cmd) & _FILE_COMMANDS or _FILE_CODE.search(cmd) or re.search(r"[^<>]>{1,2}\s*[\w/.]", cmd):
            found.add("file")
        if _RUN.search(cmd) or _NUMERIC.search(cmd):
            found.add("computation")
    elif name == "str_replace_editor":
        found.add("file")
        code = " ".join(str(args.get(k, "")) for k in ("file_text", "new_str"))
        if _EXTERNAL.search(code):
            found.add("external")
        if _NUMERIC.search(code):
            found.add("computation")
    return found


def classify_step(step: dict) -> set[str]:
    found: set[str] = set()
    for call in step.get("tool_calls") or []:
        found |= classify_call(call.get("name", ""), call.get("arguments", ""))
    return found


def usage(trajectories: list[dict]) -> dict:
    """Usage rate of each capability over all turns of these trajectories, and turns per run."""
    turns, counts = 0, Counter()
    for traj in trajectories:
        for step in traj.get("steps") or []:
            turns += 1
            counts.update(classify_step(step))
    runs = len(trajectories)
    return {"turns": turns, "runs": runs, "avg_turns": turns / runs if runs else 0.0,
            **{f"{c}_rate": (counts[c] / turns if turns else 0.0) for c in CAPABILITIES},
            **{f"{c}_turns": counts[c] for c in CAPABILITIES}}
