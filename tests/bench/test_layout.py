"""bench/ as a suite: the top level holds only the suite, every module imports, and no two modules import
each other (directly or through others), counting the imports inside functions too."""

import ast
import os
import subprocess
import sys
from typing import Dict, List, Set

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BENCH = os.path.join(ROOT, "bench")
# The suite (bench.run and what it is made of: the hardware peak, the quotes of its figures) and the conversion
# check the tests import.
TOP_LEVEL = {"__init__.py", "run.py", "plan.py", "estimate.py", "stats.py", "report.py", "tables.py",
             "serving_report.py", "worker.py", "hf_equivalence.py", "peak.py", "quotes.py"}


def bench_modules() -> Dict[str, str]:
    """{dotted name: path} of every Python file under bench/."""
    out = {}
    for folder, _, files in os.walk(BENCH):
        for name in files:
            if name.endswith(".py"):
                path = os.path.join(folder, name)
                parts = os.path.relpath(path, ROOT)[:-3].split(os.sep)
                out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def imports_of(path: str, modules: Set[str]) -> Set[str]:
    """The bench modules a file imports anywhere in it (`from bench.x import y` counts y when it is a module)."""
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read())
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found |= {f"{node.module}.{alias.name}" for alias in node.names}
    return {name for name in found if name in modules}


def cycles(graph: Dict[str, Set[str]]) -> List[List[str]]:
    """Every import cycle of a graph {module: modules it imports}, each as the path that closes it.

    >>> cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}})
    [['a', 'b', 'c', 'a']]
    """
    found, done = [], set()

    def visit(node, path):
        if node in path:
            loop = path[path.index(node):] + [node]
            if sorted(loop[:-1]) not in [sorted(c[:-1]) for c in found]:
                found.append(loop)
            return
        if node in done:
            return
        for nxt in sorted(graph.get(node, ())):
            visit(nxt, path + [node])
        done.add(node)

    for start in sorted(graph):
        visit(start, [])
    return found


def test_no_module_of_bench_is_in_an_import_cycle():
    modules = bench_modules()
    # A package imports its parent package first: that edge is not a cycle.
    graph = {name: {m for m in imports_of(path, set(modules)) if not name.startswith(m + ".") and m != name}
             for name, path in modules.items()}
    assert cycles(graph) == []


def test_the_cycle_finder_finds_the_circle_bench_had():
    # bench/systems/onnx_runtimes.py imported hf at the top, hf.onnx_text imported onnx_runtimes in a function.
    graph = {"bench.systems.onnx_runtimes": {"bench.systems.hf", "bench.systems.common"},
             "bench.systems.hf": {"bench.systems.onnx_runtimes", "bench.systems.common"}, "bench.systems.common": set()}
    assert cycles(graph) == [["bench.systems.hf", "bench.systems.onnx_runtimes", "bench.systems.hf"]]
    source = "def f():\n    from bench.systems import hf\n"
    path = os.path.join(os.path.dirname(__file__), "_cycle_probe.py")
    try:
        with open(path, "w", encoding="utf-8") as f:
            f.write(source)
        assert imports_of(path, {"bench.systems.hf", "bench.systems"}) == {"bench.systems", "bench.systems.hf"}
    finally:
        os.remove(path)


def test_bench_top_level_is_the_suite_and_the_studies_have_their_folder():
    assert set(n for n in os.listdir(BENCH) if n.endswith(".py")) == TOP_LEVEL
    studies = os.path.join(BENCH, "studies")
    with open(os.path.join(studies, "README.md"), encoding="utf-8") as f:
        index = f.read()
    for name in os.listdir(studies):
        if name.endswith((".py", ".sh")) and name != "__init__.py":
            assert f"`{name}`" in index, f"bench/studies/README.md does not list {name}"
            with open(os.path.join(studies, name), encoding="utf-8") as f:
                head = f.read(3000)
            assert "Question:" in head and "Answer:" in head and "Command:" in head or name.endswith(".sh"), name


def test_every_bench_module_imports_without_the_extras():
    names = sorted(bench_modules())
    code = "import importlib, sys\nfor n in sys.argv[1:]:\n    importlib.import_module(n)\nprint('ok')\n"
    proc = subprocess.run([sys.executable, "-c", code, *names], cwd=ROOT, capture_output=True, text=True,
                          timeout=300, env=dict(os.environ, PYTHONPATH=ROOT, TF_CPP_MIN_LOG_LEVEL="3"))
    assert proc.returncode == 0 and proc.stdout.strip().endswith("ok"), proc.stderr[-2000:]
