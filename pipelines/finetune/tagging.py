"""CoNLL-style tagging (NER, chunking, POS): words with tags -> piece features and back.

Files: `data_dir/{train,dev,test}.txt`, one word per line as "word ... TAG"
(whitespace-separated; the word is the first column, the tag the last), a
blank line between sentences, "-DOCSTART-" lines ignored. A test file may have
the word column only (no tags). The tag set is learned from the training file
(sorted). Each word is normalised and cut into SentencePiece pieces as the
model's preprocessor does; the word's FIRST piece carries its tag and the
continuation pieces, [CLS], [SEP] and padding get label -1 (ignored by
AlbertTokenClassifier's loss). A word that does not fit in what is left of
max_seq_length - 2 pieces is dropped (predicted "O", counted and logged) and
the later words that fit are kept; a word with no piece stands as <unk>.

Example:

>>> sentences = read_conll("train.txt")                           # doctest: +SKIP
>>> tags = learn_tag_names(sentences)                              # doctest: +SKIP
>>> features = convert_sentences_to_features(sentences, text, tags, 128)  # doctest: +SKIP
>>> logits = model.predict(features.model_inputs(), batch_size=32)   # doctest: +SKIP
>>> word_tags = features.word_predictions(logits.argmax(-1), tags)  # doctest: +SKIP
"""

from __future__ import annotations

import dataclasses
from typing import List, Optional, Sequence, Tuple

import numpy as np
import tensorflow as tf
from absl import logging

from pipelines.finetune.common import split_file
from pipelines.finetune.sp_text import PieceText

IGNORE_LABEL = -1
DOCSTART = "-DOCSTART-"


@dataclasses.dataclass(frozen=True)
class TaggedSentence:
    """One sentence.

    Attributes:
        words: the words.
        tags: their tags, or None for an untagged (test) file.
        source: "file:line" of the sentence's first word.
        lines: the line of every word (for error messages).
    """

    words: Tuple[str, ...]
    tags: Optional[Tuple[str, ...]]
    source: str
    lines: Tuple[int, ...] = ()


def read_conll(path: str) -> List[TaggedSentence]:
    """Reads a CoNLL-style file.

    Raises:
        FileNotFoundError: missing file. ValueError: an empty file, or a file
        mixing tagged and untagged lines (naming file and line).
    """
    if not tf.io.gfile.exists(path):
        raise FileNotFoundError(f"Data file not found: {path!r}")
    with tf.io.gfile.GFile(path, "rb") as f:
        lines = f.read().decode("utf-8-sig").split("\n")
    sentences, words, tags, numbers = [], [], [], []
    tagged = None

    def flush():
        if words:
            sentences.append(TaggedSentence(tuple(words), tuple(tags) if tagged else None,
                                            f"{path}:{numbers[0]}", tuple(numbers)))
        words.clear()
        tags.clear()
        numbers.clear()

    for number, line in enumerate(lines, start=1):
        columns = line.split()
        if not columns:
            flush()
            continue
        if columns[0] == DOCSTART:
            flush()
            continue
        has_tag = len(columns) > 1
        if tagged is None:
            tagged = has_tag
        elif has_tag != tagged:
            raise ValueError(f"{path}:{number}: expected 'word TAG' lines throughout "
                             f"(this line has {len(columns)} column(s): {line.strip()!r}).")
        words.append(columns[0])
        tags.append(columns[-1] if has_tag else None)
        numbers.append(number)
    flush()
    if not sentences:
        raise ValueError(f"{path}: no sentences (the file is empty).")
    return sentences


def learn_tag_names(sentences: Sequence[TaggedSentence]) -> List[str]:
    """Sorted tags of tagged sentences (deterministic ids).

    >>> learn_tag_names([TaggedSentence(("a", "b"), ("O", "B-PER"), "f:1")])
    ['B-PER', 'O']
    """
    names = sorted({t for s in sentences if s.tags for t in s.tags})
    if not names:
        raise ValueError("No tags to learn: the sentences are untagged.")
    return names


def find_conll_file(data_dir: str, split: str) -> Optional[str]:
    """data_dir/<split>.txt (or .conll), or None."""
    return split_file(data_dir, split + ".txt", split + ".conll")


