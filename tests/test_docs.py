"""README.md and docs/*.md cannot drift from the code: their blocks run, their commands are run or tied to a test.

- Every ```python block runs (in a fresh folder; `<!-- doc-test: needs=NAME -->` builds what it names first,
  tests/doc_fixtures.py; `after=previous` continues the page's previous block), and a block whose `print(...)`
  lines carry `# comments` must print exactly those.
- Every ```bash command is run here (tests/doc_commands.py RUN_HERE: `albert-plan`, `--help`, `--dry_run`; a
  ```text block right after it is its output) or listed with the test that runs it (REGISTRY) or why none can
  (NOT_RUN); the flags of every albert-* and bench command are ones its program defines.
- Links, quoted repository paths and named binaries exist; the serving page's requests are test_export's.
Each check has a companion below showing that a wrong page fails it.
"""

from __future__ import annotations

import contextlib
import doctest
import io
import json
import os
import re
import shlex
import subprocess
import sys

import pytest

from tests import doc_blocks, doc_commands
from tests.doc_blocks import REPO, Block, Command

BIN = os.path.dirname(sys.executable)


def _chains():
    """The pages' python blocks in runs: a block marked after=previous joins the page's previous block."""
    chains = []
    for block in doc_blocks.all_blocks(lang="python"):
        if block.option("after") is None:
            chains.append([block])
        elif block.option("after") == "previous" and chains and chains[-1][-1].page == block.page:
            chains[-1].append(block)
        else:
            raise ValueError(f"{block.id}: after= names no earlier python block of the page")
    return chains


def run_block(code: str, block: Block, scope: dict) -> None:
    """Runs one block's code in `scope`; when its prints carry comments, the printed lines must be those."""
    expected = doc_blocks.print_expectations(code)
    stdout = io.StringIO()
    with contextlib.redirect_stdout(stdout):
        exec(compile(code, block.id, "exec"), scope)
    if expected is not None:
        printed = [line.strip() for line in stdout.getvalue().splitlines()]
        assert printed == expected, f"{block.id} printed {printed}, its comments say {expected}"


@pytest.mark.parametrize("chain", _chains(), ids=lambda chain: chain[0].id)
def test_python_blocks_run(chain, tmp_path, monkeypatch):
    from tests.doc_fixtures import FIXTURES

    monkeypatch.chdir(tmp_path)
    scope = {"__name__": "__doc_block__"}
    with contextlib.ExitStack() as stack:
        for block in chain:
            code = block.text
            if block.option("needs"):
                assert block.option("needs") in FIXTURES, f"{block.id}: no fixture {block.option('needs')!r}"
                for old, new in stack.enter_context(FIXTURES[block.option("needs")](str(tmp_path))).items():
                    assert old in code, f"{block.id}: the fixture replaces {old!r}, which the block no longer has"
                    code = code.replace(old, new)
            run_block(code, block, scope)


def _shown_output(block: Block) -> str | None:
    """The text of a ```text block that follows `block` with nothing but blank lines between."""
    with open(os.path.join(REPO, block.page), encoding="utf-8") as f:
        page = f.read()
    blocks = doc_blocks.parse_blocks(page, block.page)
    after = [b for b in blocks if b.line > block.line]
    if not after or after[0].lang != "text":
        return None
    between = page.splitlines()[block.line + block.text.count("\n") + 1:after[0].line - 1]
    return after[0].text if not any(line.strip() for line in between) else None


def _cheap():
    return [(b, c) for b in doc_blocks.all_blocks(lang="bash") for c in doc_blocks.commands(b)
            if doc_commands.run_here(c.text)]


@pytest.mark.parametrize("block, command", _cheap(), ids=lambda x: x.id if isinstance(x, Block) else "")
def test_cheap_commands_run_as_written(block, command):
    argv = shlex.split(command.text)
    argv[0] = os.path.join(BIN, argv[0]) if argv[0].startswith("albert-") else sys.executable
    done = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"{command.page}:{command.line}: {command.text}\n{done.stderr[-2000:]}"
    shown = _shown_output(block)
    if shown is not None and len(doc_blocks.commands(block)) == 1:
        assert [l.strip() for l in done.stdout.splitlines()] == [l.strip() for l in shown.splitlines()], \
            f"{command.page}:{command.line}: the page shows other output than the command prints now"


def test_every_command_is_run_or_registered():
    problems = doc_blocks.registry_problems(doc_blocks.all_commands(), doc_commands.REGISTRY,
                                            doc_commands.run_here, doc_commands.NOT_RUN)
    assert not problems, "\n".join(problems)


def test_commands_pass_only_flags_their_program_defines():
    problems = []
    for c in doc_blocks.all_commands():
        prog = doc_blocks.program(c.text)
        if prog.startswith(("albert-", "python -m bench")):
            bad = doc_blocks.unknown_flags(c.text, doc_blocks.defined_flags(prog))
            problems += [f"{c.page}:{c.line}: {prog} defines no {flag}" for flag in bad]
        problems += [f"{c.page}:{c.line}: no flagfile {path}" for path in re.findall(r"--flagfile=(\S+)", c.text)
                     if not os.path.exists(os.path.join(REPO, path))]
    assert not problems, "\n".join(problems)


