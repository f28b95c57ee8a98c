r"""albert-finetune: fine-tune ALBERT on GLUE, a CSV/TSV/JSONL file, SQuAD, RACE or tagging data.

    albert-finetune --task=glue/sst-2 --data_dir=glue/SST-2 \
      --init_checkpoint=runs/base --output_dir=runs/sst2 \
      --max_seq_length=128 --train_batch_size=32 --learning_rate=3e-5 \
      --num_train_epochs=3 --do_train --do_eval --do_predict

--init_checkpoint is anything albert_tf.load_checkpoint reads (an
albert-pretrain output folder, a released google-research folder or its
model.ckpt-* prefix, a Hugging Face folder); its SentencePiece model is found
beside it (spm.model, 30k-clean.model, spiece.model, else the only *.model
file, in the folder of a prefix: albert_tf/model_folder.py), else in
--output_dir (a resumed run), or given with --spm_model_file.
An explicit --spm_model_file other than the vocabulary beside --init_checkpoint
is refused in one line naming both (--allow_other_vocabulary: a WARNING).
--albert_config_file instead trains from random weights. Without
--max_seq_length the length is 128, or the model's max_position_embeddings
when smaller (the demo's model: 64); a larger value is refused in one line.
Without --learning_rate, --pooling, --train_batch_size, --num_train_epochs
(and --optimizer, --warmup_proportion) the values are ALBERT-base's (3e-5,
pooled, 32, 3), or for a model of hidden size <= 256 those of
flags/recipes/small_finetune.cfg (5e-4, mean, 16, 5), said in one log line
(albert_tf/finetune_defaults.py); a flag given always wins.

Tasks: glue/{cola,sst-2,mrpc,sts-b,qqp,mnli,mnli-mm,qnli,rte,wnli} (the GLUE
TSV layout), csv (data_dir/train.csv, dev.csv[, test.csv] with a header row;
--text_column, --text_b_column, --label_column), squad_v1 / squad_v2
(train.json, dev.json), race, tagging.

Evaluation or prediction only (--do_eval and/or --do_predict without
--do_train) reads the fine-tuned model of --init_checkpoint (an albert-finetune
output folder or a save_task_model folder) and writes eval_results.txt and the
prediction files to --output_dir alone: the model's folder is only read (no
lock, no file written; it may be read-only). Without --init_checkpoint, or
with the pretrained one the model in --output_dir was trained from (the
training command again without --do_train), the model is the one trained into
--output_dir. Any other folder with no task head (an albert-pretrain, released
or Hugging Face encoder) is refused in one line.
Labels, length and lower-casing are the saved model's.

    albert-finetune --task=glue/sst-2 --data_dir=glue/SST-2 \
      --init_checkpoint=runs/sst2 --output_dir=runs/sst2-eval --do_eval --do_predict

output_dir receives the fine-tuned model (best on dev: albert_config.json,
model.weights.safetensors, task_config.json, spm.model; read by
albert_tf.load_task_model and albert-export as it is), eval_results.txt
(--do_eval), the prediction files (--do_predict), TensorBoard scalars
(train/, eval/) and the resume state: running the same command again after
an interruption continues from the last resume checkpoint (every
--save_checkpoints_steps steps and each epoch end) at the exact data position.
A non-finite loss stops the run at its step in one line naming the last good
resume checkpoint (--on_nonfinite=stop, exit code 1); nothing of that step is
saved. SIGTERM or SIGINT (a preemptible VM, a scheduler, Ctrl-C) finishes the current
step, saves the resume state there and exits with code 75 (EX_TEMPFAIL) and
one line naming it; the same command resumes exactly. A second signal stops at
once. Exit codes: 0 done, 1 an error (one line), 75 preempted. A second run
on an --output_dir in use is refused in one line naming the holder.
"""

from __future__ import annotations

from absl import app, flags

FLAGS = flags.FLAGS


def _define_flags() -> None:
    import flags.finetune_flags as finetune_flags

    finetune_flags.define_finetune_flags()