@dataclasses.dataclass
class TaggingFeatures:
    """Piece features of tagged sentences.

    Attributes:
        input_ids, input_mask, segment_ids: int32 [N, T].
        label_ids: int32 [N, T]: the tag id on each word's first piece, -1 elsewhere.
        word_index: int32 [N, T]: the word a first piece starts, -1 elsewhere.
        num_words: int32 [N]: words per sentence.
        truncated_words: words dropped because they did not fit in max_seq_length (predicted "O").
        pieceless_words: words with no SentencePiece piece, each given one <unk> piece.
    """

    input_ids: np.ndarray
    input_mask: np.ndarray
    segment_ids: np.ndarray
    label_ids: np.ndarray
    word_index: np.ndarray
    num_words: np.ndarray
    truncated_words: int = 0
    pieceless_words: int = 0

    def __len__(self) -> int:
        return len(self.input_ids)

    def model_inputs(self) -> dict:
        return {"input_ids": self.input_ids, "input_mask": self.input_mask,
                "segment_ids": self.segment_ids}

    def word_predictions(self, piece_tag_ids: np.ndarray, tag_names: Sequence[str],
                         default_tag: str = "O") -> List[List[str]]:
        """Per sentence, the tag of every word: the prediction at its first piece.

        Args:
            piece_tag_ids: int [N, T'] predicted tag ids per piece (argmax of the
                logits); T' may be shorter than T when the model saw only the
                longest row of a batch.
            tag_names: the tag list.
            default_tag: the tag of words without a piece in the window.
        """
        piece_tag_ids = np.asarray(piece_tag_ids)
        if piece_tag_ids.shape[0] != len(self):
            raise ValueError(f"{piece_tag_ids.shape[0]} prediction rows for {len(self)} sentences.")
        out = []
        for row in range(len(self)):
            tags = [default_tag] * int(self.num_words[row])
            width = min(piece_tag_ids.shape[1], self.word_index.shape[1])
            for position in range(width):
                word = self.word_index[row, position]
                if word >= 0:
                    tags[word] = tag_names[int(piece_tag_ids[row, position])]
            out.append(tags)
        return out


def convert_sentences_to_features(sentences: Sequence[TaggedSentence], text: PieceText,
                                  tag_names: Optional[Sequence[str]],
                                  max_seq_length: int = 128) -> TaggingFeatures:
    """`[CLS] pieces [SEP]` per sentence, labels on the first piece of every word.

    A word longer than the space left in its row is dropped (predicted "O") and the words after it that fit
    are kept; a word with no piece (U+200B alone) stands as one <unk> piece, so it keeps its tag. Dropped
    words are counted and logged in one line naming the first.

    Args:
        sentences: from read_conll.
        text: the SentencePiece text helper of the model.
        tag_names: the tag list (None or untagged sentences: labels all -1).
        max_seq_length: T.

    Raises:
        ValueError: naming the file and line of a tag not in `tag_names`.
    """
    if max_seq_length < 3:
        raise ValueError(f"max_seq_length must be at least 3, got {max_seq_length}.")
    tag_ids = {name: i for i, name in enumerate(tag_names or [])}
    n, t = len(sentences), max_seq_length
    arrays = {k: np.zeros((n, t), np.int32) for k in ("input_ids", "input_mask", "segment_ids")}
    labels = np.full((n, t), IGNORE_LABEL, np.int32)
    word_index = np.full((n, t), -1, np.int32)
    dropped, pieceless = [], 0
    for row, sentence in enumerate(sentences):
        ids, row_labels, row_words = [text.cls_id], [IGNORE_LABEL], [-1]
        for k, word in enumerate(sentence.words):
            label = IGNORE_LABEL
            if sentence.tags is not None and tag_names is not None:
                label = _tag_id(sentence, k, tag_ids)
            pieces = text.encode_ids(word)
            if not pieces:
                pieces, pieceless = [text.unk_id], pieceless + 1
            if len(ids) + len(pieces) > t - 1:
                dropped.append((sentence, k, len(pieces)))
                continue
            ids += pieces
            row_labels += [label] + [IGNORE_LABEL] * (len(pieces) - 1)
            row_words += [k] + [-1] * (len(pieces) - 1)
        ids.append(text.sep_id)
        row_labels.append(IGNORE_LABEL)
        row_words.append(-1)
        arrays["input_ids"][row, :len(ids)] = ids
        arrays["input_mask"][row, :len(ids)] = 1
        labels[row, :len(ids)] = row_labels
        word_index[row, :len(ids)] = row_words
    _log_dropped(dropped, pieceless, max_seq_length)
    return TaggingFeatures(arrays["input_ids"], arrays["input_mask"], arrays["segment_ids"],
                           labels, word_index,
                           np.asarray([len(s.words) for s in sentences], np.int32), len(dropped), pieceless)


def _log_dropped(dropped, pieceless: int, max_seq_length: int) -> None:
    """One warning line: how many words were dropped (and the first), how many had no piece."""
    if not dropped:
        if pieceless:
            logging.info("Tagging: %d word(s) with no SentencePiece piece stand as <unk>.", pieceless)
        return
    sentence, k, pieces = dropped[0]
    where = sentence.source.rsplit(":", 1)[0]
    line = sentence.lines[k] if sentence.lines else "?"
    logging.warning("Tagging: %d word(s) in %d sentence(s) did not fit in max_seq_length=%d and were dropped "
                    "(predicted 'O'; the later words that fit are kept), the first %r (%d pieces) at %s:%s; "
                    "%d word(s) with no piece stand as <unk>.", len(dropped), len({id(d[0]) for d in dropped}),
                    max_seq_length, sentence.words[k], pieces, where, line, pieceless)


def _tag_id(sentence: TaggedSentence, k: int, tag_ids) -> int:
    tag = sentence.tags[k]
    if tag not in tag_ids:
        where = sentence.source.rsplit(":", 1)[0]
        line = sentence.lines[k] if sentence.lines else "?"
        raise ValueError(f"{where}:{line}: tag {tag!r} is not in the training tag set "
                         f"{sorted(tag_ids)!r}.")
    return tag_ids[tag]