def test_binaries_named_are_installed_console_scripts():
    with open(os.path.join(REPO, "setup.py"), encoding="utf-8") as f:
        setup = f.read()
    names = set()
    for page in doc_blocks.pages():
        with open(os.path.join(REPO, page), encoding="utf-8") as f:
            names |= set(re.findall(r"(?<![\w/.-])(albert-[a-z]+(?:-[a-z]+)*)(?![\w-])", f.read())) - {"albert-tf"}
    assert {"albert-demo", "albert-pretrain", "albert-convert", "albert-plan"} <= names
    for name in sorted(names):
        assert f'"{name}=' in setup, f"the pages name {name}; setup.py declares no such console script"
        assert os.path.exists(os.path.join(BIN, name)), f"{name} is not installed next to {sys.executable}"


def test_links_and_quoted_paths_exist():
    problems = []
    for page in doc_blocks.pages() + ["CHANGELOG.md"]:
        with open(os.path.join(REPO, page), encoding="utf-8") as f:
            problems += doc_blocks.broken_references(f.read(), page)
    assert not problems, "\n".join(problems)


def test_serving_requests_are_the_ones_test_export_runs():
    """The REST bodies and saved_model_cli commands shown are test_export's REST_REQUESTS and CLI commands."""
    from tests.albert_tf import test_export

    found = doc_blocks.all_commands()
    bodies = [json.loads(b) for c in found for b in re.findall(r"-d '(\{.*?\})'", c.text)]
    assert len(bodies) >= 3 and all(body in test_export.REST_REQUESTS.values() for body in bodies), bodies
    shown = {c.text for c in found if c.text.startswith(("python -c", "saved_model_cli run"))}
    assert shown == {" ".join(test_export.README_CLI_RUN_TEXT.replace("MODEL_DIR", "exports/albert_sst2/1").split()),
                     " ".join(test_export.README_CLI_RUN_IDS.replace("MODEL_DIR", "exports/albert_sst2_ids/1")
                              .split())}


def test_helper_examples():
    from tests import doc_fixtures

    for module in (doc_blocks, doc_fixtures):
        result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
        assert result.attempted and not result.failed, module.__name__


# ---------------------------------------------------------------- companions: a wrong page fails each check
def test_a_wrong_print_comment_fails():
    block = Block("page.md", 1, "python", "")
    run_block("print(1 + 1)  # 2\n", block, {})
    with pytest.raises(AssertionError, match="printed"):
        run_block("print(1 + 1)  # 3\n", block, {})
    with pytest.raises(ValueError, match="every print"):
        run_block("print(1)  # 1\nprint(2)\n", block, {})


def test_a_changed_unknown_or_stale_command_fails():
    registry = {"albert-plan --preset=albert_base_v2": "tests/albert_tf/test_planning.py::test_binary_refuses_"
                                                      "bad_values_in_one_line"}
    found = [Command("albert-plan --preset=albert_base_v2", "page.md", 3)]
    assert doc_blocks.registry_problems(found, registry, lambda c: False, {}) == []
    changed = [Command("albert-plan --preset=albert_large_v2", "page.md", 3)]
    problems = doc_blocks.registry_problems(changed, registry, lambda c: False, {})
    assert any("no test runs this command" in p for p in problems)
    assert any("no page shows any more" in p for p in problems)
    wrong_test = {"albert-plan --preset=albert_base_v2": "tests/albert_tf/test_planning.py::test_nothing"}
    assert doc_blocks.registry_problems(found, wrong_test, lambda c: False, {}) == [
        "tests/albert_tf/test_planning.py::test_nothing: no such test function"]
    unused_flag = [Command("albert-plan --preset=albert_base_v2 --no_such_flag=1", "page.md", 3)]
    problems = doc_blocks.registry_problems(unused_flag, {unused_flag[0].text: registry[found[0].text]},
                                            lambda c: False, {})
    assert problems and "--no_such_flag" in problems[0]


def test_an_unknown_flag_fails():
    defined = doc_blocks.defined_flags("albert-plan")
    assert doc_blocks.unknown_flags("albert-plan --preset=x --device=a100", defined) == []
    assert doc_blocks.unknown_flags("albert-plan --preset=x --num_gpus=8", defined) == ["--num_gpus"]


def test_a_broken_link_or_path_fails():
    page = ("[ok](docs/scaling.md#scaling-out) [gone](docs/nothing.md) [bad anchor](docs/scaling.md#nowhere)\n"
            "`bench/no_such_study.py` `bench/results/<cpu-kind>.md` `runs/base`\n"
            "`tests/test_docs.py::test_a_broken_link_or_path_fails` `tests/test_docs.py::test_no_such_test`\n")
    assert doc_blocks.broken_references(page, "README.md") == [
        "README.md: link to a missing file: docs/nothing.md",
        "README.md: link to a missing heading: docs/scaling.md#nowhere",
        "README.md: names a path that does not exist: bench/no_such_study.py",
        "README.md: names a test that does not exist: tests/test_docs.py::test_no_such_test: no such test function"]


def test_an_unknown_marker_or_an_open_block_fails():
    with pytest.raises(ValueError, match="unknown doc-test marker item 'skip'"):
        doc_blocks.parse_blocks("<!-- doc-test: skip -->\n```python\npass\n```\n", "page.md")
    with pytest.raises(ValueError, match="never closed"):
        doc_blocks.parse_blocks("```python\npass\n", "page.md")
