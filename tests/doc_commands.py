"""Which test runs each command that README.md and docs/*.md show (tests/test_docs.py holds the pages to it).

Three lists. A command on a page must be in one of them, word for word (whitespace collapsed), or the suite
fails: so a page cannot show a command that nothing runs, and changing a command means saying here which test
runs the new one.

- RUN_HERE: commands cheap enough that tests/test_docs.py runs them itself, as written (`albert-plan` answers
  in seconds; `--help` and `--dry_run` only print).
- REGISTRY: command -> the test (`tests/file.py::name`) that runs the same command on tiny data. The test's file
  must mention every flag the command passes, and the binary must define each of them.
- NOT_RUN: command -> why no test can run it here (a server, a cloud runner, the test suite itself). The page
  says so beside the command too.
"""

import re

RUN_HERE = (
    re.compile(r"^albert-plan( |$)"),
    re.compile(r"^albert-[a-z-]+ --help$"),
    re.compile(r"^python -m bench\.run --dry_run$"),
)

_DATA = "tests/pipelines/test_create.py"
_FINETUNE = "tests/albert_tf/test_finetune_binary.py"
_EXPORT = "tests/albert_tf/test_export.py"
_EXPORT_CONTRACT = "tests/contracts/test_exports.py::test_binary"
# A model of the demo's config (its size, 64 positions), as `demo_output/model` is: README's command as written.
_NEWCOMER = "tests/albert_tf/test_newcomer_finetune.py::test_readme_command_learns_on_a_demo_sized_model"
_ONE_MACHINE = "tests/albert_tf/test_one_machine_pretraining.py::test_one_machine_sequence_through_the_installed_binaries"
_SERVICE = "tests/albert_tf/test_data_service.py::test_albert_data_service_and_albert_pretrain"

