r"""The fenced blocks of README.md and docs/*.md, read the way tests/test_docs.py checks them.

A page's blocks are found by their fence. ```python blocks run; ```bash blocks hold commands (one a line, a
trailing `\` continues it, `#` starts a comment); other blocks (```text, output) are read, never run. A marker,
an HTML comment on the line just above a fence (invisible on the rendered page), says what a python block needs:

    <!-- doc-test: needs=demo_model -->    build the named fixture in the block's folder first
    <!-- doc-test: after=previous -->      run in the folder and namespace of the page's previous python block

Every check here returns a list of problems (empty: the pages are true), so that a test can also show that a
wrong page fails it.

Example:

>>> page = "Intro\n\n```bash\nalbert-plan --preset=albert_base_v2 \\\n  --device=a100  # a comment\n```\n"
>>> [b.lang for b in parse_blocks(page, "page.md")]
['bash']
>>> [c.text for c in commands(parse_blocks(page, "page.md")[0])]
['albert-plan --preset=albert_base_v2 --device=a100']
>>> program("nice -n 5 python -m bench.run --dry_run"), command_flags("albert-plan --preset=x --noy -- --z")
('python -m bench.run', ['preset', 'noy'])
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import glob
import os
import re
import shlex
import subprocess
import sys
from typing import Dict, List, Optional, Sequence

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MARKERS = {"needs", "after"}
_FENCE = re.compile(r"^```(\w*)\s*$")
_MARKER = re.compile(r"^<!--\s*doc-test:\s*(.*?)\s*-->\s*$")
# Repository folders whose paths the pages quote in `code`: such a path must exist.
_REPO_DIRS = ("albert_tf", "pipelines", "bench", "tests", "flags", "docs", ".ci")


def pages(root: str = REPO) -> List[str]:
    """README.md and every docs/*.md, repository-relative, in a fixed order."""
    return ["README.md"] + sorted(os.path.relpath(p, root) for p in glob.glob(os.path.join(root, "docs", "*.md")))


@dataclasses.dataclass(frozen=True)
class Block:
    """One fenced block: its page, the line of its opening fence (1-based), language, text and marker."""

    page: str
    line: int
    lang: str
    text: str
    marker: tuple = ()  # (key, value) pairs of its doc-test marker

    @property
    def id(self) -> str:
        return f"{self.page}:{self.line}"

    def option(self, key: str) -> Optional[str]:
        return dict(self.marker).get(key)


@dataclasses.dataclass(frozen=True)
class Command:
    """One command of a bash block, continuation lines joined and whitespace collapsed."""

    text: str
    page: str
    line: int


def _parse_marker(text: str, where: str) -> tuple:
    items = []
    for item in text.replace(",", " ").split():
        key, _, value = item.partition("=")
        if key not in MARKERS or not value:
            raise ValueError(f"{where}: unknown doc-test marker item {item!r} (known: needs=NAME, after=previous)")
        items.append((key, value))
    return tuple(items)


def parse_blocks(text: str, page: str) -> List[Block]:
    """The fenced blocks of one page's text.

    Args:
        text: the page's markdown.
        page: its name, for messages and ids.

    Raises:
        ValueError: a fence that is never closed, or a marker with an unknown item.
    """
    lines = text.splitlines()
    blocks, i = [], 0
    while i < len(lines):
        match = _FENCE.match(lines[i])
        if not match:
            i += 1
            continue
        start = i
        i += 1
        while i < len(lines) and lines[i].rstrip() != "```":
            i += 1
        if i == len(lines):
            raise ValueError(f"{page}:{start + 1}: the block is never closed")
        previous = lines[start - 1] if start else ""
        marker = _MARKER.match(previous)
        blocks.append(Block(page, start + 1, match.group(1), "\n".join(lines[start + 1:i]) + "\n",
                            _parse_marker(marker.group(1), f"{page}:{start}") if marker else ()))
        i += 1
    return blocks


def all_blocks(root: str = REPO, lang: Optional[str] = None) -> List[Block]:
    """Every block of every page (of one language when given)."""
    found = []
    for page in pages(root):
        with open(os.path.join(root, page), encoding="utf-8") as f:
            found += parse_blocks(f.read(), page)
    return [b for b in found if lang is None or b.lang == lang]


def _strip_comment(line: str) -> str:
    """The line without a trailing `# comment` (a `#` inside quotes stays)."""
    quote = None
    for i, ch in enumerate(line):
        if quote:
            quote = None if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i].rstrip()
    return line.rstrip()


def commands(block: Block) -> List[Command]:
    """The commands of a bash block, comments dropped and continuation lines joined."""
    found, pending, start = [], "", None
    for offset, raw in enumerate(block.text.splitlines(), start=block.line + 1):
        line = _strip_comment(raw)
        if not line.strip() and not pending:
            continue
        start = start if pending else offset
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        found.append(Command(" ".join((pending + line).split()), block.page, start))
        pending = ""
    if pending:
        found.append(Command(" ".join(pending.split()), block.page, start))
    return found


def all_commands(root: str = REPO) -> List[Command]:
    return [c for b in all_blocks(root, "bash") for c in commands(b)]


def _tokens(command: str) -> List[str]:
    try:
        return shlex.split(command)
    except ValueError:
        return command.split()


def program(command: str) -> str:
    """What a command runs: `albert-export`, `python -m bench.run`, `docker`...; env assignments skipped."""
    tokens = [t for t in _tokens(command) if not re.match(r"^[A-Z_]+=", t)]
    if tokens[:2] == ["nice", "-n"]:
        tokens = tokens[3:]
    if len(tokens) >= 3 and tokens[0] in ("python", "python3") and tokens[1] == "-m":
        return f"python -m {tokens[2]}"
    return tokens[0] if tokens else ""


def command_flags(command: str) -> List[str]:
    """The `--flag` names a command passes to its program (Beam's options after a lone `--` are not its)."""
    names = []
    for token in _tokens(command)[1:]:
        if token == "--":
            break
        if token.startswith("--") and len(token) > 2:
            names.append(token[2:].split("=", 1)[0])
    return names


@functools.lru_cache(maxsize=None)
def defined_flags(prog: str) -> frozenset:
    """The flags a program defines: an albert binary's `--helpfull`, a bench module's `--help`.

    Both answer without importing TensorFlow (about 0.1-1 s each).
    """
    if prog.startswith("albert-"):
        argv, pattern = [os.path.join(os.path.dirname(sys.executable), prog), "--helpfull"], r"^  --(?:\[no\])?(\w+):"
    else:
        argv, pattern = [sys.executable, "-m", prog.split()[-1], "--help"], r"(?<![\w-])--(\w+)"
    done = subprocess.run(argv, capture_output=True, text=True, cwd=REPO, timeout=120)
    names = frozenset(re.findall(pattern, done.stdout, re.M))
    if not names:
        raise RuntimeError(f"{' '.join(argv)} listed no flags: {done.stderr[-500:]}")
    return names


def unknown_flags(command: str, defined: frozenset) -> List[str]:
    """The flags of `command` its program does not define (`--noX` is X's negation)."""
    return [f"--{name}" for name in command_flags(command)
            if name not in defined and not (name.startswith("no") and name[2:] in defined)]


def print_expectations(code: str) -> Optional[List[str]]:
    """What the block says it prints: the `# comment` of each `print(...)` line, in order.

    Returns None when no print line has a comment (the output is not compared).

    Raises:
        ValueError: some print lines have a comment and others do not.
    """
    prints = [line for line in code.splitlines() if re.match(r"^\s*print\(", line)]
    expected = [m.group(1).strip() for m in (re.search(r"\)\s+#\s*(.*)$", line) for line in prints) if m]
    if not expected:
        return None
    if len(expected) != len(prints):
        raise ValueError("give every print(...) line of the block a '# what it prints' comment, or none")
    return expected


def heading_anchor(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens.

    >>> heading_anchor("The input pipeline on other machines: tf.data service")
    'the-input-pipeline-on-other-machines-tfdata-service'
    """
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _anchors(path: str) -> set:
    with open(path, encoding="utf-8") as f:
        text = re.sub(r"```.*?```", "", f.read(), flags=re.S)
    return {heading_anchor(h) for h in re.findall(r"^#+\s+(.*)$", text, re.M)}


def broken_references(text: str, page: str, root: str = REPO) -> List[str]:
    """Links to missing files or headings, and quoted repository paths (`bench/...`) that do not exist."""
    problems = []
    prose = re.sub(r"```.*?```", "", text, flags=re.S)
    for target in re.findall(r"\]\(([^)\s]+)\)", prose):
        if re.match(r"^[a-z]+:", target):
            continue
        path, _, anchor = target.partition("#")
        full = os.path.normpath(os.path.join(root, os.path.dirname(page), path)) if path else os.path.join(root, page)
        if not os.path.exists(full):
            problems.append(f"{page}: link to a missing file: {target}")
        elif anchor and full.endswith(".md") and anchor not in _anchors(full):
            problems.append(f"{page}: link to a missing heading: {target}")
    for quoted in re.findall(r"`([^`\s]+)`", prose):
        if quoted.split("/")[0] in _REPO_DIRS and "/" in quoted and not re.search(r"[*{<\[]", quoted):
            if "::" in quoted:  # a test by node id: its file must define it
                problem = test_function_exists(quoted, root)
                if problem:
                    problems.append(f"{page}: names a test that does not exist: {problem}")
            elif not os.path.exists(os.path.join(root, quoted.rstrip("/"))):
                problems.append(f"{page}: names a path that does not exist: {quoted}")
    return problems


def test_function_exists(node_id: str, root: str = REPO) -> Optional[str]:
    """None when `tests/x.py::name` is a test function defined in that file, else the problem."""
    path, _, name = node_id.partition("::")
    full = os.path.join(root, path)
    if not os.path.exists(full):
        return f"{node_id}: no such file"
    with open(full, encoding="utf-8") as f:
        tree = ast.parse(f.read())
    names = {n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)}
    return None if name in names else f"{node_id}: no such test function"


def flags_missing_from_test(command: str, node_id: str, root: str = REPO) -> List[str]:
    """The command's flags that the test file named in `node_id` never mentions: it cannot run them."""
    with open(os.path.join(root, node_id.partition("::")[0]), encoding="utf-8") as f:
        source = f.read()
    missing = []
    for name in command_flags(command):
        bare = name[2:] if name.startswith("no") and f"--{name}" not in source else name
        if f"--{bare}" not in source and f"--no{bare}" not in source:
            missing.append(f"--{name}")
    return missing


def registry_problems(found: Sequence[Command], registry: Dict[str, str], run_here, not_run: Dict[str, str],
                      root: str = REPO) -> List[str]:
    """Commands on the pages that nothing runs, stale registry entries, and entries that name no real test.

    Args:
        found: the pages' commands.
        registry: command -> `tests/file.py::test_name` that runs the same command.
        run_here: a predicate, True for the commands tests/test_docs.py runs itself.
        not_run: command -> why no test can run it (a server, a cloud runner); the page says so too.
    """
    problems = []
    texts = {c.text for c in found}
    for c in found:
        if not (c.text in registry or c.text in not_run or run_here(c.text)):
            problems.append(f"{c.page}:{c.line}: no test runs this command (add it to tests/doc_commands.py "
                            f"with the test that runs it, or change it back): {c.text}")
    for text in sorted((set(registry) | set(not_run)) - texts):
        problems.append(f"tests/doc_commands.py lists a command no page shows any more: {text}")
    for text, node_id in registry.items():
        problem = test_function_exists(node_id, root)
        if problem:
            problems.append(problem)
        elif text in texts:
            missing = flags_missing_from_test(text, node_id, root)
            if missing:
                problems.append(f"{node_id} never mentions {', '.join(missing)}, so it cannot run: {text}")
    for text, why in not_run.items():
        if not why.strip():
            problems.append(f"tests/doc_commands.py: say why no test runs: {text}")
    return problems
