"""SQuAD reader, features and post-processing on hand-made examples.

The post-processing tests build the logits by hand, so the expected answer
string is known without a model.
"""

import json
import os

import numpy as np
import pytest
import tensorflow as tf

from pipelines import tokenizer
from pipelines.finetune import squad
from pipelines.finetune.squad import alignment as squad_alignment
from pipelines.finetune.squad import features as squad_features
from pipelines.finetune.sp_text import PieceText

CONTEXT = "The Kalo-Mi tower, built in 1889."
ANSWER = "Kalo-Mi tower"


@pytest.fixture(scope="module")
def text(vocab):
    return PieceText(vocab, do_lower_case=True)


def _example(qid="q1", context=CONTEXT, answer=ANSWER, question="What was built?",
             impossible=False):
    start = -1 if impossible else context.index(answer)
    return squad.SquadExample(qid, question, context, "" if impossible else answer, start,
                              impossible, [] if impossible else [answer])


def test_piece_ids_match_the_in_graph_tokenizer(vocab, text):
    lines = ["The Kalo-Mi tower, built in 1889.", "Café  naïve ``quoted'' 1, 2019,",
             "ka lo mi ten ser qua vi don"]
    graph = vocab.make_tokenizer().tokenize(tokenizer.preprocess_text(tf.constant(lines), True))
    assert [text.encode_ids(line) for line in lines] == graph.to_list()


def test_alignment_maps_pieces_back_to_original_characters(text):
    context = "Café  KALO mi-ten,\tser."
    alignment = squad.align_paragraph(context, text)
    assert alignment.coverage > 0.8
    pieces = text.encode_pieces(text.normalize(context))
    for piece, first, last in zip(pieces, alignment.tok_start_to_orig, alignment.tok_end_to_orig):
        surface = piece.replace(tokenizer.SPIECE_UNDERLINE, "")
        original = context[first:last + 1].strip()
        if surface:  # the characters the piece came from, accents and case undone
            assert text.normalize(original) == surface, (piece, original)
    # "é" (one character) is matched by the piece text "e".
    e_piece = [i for i, p in enumerate(pieces) if p.endswith("e")][0]
    assert context[alignment.tok_end_to_orig[e_piece]] == "é"


def test_identity_fast_path_equals_the_lcs(text):
    context = "The Kalo-Mi tower, Café built in 1889 by mi ten ser."
    orig = [text.normalize_char(c) for c in context]
    tok_text = "".join(text.encode_pieces(text.normalize(context))).replace(
        tokenizer.SPIECE_UNDERLINE, " ")
    fast = squad_alignment._identity_alignment(orig, tok_text)
    assert fast is not None
    assert fast == squad_alignment._lcs_alignment(orig, tok_text)
    # Collapsed whitespace: the fast path does not apply, the LCS does.
    spaced = [text.normalize_char(c) for c in context.replace(" ", "  ")]
    assert squad_alignment._identity_alignment(spaced, tok_text) is None


def test_alignment_below_80_percent_is_skipped_and_counted(text):
    # NFKD turns each ligature into two letters: no character matches one to one.
    bad = squad.SquadExample("bad", "q?", "\ufb01\ufb01\ufb01 \ufb01\ufb01", "", -1, True, [])
    assert squad.align_paragraph(bad.context_text, text) is None
    features = squad.convert_examples_to_features([bad, _example()], text, 64, 16, 8,
                                                  is_training=True)
    assert features.skipped_alignment == 1
    assert set(features.example_index.tolist()) == {1}


def test_doc_spans_and_max_context():
    # 10 pieces, windows of 4, stride 3: starts 0, 3, 6; stride 5: 0, 4, 8 (last shorter).
    assert squad_features.doc_spans(10, 4, 3) == [(0, 4), (3, 4), (6, 4)]
    assert squad_features.doc_spans(10, 4, 5) == [(0, 4), (4, 4), (8, 2)]
    spans = [(0, 4), (3, 4), (6, 4)]
    # piece 3: min(3, 0) + .04 in window 0 ties min(0, 3) + .04 in window 1: the first wins.
    assert squad_features.is_max_context(spans, 0, 3) and not squad_features.is_max_context(spans, 1, 3)
    assert squad_features.is_max_context(spans, 1, 4)  # min(1, 2) = 1 beats window 0 (not inside)
    assert squad_features.is_max_context(spans, 1, 6)


