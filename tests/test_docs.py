"""The manual and the front page say what the code does: every docs page the code cites exists (and
has the heading cited), every page of mkdocs.yml's nav exists, every `insandbox ...` command shown in
a code block parses against the real command line, and the README's two set-up commands are the ones
CI runs. No command is run: each is parsed by click, as `insandbox` would parse it, and stops there."""
from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
import typer.main
import yaml

from insandbox.cli.app import app
from insandbox.cli.common import click_exceptions

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
README = ROOT / "README.md"
MAIN_JOB = ('bash scripts/setup.sh && .venv/bin/insandbox run "Write a Python script that prints the first 10 prime '
            'numbers, run it, and save the output to /testbed/output/primes.txt" --max-steps 10')
TEST_COMMAND = "bash scripts/test.sh"

# a docs path as the code cites it, with the page's heading after it when one is named: docs/guide/cost.md ('Cost')
CITATION = re.compile(r"docs/([A-Za-z0-9_./-]+?\.md)(?:\s*\('([^']+)'\))?")
SHELL_FENCES = {"", "bash", "sh", "shell", "console"}


def pages() -> list[Path]:
    return sorted(p for p in DOCS.rglob("*.md") if "hooks" not in p.relative_to(DOCS).parts)


def headings(page: Path) -> set[str]:
    return {m.group(1).strip() for m in re.finditer(r"^#{1,6} (.+)$", page.read_text(), re.M)}


def citations(text: str) -> list[tuple[str, str | None]]:
    """(page, heading or None); a heading wrapped over two lines of a docstring is read as one line."""
    return [(m.group(1), " ".join(m.group(2).split()) if m.group(2) else None) for m in CITATION.finditer(text)]


def cited_in_code() -> list[tuple[Path, str, str | None]]:
    """Citations in the package, the recipes, the benchmarks and the scripts."""
    found = []
    files = [p for folder in ("src", "recipes", "benchmarks", "scripts") for p in (ROOT / folder).rglob("*")]
    for path in sorted(files):
        if path.is_file() and path.suffix in (".py", ".yaml", ".sh", ".j2", ".html", ".txt"):
            found += [(path, page, title) for page, title in citations(path.read_text(errors="replace"))]
    return found


# ------------------------------------------------------------------ the pages the code cites
def test_citations_are_read_with_the_heading_they_name():
    assert citations("see docs/guide/cost.md ('Cost'), or docs/security/index.md, docs/a.md ('Who\n  vouches')") == [
        ("guide/cost.md", "Cost"), ("security/index.md", None), ("a.md", "Who vouches")]


def test_every_docs_page_the_code_cites_exists_with_the_heading_it_names():
    cited = cited_in_code()
    assert len({page for _, page, _ in cited}) >= 5, "the code's messages cite the manual's pages"
    for path, page, title in cited:
        target = DOCS / page
        where = f"{path.relative_to(ROOT)} cites docs/{page}"
        assert target.is_file(), f"{where}, which does not exist"
        if title is not None:
            assert title in headings(target), f"{where} ('{title}'), a heading it does not have"


def test_the_code_sends_no_one_to_a_readme_section():
    """The README is a front page now: what it used to explain is in the manual."""
    pattern = re.compile(r"see (?:the )?README|README[,:] ?'?[A-Z]|README's")
    for path in sorted((ROOT / "src").rglob("*")):
        if path.is_file() and path.suffix in (".py", ".yaml"):
            for line in path.read_text(errors="replace").splitlines():
                assert not pattern.search(line), f"{path.relative_to(ROOT)}: {line.strip()}"


# ------------------------------------------------------------------ mkdocs.yml's nav
def nav_pages(nav) -> list[str]:
    found = []
    for item in nav:
        value = next(iter(item.values())) if isinstance(item, dict) else item
        found += nav_pages(value) if isinstance(value, list) else [value]
    return found


def test_every_page_in_the_nav_exists_and_every_page_is_in_the_nav():
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text())
    listed = nav_pages(config["nav"])
    assert "index.md" in listed and "reference/cli.md" in listed
    for page in listed:
        assert (DOCS / page).is_file(), f"mkdocs.yml's nav lists {page}, which is not in docs/"
    assert sorted(listed) == sorted(str(p.relative_to(DOCS)) for p in pages())


