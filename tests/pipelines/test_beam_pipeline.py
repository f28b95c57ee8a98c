"""The Beam pipeline of albert-create-pretraining-data against the single-machine tool.

The reference is `pipelines.create` (tested on its own in test_create.py): the Beam
pipeline must write the same bytes, shard by shard, on the DirectRunner in-process and
with two worker processes. The corpus is built to reach the hard cases of document
numbering: several files (one gzip, one with CRLF line ends), a document longer than
max_document_lines that crosses a 1024-line block boundary inside the second file (so
the tool cuts it at a position that depends on the lines of the first file), blank-line
runs, a line of invalid UTF-8 and a line over max_line_bytes.
"""

import dataclasses
import filecmp
import gzip
import hashlib
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

beam = pytest.importorskip(
    "apache_beam", reason="apache-beam is in the [beam] extra only (see setup.py: its protobuf cap)")

from pipelines import beam_pipeline, create  # noqa: E402
from tests.pipelines.conftest import write_corpus  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CONFIG = create.PretrainingDataConfig(max_seq_length=32, max_predictions_per_seq=5, dupe_factor=2,
                                      num_shards=3, shuffle_buffer_size=16, max_document_lines=100,
                                      max_line_bytes=400)
MULTI = ["--direct_num_workers=2", "--direct_running_mode=multi_processing"]


def _long_document(path, lines, seed):
    rng = np.random.default_rng(seed)
    with open(path, "w", encoding="utf-8", newline="") as f:
        for i in range(lines):
            words = rng.choice(["ka", "lo", "mi", "ten", "ser", "the", "of"], size=int(rng.integers(3, 12)))
            f.write(" ".join(words).capitalize() + ".\r\n")
        f.write("\r\n\r\n\r\n")
        f.write("A short last document.\r\nWith two lines.\r\n")


@pytest.fixture(scope="module")
def corpus(tmp_path_factory, spm_model):
    root = tmp_path_factory.mktemp("beam_corpus")
    first = write_corpus(str(root / "a.txt"), num_docs=110, seed=3)  # ~800 lines
    with open(first, "ab") as f:
        f.write(b"Bad bytes \xff\xfe here.\nA good line.\n" + b"long " * 100 + b"\nEnd of it.\n\n")
    _long_document(str(root / "b.txt"), 400, seed=4)  # crosses line 1024 of the corpus
    plain = write_corpus(str(root / "c.txt"), num_docs=20, seed=5)
    with open(plain, "rb") as src, gzip.open(str(root / "c.txt.gz"), "wb") as dst:
        dst.write(src.read())
    os.remove(plain)
    pattern = str(root / "*.txt*")
    tool = str(root / "tool")
    summary = create.create_pretraining_data([pattern], spm_model, tool, CONFIG)
    return {"pattern": pattern, "tool": tool, "summary": summary, "root": root}


def _same_files(a, b):
    names = sorted(os.listdir(a))
    assert names == sorted(os.listdir(b))
    return [n for n in names if not filecmp.cmp(os.path.join(a, n), os.path.join(b, n), shallow=False)]


def _counts(summary):
    return {f.name: getattr(summary, f.name) for f in dataclasses.fields(summary)
            if f.name not in ("seconds", "shards_written", "shards_already_complete")}


def test_the_corpus_reaches_the_hard_cases(corpus):
    s = corpus["summary"]
    assert s.skipped_lines_invalid_utf8 == 1 and s.skipped_lines_too_long == 1
    assert s.instances > 300 and len(s.shards_written) == 3
    # 110 + 1 (the bad-bytes one) in a.txt, 2 in b.txt, 20 in c.txt.gz, and one more: the
    # tool cut b.txt's 400-line document where line 1024 of the corpus ends a block (over
    # max_document_lines=100 pending there), a position set by a.txt's length.
    assert s.documents == 110 + 1 + 2 + 20 + 1


