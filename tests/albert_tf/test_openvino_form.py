"""albert_tf.export.openvino_form: each CPU kind's form computes what the model computes, and OpenVINO's CPU
plugin runs the float32 kinds' form with no post-op fused into any matmul (the bfloat16 kinds' form keeps the
GELU fused). The OpenVINO half runs in CI's [openvino] environment and skips elsewhere."""

import os
import re

import keras
import numpy as np
import pytest
import tensorflow as tf

import albert_tf
from albert_tf import cpu
from albert_tf.export import openvino_form

RELATIVE = 1e-5  # float32 against float32, relative to the output's scale


def test_float32_kinds_take_the_gelu_outside_and_bfloat16_kinds_keep_it_fused():
    outside = {k: openvino_form.gelu_outside_matmuls(k) for k in openvino_form.CPU_KINDS}
    assert outside == {"avx2": True, "avx512": True, "avx512-bf16": False, "amx": False, "other": True}
    assert set(cpu.BFLOAT16_KINDS) == {k for k, v in outside.items() if not v}


def test_the_default_is_this_machines_kind_and_an_unknown_kind_is_refused_by_name():
    assert openvino_form.target_kind(None) == cpu.cpu_kind(cpu.cpu_flags())
    assert openvino_form.target_kind("amx") == "amx"
    with pytest.raises(ValueError, match="'avx3'"):
        openvino_form.target_kind("avx3")


def _encoder(hidden_act, seed=3):
    keras.utils.set_random_seed(seed)
    config = albert_tf.AlbertConfig(vocab_size=120, embedding_size=8, hidden_size=24, num_hidden_layers=2,
                                    num_attention_heads=2, intermediate_size=40, max_position_embeddings=64,
                                    hidden_act=hidden_act)
    encoder = albert_tf.AlbertPretrainer(config).encoder
    rng = np.random.default_rng(seed)
    for v in encoder.weights:  # order-1 weights: differences of the forms would show
        v.assign(rng.normal(0.0, 0.3, size=v.shape).astype(np.float32) + (1.0 if "gamma" in v.path else 0.0))
    return encoder


def _ids(batch=3, length=10, seed=0):
    rng = np.random.default_rng(seed)
    ids = rng.integers(5, 120, size=(batch, length)).astype(np.int32)
    mask = np.ones_like(ids)
    mask[1, -4:] = 0
    return {"input_ids": ids, "input_mask": mask, "segment_ids": np.zeros_like(ids)}


def _graph_ops(fn, inputs):
    """The ops of fn's traced graph on `inputs`."""
    return tf.function(fn).get_concrete_function({k: tf.constant(v) for k, v in inputs.items()}).graph.get_operations()


def _ops(fn, inputs):
    return {op.type for op in _graph_ops(fn, inputs)}


@pytest.mark.parametrize("hidden_act", ["gelu", "gelu_exact"])
@pytest.mark.parametrize("kind", ["avx2", "amx"])
def test_each_kinds_form_computes_the_encoders_outputs(kind, hidden_act):
    encoder, ids = _encoder(hidden_act), _ids()
    want = encoder(ids, training=False)
    with openvino_form.tracing_for_openvino(kind):
        got = encoder(ids, training=False)
        ops = _ops(lambda x: encoder(x, training=False)["sequence_output"], ids)
    for name in ("sequence_output", "pooled_output"):
        scale = max(1.0, float(np.max(np.abs(want[name]))))
        assert np.max(np.abs(np.asarray(got[name]) - np.asarray(want[name]))) <= RELATIVE * scale, name
    # The tanh GELU is written as a sigmoid on float32 kinds only; the erf GELU is never rewritten.
    assert ("Sigmoid" in ops) == (kind == "avx2" and hidden_act == "gelu"), ops
    assert bool({"Erf", "Erfc"} & ops) == (hidden_act == "gelu_exact"), ops


def _dense_input_ranks(fn, inputs):
    """The rank of the first input of every matmul by a 2-D kernel (the dense layers) in fn's graph."""
    return [op.inputs[0].shape.rank for op in _graph_ops(fn, inputs)
            if op.type in ("MatMul", "BatchMatMulV2") and op.inputs[1].shape.rank == 2]