REGISTRY = {
    # README.md
    "albert-demo --output_dir=demo_output": "tests/albert_tf/test_demo.py::test_demo_runs_every_stage_and_reruns",
    "albert-create-vocab --input_file='corpus/*.txt' --model_prefix=vocab/30k --vocab_size=30000":
        "tests/pipelines/test_create_vocab.py::test_create_vocab_binary",
    "albert-finetune --task=csv --data_dir=mytask --init_checkpoint=demo_output/model --output_dir=runs/mytask "
    "--do_train --do_eval": _NEWCOMER,
    "albert-export --checkpoint=runs/mytask --head=classifier --export_dir=exports/mytask": _EXPORT_CONTRACT,
    # docs/finetuning.md
    "albert-finetune --task=csv --data_dir=mytask --init_checkpoint=demo_output/model --output_dir=runs/mytask "
    "--do_train --do_eval --do_predict": _NEWCOMER,
    "albert-finetune --task=glue/sst-2 --data_dir=glue/SST-2 --init_checkpoint=runs/base --output_dir=runs/sst2 "
    "--max_seq_length=128 --train_batch_size=32 --learning_rate=3e-5 --num_train_epochs=3 --do_train --do_eval "
    "--do_predict": f"{_FINETUNE}::test_glue_sst2_from_a_pretrained_folder",
    "albert-finetune --task=squad_v2 --data_dir=squad --init_checkpoint=runs/base --output_dir=runs/squad2 "
    "--max_seq_length=384 --doc_stride=128 --train_batch_size=48 --learning_rate=5e-5 --num_train_epochs=2 "
    "--do_train --do_eval --do_predict": f"{_FINETUNE}::test_squad",
    "albert-finetune --task=glue/sst-2 --data_dir=glue/SST-2 --init_checkpoint=runs/sst2 "
    "--output_dir=runs/sst2-eval --do_eval --do_predict": "tests/contracts/test_starting_points.py::test_eval_only",
    # docs/models.md
    "albert-finetune --task=glue/sst-2 --data_dir=glue/SST-2 --init_checkpoint=albert_base_v2 --output_dir=runs/sst2 "
    "--do_train --do_eval": "tests/albert_tf/test_model_folder.py::test_finetune_starts_from_the_folder_alone",
    "albert-convert --input=my_model --output_dir=my_model_hf --to=huggingface":
        "tests/albert_tf/test_hf_export.py::test_convert_binary_to_huggingface",
    # docs/pretraining.md: the one-machine sequence, read from the page and run by the installed binaries
    "albert-create-vocab --input_file='corpus/*.txt' --model_prefix=vocab/8k --vocab_size=8000": _ONE_MACHINE,
    "albert-create-pretraining-data --input_file='corpus/*.txt' --spm_model_file=vocab/8k.model "
    "--output_dir=data/small --max_seq_length=128 --max_predictions_per_seq=20 --dupe_factor=5": _ONE_MACHINE,
    "albert-pretrain --flagfile=flags/recipes/small_pretrain.cfg --input_file='data/small/*.tfrecord' "
    "--spm_model_file=vocab/8k.model --output_dir=runs/small": _ONE_MACHINE,
    # docs/pretraining.md: the paper's recipe
    "albert-create-pretraining-data --input_file='corpus/*.txt' --spm_model_file=vocab/30k.model "
    "--output_dir=data/train --max_seq_length=512 --max_predictions_per_seq=20 --dupe_factor=40 --num_shards=256":
        f"{_DATA}::test_binary_end_to_end",
    "albert-pretrain --flagfile=flags/recipes/albert_base_pretrain.cfg --input_file='data/train/*.tfrecord' "
    "--spm_model_file=vocab/30k.model --output_dir=runs/base --gradient_accumulation_steps=64":
        "tests/albert_tf/test_pretrain_binary.py::test_end_to_end_then_resume_with_more_steps",
    # docs/scaling.md
    "albert-finetune --task=csv --data_dir=mytask --init_checkpoint=demo_output/model "
    "--output_dir=runs/mytask_static --do_train --do_eval --static_shapes --jit_compile":
        "tests/albert_tf/test_static_shapes.py::test_albert_finetune_static_shapes_end_to_end",
    "albert-data-service --role=dispatcher --port=5050": _SERVICE,
    "albert-data-service --role=worker --port=5051 --dispatcher_address=grpc://DISPATCHER:5050 "
    "--worker_address=THIS_HOST:5051": _SERVICE,
    "albert-pretrain ... --data_service_address=grpc://DISPATCHER:5050": _SERVICE,
    # docs/serving.md
    "albert-export --checkpoint=runs/sst2 --head=classifier --export_dir=exports/albert_sst2": _EXPORT_CONTRACT,
    "albert-export --checkpoint=runs/base --head=pretrainer --export_dir=exports/albert_fill_mask": _EXPORT_CONTRACT,
    "albert-export --checkpoint=runs/sst2 --head=classifier --export_dir=exports/albert_sst2_ids "
    "--notext_signatures": f"{_EXPORT}::test_ids_only_export_has_no_text_signature",
    "albert-export --checkpoint=runs/base --head=encoder --export_dir=exports/albert_ov --format=openvino":
        "tests/albert_tf/test_openvino_export.py::test_classifier_variant_equals_saved_model",
    "albert-export --checkpoint=runs/mytask --head=classifier --export_dir=exports/mytask_int8 --format=openvino "
    "--quantize=int8": "tests/albert_tf/test_int8_export.py::test_single_text_classifier_cost_is_its_dev_accuracy",
    'curl -X POST http://localhost:8501/v1/models/albert_sst2:predict -d \'{"instances": [{"text": "A fine, '
    'moving film."}, {"text": "Dull and far too long."}]}\'': f"{_EXPORT}::test_rest_request_bodies",
    'curl -X POST http://localhost:8501/v1/models/albert_sst2:predict -d \'{"signature_name": "serve_text_pair", '
    '"instances": [{"text": "First segment.", "text_pair": "Second segment."}]}\'':
        f"{_EXPORT}::test_rest_request_bodies",
    'curl -X POST http://localhost:8501/v1/models/albert_fill_mask:predict -d \'{"instances": [{"text": "The '
    '[MASK] sat on the mat."}]}\'': f"{_EXPORT}::test_rest_request_bodies",
    "python -c 'import sys, tensorflow_text; from tensorflow.python.tools.saved_model_cli import main; sys.argv[0] "
    "= \"saved_model_cli\"; main()' run --dir exports/albert_sst2/1 --tag_set serve --signature_def "
    "serving_default --input_exprs 'text=[\"A fine, moving film.\"]'": f"{_EXPORT}::test_docs_saved_model_cli_run_commands",
    "saved_model_cli run --dir exports/albert_sst2_ids/1 --tag_set serve --signature_def serve_token_ids "
    "--input_exprs 'input_ids=[[2,30,41,3]];input_mask=[[1,1,1,1]];segment_ids=[[0,0,0,0]]'":
        f"{_EXPORT}::test_docs_saved_model_cli_run_commands",
}

