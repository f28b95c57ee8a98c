"""The verdict: whether the demo's figures show learning, computed from what it measured.

"Learning happened" only when the masked LM and both fine-tuned classifiers
beat their baselines by more than the binomial spread (`learning_verdict`);
otherwise the verdict names the figure that failed.
"""

from __future__ import annotations

import dataclasses
import math
from typing import List, Tuple

from albert_tf.demo.console import Console


@dataclasses.dataclass
class DemoFigures:
    """What the demo measured, the input of its verdict.

    Attributes:
        pretrain_steps / pretrain_steps_planned: steps reached and the step budget.
        mlm_accuracy: held-out masked-LM accuracy of the pretrained model.
        mlm_baseline: held-out accuracy of always answering the training data's most frequent masked piece.
        mlm_positions: held-out masked positions scored (the binomial n of both).
        pretrained_accuracy / random_accuracy: dev accuracy of fine-tuning from the
            pretrained and from random weights.
        majority_accuracy: dev accuracy of always answering the most frequent training label.
        bag_of_words_accuracy: dev accuracy of naive Bayes on word counts.
        dev_examples: dev passages (the binomial n of the dev accuracies).
    """

    pretrain_steps: int
    pretrain_steps_planned: int
    mlm_accuracy: float
    mlm_baseline: float
    mlm_positions: int
    pretrained_accuracy: float
    random_accuracy: float
    majority_accuracy: float
    bag_of_words_accuracy: float
    dev_examples: int


def chance_margin(rate: float, n: int, sigmas: float = 3.0) -> float:
    """`sigmas` binomial standard deviations of an accuracy measured on n items at `rate`.

    A classifier no better than a baseline scoring `rate` lands above
    rate + chance_margin(rate, n) with probability about 0.1% (3 sigmas).

    Example:
    >>> round(chance_margin(0.25, 600), 4)
    0.053
    """
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n!r}.")
    return sigmas * math.sqrt(rate * (1.0 - rate) / n)


def learning_verdict(figures: DemoFigures) -> Tuple[bool, List[str]]:
    """Whether the demo's figures show learning, with one line per check (passed or failed).

    Learning happened when (1) the pretrained masked LM beats the
    most-frequent-piece baseline and (2) fine-tuning from the pretrained and
    (3) from random weights each beat the majority class, all by more than 3
    binomial standard deviations of the baseline on the items scored. Whether
    pretraining paid (pretrained over random by more than 2 standard
    deviations of a difference of two accuracies) and where both stand against
    the bag-of-words baseline are reported beside, not required: they are the
    targets of this size of model, not a sign that training works.

    Args:
        figures: the measured figures.

    Returns:
        (learning happened, lines).

    Example:
    >>> ok, lines = learning_verdict(DemoFigures(1500, 1500, 0.16, 0.06, 30000, 0.62, 0.55, 0.25, 0.65, 600))
    >>> ok, lines[0]
    (True, 'PASS masked LM: held-out accuracy 0.160 > most frequent piece 0.060 + 0.004 (3 sigma, 30000 positions)')
    """
    f = figures
    lines: List[str] = []
    checks = [
        ("masked LM", f"held-out accuracy {f.mlm_accuracy:.3f}", "most frequent piece", f.mlm_accuracy,
         f.mlm_baseline, f.mlm_positions, "positions"),
        ("fine-tuning from pretrained weights", f"dev accuracy {f.pretrained_accuracy:.3f}", "majority class",
         f.pretrained_accuracy, f.majority_accuracy, f.dev_examples, "dev passages"),
        ("fine-tuning from random weights", f"dev accuracy {f.random_accuracy:.3f}", "majority class",
         f.random_accuracy, f.majority_accuracy, f.dev_examples, "dev passages"),
    ]
    ok = True
    for name, measured, baseline_name, value, baseline, n, unit in checks:
        margin = chance_margin(baseline, n)
        passed = value > baseline + margin
        ok &= passed
        lines.append(f"{'PASS' if passed else 'FAIL'} {name}: {measured} {'>' if passed else '<='} "
                     f"{baseline_name} {baseline:.3f} + {margin:.3f} (3 sigma, {n} {unit})")
    gap = f.pretrained_accuracy - f.random_accuracy
    mean = (f.pretrained_accuracy + f.random_accuracy) / 2
    spread = chance_margin(mean, f.dev_examples, 2.0) * math.sqrt(2.0)
    if gap > spread:
        lines.append(f"pretraining paid: pretrained - random = {100 * gap:+.1f} points, beyond the 2-sigma spread "
                     f"of a difference ({100 * spread:.1f})")
    else:
        lines.append(f"pretraining did not clearly pay: pretrained - random = {100 * gap:+.1f} points, within the "
                     f"2-sigma spread of a difference ({100 * spread:.1f})")
    lines.append(f"bag of words (naive Bayes) {f.bag_of_words_accuracy:.3f}: pretrained "
                 f"{100 * (f.pretrained_accuracy - f.bag_of_words_accuracy):+.1f} points, random "
                 f"{100 * (f.random_accuracy - f.bag_of_words_accuracy):+.1f} points")
    if f.pretrain_steps < f.pretrain_steps_planned:
        lines.append(f"CUT pretraining stopped at {f.pretrain_steps} of {f.pretrain_steps_planned} steps "
                     "(the --minutes safety cap)")
    return ok, lines


def report_verdict(console: Console, figures: DemoFigures) -> bool:
    """Prints the verdict's lines and its conclusion; returns whether learning happened."""
    learned, lines = learning_verdict(figures)
    console.say("What the demo measured:")
    console.block(lines)
    if learned:
        console.say("Learning happened: the masked LM beats its frequent-piece baseline and both fine-tuned "
                    "classifiers beat the majority class, each by more than 3 binomial standard deviations.")
    else:
        failed = "; ".join(line[len("FAIL "):] for line in lines if line.startswith("FAIL"))
        console.say("Learning did NOT clearly happen: %s.%s", failed,
                    " Pretraining was cut short: re-run with a larger --minutes (it resumes)."
                    if figures.pretrain_steps < figures.pretrain_steps_planned else "")
    return learned
