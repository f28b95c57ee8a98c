"""The contract matrix's table (tests/contracts/README.md), generated from the tests themselves.

    python -m tests.contracts.matrix            # prints the table
    python -m tests.contracts.matrix --write    # rewrites tests/contracts/README.md

Each cell names the tests that check one promise (column) on one head
(row). The parametrized tests are found by pytest's own collection (so a
renamed or removed test changes the table); the OpenVINO tests, which only
collect in the [openvino] environment, are read from their file's source.
tests/contracts/test_matrix.py checks that README.md is this table.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from typing import Dict, List, NamedTuple, Optional, Sequence, Tuple

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
README = os.path.join(REPO, "tests", "contracts", "README.md")
RESUME = "tests/contracts/test_resume.py"
PRETRAIN = "tests/contracts/test_pretrain_resume.py"
EXPORTS = "tests/contracts/test_exports.py"
OPENVINO = "tests/albert_tf/test_openvino_export.py"
FINETUNED = "tests/contracts/test_finetuned_exports.py"
LABELS = "tests/contracts/test_labels_from_model.py"
REMOTE = "tests/contracts/test_remote_folder.py"

ROWS = ("encoder", "pretrainer", "classifier_single", "classifier_pair", "classifier_regression",
        "classifier_mean_pooling", "span_qa_v1", "span_qa_v2", "multiple_choice", "tagging")
# Heads with an OpenVINO export (the others: the binary's refusal is the cell).
OPENVINO_ROWS = ("encoder", "classifier_single", "classifier_pair", "classifier_regression",
                 "classifier_mean_pooling")


# albert-pretrain trains the pretrainer, and with it the encoder: its tests fill both rows.
PRETRAINING_ROWS = ("encoder", "pretrainer")
ROWS_FROM_IDS = None  # a source whose parametrized ids name its rows

# The second table: what users start from (rows, the `start` parametrization) by job (the test functions).
STARTS_FILE = "tests/contracts/test_starting_points.py"
STARTS_DESCRIBED = {
    "released_folder": "a released google-research folder (`albert_config.json`, `30k-clean.model`, `model.ckpt-best`)",
    "hugging_face_folder": "a Hugging Face folder (`config.json`, `spiece.model`, `model.safetensors`)",
    "demo_folder": "a demo folder (`demo_output/model`)",
    "from_pretrained_model": "a task model made with `from_pretrained` in Python",
}
STARTS = tuple(STARTS_DESCRIBED)
JOBS = (("fine-tune", "test_fine_tune"), ("eval-only", "test_eval_only"), ("predict", "test_predict"),
        ("export", "test_export"))


class Source(NamedTuple):
    """Tests of one promise: a test function of a file, and its rows (ROWS_FROM_IDS: its ids name them)."""

    path: str
    function: str
    rows: Optional[Tuple[str, ...]] = ROWS_FROM_IDS


class Column(NamedTuple):
    """One promise. `refusal_rows`: rows whose tests check a one-line refusal (the cell reads "refused");
    `not_applicable`: (row, why) pairs for rows where the promise has no meaning (the cell reads "n/a")."""

    title: str
    sources: Tuple[Source, ...]
    refusal_rows: Tuple[str, ...] = ()
    not_applicable: Tuple[Tuple[str, str], ...] = ()


COLUMNS = (
    Column("kill -9, resume", (
        Source(RESUME, "test_kill_9_mid_pass_then_resume_equals_an_uninterrupted_run"),
        Source(PRETRAIN, "test_albert_pretrain_killed_mid_run_then_rerun_equals_an_uninterrupted_run",
               PRETRAINING_ROWS))),
    Column("--do_train rerun", (
        Source(RESUME, "test_do_train_rerun_of_a_finished_run_trains_nothing_and_changes_nothing"),
        Source(PRETRAIN, "test_albert_pretrain_rerun_of_a_finished_run_changes_nothing", PRETRAINING_ROWS))),
    Column("rerun refusals", (
        Source(RESUME, "test_rerun_with_another_setting_is_refused_naming_it"),
        Source(PRETRAIN, "test_albert_pretrain_rerun_with_another_setting_is_refused_naming_it", PRETRAINING_ROWS),
        Source(PRETRAIN, "test_albert_pretrain_rerun_on_other_input_files_is_refused", PRETRAINING_ROWS))),
    Column("albert-export", (Source(EXPORTS, "test_binary"),)),
    Column("SavedModel = library", (Source(EXPORTS, "test_library"),)),
    Column("OpenVINO = SavedModel", (
        Source(OPENVINO, "test_text_model_equals_saved_model_on_edge_texts", ("encoder",)),
        Source(OPENVINO, "test_unicode_sweep_text_model_tokenizer_equals_saved_models", ("encoder",)),
        Source(OPENVINO, "test_text_model_of_a_classifier_equals_saved_model", ("classifier_single",)),
        Source(OPENVINO, "test_classifier_variant_equals_saved_model"),
        Source(EXPORTS, "test_openvino_refusal")),
        refusal_rows=tuple(row for row in ROWS if row not in OPENVINO_ROWS)),
    Column("empty batch", (Source(EXPORTS, "test_empty"),)),
    Column("hostile strings", (Source(EXPORTS, "test_hostile"),)),
    Column("metadata", (Source(EXPORTS, "test_metadata"),)),
    Column("remote folder", (Source(REMOTE, "test_remote_folder"),)),
    Column("labels from the model", (Source(LABELS, "test_eval_and_predict_name_answers_with_the_models_labels"),),
           not_applicable=tuple((row, "its answers have no label names") for row in (
               "encoder", "pretrainer", "classifier_regression", "span_qa_v1", "span_qa_v2", "multiple_choice"))),
    Column("text pairs", (
        Source(FINETUNED, "test_text_pairs"),
        Source(EXPORTS, "test_fill_mask_takes_no_text_pair", ("pretrainer",))),
        refusal_rows=("tagging", "pretrainer")),
    Column("from an albert-finetune folder", (Source(FINETUNED, "test_export_from_an_albert_finetune_folder"),),
           refusal_rows=("pretrainer",)),
)


def collect(paths: Sequence[str]) -> List[str]:
    """pytest's node ids of the tests in `paths` (collection only, in a subprocess)."""
    proc = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
                           *paths], cwd=REPO, capture_output=True, text=True, timeout=600,
                          env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"))
    nodes = [line.strip() for line in proc.stdout.splitlines() if "::" in line]
    if not nodes:
        raise RuntimeError(f"pytest collected nothing in {list(paths)}: {proc.stdout[-2000:]}{proc.stderr[-2000:]}")
    return nodes


