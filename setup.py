"""albert-tf: ALBERT for TensorFlow 2 / Keras 3."""

import setuptools

setuptools.setup(
    name="albert-tf",
    version="0.1.0",
    description=(
        "ALBERT (A Lite BERT) for TensorFlow 2 and Keras 3: model library, "
        "tf.data pretraining pipeline, distributed pretraining, serving export."
    ),
    python_requires=">=3.10",
    packages=setuptools.find_packages(include=["albert_tf*", "pipelines*", "flags*"]),
    package_data={"flags": ["recipes/*.cfg", "recipes/*.json"]},
    install_requires=[
        "tensorflow>=2.21,<2.22",
        "tensorflow-text>=2.21,<2.22",
        "keras>=3.15,<3.16",  # the optimizers use Keras internals: tested range only
        "sentencepiece>=0.2",
        "absl-py",
        "safetensors",
        "numpy",
    ],
    extras_require={
        "test": ["pytest", "pytest-xdist"],  # .ci/run: both cores, one file per worker (--dist loadfile)
        # The Beam pipeline of albert-create-pretraining-data (--runner). 2.77
        # resolves with tensorflow 2.21 but caps protobuf below 7, and then
        # sentencepiece 0.2.3's model proto (protobuf 7 gencode) no longer
        # imports: transformers' ALBERT tokenizer ([bench]) fails. So not in
        # [test] (its tests skip without it) and not to be combined with [bench].
        "beam": ["apache-beam>=2.77,<2.78"],
        # TF Serving's protos: albert-export writes assets.extra/tf_serving_warmup_requests
        # (PredictionLog records) with them, and the tests parse them back. 2.21 pins
        # tensorflow>=2.21 and protobuf>=6.31.1,<8: it installs beside [beam] unchanged.
        # Exports without it work and only skip the warm-up file (logged).
        "serving": ["tensorflow-serving-api>=2.21,<2.22"],
        # torch==2.13.0: the CPU build pip finds on this project's machines; an
        # unpinned torch pulls a multi-GB CUDA build. keras-hub/transformers:
        # the releases measured with TF 2.21 / Keras 3.15 (bench/results/<cpu-kind>.md).
        # OpenVINO and ONNX Runtime run Hugging Face's model exported with
        # torch.onnx.export (which needs onnx and onnxscript); none changes
        # the protobuf that tensorflow 2.21 uses. openvino-tokenizers: the raw-text
        # rows (our OpenVINO export and OpenVINO's text path).
        "bench": ["keras-hub>=0.32,<0.33", "torch==2.13.0", "transformers>=5.24,<5.25",
                  "openvino>=2026.4,<2026.5", "onnxruntime>=1.31,<1.33", "onnx>=1.20,<1.24",
                  "onnxscript>=0.7,<0.8", "openvino-tokenizers>=2026.4,<2026.5"],
        # albert-export --format=openvino (an OpenVINO IR for OpenVINO Model Server);
        # openvino-tokenizers builds the text model from Hugging Face's tokenizer;
        # NNCF quantizes it (--quantize=int8; 3.4 is the release for OpenVINO 2026.4).
        "openvino": ["openvino>=2026.4,<2026.5", "openvino-tokenizers>=2026.4,<2026.5",
                     "transformers>=5.24,<5.25", "nncf>=3.4,<3.5"],
    },
    entry_points={
        "console_scripts": [
            "albert-create-vocab=pipelines.bin.create_vocab:run",
            "albert-create-pretraining-data=pipelines.bin.create_pretraining_data:run",
            "albert-pretrain=albert_tf.bin.pretrain:run",
            "albert-data-service=albert_tf.bin.data_service:run",
            "albert-convert=albert_tf.bin.convert:run",
            "albert-demo=albert_tf.bin.demo:run",
            "albert-finetune=albert_tf.bin.finetune:run",
            "albert-export=albert_tf.bin.export:run",
            "albert-plan=albert_tf.bin.plan:run",
        ],
    },
)
