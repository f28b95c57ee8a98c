"""The data pipeline's docs point to nothing a clone lacks (the project's
design notes and reference summaries are not part of the repository).  Their
examples run in tests/test_doctests.py."""

import os
import re

import pytest

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FILES = ["pipelines/__init__.py", "pipelines/corpus.py", "pipelines/create/__init__.py", "pipelines/create/config.py",
         "pipelines/create/manifest.py", "pipelines/create/run.py", "pipelines/create/spill.py",
         "pipelines/instances.py", "pipelines/masking.py", "pipelines/random_ops.py",
         "pipelines/stdlib_corpus.py", "pipelines/tfrecords.py", "pipelines/tokenizer.py",
         "pipelines/bin/create_pretraining_data.py", "flags/pipeline_flags.py"]


@pytest.mark.parametrize("path", FILES)
def test_no_reference_to_files_outside_the_repository(path):
    with open(os.path.join(REPO_ROOT, path)) as f:
        text = f.read()
    for pattern in (r"shared/", r"\.\./", r"reference/", r"reference section",
                    r"see the reference"):
        assert not re.search(pattern, text), (path, pattern)