def options_from_flags(flag_values=FLAGS):
    """`FinetuneOptions` from the parsed flags."""
    from albert_tf.tasks.base import TaskOptions
    from albert_tf.tasks.runner import FinetuneOptions

    f = flag_values
    # Not given: None, resolved from the model (runner.resolve_max_seq_length). `present`, not the value:
    # albert-pretrain and albert-export define the same flag with other defaults in a shared process.
    max_seq_length = f.max_seq_length if f["max_seq_length"].present else None
    # albert-finetune's default (true) whatever group defined the flag first (albert-export's default is None).
    do_lower_case = bool(f.do_lower_case) if f["do_lower_case"].present else True
    defaulted, given = given_or_default(f)
    task_options = TaskOptions(
        max_seq_length=max_seq_length, do_lower_case=do_lower_case, spm_model_file=f.spm_model_file,
        text_column=f.text_column, text_b_column=f.text_b_column, label_column=f.label_column,
        regression=f.regression, doc_stride=f.doc_stride, max_query_length=f.max_query_length,
        n_best_size=f.n_best_size, max_answer_length=f.max_answer_length, max_qa_length=f.max_qa_length,
        length_buckets=f.length_buckets, pooling=given["pooling"], static_shapes=f.static_shapes,
        static_length_step=f.static_length_step)
    return FinetuneOptions(
        task=f.task, data_dir=f.data_dir, output_dir=f.output_dir, init_checkpoint=f.init_checkpoint,
        albert_config_file=f.albert_config_file, task_options=task_options,
        train_batch_size=given["train_batch_size"], eval_batch_size=f.eval_batch_size,
        learning_rate=given["learning_rate"], num_train_epochs=given["num_train_epochs"],
        warmup_proportion=given["warmup_proportion"], train_step=f.train_step, warmup_step=f.warmup_step,
        weight_decay_rate=f.weight_decay_rate,
        layerwise_lr_decay=f.layerwise_lr_decay, optimizer=given["optimizer"], adam_epsilon=f.adam_epsilon,
        steps_per_epoch=f.steps_per_epoch,
        strategy=f.strategy, tpu=f.tpu, num_gpus=f.num_gpus, mixed_precision=f.mixed_precision, jit_compile=f.jit_compile, do_train=f.do_train,
        do_eval=f.do_eval, do_predict=f.do_predict, seed=f.seed, log_steps=f.log_steps,
        save_checkpoints_steps=f.save_checkpoints_steps, on_nonfinite=f.on_nonfinite, defaulted=defaulted,
        allow_other_vocabulary=f.allow_other_vocabulary)


def given_or_default(flag_values=FLAGS):
    """(names not given, name -> value) of the settings whose default depends on the model's size
    (`albert_tf.finetune_defaults.SIZE_DEPENDENT`): a flag not on the command line has ALBERT-base's
    default here, which the runner replaces for a small model. `present`, not the flag's value:
    albert-pretrain defines some of the same flags with other defaults in a shared process."""
    from albert_tf.finetune_defaults import BASE_DEFAULTS, SIZE_DEPENDENT

    defaulted = tuple(name for name in SIZE_DEPENDENT if not flag_values[name].present)
    return defaulted, {name: BASE_DEFAULTS[name] if name in defaulted else flag_values[name].value
                       for name in SIZE_DEPENDENT}


def main(argv) -> None:
    if len(argv) > 1:
        raise app.UsageError(f"Unexpected arguments: {argv[1:]}")
    for name in ("task", "data_dir", "output_dir"):
        if not getattr(FLAGS, name):
            raise app.UsageError(f"--{name} is required.")
    if FLAGS.preset:
        raise app.UsageError("--preset is for pretraining; give --init_checkpoint or --albert_config_file.")
    from albert_tf.tasks.registry import task_names
    from albert_tf.tasks.runner import run_finetuning

    if FLAGS.task.strip().lower() not in task_names():
        raise app.UsageError(f"--task={FLAGS.task!r} is not a known task; expected one of: "
                             f"{', '.join(task_names())}.")
    from albert_tf import preemption
    from pipelines.locking import FolderLock

    # One writer per --output_dir (pipelines/locking.py); a lost lease stops training as a signal does.
    with FolderLock(FLAGS.output_dir, "albert-finetune", on_lost=preemption.request_stop):
        run_finetuning(options_from_flags())  # absl exits with main's return value: return nothing


def run() -> None:
    """Console-script entry point."""
    from albert_tf.bin.common import run_binary

    run_binary(main, _define_flags, "albert-finetune", __doc__)


if __name__ == "__main__":
    run()