# ------------------------------------------------------------------ commands shown in the docs
def code_blocks(path: Path) -> list[tuple[int, str, list[str]]]:
    """(first line number, fence language, lines) of each fenced block."""
    blocks, current, lang, start = [], None, "", 0
    for n, line in enumerate(path.read_text().splitlines(), 1):
        fence = re.match(r"^\s*```\s*([A-Za-z]*)", line)
        if fence and current is None:
            current, lang, start = [], fence.group(1).lower(), n + 1
        elif fence:
            blocks.append((start, lang, current))
            current = None
        elif current is not None:
            current.append(line)
    return blocks


def shell_lines(lines: list[str]) -> list[str]:
    """Lines with their backslash continuations joined."""
    out, pending = [], ""
    for line in lines:
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
        else:
            out.append(pending + line)
            pending = ""
    return out + ([pending] if pending else [])


def insandbox_commands(line: str) -> list[list[str]]:
    """Every `insandbox ...` (or `.venv/bin/insandbox ...`) in one shell line, as argv after the program:
    the line split at `&&`, `||`, `;`, `|` and `&`, comments dropped, VAR=value prefixes skipped."""
    lexer = shlex.shlex(line, posix=True, punctuation_chars=";&|()<>")
    lexer.whitespace_split = True
    lexer.commenters = "#"
    words: list[str] = []
    commands, simple = [], []
    try:
        words = list(lexer)
    except ValueError:  # a quote left open in prose-like shell: not a command
        return []
    for word in [*words, ";"]:
        if word and set(word) <= set(";&|()<>"):
            commands.append(simple)
            simple = []
        else:
            simple.append(word)
    found = []
    for simple in commands:
        while simple and re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", simple[0]):
            simple = simple[1:]
        if simple and (simple[0] == "insandbox" or simple[0].endswith("/insandbox")):
            found.append(simple[1:])
    return found


def shown_commands() -> list[tuple[str, list[str]]]:
    shown = []
    for path in [README, *pages()]:
        for start, lang, lines in code_blocks(path):
            if lang in SHELL_FENCES:
                for line in shell_lines(lines):
                    where = f"{path.relative_to(ROOT)}:{start}"
                    shown += [(where, argv) for argv in insandbox_commands(line)]
    return shown


def parse(argv: list[str]) -> None:
    """Parse argv as `insandbox` would, down to the command, without running it: click checks every
    subcommand and option exists and converts every value to its type (resilient_parsing off)."""
    command = typer.main.get_command(app)
    ctx, args, name = None, list(argv), "insandbox"
    try:
        while True:
            ctx = command.make_context(name, args, parent=ctx, resilient_parsing=False)
            if not hasattr(command, "resolve_command"):  # a command, not a group: parsed
                return
            # a group stops at its subcommand's name and leaves the words after it in ctx.args
            after = list(ctx.args)
            named = getattr(ctx, "_protected_args", None) or getattr(ctx, "protected_args", None) or []
            if not named and not after and getattr(command, "invoke_without_command", False):
                return  # a group that runs on its own (`insandbox gateway --upstream URL`)
            name = args[len(args) - len(after) - 1]
            _, command, _ = command.resolve_command(ctx, [name, *after])
            args = after
    except typer.Exit as e:  # --help, --version: they print and stop
        if e.exit_code:
            raise


def test_the_parser_catches_a_wrong_subcommand_option_and_value():
    exc = click_exceptions()
    parse(["run", "a task", "--max-steps", "10", "--model", "Qwen/Qwen3-8B"])
    parse(["rl", "rollout", "--data", "tasks/tasks.jsonl", "--out", "RUN_DIR", "--repeats", "8"])
    parse(["bench", "--help"])
    for bad in (["runn", "x"], ["run", "x", "--max-step", "10"], ["run", "x", "--max-steps", "ten"],
                ["rl", "rollouts", "--data", "x"], ["image", "buil"]):
        with pytest.raises(exc.UsageError):
            parse(bad)


def test_commands_are_found_in_shell_lines():
    assert insandbox_commands('OPENAI_API_KEY=sk-... .venv/bin/insandbox run "a b" --model m  # note') == [
        ["run", "a b", "--model", "m"]]
    assert insandbox_commands("insandbox image build && ray start --head; insandbox view x | cat") == [
        ["image", "build"], ["view", "x"]]
    assert insandbox_commands("vllm serve m &") == []
    assert shell_lines(["insandbox run x \\", "  --max-steps 3", "ls"]) == ["insandbox run x    --max-steps 3", "ls"]


