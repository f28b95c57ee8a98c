"""The albert-demo program: the whole system end to end on a small ALBERT, in minutes on a CPU.

1. corpus: the docstrings of the installed Python standard library (or
   --input_file), one sentence per line; some documents are held out;
2. a SentencePiece vocabulary (albert-create-vocab's settings);
3. pretraining TFRecord shards with SOP pairs and n-gram masking;
4. pretraining of a small all-shared ALBERT (E < H) with LAMB for a step
   budget (--pretrain_steps; flags/recipes/small_pretrain.cfg's rate, warmup
   and 40% dynamic masking); --minutes is only a safety cap, announced loudly
   when it cuts training short;
5. evaluation on the held-out documents: masked-LM and SOP accuracy against
   their chance levels;
6. fill-in-the-blank on held-out sentences: a few shown, 200 scored;
7. fine-tuning on a labelled task built from the same machine's text (which
   part of the standard library a docstring passage comes from; whole modules
   held out for dev), once from the pretrained weights and once from random
   weights with the same budget, beside naive Bayes on word counts and the
   majority class;
8. export of the fine-tuned classifier and of the pretrainer (fill-mask) as
   TF Serving SavedModels, then raw-text requests answered by the exported
   models loaded with tf.saved_model.load, as a server would.

It ends with a verdict computed from what it measured (`learning_verdict`):
"Learning happened" only when the masked LM and both fine-tuned classifiers
beat their baselines by more than the binomial spread; otherwise it names the
figure that failed.

Every stage writes under --output_dir and is skipped when its output is
already complete, so an interrupted demo continues where it stopped.

One module per stage (corpus, vocabulary, data, pretraining, evaluation,
blanks, finetuning, export), the verdict (verdict), the console that prints the
story (console), the settings (settings, albert-demo's flags as a dataclass)
and run (`run_demo`, the stages in order). The package defines no absl flags:
albert_tf/bin/demo.py is the thin binary over it.

    albert-demo --output_dir=demo_output [--pretrain_steps=1500]

Example:

>>> from albert_tf.demo import DemoSettings, run_demo
>>> run_demo(DemoSettings(output_dir="demo_output"))  # doctest: +SKIP
"""

from albert_tf.demo.run import run_demo
from albert_tf.demo.settings import DemoSettings

__all__ = ["DemoSettings", "run_demo"]