def test_training_features_answer_positions(text):
    example = _example()
    features = squad.convert_examples_to_features([example], text, max_seq_length=64,
                                                  doc_stride=16, max_query_length=8,
                                                  is_training=True)
    assert len(features) == 1
    query = text.encode_ids(example.question_text)
    assert len(query) > 8
    query = query[:8]  # max_query_length
    ids = features.input_ids[0].tolist()
    # [CLS] question [SEP] context [SEP] then padding.
    doc = text.encode_ids(CONTEXT)
    assert ids[:len(query) + 2 + len(doc) + 1] == [2] + query + [3] + doc + [3]
    assert features.doc_offset[0] == len(query) + 2
    assert features.p_mask[0].tolist() == ([0] + [1] * (len(query) + 1) + [0] * len(doc) + [1]
                                           + [1] * (64 - len(query) - len(doc) - 3))
    assert features.segment_ids[0].sum() == len(doc) + 1
    start, end = features.start_positions[0], features.end_positions[0]
    offset = features.doc_offset[0]
    # The answer pieces cover exactly the answer's characters (the leading space stripped).
    first = features.tok_start_to_orig[0][start - offset]
    last = features.tok_end_to_orig[0][end - offset]
    assert CONTEXT[first:last + 1].strip() == ANSWER
    assert last == CONTEXT.index(ANSWER) + len(ANSWER) - 1
    assert features.is_impossible[0] == 0


def test_windows_without_the_answer_point_at_cls(text):
    context = "Ka lo mi ten ser qua vi don pra el nu ros tia ge bar " * 2 + "The Kalo-Mi tower."
    example = _example(context=context)
    features = squad.convert_examples_to_features([example], text, max_seq_length=32,
                                                  doc_stride=8, max_query_length=6,
                                                  is_training=True)
    assert len(features) > 2
    has_answer = features.is_impossible == 0
    assert not has_answer[0] and has_answer[-1]
    assert (features.start_positions[~has_answer] == 0).all()
    assert (features.end_positions[~has_answer] == 0).all()
    for row in np.flatnonzero(has_answer):
        offset = features.doc_offset[row]
        first = features.tok_start_to_orig[row][features.start_positions[row] - offset]
        last = features.tok_end_to_orig[row][features.end_positions[row] - offset]
        assert context[first:last + 1].strip() == ANSWER
    # Consecutive windows start doc_stride pieces apart.
    firsts = [int(m[0]) for m in features.tok_start_to_orig]
    doc_starts = squad.align_paragraph(context, text).tok_start_to_orig
    assert firsts == [doc_starts[8 * k] for k in range(len(features))]


def test_impossible_question_and_bad_answers(text):
    impossible = _example(qid="imp", impossible=True)
    # Text "tower" but offset 0: the original trains on the 5 characters at 0 (counted).
    mismatched = squad.SquadExample("mismatched", "q?", CONTEXT, "tower", 0, False, ["tower"])
    outside = squad.SquadExample("outside", "q?", CONTEXT, "tower", len(CONTEXT) - 2, False, ["tower"])
    features = squad.convert_examples_to_features([impossible, mismatched, outside], text, 64, 16, 8,
                                                  is_training=True)
    assert features.skipped_answer == 1 and features.mismatched_answer == 1 and len(features) == 2
    assert (features.start_positions[0], features.end_positions[0]) == (0, 0)
    assert features.is_impossible[0] == 1
    offset = features.doc_offset[1]
    first = features.tok_start_to_orig[1][features.start_positions[1] - offset]
    last = features.tok_end_to_orig[1][features.end_positions[1] - offset]
    assert features.is_impossible[1] == 0 and first == 0 and last >= 4  # the pieces covering CONTEXT[0:5]


def test_max_seq_length_too_small(text):
    with pytest.raises(ValueError, match="max_seq_length=10 leaves no room"):
        squad.convert_examples_to_features([_example()], text, 10, 4, 8)


def _answer_rows(features, text, row, context, answer):
    """Window positions of the pieces that start and end `answer`."""
    offset = features.doc_offset[row]
    start_char = context.index(answer)
    end_char = start_char + len(answer) - 1
    starts = features.tok_start_to_orig[row].tolist()
    ends = features.tok_end_to_orig[row].tolist()
    s = max(i for i, c in enumerate(starts) if c <= start_char)
    e = ends.index(end_char)
    return s + offset, e + offset