def source_nodes(path: str) -> List[str]:
    """The node ids of a file's tests as read from its source (for a file that only collects in another
    environment): `path::function`, or `path::function[id]` for each literal value of a `row` parametrization."""
    with open(os.path.join(REPO, path), encoding="utf-8") as f:
        tree = ast.parse(f.read())
    constants = {t.id: n.value for n in tree.body if isinstance(n, ast.Assign) for t in n.targets
                 if isinstance(t, ast.Name)}
    nodes = []
    for function in tree.body:
        if not (isinstance(function, ast.FunctionDef) and function.name.startswith("test_")):
            continue
        ids = []
        for decorator in function.decorator_list:
            if (isinstance(decorator, ast.Call) and getattr(decorator.func, "attr", "") == "parametrize"
                    and isinstance(decorator.args[0], ast.Constant) and decorator.args[0].value == "row"):
                values = decorator.args[1]
                values = constants.get(values.id, values) if isinstance(values, ast.Name) else values
                ids = [v.value for v in getattr(values, "elts", ())]
        nodes += [f"{path}::{function.name}[{i}]" for i in ids] or [f"{path}::{function.name}"]
    return nodes


def _row_of(node: str) -> List[str]:
    """The rows a parametrized node id names (its '-'-separated ids that are rows)."""
    if "[" not in node:
        return []
    return [part for part in node[node.index("[") + 1:-1].split("-") if part in ROWS]


def cells(nodes: Sequence[str]) -> Dict[str, Dict[str, List[str]]]:
    """row -> column title -> the tests of that cell (short names: function[ids])."""
    table = {row: {c.title: [] for c in COLUMNS} for row in ROWS}
    for node in nodes:
        path, test = node.split("::", 1)
        function = test.split("[", 1)[0]
        for column in COLUMNS:
            for source in column.sources:
                if source.path == path and source.function == function:
                    for row in _row_of(test) if source.rows is ROWS_FROM_IDS else source.rows:
                        table[row][column.title].append(test)
    return table


def _mark(column: Column, row: str, tests: Sequence[str]) -> str:
    """The summary cell: "n/a", "-" (no test), "refused" or "yes (n)"."""
    if row in dict(column.not_applicable):
        return "n/a"
    if not tests:
        return "-"
    return "refused" if row in column.refusal_rows else f"yes ({len(tests)})"


