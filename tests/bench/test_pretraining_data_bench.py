"""bench.studies.pretraining_data: the original tool is run, not assumed; no constant rate or ratio."""

import os
import re

from bench.studies import pretraining_data as bpd

# (wall s, instances, instances/s, peak RSS MB, CPU s)
OURS = [(10.0, 1000, 100.0, 700.0, 20.0), (8.0, 1000, 125.0, 700.0, 16.0), (12.0, 1000, 1000 / 12, 700.0, 18.0)]
ORIGINAL = [(50.0, 1010, 20.2, 400.0, 50.0), (40.0, 1010, 25.25, 400.0, 40.0), (50.0, 1010, 20.2, 400.0, 50.0)]


def test_no_constant_rate_or_fixed_cost_is_left_in_the_script():
    with open(bpd.__file__, encoding="utf-8") as f:
        source = f.read()
    assert not hasattr(bpd, "ORIGINAL_RATE")
    assert not re.search(r"\b(450|650)\b", source) and "2.3 CPU-s" not in source


def test_same_run_ratio_is_the_median_of_the_rounds():
    rows = bpd.ratio_rows(OURS, ORIGINAL)
    # rounds: 100 / 20.2 = 4.95, 125 / 25.25 = 4.95, 83.3 / 20.2 = 4.13
    assert "**5.0x** (rounds: 5.0x, 5.0x, 4.1x)" in rows
    # per CPU-second: (1000/20) / (1010/50) = 2.48, (1000/16) / (1010/40) = 2.48, (1000/18) / (1010/50) = 2.75
    assert "per CPU-second | 2.5x |" in rows


def test_missing_original_tool_reports_no_ratio(tmp_path):
    assert bpd.original_tool_dir(str(tmp_path)) is None
    rows = bpd.ratio_rows(OURS, [])
    assert "not measured" in rows and not re.search(r"\d+(\.\d+)?x", rows)


def test_default_original_tool_path_is_relative_to_the_repository():
    args = bpd.parse_args([])
    assert not os.path.isabs(args.original_tool)
    assert args.original_tool == os.path.join("..", "shared", "reference", "original_tool")
    found = bpd.original_tool_dir(args.original_tool)
    assert found is None or found == os.path.normpath(os.path.join(bpd.REPO, args.original_tool))


def test_both_tools_get_the_same_flags():
    ours = bpd.creation_command("c.txt", "sp", 4)
    original = bpd.original_command("c.txt", "sp")
    shared = [a for a in ours if a.startswith("--") and not a.startswith("--num_shards")]
    assert set(shared) <= set(original)
    env = bpd.original_env("/tool")
    assert env["PYTHONPATH"].split(os.pathsep) == ["/tool", os.path.join("/tool", "albert", "stubs")]
