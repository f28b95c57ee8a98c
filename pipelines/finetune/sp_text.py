"""Python-side SentencePiece for the readers that build id features (SQuAD, RACE
lengths, tagging): the same normalisation and ids as the in-graph tokenizer.

Text is normalised with `pipelines.tokenizer.preprocess_text_py`, split into
pieces by the Python `sentencepiece` package, and pieces ending in
"<digit>," are re-split as the original's `encode_pieces` does (the vocabulary's
`resplit` table does the same in the graph). The surface pieces are kept (an
unknown character stays visible for the character alignment) and mapped to ids
with the vocabulary.

Example:

>>> vocab = SentencePieceVocab.from_file("spm.model")        # doctest: +SKIP
>>> text = PieceText(vocab, do_lower_case=True)              # doctest: +SKIP
>>> text.encode_ids("Hello world")                           # doctest: +SKIP
[2243, 126]
"""

from __future__ import annotations

import unicodedata
from typing import List

from pipelines.tokenizer import (DEFAULT_NORMALIZATION, SPIECE_UNDERLINE, SentencePieceVocab, check_normalization,
                                 preprocess_text_py)


class PieceText:
    """Normalised text -> SentencePiece pieces and ids, as the original.

    Args:
        vocab: the checked ALBERT vocabulary (pipelines.tokenizer).
        do_lower_case: lowercase as the model's preprocessor does.
        normalization: "original" or "xlnet", as the model's preprocessor
            (`pipelines.tokenizer.preprocess_text`).
    """

    def __init__(self, vocab: SentencePieceVocab, do_lower_case: bool = True,
                 normalization: str = DEFAULT_NORMALIZATION):
        import sentencepiece as spm

        self.vocab = vocab
        self.do_lower_case = do_lower_case
        self.normalization = check_normalization(normalization)
        self._sp = spm.SentencePieceProcessor()
        self._sp.LoadFromSerializedProto(vocab.model_proto)
        self.cls_id = self._sp.PieceToId("[CLS]")
        self.sep_id = self._sp.PieceToId("[SEP]")
        self.pad_id = self._sp.PieceToId("<pad>")
        self.unk_id = self._sp.unk_id()

    def normalize(self, text: str) -> str:
        """The whole-text normalisation (`preprocess_text_py`)."""
        return preprocess_text_py(text, self.do_lower_case, self.normalization)

    def normalize_char(self, char: str) -> str:
        """One character normalised without whitespace handling (the original's
        `preprocess_text(c, remove_space=False)`, used by the alignment)."""
        out = unicodedata.normalize("NFKD", char)
        out = "".join(c for c in out if not unicodedata.combining(c))
        return out.lower() if self.do_lower_case else out

    def encode_pieces(self, normalized_text: str) -> List[str]:
        """Surface pieces of already-normalised text, digit-comma pieces re-split."""
        pieces = []
        for piece in self._sp.EncodeAsPieces(normalized_text):
            if len(piece) > 1 and piece[-1] == "," and piece[-2].isdigit():
                parts = self._sp.EncodeAsPieces(piece[:-1].replace(SPIECE_UNDERLINE, ""))
                if piece[0] != SPIECE_UNDERLINE and parts and parts[0][0] == SPIECE_UNDERLINE:
                    parts = parts[1:] if len(parts[0]) == 1 else [parts[0][1:]] + parts[1:]
                pieces.extend(parts + [piece[-1]])
            else:
                pieces.append(piece)
        return pieces

    def piece_ids(self, pieces: List[str]) -> List[int]:
        """Vocabulary ids of surface pieces (unknown pieces -> <unk>)."""
        return [self._sp.PieceToId(p) for p in pieces]

    def encode_ids(self, text: str) -> List[int]:
        """Ids of raw text (normalised first), as the model's preprocessor computes them."""
        return self.piece_ids(self.encode_pieces(self.normalize(text)))
