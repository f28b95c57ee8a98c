"""What the python blocks of the pages need before they run (`<!-- doc-test: needs=NAME -->` above a block).

Each fixture is a context manager over the block's folder (the current directory while the block runs). It
writes the files the block names, small and made here (nothing is downloaded), and yields the replacements to
make in the block's code before it runs (e.g. a server's port); each replaced text must be in the block.

Example:

>>> sorted(FIXTURES)
['checkpoints', 'demo_model', 'grpc_server', 'released_folders']
"""

from __future__ import annotations

import contextlib
import os
import shutil
from concurrent import futures
from typing import Dict, Iterator

from tests.albert_tf.task_testlib import tiny_config, train_tiny_spm

FIXTURE_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures")


def _spm(folder: str) -> str:
    """A tiny SentencePiece model with the ALBERT ids, trained in folder/spm (about 1 s)."""
    os.makedirs(os.path.join(folder, "spm"), exist_ok=True)
    return train_tiny_spm(os.path.join(folder, "spm"))


@contextlib.contextmanager
def demo_model(folder: str) -> Iterator[Dict[str, str]]:
    """`demo_output/model`: what albert-demo leaves there, a model of the demo's config (its size and 64 positions;
    random weights, the tiny test vocabulary) and its spm.model."""
    import albert_tf
    from albert_tf.demo.pretraining import demo_config
    from tests.albert_tf.task_testlib import SPM_VOCAB_SIZE

    spm = _spm(folder)
    albert_tf.save_pretrained(albert_tf.AlbertPretrainer(demo_config(SPM_VOCAB_SIZE, 64)),
                              os.path.join(folder, "demo_output", "model"), spm_model_file=spm)
    yield {}


@contextlib.contextmanager
def checkpoints(folder: str) -> Iterator[Dict[str, str]]:
    """An original TF1 checkpoint (`albert_base/model.ckpt-best`), a Hugging Face folder and `30k-clean.model`.

    The checkpoints are the golden fixtures of the original code and of transformers (tests/fixtures/).
    """
    original = os.path.join(FIXTURE_DIR, "original_albert", "g1_i1")
    os.makedirs(os.path.join(folder, "albert_base"))
    shutil.copy(os.path.join(original, "albert_config.json"), os.path.join(folder, "albert_base"))
    for suffix in (".index", ".data-00000-of-00001"):
        shutil.copy(os.path.join(original, "model.ckpt" + suffix),
                    os.path.join(folder, "albert_base", "model.ckpt-best" + suffix))
    hf = os.path.join(FIXTURE_DIR, "hf_albert", "gelu_new_g1_i1")
    os.makedirs(os.path.join(folder, "albert-base-v2-hf"))
    for name in ("config.json", "model.safetensors"):
        shutil.copy(os.path.join(hf, name), os.path.join(folder, "albert-base-v2-hf"))
    shutil.copy(_spm(folder), os.path.join(folder, "30k-clean.model"))
    yield {}


@contextlib.contextmanager
def released_folders(folder: str) -> Iterator[Dict[str, str]]:
    """`albert_base_v2/` as the release tarball unpacks (`albert_config.json`, `30k-clean.model`, `model.ckpt-best.*`,
    no `checkpoint` file) and `albert-base-v2/` as a Hugging Face folder (`config.json`, `model.safetensors`,
    `spiece.model`): the golden fixtures' tiny models (vocab 50) under the names the releases use."""
    os.makedirs(os.path.join(folder, "spm50"))
    spm = train_tiny_spm(os.path.join(folder, "spm50"), vocab_size=50)
    released, hugging_face = os.path.join(folder, "albert_base_v2"), os.path.join(folder, "albert-base-v2")
    original = os.path.join(FIXTURE_DIR, "original_albert", "g1_i1")
    os.makedirs(released)
    shutil.copy(os.path.join(original, "albert_config.json"), released)
    for suffix in (".index", ".data-00000-of-00001"):
        shutil.copy(os.path.join(original, "model.ckpt" + suffix), os.path.join(released, "model.ckpt-best" + suffix))
    shutil.copy(spm, os.path.join(released, "30k-clean.model"))
    hf = os.path.join(FIXTURE_DIR, "hf_albert", "gelu_new_g1_i1")
    os.makedirs(hugging_face)
    for name in ("config.json", "model.safetensors"):
        shutil.copy(os.path.join(hf, name), hugging_face)
    shutil.copy(spm, os.path.join(hugging_face, "spiece.model"))
    yield {}


class _Predictor:
    """TF Serving's PredictionService.Predict over SavedModels loaded in this process."""

    def __init__(self, models: Dict[str, str]):
        import tensorflow as tf
        import tensorflow_text  # noqa: F401  (the SentencePiece ops of the text signatures)

        self.models = {name: tf.saved_model.load(path) for name, path in models.items()}
        self.served = []

    def Predict(self, request, context):  # noqa: N802 (gRPC's method name)
        import tensorflow as tf
        from tensorflow_serving.apis import predict_pb2

        name, signature = request.model_spec.name, request.model_spec.signature_name or "serving_default"
        inputs = {key: tf.constant(tf.make_ndarray(proto)) for key, proto in request.inputs.items()}
        outputs = self.models[name].signatures[signature](**inputs)
        response = predict_pb2.PredictResponse()
        for key, value in outputs.items():
            response.outputs[key].CopyFrom(tf.make_tensor_proto(value.numpy()))
        self.served.append((name, signature, sorted(outputs)))
        return response


@contextlib.contextmanager
def grpc_server(folder: str) -> Iterator[Dict[str, str]]:
    """A gRPC PredictionService (TF Serving's API) serving a tiny classifier export as `albert_sst2`.

    The block's `localhost:8500` becomes the server's free port. After the block, the server must have answered
    one request with the classifier's outputs.
    """
    import grpc
    from tensorflow_serving.apis import prediction_service_pb2_grpc

    import albert_tf

    spm = _spm(folder)
    classifier = albert_tf.AlbertClassifier(tiny_config(), 2, label_names=["negative", "positive"],
                                            preprocessor=albert_tf.AlbertTextPreprocessor(spm, max_seq_length=32))
    version = albert_tf.export_saved_model(classifier, os.path.join(folder, "exports", "albert_sst2"))
    predictor = _Predictor({"albert_sst2": version})
    servicer = type("Servicer", (prediction_service_pb2_grpc.PredictionServiceServicer,),
                    {"Predict": predictor.Predict})()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    prediction_service_pb2_grpc.add_PredictionServiceServicer_to_server(servicer, server)
    port = server.add_insecure_port("localhost:0")
    server.start()
    try:
        yield {"localhost:8500": f"localhost:{port}"}
    finally:
        server.stop(None)
    assert predictor.served == [("albert_sst2", "serving_default", ["label", "logits", "probabilities"])], \
        predictor.served


FIXTURES = {"demo_model": demo_model, "checkpoints": checkpoints, "grpc_server": grpc_server,
            "released_folders": released_folders}
