"""The character alignment between a SQuAD context and its SentencePiece pieces,
as the original ALBERT `squad_utils` computes it: the context is normalised and
cut into pieces, and the original's banded longest-common-subsequence matches
the characters of the original context with those of the concatenated pieces
(a shortcut handles the common case where the pieces spell the normalised
characters exactly). A context whose alignment covers less than 80% of its
characters is dropped, as the original's "MISMATCH DETECTED".

Example:

>>> convert_index([None, 4, None, 9], 2, is_start=True), convert_index([None, 4, None, 9], 2, is_start=False)
(5, 8)
"""

from __future__ import annotations

import dataclasses
from typing import Dict, List, Optional, Sequence, Tuple

from pipelines.finetune.sp_text import PieceText
from pipelines.tokenizer import SPIECE_UNDERLINE

# The original drops an example whose character alignment covers less than this.
MIN_ALIGNMENT_COVERAGE = 0.8


@dataclasses.dataclass
class ParagraphAlignment:
    """A context's pieces and their character alignment.

    Attributes:
        piece_ids: the ids of the context's pieces.
        tok_start_to_orig, tok_end_to_orig: per piece, the first and last
            character offsets in the original context.
        orig_to_chartok: per original character, its position in the pieces'
            concatenated text (None when unmatched).
        chartok_to_tok: per character of the concatenated pieces, the piece.
        coverage: matched characters / characters of the context.
    """

    piece_ids: List[int]
    tok_start_to_orig: List[int]
    tok_end_to_orig: List[int]
    orig_to_chartok: List[Optional[int]]
    chartok_to_tok: List[int]
    coverage: float


def _lcs_match(orig: Sequence[str], tok_text: str, max_dist: int) -> Tuple[float, Dict]:
    """The original's banded longest-common-subsequence of two character strings.

    Cells outside the band count 0, as in the original's zero-filled matrix.
    Returns the score at (n-1, m-1) and the back-pointers (0 up, 1 left, 2 match).
    """
    n, m = len(orig), len(tok_text)
    back = {}
    prev_row: Dict[int, float] = {}
    for i in range(n):
        row: Dict[int, float] = {}
        for j in range(max(i - max_dist, 0), min(i + max_dist, m)):
            value = 0.0
            if i > 0:
                back[(i, j)] = 0
                value = prev_row.get(j, 0.0)
            if j > 0 and row.get(j - 1, 0.0) > value:
                back[(i, j)] = 1
                value = row[j - 1]
            diagonal = prev_row.get(j - 1, 0.0) if i > 0 and j > 0 else 0.0
            if orig[i] == tok_text[j] and diagonal + 1 > value:
                back[(i, j)] = 2
                value = diagonal + 1
            row[j] = value
        prev_row = row
    return prev_row.get(m - 1, 0.0) if n else 0.0, back


def convert_index(index: List[Optional[int]], pos: int, m: Optional[int] = None,
                   is_start: bool = True) -> int:
    """The original `_convert_index`: the aligned position of `pos`, or the nearest
    one inside the span when `pos` itself is unmatched."""
    if index[pos] is not None:
        return index[pos]
    n = len(index)
    rear = pos
    while rear < n - 1 and index[rear] is None:
        rear += 1
    front = pos
    while front > 0 and index[front] is None:
        front -= 1
    if index[front] is None:
        if index[rear] >= 1:
            return 0 if is_start else index[rear] - 1
        return index[rear]
    if index[rear] is None:
        if m is not None and index[front] < m - 1:
            return index[front] + 1 if is_start else m - 1
        return index[front]
    if is_start:
        return index[front] + 1 if index[rear] > index[front] + 1 else index[rear]
    return index[rear] - 1 if index[rear] > index[front] + 1 else index[front]


def _identity_alignment(orig: Sequence[str], tok_text: str):
    """The common case, without the O(n * band) search: the pieces spell the
    normalised characters after SentencePiece's leading space. The LCS then
    matches character i to i + 1 (its back-pointers prefer the diagonal)."""
    n = len(orig)
    if len(tok_text) != n + 1 or tok_text[0] != " ":
        return None
    if any(len(c) != 1 or c != tok_text[i + 1] for i, c in enumerate(orig)):
        return None
    return list(range(1, n + 1)), [None] + list(range(n)), float(n)


def _lcs_alignment(orig: Sequence[str], tok_text: str):
    """(orig_to_chartok, chartok_to_orig, score) from the original's banded LCS."""
    n, m = len(orig), len(tok_text)
    max_dist = abs(n - m) + 5
    for _ in range(2):  # the original widens the band once
        score, back = _lcs_match(orig, tok_text, max_dist)
        if score > MIN_ALIGNMENT_COVERAGE * n:
            break
        max_dist *= 2
    orig_to_chartok: List[Optional[int]] = [None] * n
    chartok_to_orig: List[Optional[int]] = [None] * m
    i, j = n - 1, m - 1
    while i >= 0 and j >= 0 and (i, j) in back:
        if back[(i, j)] == 2:
            orig_to_chartok[i], chartok_to_orig[j] = j, i
            i, j = i - 1, j - 1
        elif back[(i, j)] == 1:
            j -= 1
        else:
            i -= 1
    return orig_to_chartok, chartok_to_orig, score


def align_paragraph(context: str, text: PieceText) -> Optional[ParagraphAlignment]:
    """Pieces of a context and the original's character alignment; None when the
    alignment covers less than 80% of the characters (the original drops those)."""
    pieces = text.encode_pieces(text.normalize(context))
    chartok_to_tok, tok_start_to_chartok, tok_end_to_chartok = [], [], []
    count = 0
    for i, piece in enumerate(pieces):
        surface = piece.replace(SPIECE_UNDERLINE, " ")
        chartok_to_tok.extend([i] * len(surface))
        tok_start_to_chartok.append(count)
        count += len(surface)
        tok_end_to_chartok.append(count - 1)
    tok_text = "".join(pieces).replace(SPIECE_UNDERLINE, " ")
    n, m = len(context), len(tok_text)
    if n == 0 or m == 0:
        return None
    orig = [text.normalize_char(c) for c in context]
    aligned = _identity_alignment(orig, tok_text)
    if aligned is None:
        aligned = _lcs_alignment(orig, tok_text)
    orig_to_chartok, chartok_to_orig, score = aligned
    if all(v is None for v in orig_to_chartok) or score < MIN_ALIGNMENT_COVERAGE * n:
        return None
    starts = [convert_index(chartok_to_orig, p, n, is_start=True) for p in tok_start_to_chartok]
    ends = [convert_index(chartok_to_orig, p, n, is_start=False) for p in tok_end_to_chartok]
    return ParagraphAlignment(text.piece_ids(pieces), starts, ends, orig_to_chartok,
                              chartok_to_tok, score / n)