@pytest.mark.parametrize("packs_tokens", [False, True])
def test_the_int8_form_computes_the_same_outputs_on_rank3_tokens(packs_tokens):
    """An int8 graph keeps the tokens rank-3 ([1, tokens, hidden]) through every dense layer of the blocks, packed
    or not: same outputs as the 2-D form, including a padded row and an all-padding row."""
    encoder, ids = _encoder("gelu"), _ids(batch=4)
    ids["input_mask"][3, :] = 0
    encoder.inference_packs_tokens = packs_tokens
    want = encoder(ids, training=False)
    plain = _dense_input_ranks(lambda x: encoder(x, training=False)["pooled_output"], ids)
    with openvino_form.tracing_for_openvino("avx512-bf16", quantized=True):
        got = encoder(ids, training=False)
        ranks = _dense_input_ranks(lambda x: encoder(x, training=False)["pooled_output"], ids)
    for name in ("sequence_output", "pooled_output"):
        scale = max(1.0, float(np.max(np.abs(want[name]))))
        assert np.max(np.abs(np.asarray(got[name]) - np.asarray(want[name]))) <= RELATIVE * scale, name
    # 2 layers x 6 dense layers (q, k, v, attention output, FFN in and out) go from 2-D to rank-3 inputs; the
    # embedding projection (Keras's Dense: a 2-D MatMul in TensorFlow's graph) and the pooler stay 2-D.
    assert sorted(plain) == [2] * (2 * 6 + 2) and sorted(ranks) == [2] * 2 + [3] * (2 * 6), (plain, ranks)


