"""README.md is a front page: short, with the demo and the test command, and a way to every docs/ page.

Its blocks run with every other page's in tests/test_docs.py; this file holds what only the front page must do.
"""

import glob
import os
import re

from tests import doc_blocks

REPO = doc_blocks.REPO
MAX_LINES = 200  # a page read in five minutes; the detail lives in docs/


def _readme() -> str:
    with open(os.path.join(REPO, "README.md"), encoding="utf-8") as f:
        return f.read()


def front_page_problems(text: str, docs_pages) -> list:
    """What keeps `text` from being the front page: its length, missing commands, unlinked docs pages."""
    problems = []
    if len(text.splitlines()) > MAX_LINES:
        problems.append(f"{len(text.splitlines())} lines, over {MAX_LINES}: move the detail to a docs/ page")
    shown = [c.text for b in doc_blocks.parse_blocks(text, "README.md") if b.lang == "bash"
             for c in doc_blocks.commands(b)]
    for prefix in ("albert-demo ", "bash .ci/run", "python -m pytest "):
        if not any(c.startswith(prefix) for c in shown):
            problems.append(f"no command starting with {prefix!r} in a bash block")
    if not any(b.lang == "python" and "from_preset" in b.text for b in doc_blocks.parse_blocks(text, "README.md")):
        problems.append("no python example of the library (AlbertConfig.from_preset)")
    for page in docs_pages:
        if f"]({page})" not in text:
            problems.append(f"no link to {page}")
    return problems


def test_readme_is_the_front_page():
    docs_pages = sorted(os.path.relpath(p, REPO) for p in glob.glob(os.path.join(REPO, "docs", "*.md")))
    assert len(docs_pages) >= 8
    problems = front_page_problems(_readme(), docs_pages)
    assert not problems, "\n".join(problems)


def test_every_comparison_row_links_its_evidence():
    table = [line for line in _readme().split("## How it compares", 1)[1].split("\n## ", 1)[0].splitlines()
             if line.startswith("| ") and not line.startswith("| what ")]
    assert len(table) >= 8
    for row in table:
        assert re.search(r"\]\([^)]+\)", row.rsplit("|", 2)[-2]), f"a row without a linked test or result: {row}"


def test_a_long_or_bare_readme_is_not_a_front_page():
    short = _readme()
    assert front_page_problems(short + "\n" * MAX_LINES, [])[0].startswith(f"{len(short.splitlines()) + MAX_LINES}")
    bare = "# albert-tf\n\n```bash\npip install -e .\n```\n"
    assert front_page_problems(bare, ["docs/serving.md"]) == [
        "no command starting with 'albert-demo ' in a bash block",
        "no command starting with 'bash .ci/run' in a bash block",
        "no command starting with 'python -m pytest ' in a bash block",
        "no python example of the library (AlbertConfig.from_preset)",
        "no link to docs/serving.md"]