_SERVER = "a model server in Docker, which the test machines do not run; the same requests are run in-process"
_DOWNLOAD = ("a download of released weights; nothing is downloaded in tests, which build both folders' layouts "
             "from the golden fixtures: tests/albert_tf/test_model_folder.py")
NOT_RUN = {
    "python3 -m venv .venv && . .venv/bin/activate && pip install -e .":
        "the installation itself; .ci/run installs the same package into .venv",
    "curl -LO https://storage.googleapis.com/albert_models/albert_base_v2.tar.gz": _DOWNLOAD,
    "tar xzf albert_base_v2.tar.gz && mv albert_base albert_base_v2": _DOWNLOAD,
    "hf download albert/albert-base-v2 --local-dir albert-base-v2": _DOWNLOAD,
    "bash .ci/run": "CI's entry point: it runs the whole suite, this test among it",
    "python -m pytest -q tests": "the whole suite, this test among it",
    "python -m pytest -q -n 2 --dist loadfile --no-loadscope-reorder tests": "the whole suite on both cores, as "
                                                                             ".ci/run runs it, this test among it",
    "python -m pytest -q tests/test_docs.py": "this test itself",
    'docker run -p 8501:8501 -v "$PWD/exports/mytask:/models/mytask" -e MODEL_NAME=mytask tensorflow/serving': _SERVER,
    'docker run -p 8501:8501 -v "$PWD/exports/albert_sst2:/models/albert_sst2" -e MODEL_NAME=albert_sst2 '
    "tensorflow/serving": _SERVER,
    'docker run -p 8501:8501 -v "$PWD/exports/albert_ov:/models/albert" openvino/model_server --model_path '
    "/models/albert --model_name albert --rest_port 8501": _SERVER,
    "albert-create-pretraining-data --runner=DataflowRunner --input_file='gs://BUCKET/corpus/*.txt' "
    "--spm_model_file=vocab/30k.model --output_dir=gs://BUCKET/data --max_seq_length=512 --dupe_factor=40 "
    "--num_shards=4096 -- --project=PROJECT --region=us-central1 --temp_location=gs://BUCKET/tmp "
    "--setup_file=./setup.py": "a cloud runner; the same binary and Beam options run on the DirectRunner in "
                               "tests/pipelines/test_beam_pipeline.py::test_binary_with_runner_and_beam_options",
    "albert-create-pretraining-data --runner=FlinkRunner --input_file='hdfs://corpus/*.txt' ... -- "
    "--flink_master=HOST:8081 --environment_type=DOCKER": "a Flink cluster; see the DirectRunner tests",
    "albert-create-pretraining-data --runner=SparkRunner --input_file='hdfs://corpus/*.txt' ... -- "
    "--spark_master_url=spark://HOST:7077 --environment_type=DOCKER": "a Spark cluster; see the DirectRunner tests",
    "python -m bench.run": "the benchmark suite itself (about 70 minutes); its plans, statistics and tables are "
                           "tested in tests/bench/",
    "python -m bench.run --plan levers --reps 3 --output bench/results/avx2-levers-3.md":
        "another levers run on a quiet AVX2 machine (about 75 minutes); the plan, its lever pairs and their "
        "tables are tested in tests/bench/test_bench_run.py::test_levers_plan_pulls_each_lever_against_the_"
        "default_in_float32",
    "bash bench/studies/device_check.sh device_check_output": "a machine with NVIDIA GPUs; its CPU fallback's run "
                                                              "is bench/results/device_check_cpu.md",
}


def run_here(command: str) -> bool:
    """True for the commands tests/test_docs.py runs itself."""
    return any(pattern.match(command) for pattern in RUN_HERE)