def _logits(features, picks):
    """Logits -10 everywhere except the given {row: [(position, value)]}."""
    start = np.full(features.input_ids.shape, -10.0, np.float32)
    end = np.full(features.input_ids.shape, -10.0, np.float32)
    for row, (s_points, e_points) in picks.items():
        for position, value in s_points:
            start[row, position] = value
        for position, value in e_points:
            end[row, position] = value
    return {"start_logits": start, "end_logits": end}


def test_postprocess_returns_the_original_substring(text):
    example = _example()
    features = squad.convert_examples_to_features([example], text, 64, 16, 8)
    s, e = _answer_rows(features, text, 0, CONTEXT, ANSWER)
    # A better-scoring start in the question and an end before the start are invalid.
    outputs = _logits(features, {0: ([(s, 5.0), (1, 9.0), (e + 1, 8.0)], [(e, 5.0), (s - 1, 9.5)])})
    result = squad.postprocess_predictions([example], features, outputs, n_best_size=5)
    assert result.predictions == {"q1": "Kalo-Mi tower"}
    best = result.nbest["q1"][0]
    assert best["text"] == ANSWER and best["start_logit"] == 5.0 and best["end_logit"] == 5.0
    probabilities = [entry["probability"] for entry in result.nbest["q1"]]
    assert sum(probabilities) == pytest.approx(1.0)
    assert probabilities == sorted(probabilities, reverse=True)


def test_postprocess_max_answer_length(text):
    example = _example()
    features = squad.convert_examples_to_features([example], text, 64, 16, 8)
    s, e = _answer_rows(features, text, 0, CONTEXT, ANSWER)
    s2, e2 = _answer_rows(features, text, 0, CONTEXT, "1889")
    # The best pair (s, e2) spans more pieces than allowed; (s2, e2) is next best.
    outputs = _logits(features, {0: ([(s, 9.0), (s2, 4.0)], [(e2, 9.0)])})
    long_ok = squad.postprocess_predictions([example], features, outputs)
    assert long_ok.predictions["q1"] == CONTEXT[CONTEXT.index(ANSWER):CONTEXT.index("1889") + 4]
    short = squad.postprocess_predictions([example], features, outputs,
                                          max_answer_length=e2 - s)
    assert short.predictions["q1"] == "1889"


def test_postprocess_uses_the_window_with_max_context(text):
    context = "ka lo mi ten ser qua vi don pra el nu ros tia ge bar"
    example = _example(context=context, answer="ser")
    query_length = len(text.encode_ids(example.question_text)[:6])
    # Windows of 8 context pieces, stride 2: window 0 = pieces 0-7, window 1 = 2-9.
    features = squad.convert_examples_to_features([example], text, query_length + 11, 2, 6)
    assert [len(m) for m in features.tok_start_to_orig[:2]] == [8, 8]
    # Piece 2: min(2, 5) in window 0 beats min(0, 7) in window 1: not max context in window 1.
    # Piece 6: min(4, 3) in window 1 beats min(6, 1) in window 0 and min(2, 5) in window 2.
    assert not features.token_is_max_context[1][0] and features.token_is_max_context[1][4]
    offset = features.doc_offset[1]
    # Window 1: a high-scoring span at piece 2 (filtered out), a low one at piece 6.
    outputs = _logits(features, {1: ([(offset + 0, 20.0), (offset + 4, 1.0)],
                                     [(offset + 0, 20.0), (offset + 4, 1.0)])})
    result = squad.postprocess_predictions([example], features, outputs)
    piece_text = lambda k: context[features.tok_start_to_orig[1][k]:  # noqa: E731
                                   features.tok_end_to_orig[1][k] + 1].strip()
    assert piece_text(0) != piece_text(4)
    assert result.predictions["q1"] == piece_text(4)


def test_v2_null_score_bert_style_and_threshold(text):
    example = _example()
    features = squad.convert_examples_to_features([example], text, 64, 16, 8)
    s, e = _answer_rows(features, text, 0, CONTEXT, ANSWER)
    # best span 5 + 5 = 10; null (CLS) 6 + 6 = 12: odds 2.
    outputs = _logits(features, {0: ([(s, 5.0), (0, 6.0)], [(e, 5.0), (0, 6.0)])})
    result = squad.postprocess_predictions([example], features, outputs, version_2=True)
    assert result.null_odds["q1"] == pytest.approx(2.0)
    assert result.predictions["q1"] == ""
    assert result.best_non_null["q1"] == ANSWER
    assert result.nbest["q1"][0]["text"] == ""
    assert squad.answers_at_threshold(result.best_non_null, result.null_odds, 2.5) == {"q1": ANSWER}
    above = squad.postprocess_predictions([example], features, outputs, version_2=True,
                                          null_score_diff_threshold=3.0)
    assert above.predictions["q1"] == ANSWER


