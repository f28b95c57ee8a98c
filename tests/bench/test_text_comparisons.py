"""Issue 18's like-for-like comparisons: the raw-text and fine-tuning plans give
every system the same batches (length-grouped for the best normal use, random
for the same padding), the pool's batches, and Hugging Face's training loss on
the masked positions only. Torch/transformers tests skip when not installed."""

import json

import numpy as np
import pytest

from bench import run
from bench.systems import common


def _rows(group):
    return [m for m in run.plan(False, "sp.model", "pool.json") if m.group == group]


@pytest.mark.parametrize("group", ["text", "finetune"])
def test_each_system_is_in_both_comparisons_on_the_same_batches(group):
    rows = _rows(group)
    order = "feed" if group == "text" else "order"
    second = run.AS_SERVED if group == "text" else run.SAME_PADDING
    tables = {name: [m for m in rows if run.comparison(m) == name] for name in (run.BEST_USE, second)}
    want = {run.BEST_USE: common.GROUPED, second: common.RANDOM}
    for name, part in tables.items():
        # Length-grouped batches for every system in the best-use table, random ones in the other.
        assert {m.kwargs[order] for m in part} == {want[name]}
        # The same pool, warm-up and timed batches for everyone in a table.
        assert len({(m.kwargs["pool_file"], m.kwargs["warmup"], m.kwargs["steps"]) for m in part}) == 1
    peers = {"keras-hub" if group == "text" else "keras-hub fit", "Hugging Face"}
    for part in tables.values():
        assert peers <= {m.system for m in part} and any(run._is_ours(m.system) for m in part)
    # keras-hub pre-packed to bucket lengths at its best, to the longest row on random batches;
    # ours on random batches both ways: at its normal use and padding as the peers.
    kh = {run.comparison(m): m.kwargs["padding"] for m in rows if m.module == "kerashub" or
          (m.function == "kerashub")}
    assert kh == {run.BEST_USE: "bucket", second: "longest"}
    if group == "text":
        served = [m for m in tables[run.AS_SERVED] if run._is_ours(m.system)]
        padded = {m.system for m in served if run.pads_like_peers(m)}
        assert padded == {"albert-tf task model, no buckets", run.OURS_OPENVINO_PADDED}
        assert {m.system for m in served} - padded == {"albert-tf task model", "albert-tf SavedModel",
                                                       run.OURS_OPENVINO}
        assert not any(run.pads_like_peers(m) for m in tables[run.BEST_USE])


def test_length_grouped_batches_follow_group_by_length_and_pad_less():
    rng = np.random.default_rng(3)
    lengths = rng.integers(5, 128, size=640).tolist()
    grouped = common.length_grouped_batches(lengths, 32, seed=0, mega=5)
    rand = common.random_batches(640, 32, seed=0)
    for batches in (grouped, rand):
        flat = [i for b in batches for i in b]
        assert sorted(flat) == list(range(640)) and {len(b) for b in batches} == {32}
    # Within a mega-batch of 5 x 32 every batch is a run of the length-sorted order.
    for b in grouped:
        assert [lengths[i] for i in b] == sorted((lengths[i] for i in b), reverse=True)
    padded = lambda bs: sum(len(b) * max(lengths[i] for i in b) for b in bs)  # noqa: E731
    assert padded(grouped) < 0.8 * padded(rand)
    assert grouped == common.length_grouped_batches(lengths, 32, seed=0, mega=5)


def test_read_text_pool_gives_warmup_then_timed_batches(tmp_path):
    path = tmp_path / "pool.json"
    path.write_text(json.dumps({"sentences": list("abcdefgh"), "lengths": [1] * 8, "batch": 2,
                                common.GROUPED: [[0, 1], [2, 3], [4, 5], [6, 7]],
                                common.RANDOM: [[7, 0], [1, 2], [3, 4], [5, 6]]}))
    sentences, warm, timed = common.read_text_pool(str(path), common.RANDOM, 1, 2)
    assert sentences == list("abcdefgh") and warm == [[7, 0]] and timed == [[1, 2], [3, 4]]
    with pytest.raises(ValueError, match="4 batches"):
        common.read_text_pool(str(path), common.GROUPED, 2, 3)
    with pytest.raises(ValueError, match="feed"):
        common.read_text_pool(str(path), "sorted", 1, 1)