def _detail(column: Column, row: str, tests: Sequence[str]) -> str:
    """The cell of a row's detail table: its tests, with "refused: " or the reason it does not apply."""
    why = dict(column.not_applicable).get(row)
    if why:
        return f"n/a: {why}"
    text = ", ".join(f"`{t}`" for t in tests) if tests else "-"
    return f"{'refused: ' if row in column.refusal_rows and tests else ''}{text}"


def render(table: Dict[str, Dict[str, List[str]]],
           starts: Optional[Dict[str, Dict[str, List[str]]]] = None) -> str:
    lines = [
        "# The contract matrix (generated: `python -m tests.contracts.matrix --write`; do not edit)",
        "",
        "Rows: every head and variant. Columns: every promise the README makes of a model. A cell names its",
        "tests; \"refused\" cells check the refusal message; \"n/a\" cells say why the promise has no meaning for",
        "that head; \"-\" is a cell no test covers yet. Files:",
        "",
    ]
    files = {source.path for c in COLUMNS for source in c.sources}
    lines += [f"- `{path}`: " + ", ".join(c.title for c in COLUMNS if path in {source.path for source in c.sources})
              for path in sorted(files)]
    lines += ["- The OpenVINO column: the tests of `" + OPENVINO + "` that compare with the SavedModel run in the",
              "  [openvino] environment for the heads with an OpenVINO export; the other heads' cell is the",
              "  binary's refusal (`" + EXPORTS + "::test_openvino_refusal`).", ""]
    lines += ["| head | " + " | ".join(c.title for c in COLUMNS) + " |",
              "|---|" + "---|" * len(COLUMNS)]
    for row in ROWS:
        marks = [_mark(column, row, table[row][column.title]) for column in COLUMNS]
        lines.append(f"| {row} | " + " | ".join(marks) + " |")
    if starts is not None:
        lines += render_starts(starts)
    lines += ["", "yes (n): n tests check the cell. The tests of each cell:", ""]
    for row in ROWS:
        lines.append(f"## {row}")
        lines.append("")
        lines.append("| promise | tests |")
        lines.append("|---|---|")
        for column in COLUMNS:
            lines.append(f"| {column.title} | {_detail(column, row, table[row][column.title])} |")
        lines.append("")
    return "\n".join(lines)


def start_cells(nodes: Sequence[str]) -> Dict[str, Dict[str, List[str]]]:
    """start -> job -> the tests of that cell, from the node ids of STARTS_FILE (parametrized by start)."""
    table = {start: {job: [] for job, _ in JOBS} for start in STARTS}
    functions = {function: job for job, function in JOBS}
    for node in nodes:
        path, test = node.split("::", 1)
        function = test.split("[", 1)[0]
        if path != STARTS_FILE or function not in functions or "[" not in test:
            continue
        for part in test[test.index("[") + 1:-1].split("-"):
            if part in table:
                table[part][functions[function]].append(test)
    return table


def render_starts(starts: Dict[str, Dict[str, List[str]]]) -> List[str]:
    """The second table: the folders and models users start from, by job (STARTS_FILE)."""
    lines = ["", "## Starting points", "",
             f"Rows: what a user starts from. Columns: the job, through the installed binaries (`{STARTS_FILE}`).",
             "", "| start | " + " | ".join(job for job, _ in JOBS) + " |", "|---|" + "---|" * len(JOBS)]
    for start in STARTS:
        marks = [f"yes ({len(starts[start][job])})" if starts[start][job] else "-" for job, _ in JOBS]
        lines.append(f"| {STARTS_DESCRIBED[start]} | " + " | ".join(marks) + " |")
    return lines


def generate() -> str:
    """The README's text, from the tests as they are now."""
    nodes = collect([path for path in (RESUME, EXPORTS, PRETRAIN, FINETUNED, LABELS, REMOTE, STARTS_FILE)
                     if os.path.exists(os.path.join(REPO, path))])
    return render(cells(nodes + source_nodes(OPENVINO)), start_cells(nodes))


def main(argv: Sequence[str]) -> None:
    text = generate()
    if "--write" in argv:
        with open(README, "w", encoding="utf-8") as f:
            f.write(text)
    else:
        sys.stdout.write(text)


if __name__ == "__main__":
    main(sys.argv[1:])
