"""`export_openvino`: an OpenVINO IR that OpenVINO Model Server serves (the [openvino] extra).

OpenVINO Model Server (OVMS) reads a model repository laid out as TF
Serving's: `<repository>/<model_name>/<version>/` holding one `model.xml` +
`model.bin`; this writes `export_dir/<version>/model.xml` (export_dir is the
model's folder, as for the SavedModel). OVMS speaks TF Serving's REST and
gRPC API, so `POST /v1/models/<model_name>:predict` with
`{"instances": [{"text": "..."}]}` is the same request as for the SavedModel.

The graph is made from the float32 ids signature (`serve_token_ids` of
`export_saved_model(..., text_signatures=False)`, converted by OpenVINO's
TensorFlow frontend; a mixed-precision model is exported from a float32 copy
with the same weights: the frontend rejects bfloat16 constants, and the
OpenVINO CPU plugin picks bf16 itself where the CPU has it). Inputs
`input_ids`, `input_mask`, `segment_ids` (int32 [batch, seq]); outputs as the
SavedModel's (encoder: `pooled_output`, `sequence_output`, `input_mask`).
By default the dense layers run on the real tokens only (`pack_tokens`,
`albert_tf.layers.token_packing`): a batch of mixed-length text does no work
on its padding (on an AMX CPU, random batches of real sentences: about 1.7x the
padded model's rate, `bench/results/performance_notes.md`), and
`sequence_output` is 0 at padding positions.

With text (the default; see TEXT_HEADS) the model's input is instead `text` (string
[batch]): an openvino-tokenizers tokenizer built from the same SentencePiece
model, with the original's normalisation written as its normalisation steps
(Python's whitespace collapsed to one space and stripped, NFKD, characters of
non-zero canonical combining class dropped, lower-casing; "xlnet" also turns
`` and '' into "), then SentencePiece (the model's own normaliser, as
tensorflow-text's op), truncation to max_seq_length - 2 pieces and
`[CLS] ... [SEP]`, connected to the ids graph (segment_ids all 0). It answers
as the SavedModel's `serving_default` except where `TEXT_DIFFERENCES` says.
`text_pair` is not served: pairs go through the ids model
(`text_signatures=False`), and the text model of a classifier trained on text
pairs (task_config.json's `"text_pairs": true`) is refused in one line naming
that flag (it would answer single texts it never saw). The normalisation runs
in the original's order (`_unmerged_normalization`), lower-casing with
`tf.strings.lower`'s own mapping and final sigma (`_lower_case_steps`); on every
BMP code point in "ka X", "ka X lo" and "X" the text model's ids are the
SavedModel's (`SWEEP_DIFFERENCES`, tested with a vocabulary that has a piece for
every character those code points normalise to, tests/script_vocab.py).
An empty batch answers with no rows (`openvino_graph.answers_empty_batches`).

A classifier of two or more classes also answers `label` (string [batch]), and
every export writes the SavedModel's assets beside model.xml
(`<version>/assets/`: spm.model, albert_config.json, task_config.json,
label_names.txt, preprocessing.json saying `"format": "openvino"`).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from typing import Any, Optional

OPENVINO_HEADS = ("encoder", "classifier")
# Heads with the text model. A classifier traced with its buckets of rows (pack_tokens=False: a While loop)
# and connected to the tokenizer fails in the OpenVINO 2026.4 CPU plugin at inference (Broadcast shape check
# inside the Loop); packed tokens (the default) need no loop.
TEXT_HEADS = ("encoder", "classifier")
MODEL_FILE = "model.xml"
# Where the text model's ids may differ from the SavedModel's serving_default, by name. Each entry is
# reproduced by tests/albert_tf/test_openvino_export.py (test_text_difference_is_still_reproduced): an entry
# without a reproduction there, or one whose difference went away, fails it.
TEXT_DIFFERENCES = {
    "long_text":
        "Texts longer than max_seq_length * 64 characters: the SavedModel first cuts each text to that many "
        "characters (bounded work for huge requests), the OpenVINO tokenizer normalises the whole text; the ids "
        "differ only when the first max_seq_length pieces span more characters than that (long runs of "
        "whitespace or combining marks).",
    "literal_special_pieces":
        "Texts holding the literal strings \"<unk>\" or \"<pad>\": the OpenVINO tokenizer's unigram model reads "
        "each as one piece (the <unk> or <pad> id); SentencePiece never makes those pieces from text and tokenizes "
        "the characters.",
    "digit_comma_pieces":
        "With a vocabulary holding pieces of a digit then a comma (\"▁1,\"): the SavedModel splits such a piece "
        "as the original's encode_pieces does (\"▁1\" \",\"), the OpenVINO tokenizer keeps it; "
        "export_openvino logs a warning for such vocabularies.",
    "invalid_utf8":
        "Text that is not valid UTF-8 (possible over gRPC, never in JSON): the SavedModel drops the invalid bytes, as "
        "the original's convert_to_unicode does; the OpenVINO tokenizer reads a stray byte as a word break, and "
        "openvino-tokenizers 2026.4 crashes the process (SIGSEGV) within a few dozen random strings of stray bytes "
        "(its UTF8Validate step crashes too, in either mode); send valid UTF-8.",
    "numpy_trailing_nul":
        "From Python, a NUL at the end of a text passed as a numpy string array never reaches the model (numpy drops "
        "trailing NULs); the model itself reads it as the SavedModel does (a <unk> piece).",
}
# (template, do_lower_case) -> the BMP code points X (surrogates skipped) where the text model's ids differ from
# the SavedModel's on template.format(X), for the templates "ka {}", "ka {} lo" and "{}", with a vocabulary that
# knows every character (tests/script_vocab.py): none. The sweep in
# tests/albert_tf/test_openvino_export.py fails on a new difference and on a listed one that went away.
SWEEP_DIFFERENCES = {}


def export_openvino(model: Any, export_dir: str, *, head: Optional[str] = None, version: Optional[int] = None,
                    max_seq_length: Optional[int] = None, spm_model_file: Optional[str] = None,
                    do_lower_case: Optional[bool] = None, normalization: Optional[str] = None,
                    text_signatures: bool = True, label_names=None, pack_tokens: bool = True,
                    quantize: Optional[str] = None, calibration=None, dev=None,
                    max_accuracy_drop: Optional[float] = None, target_cpu: Optional[str] = None) -> str:
    """Writes `model` as an OpenVINO IR to export_dir/<version>/model.xml (+ model.bin) and assets/.

    Args:
        model: an `AlbertEncoder` or `AlbertClassifier` (OPENVINO_HEADS).
        export_dir, head, version, max_seq_length, spm_model_file,
        do_lower_case, normalization, label_names: as `export_saved_model`
            (label_names: the `label` output's names and
            assets/label_names.txt).
        text_signatures: True (TEXT_HEADS only): the model takes `text`
            (string [batch]), with the tokenizer inside; False: `input_ids`,
            `input_mask`, `segment_ids`.
        pack_tokens: True: the dense layers run on the real tokens only
            (`AlbertEncoder.inference_packs_tokens`; a classifier's buckets of
            rows are then not used): mixed-length batches skip the padding's
            work, and `sequence_output` is 0 at padding positions. False:
            every position is computed, as the SavedModel does.
        quantize: None (float32 weights) or "int8": NNCF's post-training
            quantization calibrated on `calibration` (`albert_tf.export.int8`).
        calibration: an `int8.TextSet` (needed for int8).
        dev: an `int8.TextSet` the float and int8 models both answer (with
            labels: accuracy, checked against max_accuracy_drop); None: the
            calibration texts (agreement only).
        max_accuracy_drop: points the int8 model may lose on labelled dev
            texts (default `int8.DEFAULT_MAX_ACCURACY_DROP`); past it the
            export is refused and nothing is written.
        target_cpu: the CPU kind the graph's form is chosen for
            (`albert_tf.export.openvino_form`: "avx2", "avx512",
            "avx512-bf16", "amx", "other"); None: this machine's. The model
            answers the same on any CPU; it runs fastest on its kind.

    Returns:
        The version folder written.

    Raises:
        ValueError: a head OpenVINO's export does not cover, or text for a
            head outside TEXT_HEADS (or a classifier's text with
            pack_tokens=False).
        FileExistsError: export_dir/version exists already.
    """
    from albert_tf.export.heads import _resolve_head, head_of
    from albert_tf.export.openvino_form import target_kind, tracing_for_openvino

    kind = target_kind(target_cpu)
    if quantize:
        from albert_tf.export import int8

        int8.check_request(quantize, calibration, dev, getattr(model, "text_pairs", None))

    if text_signatures and head in (None, "classifier") and head_of(model) == "classifier":
        _refuse_pair_classifier_text(model)  # before any work, and without the [openvino] extra

    import openvino as ov

    from albert_tf.export import openvino_graph
    from albert_tf.export.saved_model import _make_preprocessor, export_saved_model
    from albert_tf.export.versions import _choose_version, release_version

    head = _resolve_head(model, head)
    if head not in OPENVINO_HEADS:
        raise ValueError(f"--format=openvino exports the heads {OPENVINO_HEADS}, not {head!r} (its outputs "
                         "include strings or ragged decoding that the ids graph cannot hold); use the SavedModel.")
    if text_signatures and head not in TEXT_HEADS:
        raise ValueError(f"--format=openvino: head {head!r} is exported with ids inputs only (text_signatures=False / "
                         f"--notext_signatures); the text model covers {TEXT_HEADS}.")
    if text_signatures and head != "encoder" and not pack_tokens:
        raise ValueError(f"--format=openvino: the {head} text model needs pack_tokens=True (with its buckets of "
                         "rows, a While loop, OpenVINO's CPU plugin fails behind the tokenizer); or export ids "
                         "inputs only (text_signatures=False).")
    model = float32_copy(model)
    _, pre = _make_preprocessor(model, spm_model_file, max_seq_length, do_lower_case, normalization)
    work = tempfile.mkdtemp(prefix="albert-openvino-")
    try:
        # OpenVINO turns the weights into constants: trace the layers in the forms it runs fastest on `kind`.
        with tracing_for_openvino(kind, quantized=bool(quantize)), _packed_tokens(model, pack_tokens):
            saved = export_saved_model(model, work, head=head, version=1, text_signatures=False,
                                       freeze_weights=False, label_names=label_names, max_seq_length=max_seq_length,
                                       spm_model_file=spm_model_file, do_lower_case=do_lower_case,
                                       normalization=normalization)
        ir = ov.convert_model(saved)
        openvino_graph.share_equal_constants(ir)  # one node per shared weight, as NNCF needs it (int8)
        ir = _numeric_outputs(ir)
        ir.set_rt_info(kind, ["albert_tf", "target_cpu"])
        if quantize:
            ir, cost = int8.quantize_and_measure(ir, pre, head, calibration, dev, max_accuracy_drop)
        if text_signatures:
            _warn_on_resplit(pre)
            ir = openvino_graph.answers_empty_batches(_with_tokenizer(ir, pre))
        labels = openvino_graph.saved_label_names(saved)
        if labels:  # a classifier of two or more classes: the SavedModel's `label` output
            ir = openvino_graph.with_label(ir, labels)
        version = _choose_version(export_dir, version)
        final_dir = os.path.join(export_dir, str(version))
        tmp_dir = os.path.join(work, "ir")
        ov.save_model(ir, os.path.join(tmp_dir, MODEL_FILE), compress_to_fp16=False)
        openvino_graph.copy_assets(saved, tmp_dir, text_input=text_signatures, pack_tokens=pack_tokens)
        if quantize:
            int8.write_report(tmp_dir, cost, calibration)
        publish_folder(tmp_dir, final_dir)
    finally:
        shutil.rmtree(work, ignore_errors=True)
        release_version(export_dir, version)  # the folder is in place (or the export failed)
    return final_dir


def _refuse_pair_classifier_text(model) -> None:
    """The text model takes one `text`: a classifier trained on text pairs is refused (its ids model serves
    pairs); one that does not say (saved before task_config.json's "text_pairs") is exported with a warning.

    Raises:
        ValueError: the classifier records `text_pairs` True.
    """
    from absl import logging

    from albert_tf.export.base import _task_config

    pairs = getattr(model, "text_pairs", None)
    if pairs is None:
        pairs = _task_config(model).get("text_pairs")
    if pairs:
        raise ValueError("--format=openvino: this classifier was trained on text pairs (task_config.json "
                         "\"text_pairs\": true) and the OpenVINO text model takes one text; export ids inputs "
                         "(--notext_signatures / text_signatures=False) and pack [CLS] text [SEP] text_pair [SEP] "
                         "with segment_ids 1 on the pair, or use the SavedModel's serve_text_pair.")
    if pairs is None:
        logging.warning("The classifier does not record whether it was trained on text pairs (task_config.json "
                        "has no \"text_pairs\"): the OpenVINO text model takes one text; for a pair model export "
                        "ids inputs (--notext_signatures).")


def publish_folder(local_dir: str, final_dir: str) -> None:
    """Moves the finished local folder `local_dir` to `final_dir`, local or a
    URL (gs://...). OpenVINO writes local files only, so a remote export is
    first copied through tf.io.gfile into a hidden temporary folder, then its
    files are renamed into `final_dir` one by one with model.xml last, so a
    server that finds model.xml finds the whole model (object stores rename a
    folder file by file anyway).

    Raises:
        FileExistsError: `final_dir` exists (another export took the version).

    Example:
    >>> import tempfile
    >>> import tensorflow as tf
    >>> src = tempfile.mkdtemp()
    >>> from pipelines.fileio import atomic_write
    >>> with atomic_write(os.path.join(src, MODEL_FILE)) as f:
    ...     _ = f.write("<net/>")
    >>> publish_folder(src, "ram://doctest-openvino/1")
    >>> tf.io.gfile.listdir("ram://doctest-openvino/1")
    ['model.xml']
    """
    import tensorflow as tf

    from albert_tf.export.versions import publish, remove_staging, staging_name

    parent = os.path.dirname(final_dir.rstrip("/"))
    tf.io.gfile.makedirs(parent)
    if tf.io.gfile.exists(final_dir):
        raise FileExistsError(f"Export version {final_dir!r} appeared while exporting; not overwritten.")
    if "://" not in final_dir:
        shutil.move(local_dir, final_dir)
        return
    staging = staging_name(final_dir)
    names = [os.path.relpath(os.path.join(root, name), local_dir)  # this process's temporary folder
             for root, _, files in os.walk(local_dir) for name in files]
    try:
        for name in names:
            tf.io.gfile.makedirs(os.path.dirname(os.path.join(staging, name)))
            tf.io.gfile.copy(os.path.join(local_dir, name), os.path.join(staging, name))
        publish(staging, final_dir, last=MODEL_FILE)  # file by file, model.xml last
    finally:
        remove_staging(staging)


@contextlib.contextmanager
def _packed_tokens(model, pack: bool):
    """Traces `model` with its encoder packing tokens (and no buckets of rows) when `pack`."""
    encoder = getattr(model, "encoder", model)
    saved = encoder.inference_packs_tokens, getattr(model, "inference_rows_per_bucket", None)
    if pack:
        encoder.inference_packs_tokens = True
        if saved[1] is not None:
            model.inference_rows_per_bucket = None
    try:
        yield
    finally:
        encoder.inference_packs_tokens = saved[0]
        if saved[1] is not None:
            model.inference_rows_per_bucket = saved[1]


def _warn_on_resplit(pre) -> None:
    from absl import logging

    from pipelines.tokenizer import SentencePieceVocab

    if SentencePieceVocab.from_proto(pre.spm_model_proto).needs_resplit():
        logging.warning("The SentencePiece model has pieces of a digit then a comma: the OpenVINO text model "
                        "keeps them whole where the SavedModel splits them (albert_tf.export.openvino."
                        "TEXT_DIFFERENCES); send ids (--notext_signatures) where that matters.")


def float32_copy(model):
    """The model itself when it computes in float32, else a float32 copy with its weights."""
    if getattr(model.dtype_policy, "compute_dtype", "float32") == "float32":
        return model
    config = model.get_config()
    config["dtype"] = "float32"
    copy = type(model).from_config(config)
    copy.set_weights(model.get_weights())
    return copy


def _numeric_outputs(ir):
    """The IR without the converted string outputs (the classifier's `label`, which OpenVINO's CPU plugin
    cannot compute as converted; `openvino_graph.with_label` adds it back in a form it runs)."""
    import openvino as ov

    for out in list(ir.outputs):
        if out.get_element_type() == ov.Type.string:
            ir.remove_result(out.get_node())
    return ir


def _normalizer_steps(pre, precompiled) -> list:
    """The original's preprocess_text as Hugging Face tokenizer.json normalizer steps."""
    from pipelines import tokenizer as sp_tokenizer

    # Stripped as one space at either end: a Strip step would strip OpenVINO's \s, which also holds U+180E
    # and NUL (Python's str.strip() does not).
    steps = [{"type": "Replace", "pattern": {"Regex": sp_tokenizer._WHITESPACE_RE}, "content": " "},
             {"type": "Replace", "pattern": {"Regex": "^ | $"}, "content": ""}]
    if pre.normalization == "xlnet":
        steps += [{"type": "Replace", "pattern": {"String": "``"}, "content": '"'},
                  {"type": "Replace", "pattern": {"String": "\'\'"}, "content": '"'}]
    steps += [{"type": "NFKD"},
              {"type": "Replace", "pattern": {"Regex": sp_tokenizer.combining_marks_regex()}, "content": ""}]
    if pre.do_lower_case:
        steps.append({"type": "Lowercase"})
    return steps + ([precompiled] if precompiled else [])


def _hf_tokenizer(pre):
    """Hugging Face's ALBERT tokenizer of the SentencePiece model, with our normalisation and no special-token split."""
    import json

    import tensorflow as tf
    import tokenizers
    import transformers

    folder = tempfile.mkdtemp(prefix="albert-openvino-spm-")
    try:
        with tf.io.gfile.GFile(os.path.join(folder, "spiece.model"), "wb") as f:
            f.write(pre.spm_model_proto)
        hf = transformers.AlbertTokenizer.from_pretrained(folder, do_lower_case=pre.do_lower_case)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    spec = json.loads(hf.backend_tokenizer.to_str())
    steps = spec["normalizer"]["normalizers"] if spec["normalizer"]["type"] == "Sequence" else [spec["normalizer"]]
    precompiled = next((s for s in steps if s["type"] == "Precompiled"), None)
    spec["normalizer"] = {"type": "Sequence", "normalizers": _normalizer_steps(pre, precompiled)}
    hf._tokenizer = tokenizers.Tokenizer.from_str(json.dumps(spec))
    return hf


def _tokenizer_model(pre):
    """openvino-tokenizers' model: text [B] -> input_ids, attention_mask (int32 [B, T]).

    Built as `convert_tokenizer` builds it, less the step that reads special
    tokens written in the text ("[MASK]", "<unk>") as their ids: the
    SavedModel tokenizes such text as any other.
    """
    import openvino as ov
    from openvino_tokenizers.hf_parser import TransformersTokenizerPipelineParser
    from openvino_tokenizers.tokenizer_pipeline import SpecialTokensSplit
    from openvino_tokenizers.utils import TokenzierConversionParams, change_outputs_type

    hf = _hf_tokenizer(pre)
    hf.model_max_length = int(pre.max_seq_length)
    params = TokenzierConversionParams(max_length=int(pre.max_seq_length), truncation=True)
    pipeline = TransformersTokenizerPipelineParser(hf, params).parse()
    pipeline.steps = [_never_split() if isinstance(step, SpecialTokensSplit) else step for step in pipeline.steps]
    pipeline.finalize()
    pipeline.steps = _unmerged_normalization(pipeline.steps, pre)
    graph = pipeline.get_tokenizer_ov_subgraph()
    outputs = []
    for name in ("input_ids", "attention_mask"):
        out = next(o for o in graph.outputs if name in o.get_names())
        outputs.append(out)
    model = ov.Model(outputs, graph.get_parameters(), "albert_tokenizer")
    model.add_sinks(graph.get_sinks())
    return change_outputs_type(model, ov.Type.i32)


def _unmerged_normalization(steps: list, pre) -> list:
    """The finalized pipeline's steps with the normalisation in the original's order, then SentencePiece's.

    openvino-tokenizers merges NFKD, lower-casing and the model's charsmap
    into one CharsMapNormalization, placed first; that op then applies NFKD
    and lower-casing but not the charsmap (control characters, ZWSP, BOM,
    U+FFFD stay and become `▁ <unk>`), and the combining marks are dropped
    after it, which leaves the spaces it frees (a trailing `▁`). Here the
    merged step becomes NFKD, combining marks dropped, lower-casing, then
    the charsmap with SentencePiece's whitespace rule (runs of spaces become
    one, leading and trailing ones go), as the SavedModel does. Lower-casing
    is `tf.strings.lower`'s mapping (`_lower_case_steps`), not
    openvino-tokenizers' case folding (which also, in the NFKD step, turns
    U+0345 into a letter before the marks are dropped).
    The text model's tokenizer costs about 20% more than with the merged step.

    Raises:
        RuntimeError: the pipeline does not have the form this rewrites
            (another openvino-tokenizers version).
    """
    from openvino_tokenizers import tokenizer_pipeline as tp

    from pipelines import tokenizer as sp_tokenizer

    merged = [i for i, step in enumerate(steps) if isinstance(step, tp.CharsmapStep)]
    combining = [i for i, step in enumerate(steps) if isinstance(step, tp.RegexNormalizationStep)
                 and step.regex_search_pattern == sp_tokenizer.combining_marks_regex()]
    if len(merged) != 1 or len(combining) != 1 or combining[0] < merged[0]:
        raise RuntimeError("openvino-tokenizers built a pipeline of another form than expected: "
                           f"{[type(step).__name__ for step in steps]}; the text model's normalisation "
                           "cannot be put in the original's order.")
    charsmap = steps[merged[0]].charsmap
    ordered = [tp.CharsmapStep(normalization_form="nfkd", remove_extra_whitespaces=False), steps[combining[0]]]
    if pre.do_lower_case:
        ordered += _lower_case_steps()
    ordered.append(tp.CharsmapStep(charsmap=charsmap, normalization_form=None if charsmap else "identity",
                                   remove_extra_whitespaces=True))
    rest = [step for i, step in enumerate(steps) if i not in (merged[0], combining[0])]
    return rest[:merged[0]] + ordered + rest[merged[0]:]


def _lower_case_steps() -> list:
    """`tf.strings.lower` as openvino-tokenizers steps: word-final Σ -> ς (a regex), then each character's
    lower-case form (a charsmap), both read from tf.strings.lower itself (`albert_tf.export.lowercase`).

    openvino-tokenizers' own lower-casing (CharsmapStep case_fold=True) is simple case folding: it turned ς into σ
    and lower-case Cherokee into upper-case (183 BMP code points gave other ids than the SavedModel's).
    """
    from openvino_tokenizers import tokenizer_pipeline as tp

    from albert_tf.export import lowercase

    return [tp.RegexNormalizationStep(regex_search_pattern=lowercase.final_sigma_pattern(),
                                      replace_term=lowercase.FINAL_SIGMA_REPLACEMENT),
            tp.CharsmapStep(charsmap=lowercase.lower_case_charsmap(), normalization_form=None,
                            remove_extra_whitespaces=False)]


def _never_split():
    """The special-token split step with a pattern that matches nothing (the steps after it
    take its output's form)."""
    from openvino_tokenizers import tokenizer_pipeline as tp

    class NoSpecialTokensSplit(tp.SpecialTokensSplit):
        def get_ov_subgraph(self, input_nodes):
            nodes = list(input_nodes) + list(tp.create_string_constant_node(r"([^\s\S])"))
            return tp._get_factory().create("SpecialTokensSplit", nodes).outputs()

    return NoSpecialTokensSplit()


def _with_tokenizer(ir, pre):
    """tokenizer -> ids graph: one model with the string input `text` (segment_ids all 0)."""
    import openvino as ov
    import openvino.opset15 as ops
    from openvino_tokenizers import connect_models

    segments = next(p for p in ir.get_parameters() if "segment_ids" in p.output(0).get_names())
    ids = next(p for p in ir.get_parameters() if "input_ids" in p.output(0).get_names())
    zeros = ops.multiply(ids, ops.constant(0, ov.Type.i32))
    for target in list(segments.output(0).get_target_inputs()):
        target.replace_source_output(zeros.output(0))
    ir.remove_parameter(segments)
    tokenizer = _tokenizer_model(pre)
    combined = connect_models(tokenizer, ir, name_map={"input_ids": "input_ids", "attention_mask": "input_mask"})
    combined.add_sinks(tokenizer.get_sinks())  # its state (ReadValue/Assign), which connect_models leaves out
    combined.input(0).get_tensor().set_names({"text"})
    for out in combined.outputs:
        if "attention_mask" in out.get_names():
            out.get_tensor().set_names({"input_mask"})
    return combined