def test_text_pass_result_hand_worked():
    masks = [np.array([[1, 1, 0], [1, 0, 0]]), np.array([[1, 1, 1, 1], [1, 1, 1, 0]])]
    r = common.text_pass_result([1.0, 3.0], masks)
    assert r["per_s"] == pytest.approx(4 / 4.0) and r["n_timed"] == 2
    assert r["padded_tokens"] == pytest.approx((6 + 8) / 4) and r["real_tokens"] == pytest.approx(10 / 4)
    assert r["padded_length"] == 4


def test_cpu_line_names_the_model_and_amx():
    cpu = {"model": "Some Xeon", "cores": 2, "flags": ["avx512f", "amx_bf16", "amx_tile"]}
    assert common.cpu_line(cpu).startswith("CPU: Some Xeon, 2 cores; AMX: yes")
    assert "AMX: no" in common.cpu_line(dict(cpu, flags=["amx_tile"]))
    assert "AMX: " in common.cpu_line()


def test_hugging_face_loss_runs_the_mlm_head_on_the_masked_positions_only():
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from bench.systems import hf

    config = transformers.AlbertConfig(vocab_size=50, embedding_size=8, hidden_size=16, num_hidden_layers=2,
                                       num_attention_heads=2, intermediate_size=32, hidden_dropout_prob=0.0,
                                       attention_probs_dropout_prob=0.0, max_position_embeddings=32)
    torch.manual_seed(0)
    model = transformers.AlbertForPreTraining(config).eval()
    batch, seq, preds = 3, 12, 4
    inputs = hf.pretraining_inputs(common.synthetic_pretraining_batch(batch, seq, preds, 50, seed=2))
    seen = []
    model.predictions.register_forward_hook(lambda mod, args, out: seen.append(tuple(args[0].shape)))
    with torch.no_grad():
        ours = float(hf.masked_pretraining_loss(model, inputs))
        # Reference: transformers' own loss with labels -100 everywhere but the masked positions.
        labels = torch.full((batch, seq), -100, dtype=torch.long)
        labels[torch.arange(batch)[:, None], inputs["masked_lm_positions"]] = inputs["masked_lm_ids"]
        ref = model(input_ids=inputs["input_ids"], attention_mask=inputs["attention_mask"],
                    token_type_ids=inputs["token_type_ids"], labels=labels,
                    sentence_order_label=inputs["sentence_order_label"]).loss
    assert seen[0] == (batch, preds, 16) and seen[1] == (batch, seq, 16)
    assert ours == pytest.approx(float(ref), rel=1e-5)


def test_text_section_has_one_table_and_ratios_per_comparison():
    def row(system, feed, values, **extra):
        m = run.Measurement("text", system, "x", "text", dict(precision="bfloat16", feed=feed, warmup=2, steps=10,
                                                               **extra))
        m.runs = [dict(per_s=v, padded_tokens=40.0, real_tokens=36.0, peak_rss_mb=900.0) for v in values]
        return m

    rows = [row("albert-tf task model", common.GROUPED, [30.0, 32.0]), row("Hugging Face", common.GROUPED, [20.0]),
            row("albert-tf task model", common.RANDOM, [16.0]),
            row("albert-tf task model, no buckets", common.RANDOM, [12.0], one_padded_batch=True),
            row("Hugging Face", common.RANDOM, [10.0]), row(run.OPENVINO, common.RANDOM, [])]
    rows[-1].skip = "not installed: openvino (pip install -e '.[bench]')"
    text = "\n".join(run.text_section(rows))
    best, served = text.split("### Random batches, as a server receives them")
    assert "### Each system at its best normal use" in best and "**1.55x**" in best  # median 31 / 20
    normal, same = served.split("ours padding as the peers (same padding)")
    assert "**1.60x**" in normal and "**1.55x**" not in served  # 16 / 10
    assert "**1.20x**" in same  # 12 / 10
    assert f"| {run.OPENVINO} | bfloat16 | n/a | not installed: openvino" in served