# ------------------------------------------------------------------ OpenVINO
def _fused_into_matmuls(ov, path):
    """The names of the ops OpenVINO's CPU plugin fused into each FullyConnected node (its MatMul and bias add
    left out)."""
    core = ov.Core()
    compiled = core.compile_model(os.path.join(path, "model.xml"), "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    fused = []
    for op in compiled.get_runtime_model().get_ordered_ops():
        info = op.get_rt_info()
        if "layerType" in info and info["layerType"].astype(str) == "FullyConnected":
            names = info["originalLayersNames"].astype(str).split(",")
            fused.append([n for n in names if not re.search(r"/(MatMul|BiasAdd)(_\d+)?$", n)])
    return fused


@pytest.fixture(scope="module")
def exports(tmp_path_factory):
    """(openvino, kind -> the version folder of the encoder's ids model exported for it, the Keras encoder, ids)."""
    ov = pytest.importorskip("openvino", reason="--format=openvino needs the [openvino] extra")
    pytest.importorskip("openvino_tokenizers", reason="--format=openvino needs the [openvino] extra")
    from albert_tf.export.openvino import export_openvino
    from tests.albert_tf.test_export import _train_spm

    root = str(tmp_path_factory.mktemp("openvino_form"))
    spm = _train_spm(root)
    encoder = _encoder("gelu")
    folders = {kind: export_openvino(encoder, os.path.join(root, kind), head="encoder", spm_model_file=spm,
                                     text_signatures=False, pack_tokens=False, target_cpu=kind)
               for kind in ("avx2", "amx")}
    return ov, folders, encoder, _ids()


def test_the_float32_form_leaves_the_layers_matmuls_without_a_post_op_and_the_bfloat16_form_fuses_the_gelu(exports):
    ov, folders, encoder, _ = exports
    blocks = encoder.config.num_hidden_layers
    float32_form, bfloat16_form = _fused_into_matmuls(ov, folders["avx2"]), _fused_into_matmuls(ov, folders["amx"])
    # The transformer's projections (the pooler's one small matmul keeps its tanh).
    layers = [names for names in float32_form if not any("pooler" in n for n in names)]
    assert len(layers) >= 6 * blocks and not any(layers), [names for names in float32_form if names]
    assert sum(any("gelu" in n.lower() for n in names) for names in bfloat16_form) == blocks, bfloat16_form


def test_both_forms_answer_as_the_keras_encoder_and_record_their_kind(exports):
    ov, folders, encoder, ids = exports
    want = encoder(ids, training=False)
    for kind, folder in folders.items():
        model = ov.Core().read_model(os.path.join(folder, "model.xml"))
        assert model.get_rt_info(["albert_tf", "target_cpu"]).astype(str) == kind
        got = ov.Core().compile_model(model, "CPU", {"INFERENCE_PRECISION_HINT": "f32"})(ids)
        for name in ("sequence_output", "pooled_output"):
            scale = max(1.0, float(np.max(np.abs(want[name]))))
            assert np.max(np.abs(got[name] - np.asarray(want[name]))) <= RELATIVE * scale, (kind, name)


def test_share_equal_constants_merges_equal_constants_only():
    """Two equal weights become one node read by both matmuls; a weight of other values, or the same bytes in
    another shape or type, stays its own; the model computes what it did."""
    ov = pytest.importorskip("openvino", reason="--format=openvino needs the [openvino] extra")
    import openvino.opset15 as ops

    from albert_tf.export.openvino_graph import share_equal_constants

    rng = np.random.default_rng(0)
    weight, other = rng.normal(size=(4, 4)).astype(np.float32), rng.normal(size=(4, 4)).astype(np.float32)
    x = ops.parameter([2, 4], np.float32)
    first, second, third = ops.constant(weight), ops.constant(weight.copy()), ops.constant(other)
    y = ops.matmul(ops.matmul(ops.matmul(x, first, False, False), second, False, False), third, False, False)
    flat = ops.constant(weight.reshape(16))  # same bytes, another shape
    as_int = ops.constant(weight.view(np.int32))  # same bytes, another type
    model = ov.Model([y, ops.add(flat, flat), ops.add(as_int, as_int)], [x])
    inputs = rng.normal(size=(2, 4)).astype(np.float32)
    before = [np.asarray(v) for v in ov.Core().compile_model(model, "CPU")(inputs).values()]

    assert share_equal_constants(model) == 1
    constants = [op for op in model.get_ordered_ops() if op.get_type_name() == "Constant"]
    assert len(constants) == 4
    readers = {op.get_friendly_name(): len(op.output(0).get_target_inputs()) for op in constants}
    assert readers[first.get_friendly_name()] == 2 and second.get_friendly_name() not in readers, readers
    after = [np.asarray(v) for v in ov.Core().compile_model(model, "CPU")(inputs).values()]
    for want, got in zip(before, after):
        np.testing.assert_array_equal(got, want)
    assert share_equal_constants(model) == 0


@pytest.mark.parametrize("sharing", ["all", "attention", "ffn", "none"])
def test_the_ir_holds_each_weight_of_the_model_once(tmp_path, sharing):
    """Whatever the sharing, the IR's weight constants are the model's distinct weights, each once: a layer
    called by several blocks is traced once per call, and without share_equal_constants each call left its
    own copy (NNCF then gave every copy its own SmoothQuant scale: 12 int8 weight sets for ALBERT-base)."""
    ov = pytest.importorskip("openvino", reason="--format=openvino needs the [openvino] extra")
    from albert_tf.export.openvino import export_openvino

    keras.utils.set_random_seed(4)
    config = albert_tf.AlbertConfig(vocab_size=120, embedding_size=8, hidden_size=24, num_hidden_layers=3,
                                    num_attention_heads=2, intermediate_size=40, max_position_embeddings=64,
                                    sharing=sharing)
    encoder = albert_tf.AlbertPretrainer(config).encoder
    rng = np.random.default_rng(5)
    for v in encoder.weights:  # distinct values everywhere: equal constants can only be copies of one weight
        v.assign(rng.normal(0.0, 0.3, size=v.shape).astype(np.float32))
    # Weights of rank 2 (of 64 values or more: the segment table is left out): the word and position tables and
    # every dense kernel (in the IR the query kernel carries the attention scale, still one per distinct kernel).
    kernels = {id(v): v for v in encoder.weights if len(v.shape) == 2 and shape_size(v.shape) >= 64}
    folder = export_openvino(encoder, str(tmp_path / "ir"), head="encoder", text_signatures=False,
                             pack_tokens=False, target_cpu="amx")
    model = ov.Core().read_model(os.path.join(folder, "model.xml"))
    matrices = [op.get_data() for op in model.get_ordered_ops()
                if op.get_type_name() == "Constant" and len(op.get_output_shape(0)) == 2
                and op.get_output_element_type(0) == ov.Type.f32 and shape_size(op.get_output_shape(0)) >= 64]
    assert len(matrices) == len(kernels), (len(matrices), len(kernels))
    distinct = {(m.shape, m.tobytes()) for m in matrices}
    assert len(distinct) == len(matrices)


def shape_size(shape):
    return int(np.prod(list(shape)))


def test_a_target_cpu_without_the_openvino_format_is_a_usage_error(tmp_path):
    import subprocess
    import sys

    root = os.path.join(os.path.dirname(__file__), "..", "..")
    done = subprocess.run([sys.executable, "-m", "albert_tf.bin.export", f"--checkpoint={tmp_path}",
                           f"--export_dir={tmp_path / 'out'}", "--head=encoder", "--openvino_target_cpu=amx"],
                          cwd=root, capture_output=True, text=True, timeout=300)
    assert done.returncode != 0
    assert "--openvino_target_cpu=amx chooses an OpenVINO export's form: add --format=openvino." in done.stderr
    assert not os.path.exists(tmp_path / "out")
