"""The settings of a pretraining-data run (`PretrainingDataConfig`), what a run did
(`PretrainingDataSummary`) and the names of its files (`shard_path`, `temp_path`).

Example:

>>> shard_path("out", 3, 8), temp_path(shard_path("out", 3, 8), "incomplete")
('out/pretrain-00003-of-00008.tfrecord', 'out/.pretrain-00003-of-00008.tfrecord.incomplete')
"""

import dataclasses
import os
from typing import Dict, List, Optional

from pipelines import instances as instances_lib
from pipelines import masking as masking_lib


@dataclasses.dataclass(frozen=True)
class PretrainingDataConfig:
    """The settings of a pretraining-data run (names and defaults as the
    original create_pretraining_data.py's flags where it has them).

    Instances: max_seq_length, dupe_factor, short_seq_prob,
    random_next_sentence, single_segment_random_negatives, random_seed.
    Masking: max_predictions_per_seq, masked_lm_prob, ngram,
    favor_shorter_ngram, do_whole_word_mask.
    Text: do_lower_case, max_line_bytes (longer lines are skipped and counted),
    max_document_lines (longer documents are cut; bounds memory).
    Output: num_shards, output_compression ("" or "GZIP"), shuffle_buffer_size
    (records in each spill file's shuffle buffer), file_prefix.
    Speed only (the shards do not depend on them): num_parallel_calls (None:
    AUTOTUNE), progress_interval_s, and docs_per_batch, except with random
    documents (NSP or single_segment_random_negatives), which are drawn from
    the same batch.

    Example:

    >>> config = PretrainingDataConfig(max_seq_length=128, num_shards=4)
    >>> config.instance_config(vocab_size=30000).masking.max_predictions_per_seq
    20
    >>> config.content_settings()["num_shards"]
    4
    """

    max_seq_length: int = 512
    dupe_factor: int = 40
    short_seq_prob: float = 0.1
    random_next_sentence: bool = False
    single_segment_random_negatives: bool = False
    random_seed: int = 12345
    max_predictions_per_seq: int = 20
    masked_lm_prob: float = 0.15
    ngram: int = 3
    favor_shorter_ngram: bool = True
    do_whole_word_mask: bool = True
    do_lower_case: bool = True
    max_line_bytes: int = 65536
    max_document_lines: int = 20000
    num_shards: int = 1
    output_compression: str = ""
    shuffle_buffer_size: int = 100_000
    file_prefix: str = "pretrain"
    docs_per_batch: int = 32
    num_parallel_calls: Optional[int] = None
    progress_interval_s: float = 30.0

    def __post_init__(self):
        if self.num_shards < 1:
            raise ValueError(f"num_shards must be >= 1, got {self.num_shards}.")
        if self.output_compression not in ("", "GZIP"):
            raise ValueError(
                f"output_compression must be '' or 'GZIP', got {self.output_compression!r}.")
        for name in ("docs_per_batch", "shuffle_buffer_size", "max_line_bytes",
                     "max_document_lines"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}.")
        if not self.file_prefix or os.sep in self.file_prefix:
            raise ValueError(
                f"file_prefix must be a non-empty file name, got {self.file_prefix!r}.")
        # The instance and masking settings check themselves (any vocabulary size).
        self.instance_config(vocab_size=masking_lib.MASK_ID + 1)

    def masking_config(self, vocab_size: int) -> masking_lib.MaskingConfig:
        """The masking settings for a vocabulary of `vocab_size` pieces."""
        return masking_lib.MaskingConfig(
            vocab_size=vocab_size, max_predictions_per_seq=self.max_predictions_per_seq,
            masked_lm_prob=self.masked_lm_prob, ngram=self.ngram,
            favor_shorter_ngram=self.favor_shorter_ngram,
            do_whole_word_mask=self.do_whole_word_mask)

    def instance_config(self, vocab_size: int) -> instances_lib.InstanceConfig:
        """The instance settings (masking included) for a vocabulary size."""
        return instances_lib.InstanceConfig(
            masking=self.masking_config(vocab_size), max_seq_length=self.max_seq_length,
            dupe_factor=self.dupe_factor, short_seq_prob=self.short_seq_prob,
            random_next_sentence=self.random_next_sentence,
            single_segment_random_negatives=self.single_segment_random_negatives,
            random_seed=self.random_seed)

    @property
    def uses_random_documents(self) -> bool:
        return self.random_next_sentence or self.single_segment_random_negatives

    def content_settings(self) -> Dict[str, object]:
        """The settings the shards' names and bytes depend on (the manifest's)."""
        speed_only = {"num_parallel_calls", "progress_interval_s"}
        if not self.uses_random_documents:
            speed_only.add("docs_per_batch")
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)
                if f.name not in speed_only}


@dataclasses.dataclass
class PretrainingDataSummary:
    """What a creation run did (this worker, shards written in this run)."""

    documents: int = 0
    one_sentence_documents: int = 0
    empty_documents: int = 0
    instances: int = 0
    tokens: int = 0
    masked_tokens: int = 0
    label_one: int = 0
    skipped_lines_invalid_utf8: int = 0
    skipped_lines_too_long: int = 0
    dropped_chunks: int = 0
    seconds: float = 0.0
    shards_written: List[str] = dataclasses.field(default_factory=list)
    shards_already_complete: List[str] = dataclasses.field(default_factory=list)

    @property
    def masked_fraction(self) -> float:
        return self.masked_tokens / max(self.tokens, 1)

    @property
    def sop_label_one_fraction(self) -> float:
        return self.label_one / max(self.instances, 1)

    @property
    def instances_per_second(self) -> float:
        return self.instances / max(self.seconds, 1e-9)

    def to_text(self) -> str:
        return "\n".join([
            f"documents used: {self.documents}",
            f"documents skipped (one sentence): {self.one_sentence_documents}",
            f"documents skipped (no usable line): {self.empty_documents}",
            f"instances: {self.instances}",
            f"tokens: {self.tokens}",
            f"masked fraction: {self.masked_fraction:.4f}",
            f"label 1 (swapped/random) fraction: {self.sop_label_one_fraction:.4f}",
            f"skipped lines (invalid UTF-8): {self.skipped_lines_invalid_utf8}",
            f"skipped lines (too long): {self.skipped_lines_too_long}",
            f"chunks too short to pair: {self.dropped_chunks}",
            f"shards written: {len(self.shards_written)}, already complete: "
            f"{len(self.shards_already_complete)}",
            f"seconds: {self.seconds:.1f}, instances/s: {self.instances_per_second:.0f}",
        ])


def shard_path(output_dir: str, shard: int, num_shards: int, compression: str = "",
               prefix: str = "pretrain") -> str:
    """The final name of a shard."""
    suffix = ".tfrecord.gz" if compression == "GZIP" else ".tfrecord"
    return os.path.join(output_dir, f"{prefix}-{shard:05d}-of-{num_shards:05d}{suffix}")


def temp_path(path: str, kind: str) -> str:
    head, tail = os.path.split(path)
    return os.path.join(head, f".{tail}.{kind}")
