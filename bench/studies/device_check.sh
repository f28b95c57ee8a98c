#!/usr/bin/env bash
# One check of albert-tf on a machine with NVIDIA GPUs (issue 17, part 3):
#   1. the test suite;
#   2. pretraining ALBERT-base (a few hundred steps) under --mixed_precision=auto, without and with XLA, and
#      with --strategy=mirrored over all visible GPUs;
#   3. fine-tuning, exporting and serving a classifier;
#   4. training and inference throughput against keras-hub and Hugging Face (bench.run's groups).
#
# Usage (from the repository root, in the venv with `pip install -e ".[test,bench]"`):
#   bash bench/studies/device_check.sh [OUT_DIR]            # default OUT_DIR: device_check_output
# Environment:
#   DEVICE_CHECK_MODE=gpu|cpu   default: gpu when TensorFlow sees a GPU, else cpu
#   DEVICE_CHECK_TESTS=PATHS    pytest targets (default: tests on a GPU; the runtime tests in the CPU fallback)
#   DEVICE_CHECK_STEPS=N        pretraining steps (default 300 on a GPU, 20 on a CPU)
#   DEVICE_CHECK_BENCH=0        skip step 4
#
# Without a GPU the script runs in a CPU fallback that checks every step end to end, not speed: a tiny model,
# short sequences, and --strategy=mirrored over 2 logical CPU devices (--num_cpu_devices=2). Its summary says
# so in its title. --mixed_precision=auto picks per GPU generation (albert_tf/runtime.py: bfloat16 from compute
# capability 8.0, float16 with loss scaling on 7.x, float32 below). bench.run's Hugging Face system runs
# PyTorch on the CPU (the [bench] extra pins a CPU build), so its figures are CPU figures even here.
# Exit code: the number of failed steps (0: all passed). Summary: OUT_DIR/summary.md.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${1:-device_check_output}
mkdir -p "$OUT/logs"
: > "$OUT/steps.tsv"
export TF_CPP_MIN_LOG_LEVEL=${TF_CPP_MIN_LOG_LEVEL:-2}

NGPU=$(python -c 'import tensorflow as tf; print(len(tf.config.list_physical_devices("GPU")))' 2>/dev/null || echo 0)
MODE=${DEVICE_CHECK_MODE:-$([ "${NGPU:-0}" -gt 0 ] && echo gpu || echo cpu)}
if [ "$MODE" = gpu ]; then
  TESTS=${DEVICE_CHECK_TESTS:-tests}; STEPS=${DEVICE_CHECK_STEPS:-300}
  SEQ=128; PRED=20; BATCH=32; DUPE=2; SHARDS=8; FT_SEQ=128
  MIRRORED=(--strategy=mirrored); REPLICAS=$NGPU
  BENCH_ARGS=(--reps 1 --only train,infer,text,finetune)
else
  TESTS=${DEVICE_CHECK_TESTS:-tests/albert_tf/test_runtime.py}; STEPS=${DEVICE_CHECK_STEPS:-20}
  SEQ=64; PRED=10; BATCH=8; DUPE=1; SHARDS=2; FT_SEQ=64
  MIRRORED=(--strategy=mirrored --num_cpu_devices=2); REPLICAS=2
  BENCH_ARGS=(--plan smoke --reps 1 --only finetune)
fi
echo "device_check: mode $MODE ($NGPU GPU(s)), output in $OUT"

FAILED=0
step() {  # step NAME COMMAND...: runs it, logs to OUT/logs/NAME.log, records exit code and seconds
  local name=$1; shift
  local start=$SECONDS
  echo "== $name: $*"
  "$@" > "$OUT/logs/$name.log" 2>&1
  local rc=$?
  printf '%s\t%s\t%s\n' "$name" "$rc" "$((SECONDS - start))" >> "$OUT/steps.tsv"
  if [ "$rc" -ne 0 ]; then FAILED=$((FAILED + 1)); echo "   FAILED (exit $rc): tail of $OUT/logs/$name.log"; tail -5 "$OUT/logs/$name.log"; fi
  return "$rc"
}

# 1. The test suite.
step tests python -m pytest -q -x $TESTS

# 2. Data: the standard library's docstrings -> vocabulary -> shards; ALBERT-base (GPU) or tiny (CPU) config.
step prepare python -m bench.studies.device_check prepare --out "$OUT" --mode "$MODE"
VOCAB=$(python -c "import json; print(json.load(open('$OUT/albert_config.json'))['vocab_size'])")
step vocab albert-create-vocab --input_file="$OUT/corpus/train.txt" --model_prefix="$OUT/vocab/spm" \
  --vocab_size="$VOCAB"
step data albert-create-pretraining-data --input_file="$OUT/corpus/train.txt" \
  --spm_model_file="$OUT/vocab/spm.model" --output_dir="$OUT/shards" --max_seq_length=$SEQ \
  --max_predictions_per_seq=$PRED --dupe_factor=$DUPE --num_shards=$SHARDS --overwrite

pretrain() {  # pretrain NAME GLOBAL_BATCH EXTRA_FLAGS...
  local name=$1 batch=$2; shift 2
  rm -rf "$OUT/runs/$name"
  step "pretrain_$name" albert-pretrain --albert_config_file="$OUT/albert_config.json" \
    --input_file="$OUT/shards/*.tfrecord" --spm_model_file="$OUT/vocab/spm.model" --output_dir="$OUT/runs/$name" \
    --max_seq_length=$SEQ --max_predictions_per_seq=$PRED --train_batch_size="$batch" \
    --num_train_steps="$STEPS" --num_warmup_steps=$((STEPS / 10)) --learning_rate=0.00176 \
    --log_steps=$((STEPS / 4 > 0 ? STEPS / 4 : 1)) --save_checkpoints_steps="$STEPS" \
    --mixed_precision=auto --masking=dynamic --seed=1 "$@"
}
pretrain auto "$BATCH" --nojit_compile
pretrain auto_xla "$BATCH" --jit_compile
# The same per-device batch on every replica.
pretrain auto_mirrored $((BATCH * REPLICAS)) "${MIRRORED[@]}" --nojit_compile

# 3. Fine-tune a classifier from the first run, export it, query it with raw text.
step finetune albert-finetune --task=csv --data_dir="$OUT/task" --init_checkpoint="$OUT/runs/auto" \
  --output_dir="$OUT/runs/classifier" --max_seq_length=$FT_SEQ --train_batch_size=32 --learning_rate=5e-4 \
  --num_train_epochs=1 --do_train --do_eval --mixed_precision=auto
rm -rf "$OUT/export/clf"
step export albert-export --checkpoint="$OUT/runs/classifier" --head=classifier --export_dir="$OUT/export/clf"
step serve python -m bench.studies.device_check serve --export_dir "$OUT/export/clf"

# 4. Throughput against keras-hub and Hugging Face on this machine (fresh process per measurement).
if [ "${DEVICE_CHECK_BENCH:-1}" != 0 ]; then
  step bench python -m bench.run "${BENCH_ARGS[@]}" --output "$OUT/bench_RESULTS.md"
fi

python -m bench.studies.device_check summary --out "$OUT" --mode "$MODE"
exit "$FAILED"