def test_v2_cls_logits_and_beam_outputs(text):
    example = _example()
    features = squad.convert_examples_to_features([example], text, 64, 16, 8)
    s, e = _answer_rows(features, text, 0, CONTEXT, ANSWER)
    s2, _ = _answer_rows(features, text, 0, CONTEXT, "tower")
    outputs = {  # beam: k = 2 starts, 2 ends each; log-probs
        "start_logits": np.zeros(features.input_ids.shape, np.float32),
        "end_logits": np.zeros(features.input_ids.shape, np.float32),
        "start_top_index": np.array([[s2, s]]), "start_top_log_probs": np.array([[-0.5, -1.0]]),
        "end_top_index": np.array([[[e, 0], [e, 1]]]),
        "end_top_log_probs": np.array([[[-2.0, -0.1], [-0.2, -3.0]]]),
        "cls_logits": np.array([-1.5], np.float32)}
    # (s2, e): -2.5; (s2, 0) invalid; (s, e): -1.2 best; (s, 1) invalid.
    result = squad.postprocess_predictions([example], features, outputs, version_2=True)
    assert result.predictions["q1"] == ANSWER
    assert [n["text"] for n in result.nbest["q1"]] == [ANSWER, "tower"]
    assert result.null_odds["q1"] == pytest.approx(-1.5)
    assert squad.answers_at_threshold(result.best_non_null, result.null_odds, -2.0) == {"q1": ""}


def test_write_predictions_official_format(text, tmp_path):
    example = _example()
    features = squad.convert_examples_to_features([example], text, 64, 16, 8)
    s, e = _answer_rows(features, text, 0, CONTEXT, ANSWER)
    result = squad.postprocess_predictions([example], features,
                                           _logits(features, {0: ([(s, 3.0)], [(e, 3.0)])}))
    paths = squad.write_predictions(result, str(tmp_path))
    with open(paths["predictions"], encoding="utf-8") as f:
        assert json.load(f) == {"q1": ANSWER}
    with open(paths["nbest"], encoding="utf-8") as f:
        assert json.load(f)["q1"][0]["text"] == ANSWER
    assert "null_odds" not in paths


def _write_json(path, data):
    with open(path, "w", encoding="utf-8") as f:
        f.write(data if isinstance(data, str) else json.dumps(data))
    return path


def test_read_squad_examples(tmp_path):
    data = {"version": "v2.0", "data": [{"title": "t", "paragraphs": [{"context": CONTEXT, "qas": [
        {"id": "a", "question": "What?", "answers": [{"text": ANSWER, "answer_start": 4},
                                                     {"text": "tower", "answer_start": 12}]},
        {"id": "b", "question": "Who?", "answers": [], "is_impossible": True}]}]}]}
    path = _write_json(os.path.join(str(tmp_path), "dev.json"), data)
    examples = squad.read_squad_examples(path, is_training=False)
    assert [(e.qas_id, e.answer_text, e.start_char, e.is_impossible, e.gold_answers)
            for e in examples] == [("a", ANSWER, 4, False, [ANSWER, "tower"]),
                                   ("b", "", -1, True, [])]


def test_read_squad_errors(tmp_path):
    bad = _write_json(os.path.join(str(tmp_path), "bad.json"), '{"data": [\n{"paragraphs": ]}')
    with pytest.raises(ValueError, match=f"{bad}:2: malformed JSON"):
        squad.read_squad_examples(bad, is_training=False)
    no_answer = _write_json(os.path.join(str(tmp_path), "train.json"), {"data": [{"paragraphs": [
        {"context": "c", "qas": [{"id": "x1", "question": "?", "answers": []}]}]}]})
    with pytest.raises(ValueError, match="question 'x1' has no answer"):
        squad.read_squad_examples(no_answer, is_training=True)
    not_squad = _write_json(os.path.join(str(tmp_path), "n.json"), {"rows": []})
    with pytest.raises(ValueError, match="no top-level 'data' list"):
        squad.read_squad_examples(not_squad, is_training=False)