def test_two_worker_processes_write_the_tools_bytes(corpus, spm_model, tmp_path):
    """(The in-process DirectRunner: test_binary_with_runner_and_beam_options.)"""
    out = str(tmp_path / "beam")
    summary = beam_pipeline.create_pretraining_data_beam([corpus["pattern"]], spm_model, out, CONFIG,
                                                         beam_args=MULTI)
    assert _same_files(corpus["tool"], out) == []  # shards and manifest, byte for byte
    assert _counts(summary) == _counts(corpus["summary"])
    assert len(summary.shards_written) == 3 and not summary.shards_already_complete
    # The manifest both wrote holds every shard's size, record count and SHA-256.
    with open(os.path.join(out, "pretrain.manifest.json")) as f:
        entries = json.load(f)["shards"]
    assert sorted(entries) == sorted(os.path.basename(p) for p in summary.shards_written)
    for name, entry in entries.items():
        with open(os.path.join(out, name), "rb") as f:
            data = f.read()
        assert (entry["bytes"], entry["sha256"]) == (len(data), hashlib.sha256(data).hexdigest())
    assert sum(e["records"] for e in entries.values()) == summary.instances


def _lying_metrics(monkeypatch, instances, kind):
    """The runner's metrics replaced: `instances` counted (e.g. retried bundles counted twice), of `kind`."""
    monkeypatch.setattr(beam_pipeline, "_summary",
                        lambda result, seconds: (create.PretrainingDataSummary(instances=instances), kind))


def test_rerun_after_a_killed_run_writes_only_the_missing_shard(corpus, spm_model, tmp_path, monkeypatch):
    out = str(tmp_path / "beam")
    shutil.copytree(corpus["tool"], out)
    # What a run killed while writing shard 1 leaves: no shard 1, its temporary file.
    missing = create.shard_path(out, 1, 3)
    os.remove(missing)
    stale = os.path.join(out, "." + os.path.basename(missing) + ".incomplete")
    with open(stale, "wb") as f:
        f.write(b"half a shard")
    kept = {p: os.stat(p).st_mtime_ns for p in (create.shard_path(out, 0, 3), create.shard_path(out, 2, 3))}
    # Attempted counts that count every instance twice: the summary takes the manifest's records instead.
    _lying_metrics(monkeypatch, 2 * corpus["summary"].instances, "attempted")
    summary = beam_pipeline.create_pretraining_data_beam([corpus["pattern"]], spm_model, out, CONFIG)
    assert summary.shards_written == [missing] and sorted(summary.shards_already_complete) == sorted(kept)
    assert {p: os.stat(p).st_mtime_ns for p in kept} == kept  # untouched
    assert _same_files(corpus["tool"], out) == []  # the temporary file is gone too
    with open(os.path.join(out, "pretrain.manifest.json")) as f:
        assert summary.instances == json.load(f)["shards"][os.path.basename(missing)]["records"] > 0


def test_nothing_made_removes_the_shards_and_manifest_on_a_runner_without_metrics(spm_model, tmp_path,
                                                                                   monkeypatch):
    """The shards' record counts decide (the manifest), not metrics: here the runner reports none."""
    one_sentence = write_corpus(str(tmp_path / "short.txt"), num_docs=6, min_sentences=1, max_sentences=1)
    out = str(tmp_path / "beam")
    _lying_metrics(monkeypatch, 0, None)
    with pytest.raises(ValueError, match="No instance could be made from"):
        beam_pipeline.create_pretraining_data_beam([one_sentence], spm_model, out, CONFIG)
    assert os.listdir(out) == []  # empty shards and the manifest removed: other inputs need no --overwrite


def test_instances_are_the_manifests_record_counts_whatever_the_metrics(corpus, spm_model, tmp_path,
                                                                        monkeypatch):
    """A runner with committed metrics that disagree (a companion: the counters are not what is read)."""
    out = str(tmp_path / "beam")
    shutil.copytree(corpus["tool"], out)
    os.remove(create.shard_path(out, 2, 3))
    _lying_metrics(monkeypatch, 0, "committed")  # 0 would mean "nothing made" if the metrics decided
    summary = beam_pipeline.create_pretraining_data_beam([corpus["pattern"]], spm_model, out, CONFIG)
    with open(os.path.join(out, "pretrain.manifest.json")) as f:
        assert summary.instances == json.load(f)["shards"][os.path.basename(create.shard_path(out, 2, 3))][
            "records"] > 0
    assert _same_files(corpus["tool"], out) == []


