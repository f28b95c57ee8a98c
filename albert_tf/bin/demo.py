"""albert-demo: the whole system end to end on a small ALBERT, in minutes on a CPU.

Eight stages: a corpus (the standard library's docstrings or --input_file,
some documents held out), a SentencePiece vocabulary, pretraining data (SOP
pairs, n-gram masking), pretraining of a small all-shared ALBERT with LAMB for
--pretrain_steps (--minutes is a safety cap, announced loudly when it cuts),
held-out evaluation, fill-in-the-blank, fine-tuning from pretrained and from
random weights beside naive Bayes and the majority class, and export to TF
Serving SavedModels queried with raw text. It ends with a verdict computed
from what it measured. Every stage writes under --output_dir and is skipped
when complete, so an interrupted demo continues where it stopped.

The story is printed on stdout as plain lines (`[4/8] pretraining: step
500/1500, mlm_acc 0.15, ...`); --verbosity=0 adds the library's log on stderr,
--verbosity=1 everything (TensorFlow's notices too). The stages live in
albert_tf/demo/, one module per stage; this binary is their flags.

    albert-demo --output_dir=demo_output [--pretrain_steps=1500]
"""

from absl import flags

from albert_tf.demo.settings import DemoSettings

FLAGS = flags.FLAGS
_DEFAULTS = DemoSettings()


def define_flags() -> None:
    """The demo's flags, one per `DemoSettings` field, with its default. Defined when the demo runs, not at
    import, so that a process that imports this module keeps the defaults of other binaries' flags of the same
    name."""
    d = _DEFAULTS
    flags.DEFINE_string("output_dir", d.output_dir, "Where every stage writes its results.")
    flags.DEFINE_integer(
        "pretrain_steps", d.pretrain_steps,
        "Pretraining steps: the budget (about 6-7 minutes on a quiet 2-core CPU). A step budget, not a time budget, "
        "so a loaded machine trains the same model, only later.")
    flags.DEFINE_float(
        "minutes", d.minutes,
        "Safety cap on pretraining wall time in minutes. When it stops training before --pretrain_steps, the demo "
        "says so loudly and its verdict counts the cut.")
    flags.DEFINE_string(
        "input_file", d.input_file,
        "Your own corpus instead of the standard library's docstrings: glob(s), one sentence per line, "
        "blank lines between documents.")
    flags.DEFINE_integer(
        "vocab_size", d.vocab_size, "SentencePiece vocabulary size (an upper bound: small corpora get fewer pieces).")
    flags.DEFINE_integer("max_seq_length", d.max_seq_length, "Tokens per training sequence.")
    flags.DEFINE_integer("train_batch_size", d.train_batch_size, "Sequences per optimizer step.")
    flags.DEFINE_integer("dupe_factor", d.dupe_factor, "Passes over the corpus with fresh masks and pairings.")
    flags.DEFINE_float("learning_rate", d.learning_rate, "Peak LAMB learning rate (flags/recipes/small_pretrain.cfg).")
    flags.DEFINE_integer("warmup_steps", d.warmup_steps, "Linear warmup steps of pretraining (small_pretrain.cfg).")
    flags.DEFINE_float(
        "masked_lm_prob", d.masked_lm_prob, "Share of tokens masked afresh in each pass (dynamic masking, "
        "small_pretrain.cfg); the held-out evaluation keeps the shards' 15%.")
    flags.DEFINE_integer("random_seed", d.random_seed, "Seed of every random choice (corpus split, data, model).")
    flags.DEFINE_integer(
        "finetune_train_examples", d.finetune_train_examples,
        "Training passages of the fine-tuning task (a seeded subset, to fit the time budget).")
    flags.DEFINE_integer(
        "finetune_dev_examples", d.finetune_dev_examples, "Dev passages (held-out modules) of the fine-tuning task.")
    flags.DEFINE_float(
        "finetune_epochs", d.finetune_epochs, "Fine-tuning epochs (the same for pretrained and random weights).")
    flags.DEFINE_float(
        "finetune_learning_rate", d.finetune_learning_rate,
        "Peak learning rate of fine-tuning (both runs; AdamW with bias correction).")
    flags.DEFINE_enum(
        "finetune_pooling", d.finetune_pooling, ["pooled", "mean"],
        "The classifier's input: the mean of the sequence output (what masked-LM pretraining trains) or the "
        "original's pooled [CLS] (trained only by sentence order, which a model this small barely learns).")
    flags.DEFINE_float(
        "finetune_warmup_proportion", d.finetune_warmup_proportion, "Linear warmup share of the fine-tuning steps.")
    flags.DEFINE_integer("finetune_batch_size", d.finetune_batch_size, "Fine-tuning batch size (both runs).")
    flags.DEFINE_enum(
        "mixed_precision", d.mixed_precision, ["auto", "float32", "bfloat16"],
        "auto: bfloat16 where the CPU has AMX or AVX-512 bfloat16 units (or on a GPU), else float32.")


def main(argv):
    del argv
    from albert_tf.demo import console, run_demo

    if not FLAGS["verbosity"].present:  # the story only; --verbosity=0 shows the library's log as well
        console.hide_library_log()
    run_demo(DemoSettings.from_flags(FLAGS))


def run() -> None:
    """Console-script entry point (setup.py: albert-demo)."""
    from albert_tf.bin.common import run_binary

    run_binary(main, define_flags, "albert-demo", __doc__)


if __name__ == "__main__":
    run()
