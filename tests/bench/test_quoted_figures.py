"""Every ratio README.md and docs/benchmarks.md quote comes from the results file they cite.

A ratio is a figure of the form `1.23x`. The documents are read in units: a table row, a list item, or a
paragraph. A unit that quotes a ratio must cite a file of bench/results/ (`bench/results/amx.md`, the current
run of a CPU kind, or a study's file), and every ratio it quotes must appear, as written, in one of the files
it cites. So a figure cannot be computed by hand, copied from a run that is gone, or left behind when the run
file is replaced.
"""

import os
import re
from typing import List

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DOCUMENTS = ("README.md", os.path.join("docs", "benchmarks.md"))
RATIO = re.compile(r"(?<![\w.])\d+\.\d+x(?![\w])")
CITATION = re.compile(r"bench/results/[\w.-]+\.(?:md|json)")


def units(text: str) -> List[str]:
    """The document's table rows, list items and paragraphs (fenced code blocks left out).

    >>> units("a 1.2x\\nb\\n\\n- c\\n- d\\n| e |\\n```\\nf 9.9x\\n```\\ng")
    ['a 1.2x\\nb', '- c', '- d', '| e |', 'g']
    """
    out, current, fenced = [], [], False

    def close():
        if current:
            out.append("\n".join(current))
            current.clear()

    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("```"):
            close()
            fenced = not fenced
            continue
        if fenced:
            continue
        if not stripped or stripped.startswith("#"):
            close()
        elif stripped.startswith("|") or re.match(r"([-*]|\d+\.)\s", stripped):
            close()
            current.append(line)
            if stripped.startswith("|"):
                close()
        else:
            current.append(line)
    close()
    return out


def problems(text: str, root: str) -> List[str]:
    """One line per ratio that is not in a file its unit cites (or whose unit cites none)."""
    out = []
    for unit in units(text):
        ratios = RATIO.findall(unit)
        if not ratios:
            continue
        cited = CITATION.findall(unit)
        if not cited:
            out.append(f"{', '.join(ratios)} cite no bench/results file: {unit[:120]!r}")
            continue
        contents = []
        for name in cited:
            path = os.path.join(root, name)
            if not os.path.exists(path):
                out.append(f"{name} is cited but does not exist: {unit[:120]!r}")
                continue
            with open(path, encoding="utf-8") as f:
                contents.append(f.read())
        for ratio in ratios:
            if contents and not any(ratio in c for c in contents):
                out.append(f"{ratio} is not in {', '.join(cited)}: {unit[:120]!r}")
    return out


@pytest.mark.parametrize("document", DOCUMENTS)
def test_every_quoted_ratio_is_in_the_run_file_it_cites(document):
    path = os.path.join(ROOT, document)
    if not os.path.exists(path):
        pytest.skip(f"{document} is not written yet")
    with open(path, encoding="utf-8") as f:
        assert problems(f.read(), ROOT) == []


def test_a_ratio_not_in_its_run_file_or_uncited_is_reported(tmp_path):
    (tmp_path / "bench" / "results").mkdir(parents=True)
    (tmp_path / "bench" / "results" / "amx.md").write_text("| a | b | **1.25x** (1.20-1.30x) | 5 | ours ahead |\n")
    ok = "Training: 1.25x keras-hub (`bench/results/amx.md`)."
    assert problems(ok, str(tmp_path)) == []
    assert problems("Training: 1.52x keras-hub\n(bench/results/amx.md).", str(tmp_path)) == [
        "1.52x is not in bench/results/amx.md: 'Training: 1.52x keras-hub\\n(bench/results/amx.md).'"]
    assert problems("- Training: 1.25x keras-hub.", str(tmp_path))[0].startswith("1.25x cite no bench/results")
    assert "does not exist" in problems("1.25x (bench/results/RESULTS_old.md)", str(tmp_path))[0]
    # A ratio in another unit than the citation is not covered by it; a code block is not checked.
    assert problems("1.25x here.\n\nSee bench/results/amx.md.", str(tmp_path)) != []
    assert problems("```\npython -m bench.run  # 9.99x\n```", str(tmp_path)) == []