def _binary(*args):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", CUDA_VISIBLE_DEVICES="")
    return subprocess.run([sys.executable, "-m", "pipelines.bin.create_pretraining_data", *args], cwd=REPO,
                          env=env, capture_output=True, text=True, timeout=600)


def test_binary_with_runner_and_beam_options(corpus, spm_model, tmp_path):
    out = str(tmp_path / "bin")
    flags = [f"--{k}={getattr(CONFIG, k)}" for k in ("max_seq_length", "max_predictions_per_seq", "dupe_factor",
                                                     "num_shards", "shuffle_buffer_size", "max_document_lines",
                                                     "max_line_bytes")]
    done = _binary(f"--input_file={corpus['pattern']}", f"--spm_model_file={spm_model}", f"--output_dir={out}",
                   "--runner=DirectRunner", *flags, "--", "--direct_num_workers=1")
    assert done.returncode == 0, done.stderr[-3000:]
    assert "instances: " in done.stderr
    assert _same_files(corpus["tool"], out) == []


@pytest.mark.parametrize("args,message", [
    (["--input_file={root}/nothing*.txt"], "No input file matches ['{root}/nothing*.txt']"),
    (["--input_file={pattern}", "--num_workers=2"], "--runner=DirectRunner splits the work itself"),
])
def test_binary_names_bad_input(corpus, spm_model, tmp_path, args, message):
    fill = dict(root=corpus["root"], pattern=corpus["pattern"])
    done = _binary(*[a.format(**fill) for a in args], f"--spm_model_file={spm_model}",
                   f"--output_dir={tmp_path / 'out'}", "--runner=DirectRunner")
    assert done.returncode == 1 and message.format(**fill) in done.stderr, done.stderr[-2000:]


def test_nsp_mode_writes_the_tools_bytes(corpus_file, spm_model, tmp_path):
    """Random other documents come from the tool's batch (docs_per_batch of one shard):
    the Beam windows must be those batches."""
    config = dataclasses.replace(CONFIG, random_next_sentence=True, docs_per_batch=4, dupe_factor=1)
    create.create_pretraining_data([corpus_file], spm_model, str(tmp_path / "tool"), config)
    beam_pipeline.create_pretraining_data_beam([corpus_file], spm_model, str(tmp_path / "beam"), config)
    assert _same_files(str(tmp_path / "tool"), str(tmp_path / "beam")) == []


# --------------------------------------------------------------------------- the summary's counters


class _Counter:
    def __init__(self, name, committed=None, attempted=None, raises=False):
        from apache_beam.metrics.metricbase import MetricName

        self.key = type("Key", (), {"metric": MetricName(beam_pipeline._NAMESPACE, name)})()
        self._committed, self.attempted, self._raises = committed, attempted, raises

    @property
    def committed(self):
        if self._raises:
            raise NotImplementedError("committed metrics are not supported by this runner")
        return self._committed


class _Result:
    def __init__(self, counters=None, error=None):
        self.counters, self.error = counters, error

    def metrics(self):
        if self.error:
            raise self.error
        result = self

        class _Query:
            def query(self, _filter):
                return {"counters": result.counters}

        return _Query()


def test_summary_prefers_committed_counts_zero_included():
    result = _Result([_Counter("instances", committed=7, attempted=9),
                      _Counter("label_one", committed=0, attempted=3),  # 0 committed is 0, not "unknown"
                      _Counter("shards_written", committed=2, attempted=5)])
    summary, kind = beam_pipeline._summary(result, 1.0)
    assert (summary.instances, summary.label_one, kind) == (7, 0, "committed")


def test_summary_falls_back_to_attempted_and_never_raises():
    raising = _Result([_Counter("instances", attempted=9, raises=True),
                       _Counter("shards_written", attempted=3, raises=True)])
    summary, kind = beam_pipeline._summary(raising, 1.0)
    assert (summary.instances, kind) == (9, "attempted")  # said so in a warning; instances: the manifest's
    summary, kind = beam_pipeline._summary(_Result(error=NotImplementedError("no metrics")), 1.0)
    assert (summary.instances, kind) == (0, None)  # unknown, not a failure
    summary, kind = beam_pipeline._summary(_Result([]), 1.0)
    assert kind is None
