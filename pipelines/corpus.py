"""Reading the corpus: files -> cleaned lines -> documents, as tf.data.

Input format (the original's): UTF-8 text, one sentence per line, a blank line
between documents; the end of a file also ends a document; `.gz` files are
read decompressed.  Lines are normalised with `tokenizer.preprocess_text`; a
line that is empty afterwards separates documents.

Bad lines never crash the pipeline and never reach a record silently: a line
longer than `max_line_bytes` or with bytes that are not UTF-8 is dropped and
counted (per document, so counts add up across shards and workers).  A
document longer than `max_document_lines` is cut there, which bounds memory
whatever the input (a file with no blank line at all is one huge document).

Documents are numbered in corpus order (file order, then position); that
number keys all randomness about the document and decides its shard.

Example:

>>> ds = documents_dataset(["corpus.txt"], do_lower_case=True)  # doctest: +SKIP
>>> next(iter(ds))["lines"]                                      # doctest: +SKIP
"""

from typing import List, Sequence

import tensorflow as tf

from pipelines import fileio
from pipelines import tokenizer as tokenizer_lib

CODE_OK = 0
CODE_BAD_UTF8 = 1
CODE_TOO_LONG = 2


def resolve_input_files(patterns: Sequence[str]) -> List[str]:
    """Comma-separated globs -> files; raises for missing files or no text.

    Raises:
        FileNotFoundError: a pattern matches no file.
        ValueError: the files hold no non-whitespace byte at all (empty corpus).
    """
    files = tokenizer_lib.expand_input_patterns(patterns)
    for path in files:
        if _has_text(path):
            return files
    raise ValueError(
        f"Empty corpus: the {len(files)} input file(s) {files[:5]!r} contain no text "
        "(expected one sentence per line, blank lines between documents).")


def _has_text(path: str, chunk: int = 1 << 20) -> bool:
    """True at the first non-whitespace byte (reads only as far as needed)."""
    with fileio.open_binary(path) as f:
        while True:
            data = f.read(chunk)
            if not data:
                return False
            if data.strip():
                return True


def clean_lines(lines: tf.Tensor, do_lower_case: bool, max_line_bytes: int):
    """Validates and normalises a batch of raw lines.

    Returns:
        (text, code, blank): normalised text ("" for dropped lines), the
        CODE_* of every line, and whether it is a document boundary.
    """
    too_long = tf.strings.length(lines) > max_line_bytes
    safe = tf.where(too_long, "", lines)
    repaired = tf.strings.unicode_transcode(
        safe, "UTF-8", "UTF-8", errors="replace", replacement_char=0xFFFD)
    bad = tf.not_equal(repaired, safe)
    safe = tf.where(bad, "", safe)
    text = tokenizer_lib.preprocess_text(safe, do_lower_case)
    code = tf.where(too_long, CODE_TOO_LONG, tf.where(bad, CODE_BAD_UTF8, CODE_OK))
    blank = tf.equal(text, "") & tf.equal(code, CODE_OK)
    return text, code, blank


def _group_step(max_document_lines: int):
    """The tf.data scan step that turns blocks of lines into whole documents."""

    def step(state, block):
        pend_text, pend_code, next_doc = state
        text, code, blank = block
        all_text = tf.concat([pend_text, text], axis=0)
        all_code = tf.concat([pend_code, code], axis=0)
        all_blank = tf.concat([tf.zeros_like(pend_code, tf.bool), blank], axis=0)
        n = tf.size(all_text)
        blank_at = tf.cast(tf.where(all_blank)[:, 0], tf.int32)
        cut = tf.reduce_max(tf.concat([blank_at, [-1]], axis=0)) + 1
        forced = (n - cut) > max_document_lines
        cut = tf.where(forced, n, cut)
        consumed_blank = all_blank[:cut]
        doc_of_line = tf.cumsum(tf.cast(consumed_blank, tf.int32), exclusive=True)
        num_docs = tf.reduce_sum(tf.cast(consumed_blank, tf.int32)) + tf.cast(forced, tf.int32)
        nonblank = ~consumed_blank
        line_doc = tf.boolean_mask(doc_of_line, nonblank)
        line_code = tf.boolean_mask(all_code[:cut], nonblank)
        line_text = tf.boolean_mask(all_text[:cut], nonblank)
        ones = tf.ones_like(line_doc)
        n_lines = tf.math.unsorted_segment_sum(ones, line_doc, num_docs)
        bad_utf8 = tf.math.unsorted_segment_sum(
            tf.cast(line_code == CODE_BAD_UTF8, tf.int32), line_doc, num_docs)
        too_long = tf.math.unsorted_segment_sum(
            tf.cast(line_code == CODE_TOO_LONG, tf.int32), line_doc, num_docs)
        keep_doc = n_lines > 0
        new_index = tf.cumsum(tf.cast(keep_doc, tf.int32), exclusive=True)
        num_kept = tf.reduce_sum(tf.cast(keep_doc, tf.int32))
        ok_line = tf.equal(line_code, CODE_OK)
        kept_text = tf.boolean_mask(line_text, ok_line)
        kept_doc = tf.gather(new_index, tf.boolean_mask(line_doc, ok_line))
        row_lengths = tf.math.unsorted_segment_sum(tf.ones_like(kept_doc), kept_doc, num_kept)
        doc_ids = next_doc + tf.range(tf.cast(num_kept, tf.int64), dtype=tf.int64)
        out = (kept_text, row_lengths, doc_ids,
               tf.boolean_mask(bad_utf8, keep_doc), tf.boolean_mask(too_long, keep_doc))
        new_state = (all_text[cut:], all_code[cut:], next_doc + tf.cast(num_kept, tf.int64))
        return new_state, out

    return step


def documents_dataset(files: Sequence[str], do_lower_case: bool = True,
                      max_line_bytes: int = 65536, max_document_lines: int = 20000,
                      lines_per_block: int = 1024) -> tf.data.Dataset:
    """A dataset of documents in corpus order.

    Args:
        files: input files (already resolved; see `resolve_input_files`).
        do_lower_case: lowercase the text.
        max_line_bytes: longer lines are dropped and counted.
        max_document_lines: a document is cut after this many lines.
        lines_per_block: lines normalised per vectorised call.

    Returns:
        Elements {"doc_id": int64, "lines": string [None] (normalised, non-empty),
        "bad_utf8": int32, "too_long": int32} (dropped lines of the document).
    """
    files = list(files)
    compression = ["GZIP" if f.endswith(".gz") else "" for f in files]

    def read_file(path, comp):
        # The sentinel "" makes every file end a document.
        text = tf.data.TextLineDataset(path, compression_type=comp, buffer_size=1 << 20)
        return text.concatenate(tf.data.Dataset.from_tensors(tf.constant("")))

    lines = tf.data.Dataset.from_tensor_slices((files, compression)).flat_map(
        tf.autograph.experimental.do_not_convert(read_file))
    no_autograph = tf.autograph.experimental.do_not_convert
    blocks = lines.batch(lines_per_block).map(
        no_autograph(lambda x: clean_lines(x, do_lower_case, max_line_bytes)),
        num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
    init = (tf.constant([], tf.string), tf.constant([], tf.int32), tf.constant(0, tf.int64))
    docs = blocks.scan(init, no_autograph(_group_step(max_document_lines)))

    def to_elements(text, row_lengths, doc_ids, bad_utf8, too_long):
        return {
            "doc_id": doc_ids,
            "lines": tf.RaggedTensor.from_row_lengths(text, row_lengths),
            "bad_utf8": bad_utf8,
            "too_long": too_long,
        }

    return docs.map(no_autograph(to_elements)).unbatch()
