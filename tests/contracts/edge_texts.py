"""The shared edge texts of the contract matrix: every export is compared with the library on these.

Plain strings (`TEXTS`, `PAIRS`, `QUESTIONS`, `CONTEXTS`, `FILL_MASK`, `CHOICES`)
are what every SavedModel must answer as the library does; `HOSTILE` are
requests that must not break a server (invalid UTF-8, NUL and control
characters, a 2 MB word, emoji / CJK / combining marks, plus `big_batch`).
"""

from typing import List

LONG = "Ka lo mi ten ser, qua vi don. " * 40  # far longer than the tiny models' 32 pieces

TEXTS = [
    "The quick brown fox ka lo.",
    "",
    "   \t  ",
    "Ka Café naïve résumé ÀÉÎ",  # case and accents
    "中文的句子很好",  # CJK: outside the tiny vocabulary
    "emoji 😀🎉 ok",
    "ka  lo\u00a0mi\tten   ser",  # extra and non-ASCII whitespace
    "e\u0301 combining a\u0308 o\u0302",
    LONG,
]
PAIRS = ["ten ser qua", "vi don", "", "Crème brûlée", "更多中文", "🙂", "ka\u3000lo", "x", LONG]

# Span QA: contexts with case, accents, CJK, emoji, characters outside the vocabulary and extra whitespace.
QUESTIONS = ["what is ka?", "", "where is 中文?", "Ka lo?", "who?", "x " * 40, "qua?"]
CONTEXTS = [
    "Ka Café 中文 Lo",
    "😀 ka ÀÉÎ naïve lo mi",
    "ka  lo mi ten ser qua",
    "Ka lo MI ten. Ser qua, vi don!",
    "",
    "ten ser qua vi don ka lo mi " * 8,  # several windows
    "vi don ✓ ka ™ lo",
]

FILL_MASK = ["the [MASK] of ka [MASK] lo.", "no mask here", "[MASK]", "", "Ka [MASK] Café 中文", "[MASK][MASK] end",
             LONG + " [MASK]"]
CHOICES = [["ka lo", "mi ten", "ser"], ["", "😀", "qua vi don"], ["Café", "中文", "c"], [LONG, "x", "y"],
           ["a", "", "b"], ["ka", "lo", "mi"], ["vi", "don", "ka lo"]]

# Requests that must not break a server; bytes, since some are not UTF-8.
TWO_MB_WORD = b"ka" * 1_000_000
HOSTILE: List[bytes] = [
    b"ka \xff\xfe lo \xc3",  # invalid UTF-8 (a stray byte, a cut sequence)
    b"ka\x00lo \x01\x07\x1b mi\x7f",  # NUL and control characters
    b"ka\x85lo",  # a stray 0x85 (NEL in Latin-1)
    TWO_MB_WORD,
    "😀🎉 中文 e\u0301\u0302\u0303 \u200b\u200d\ufeff".encode("utf-8"),  # emoji, CJK, combining marks, zero widths
    b"",
]
BIG_BATCH = 5000


def big_batch() -> List[str]:
    """5,000 short texts (one request)."""
    words = ["ka", "lo", "mi", "ten", "ser", "qua", "vi", "don", "中", "😀"]
    return [" ".join(words[(i + k) % len(words)] for k in range(1 + i % 5)) for i in range(BIG_BATCH)]
