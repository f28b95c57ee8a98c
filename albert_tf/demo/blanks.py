"""Stage 6, fill in the blank: one whole word masked in held-out sentences; a few guesses shown, 200 scored.

Example (the word chosen in a sentence of pieces):

>>> blank_candidates(["\u2581a", "\u2581socket", "\u2581is", "\u2581clos", "ed", "\u25812", "."])
[1, 2]
"""

from __future__ import annotations

import collections
from typing import List, Tuple

from albert_tf.demo.console import Console
from albert_tf.demo.settings import DemoSettings

BLANK_EXAMPLES = 5  # printed
BLANK_SCORED = 200  # scored
WORD_START = "\u2581"


def blank_candidates(pieces: List[str]) -> List[int]:
    """Indexes of pieces that are a whole word of at least 2 letters (the piece after starts a new word)."""
    return [
        i
        for i, p in enumerate(pieces)
        if p.startswith(WORD_START)
        and p[1:].isalpha()
        and len(p) >= 3
        and (i + 1 == len(pieces) or pieces[i + 1].startswith(WORD_START) or not pieces[i + 1][0].isalnum())
    ]


def blank_examples(sp, eval_file: str, seed: int, limit: int, max_seq_length: int) -> List[Tuple[List[str], int]]:
    """Up to `limit` held-out sentences as (pieces, index of one masked whole word), seeded."""
    import numpy as np

    from pipelines.fileio import read_text
    from pipelines.tokenizer import preprocess_text_py

    rng = np.random.default_rng(seed)
    sentences = [s.strip() for s in read_text(eval_file).splitlines() if 40 <= len(s.strip()) <= 160]
    rng.shuffle(sentences)
    examples = []
    for sentence in sentences:
        pieces = sp.EncodeAsPieces(preprocess_text_py(sentence, True))
        candidates = blank_candidates(pieces)
        if candidates and len(pieces) + 2 <= max_seq_length:
            examples.append((pieces, int(rng.choice(candidates))))
            if len(examples) == limit:
                break
    return examples


def _top5(model, sp, examples, max_seq_length: int):
    """(the model's 5 best pieces per example, the right answers): [CLS] pieces [SEP] rows, one [MASK] each."""
    import numpy as np

    ids = np.zeros((len(examples), max_seq_length), np.int32)
    mask = np.zeros_like(ids)
    answers = np.zeros(len(examples), np.int64)
    for row, (pieces, target) in enumerate(examples):
        row_ids = [2] + [sp.PieceToId(p) for p in pieces] + [3]
        answers[row] = row_ids[target + 1]
        row_ids[target + 1] = 4  # [MASK]
        ids[row, :len(row_ids)] = row_ids
        mask[row, :len(row_ids)] = 1
    top = np.zeros((len(examples), 5), np.int64)
    for start in range(0, len(examples), 64):
        rows = slice(start, start + 64)
        logits = model({"input_ids": ids[rows], "input_mask": mask[rows], "segment_ids": np.zeros_like(ids[rows]),
                        "masked_lm_positions": np.array([[t + 1] for _, t in examples[rows]], np.int32)})
        top[rows] = np.argsort(-logits["mlm_logits"].numpy()[:, 0], axis=-1)[:, :5]
    return top, answers


def fill_in_the_blank_stage(settings: DemoSettings, console: Console, model, spm_model_file: str,
                            eval_file: str) -> dict:
    """Stage 6: prints a few guesses; returns how often the model was right.

    Returns:
        dict with sentences, top1 and top5 (answers at rank 1 / in the top 5)
        and distinct_top1 (different first guesses: 1 means the model answers
        the same piece whatever the context).
    """
    import sentencepiece as spm

    console.stage(6, "fill in the blank", "one whole word masked in held-out sentences")
    sp = spm.SentencePieceProcessor(model_file=spm_model_file)
    examples = blank_examples(sp, eval_file, settings.random_seed, BLANK_SCORED, settings.max_seq_length)
    top, answers = _top5(model, sp, examples, settings.max_seq_length)

    def word(piece_id) -> str:
        return sp.IdToPiece(int(piece_id)).replace(WORD_START, "") or "(space)"

    for (pieces, target), guesses in zip(examples[:BLANK_EXAMPLES], top):
        masked_text = "".join(p if i != target else WORD_START + "[MASK]" for i, p in enumerate(pieces))
        console.block([masked_text.replace(WORD_START, " ").strip(),
                       f"    answer: {pieces[target].replace(WORD_START, '')} | model's top 5: "
                       + ", ".join(word(t) for t in guesses)])
    n = len(examples)
    top1 = int((top[:, 0] == answers).sum())
    top5 = int((top == answers[:, None]).any(axis=1).sum())
    first_guesses = collections.Counter(int(t) for t in top[:, 0])
    favourite = first_guesses.most_common(1)[0][0] if n else 0
    common = ", ".join(f"{sp.IdToPiece(t).replace(WORD_START, '')!r} x{c}" for t, c in first_guesses.most_common(3))
    console.say("Fill-in-the-blank on %d held-out sentences (one whole word masked): the answer first %d times "
                "(%.1f%%; always answering %r would score %d), in the top 5 %d times (%.1f%%); %d different "
                "first guesses (most common: %s).", n, top1, 100.0 * top1 / max(n, 1),
                sp.IdToPiece(favourite).replace(WORD_START, ""), int((answers == favourite).sum()), top5,
                100.0 * top5 / max(n, 1), len(first_guesses), common)
    return {"sentences": n, "top1": top1, "top5": top5, "distinct_top1": len(first_guesses)}