def shown_files() -> dict[str, str]:
    """The files the docs show as YAML blocks headed by their name (`# qwen.yaml`): the commands name them."""
    files = {}
    for path in [README, *pages()]:
        for _, lang, lines in code_blocks(path):
            if lang not in ("yaml", "yml") or not lines:
                continue
            named = re.fullmatch(r"#\s*([\w.-]+\.ya?ml)", lines[0].strip())
            if named:
                files[named.group(1)] = "\n".join(lines[1:]) + "\n"
    return files


def test_every_command_the_docs_and_readme_show_parses(tmp_path, monkeypatch):
    for name, text in shown_files().items():  # a command that names a file the docs show reads that file
        (tmp_path / name).write_text(text)
    monkeypatch.chdir(tmp_path)
    shown = shown_commands()
    assert len(shown) >= 40, "the docs show many commands; finding few means the extraction broke"
    assert {argv[0] for _, argv in shown} >= {"run", "bench", "report", "replay", "fork", "view", "rl", "image"}
    failures = []
    for where, argv in shown:
        try:
            parse(argv)
        except Exception as e:  # every failure at once, each with where it is shown
            failures.append(f"{where}: insandbox {shlex.join(argv)}: {e}")
    assert not failures, "\n".join(failures)


# ------------------------------------------------------------------ the README's two commands
def test_the_readmes_two_setup_commands_are_the_ones_ci_runs():
    blocks = [lines for _, lang, lines in code_blocks(README) if lang == "bash"]
    assert blocks[0] == [MAIN_JOB]
    assert blocks[1] == [TEST_COMMAND]
    ci = (ROOT / ".ci" / "run").read_text()
    assert re.search(rf"^{re.escape(TEST_COMMAND)}$", ci, re.M), ".ci/run runs the README's test command"
    setup_cmd, run_cmd = MAIN_JOB.split(" && ")
    assert (ROOT / setup_cmd.split()[1]).is_file()
    assert "bash scripts/setup.sh" in (ROOT / "scripts" / "test.sh").read_text()
    # the benchmark that times the README's two commands times these very ones
    timing = (ROOT / "benchmarks" / "time_setup.sh").read_text()
    task = shlex.split(run_cmd)[2]
    assert f'task="{task}"' in timing and "--max-steps 10" in timing and "scripts/test.sh" in timing
    parse(shlex.split(run_cmd)[1:])


def test_the_test_command_builds_the_manual_strictly():
    steps = [line for line in (ROOT / "scripts" / "test.sh").read_text().splitlines()
             if line.strip() and not line.lstrip().startswith(("#", "echo"))]
    build = next(line for line in steps if "mkdocs build" in line)
    command = build.split("#")[0]
    assert "--strict" in command and "--quiet" not in command  # --quiet hides what --strict counts
    order = [next(i for i, line in enumerate(steps) if s in line)
             for s in ("ruff check", "lint-imports", "mkdocs build", "pytest")]
    assert order == sorted(order)
    assert "/site/" in (ROOT / ".gitignore").read_text().splitlines()


# ------------------------------------------------------------------ Python shown in the docs
def python_blocks() -> list[tuple[str, str]]:
    return [(f"{path.relative_to(ROOT)}:{start}", "\n".join(lines))
            for path in [README, *pages()] for start, lang, lines in code_blocks(path) if lang == "python"]


def test_every_python_block_compiles_and_names_what_insandbox_has():
    """Blocks run as written in a notebook or an async function (top-level await allowed); every name
    they import from insandbox, and every `insandbox.NAME` they use, exists."""
    import ast
    import importlib

    import insandbox

    blocks = python_blocks()
    assert len(blocks) >= 4
    checked = 0
    for where, code in blocks:
        tree = compile(code, where, "exec", flags=ast.PyCF_ONLY_AST | ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "insandbox":
                module = importlib.import_module(node.module)
                for alias in node.names:
                    assert hasattr(module, alias.name), f"{where}: {node.module} has no {alias.name}"
                    checked += 1
            elif (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                  and node.value.id == "insandbox"):
                assert node.attr in insandbox.__all__, f"{where}: insandbox has no {node.attr}"
                checked += 1
    assert checked >= 8
