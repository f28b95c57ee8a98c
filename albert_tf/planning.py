"""Capacity planning for pretraining: parameters, memory, FLOPs and step time (`albert-plan`).

Pure Python (no TensorFlow import), so the binary answers at once. Every
figure is per replica unless it says otherwise; memory is in bytes.

* Parameters: exact, from the config (the layers' variables; equal to
  `AlbertPretrainer(config).count_params()` for every sharing mode).
* Optimizer state: LAMB and AdamW keep two float32 slots per variable (m, v).
* Gradients: one float32 copy of every variable; with gradient accumulation a
  second one (the running sum beside one micro-batch's gradients).
* Weight copies: under mixed precision every dense layer casts its kernel and
  bias to the compute dtype on each call; the casts are kept for the backward
  pass, so a shared layer applied L times holds L copies.
* Activations: the tensors TensorFlow's autodiff keeps for the backward pass
  of the training step as albert-tf writes it (graph mode, no XLA; XLA fuses
  element-wise chains and keeps fewer), counted tensor by tensor in
  `activation_terms`, plus the backward pass's working set. Checked against
  TensorFlow's CPU allocator peak by `bench/studies/plan_memory.py`.
  albert-tf offers no rematerialisation (recomputing activations in the
  backward pass), so there is no "with remat" figure.
* FLOPs: matmul FLOPs, forward + backward = 3 x forward, the masked-LM head on
  `max_predictions_per_seq` positions: the formula of
  `bench/systems/common.forward_flops`, which the benchmarks' MFU uses.

Example:
>>> from albert_tf.config import AlbertConfig
>>> cfg = AlbertConfig.from_preset("albert_base_v2")
>>> parameter_count(cfg)  # encoder 11,683,584 + MLM and SOP heads
11813810
>>> round(training_flops_per_sequence(cfg, 128, 20) / 1e9, 1)
67.6
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Dict

from albert_tf.config import AlbertConfig

GIB = 2 ** 30
FLOAT32_BYTES = 4
# Bytes per element of the compute dtype.
COMPUTE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}
# Optimizer slots per variable (float32): LAMB and AdamW both keep m and v.
OPTIMIZER_SLOTS = {"lamb": 2, "adamw": 2}


@dataclasses.dataclass(frozen=True)
class Device:
    """One accelerator's published peak dense matmul rate and memory.

    Args:
        name: the --device name.
        peak_flops: dense bfloat16/float16 matmul FLOP/s (no sparsity).
        float32_flops: the rate for float32 matmuls (TF32 tensor cores on
            NVIDIA GPUs, which TensorFlow enables by default; on TPUs XLA's
            default precision runs float32 matmuls as one bfloat16 pass).
        memory_bytes: memory per chip.
        source: where the figures come from.
        float16: whether the device has float16 matmul units.
    """

    name: str
    peak_flops: float
    float32_flops: float
    memory_bytes: float
    source: str
    float16: bool = True


# Published figures, one chip each. GB = 1e9 bytes as the GPU datasheets
# state it (a little under what nvidia-smi reports: conservative); the TPU
# pages state GiB.
DEVICES: Dict[str, Device] = {
    # NVIDIA A100 Tensor Core GPU datasheet (A100 80GB SXM): BF16/FP16 Tensor
    # Core 312 TFLOPS dense (624 with sparsity), TF32 156, 80GB HBM2e.
    "a100": Device("a100", 312e12, 156e12, 80e9, "NVIDIA A100 datasheet (80GB SXM)"),
    # NVIDIA H100 Tensor Core GPU datasheet (H100 SXM): BF16 1,979 TFLOPS with
    # sparsity = 989 dense, TF32 989 with sparsity = 494 dense, 80GB HBM3.
    "h100": Device("h100", 989e12, 494e12, 80e9, "NVIDIA H100 datasheet (SXM)"),
    # NVIDIA H200 Tensor Core GPU datasheet (H200 SXM): the H100's compute
    # (BF16 989 dense, TF32 494 dense) with 141GB HBM3e.
    "h200": Device("h200", 989e12, 494e12, 141e9, "NVIDIA H200 datasheet (SXM)"),
    # Google Cloud TPU documentation, "TPU v4": 275 TFLOPS bf16 per chip,
    # 32 GiB HBM2 per chip. No float16 matmul units.
    "tpu-v4": Device("tpu-v4", 275e12, 275e12, 32 * GIB, "Cloud TPU docs: TPU v4", float16=False),
    # Google Cloud TPU documentation, "TPU v5e": 197 TFLOPS bf16 per chip,
    # 16 GiB HBM2 per chip.
    "tpu-v5e": Device("tpu-v5e", 197e12, 197e12, 16 * GIB, "Cloud TPU docs: TPU v5e", float16=False),
}
# On a CPU the rate is a measurement (flag), not a datasheet figure:
# docs/reference notes measured 0.75-1.05 TFLOP/s bfloat16 for a 4096^3
# matmul on this kind of machine and less for the model's shapes.
DEFAULT_CPU_FLOPS = 0.4e12
DEFAULT_PEAK_FRACTION = 0.4
DEFAULT_HEADROOM = 0.1


def cpu_device(flops: float, memory_bytes: float) -> Device:
    """A CPU 'device' from a measured matmul rate and a memory size.

    Args:
        flops: matmul FLOP/s to plan with (any precision).
        memory_bytes: memory available to training.
    """
    if not flops > 0 or not memory_bytes > 0:
        raise ValueError(f"A CPU needs a positive rate and memory, got flops={flops!r}, memory={memory_bytes!r}.")
    return Device("cpu", flops, flops, memory_bytes, "measured (flag)")


# --------------------------------------------------------------- parameters
def parameter_terms(config: AlbertConfig) -> Dict[str, int]:
    """Parameters by part: embeddings, projection, attention, ffn, pooler, mlm_head, sop_head.

    Args:
        config: the model.
    """
    v, e, h, i = config.vocab_size, config.embedding_size, config.hidden_size, config.intermediate_size
    attention_block = 4 * (h * h + h) + 2 * h
    ffn_block = (h * i + i) + (i * h + h) + 2 * h
    k = config.inner_group_num
    return {
        "embeddings": (v + config.max_position_embeddings + config.type_vocab_size) * e + 2 * e,
        "projection": (e * h + h) if e != h else 0,
        "attention": k * config.num_attention_groups * attention_block,
        "ffn": k * config.num_ffn_groups * ffn_block,
        "pooler": h * h + h,
        "mlm_head": (h * e + e) + 2 * e + v,
        "sop_head": 2 * h + 2,
    }


def parameter_count(config: AlbertConfig) -> int:
    """Trainable parameters of `AlbertPretrainer(config)` (encoder + both heads)."""
    return sum(parameter_terms(config).values())


def _cast_parameters(config: AlbertConfig) -> int:
    """Parameters cast to the compute dtype per step (a shared layer once per call)."""
    v, e, h, i = config.vocab_size, config.embedding_size, config.hidden_size, config.intermediate_size
    block = 4 * (h * h + h) + (h * i + i) + (i * h + h)
    calls = config.num_hidden_layers * config.inner_group_num
    projection = (e * h + h) if e != h else 0
    return calls * block + projection + (h * h + h) + (h * e + e) + v * e + v


def _repeated_parameters(config: AlbertConfig) -> int:
    """Block parameters applied more than once: (calls - distinct blocks) x block size, summed."""
    h, i, calls = config.hidden_size, config.intermediate_size, config.num_hidden_layers * config.inner_group_num
    attention, ffn = 4 * (h * h + h) + 2 * h, (h * i + i) + (i * h + h) + 2 * h
    k = config.inner_group_num
    return ((calls - k * config.num_attention_groups) * attention + (calls - k * config.num_ffn_groups) * ffn)


# -------------------------------------------------------------------- FLOPs
def forward_flops_per_sequence(config: AlbertConfig, seq: int, preds: int) -> float:
    """Matmul FLOPs of one forward pass of one sequence (`bench/systems/common.forward_flops`).

    Embedding projection 2*T*E*H (only when E != H); per applied block
    (compute is not shared even when weights are): Q, K, V, O 8*T*H^2, scores
    and weighted sum 4*T^2*H, FFN 4*T*H*I; pooler 2*H^2; the masked-LM head on
    the P predicted positions 2*P*(H*E + E*V) and SOP 4*H.

    Args:
        config: the model.
        seq: sequence length T.
        preds: masked positions P (0: no pretraining heads).
    """
    h, e, i, v = config.hidden_size, config.embedding_size, config.intermediate_size, config.vocab_size
    block = 8 * seq * h * h + 4 * seq * seq * h + 4 * seq * h * i
    total = config.num_hidden_layers * config.inner_group_num * block + 2 * h * h
    if e != h:
        total += 2 * seq * e * h
    if preds:
        total += 2 * preds * (h * e + e * v) + 4 * h
    return float(total)


def training_flops_per_sequence(config: AlbertConfig, seq: int, preds: int) -> float:
    """Forward + backward matmul FLOPs of one sequence: 3 x the forward."""
    return 3.0 * forward_flops_per_sequence(config, seq, preds)


# ------------------------------------------------------------------- memory
def activation_terms(config: AlbertConfig, seq: int, preds: int, precision: str) -> Dict[str, float]:
    """Bytes per sequence the backward pass needs, by part (float32 where the model computes in float32).

    Per applied block (L x K; the last at [CLS] and the P masked positions only, its keys and values at
    every position), for each of its two sublayers: the input as
    its matmuls read it (compute dtype; under mixed precision also its
    float32 original, which the residual add + LayerNorm kernel keeps) and
    the sublayer's output (compute dtype, kept by that kernel:
    `albert_tf.layers.xla_kernels`, which recomputes the rest); then Q, K,
    V and the attention context; two float32 [N, T, T] tensors of the
    softmax (and the probabilities' compute-dtype cast under mixed
    precision); the FFN pre-activation (kept by the GELU kernel) and GELU's
    output; dropout masks (1 byte) and dropped values where dropout is on. Embeddings (float32) and the masked-LM head on P positions
    likewise; the loss keeps float32 softmax gradients P x V. `working` is
    the backward pass's transient: gradients of the largest per-layer
    tensors (two float32 [N, T, T], two [T, I] in the compute dtype, three
    float32 [T, H] of the residual add + LayerNorm). The counts per block were
    measured on single blocks with TensorFlow's allocator (bench/studies/plan_memory.py
    checks the whole model).

    Args:
        config: the model.
        seq: sequence length T.
        preds: masked positions P.
        precision: "float32", "bfloat16" or "float16".

    Returns:
        Part -> bytes per sequence.
    """
    c = _compute_bytes(precision)
    f = FLOAT32_BYTES
    mixed = c != f
    s, p = seq, preds
    h, e, i, v, a = (config.hidden_size, config.embedding_size, config.intermediate_size, config.vocab_size,
                     config.num_attention_heads)
    scores = a * s * s
    attn_drop = (1 + f) if config.attention_probs_dropout_prob > 0 else 0
    hidden_drop = (1 + f) if config.hidden_dropout_prob > 0 else 0
    def sublayer(rows):  # its input (compute dtype, and float32 when mixed) and its output, for the residual + LN
        return rows * h * c + rows * h * f * mixed + rows * h * c + rows * h * hidden_drop

    def attention(rows):  # `rows` query positions of the T; K and V (and their input) at every position
        keys_input = (s - rows) * h * c
        # The softmax's float32 input is kept only without mixed precision (measured); its float32 output always.
        return (sublayer(rows) + keys_input + (rows + 2 * s) * h * c
                + a * rows * s * (f + f * (not mixed) + c * mixed + attn_drop) + rows * h * c)

    def ffn(rows):
        return sublayer(rows) + 2 * rows * i * c

    # The training step's last block runs at [CLS] and the P masked positions only (AlbertEncoder's
    # output_positions).
    last_rows = min(s, 1 + p)
    blocks = config.num_hidden_layers * config.inner_group_num
    embeddings = 4 * s * e * f + s * e * hidden_drop + (s * e * c * mixed + s * h * c if e != h else 0)
    mlm = p * h * c + 5 * p * e * c + 4 * p * e * f + p * e * c * mixed + p * v * f
    # The backward pass's transient: a full block's gradients of its largest tensors, reached once the last
    # block's activations are freed, or the last block's own (smaller) ones at the start.
    def working_of(rows):  # the GELU kernel's gradients in the compute dtype; the LayerNorm kernel's three float32
        return 2 * a * rows * s * f + 2 * rows * i * c + 3 * rows * h * f

    working = max(working_of(last_rows), working_of(s) - attention(last_rows) - ffn(last_rows))
    return {
        "embeddings": float(embeddings),
        "attention": float((blocks - 1) * attention(s) + attention(last_rows)),
        "ffn": float((blocks - 1) * ffn(s) + ffn(last_rows)),
        "mlm_head": float(mlm),
        "working": float(working),
    }


def activation_bytes_per_sequence(config: AlbertConfig, seq: int, preds: int, precision: str) -> float:
    """The sum of `activation_terms`."""
    return sum(activation_terms(config, seq, preds, precision).values())


@dataclasses.dataclass(frozen=True)
class MemoryPlan:
    """Bytes per replica of one training step.

    Args:
        weights: float32 variables.
        optimizer_state: the optimizer's float32 slots.
        gradients: float32 gradients (two copies with accumulation).
        weight_copies: compute-dtype casts of the weights (mixed precision).
        activations: what the backward pass keeps, for the micro-batch.
        micro_batch: sequences per replica per micro-step.
        shared_gradients: the float32 gradients of a shared layer's every
            call, held until they are summed at the end of the backward pass
            (beyond the one copy in `gradients`). They grow while the
            activations are freed, so the step needs the larger of the two.
    """

    weights: float
    optimizer_state: float
    gradients: float
    weight_copies: float
    activations: float
    micro_batch: int
    shared_gradients: float = 0.0

    @property
    def fixed(self) -> float:
        """Everything that does not grow with the micro-batch."""
        return self.weights + self.optimizer_state + self.gradients + self.weight_copies

    @property
    def total(self) -> float:
        return self.fixed + max(self.activations, self.shared_gradients)


def memory_plan(config: AlbertConfig, seq: int, preds: int, micro_batch: int, *, precision: str,
                optimizer: str, gradient_accumulation_steps: int) -> MemoryPlan:
    """Memory of one replica training `micro_batch` sequences per micro-step.

    Args:
        config: the model.
        seq: sequence length.
        preds: masked positions per sequence.
        micro_batch: sequences per replica per micro-step.
        precision: "float32", "bfloat16" or "float16".
        optimizer: "lamb" or "adamw".
        gradient_accumulation_steps: micro-steps per optimizer step.
    """
    if optimizer not in OPTIMIZER_SLOTS:
        raise ValueError(f"optimizer={optimizer!r} is not one of {sorted(OPTIMIZER_SLOTS)}.")
    _check_positive(micro_batch=micro_batch, gradient_accumulation_steps=gradient_accumulation_steps)
    params = parameter_count(config)
    c = _compute_bytes(precision)
    return MemoryPlan(
        weights=float(FLOAT32_BYTES * params),
        optimizer_state=float(OPTIMIZER_SLOTS[optimizer] * FLOAT32_BYTES * params),
        gradients=float((2 if gradient_accumulation_steps > 1 else 1) * FLOAT32_BYTES * params),
        weight_copies=float(c * _cast_parameters(config)) if c != FLOAT32_BYTES else 0.0,
        activations=micro_batch * activation_bytes_per_sequence(config, seq, preds, precision),
        micro_batch=micro_batch,
        shared_gradients=float(FLOAT32_BYTES * _repeated_parameters(config)),
    )


def largest_fitting(total_bytes: Callable[[int], float], capacity: float, limit: int = 2 ** 40) -> int:
    """The largest b >= 1 with total_bytes(b) <= capacity (0 if even b = 1 does not fit).

    Doubles, then bisects: `total_bytes` must not decrease as b grows.

    Args:
        total_bytes: memory of a micro-batch of b sequences.
        capacity: usable bytes.
        limit: the search stops here (the answer is at most `limit`).
    """
    if total_bytes(1) > capacity:
        return 0
    low, high = 1, 2
    while high <= limit and total_bytes(high) <= capacity:
        low, high = high, high * 2
    high = min(high, limit + 1)  # total_bytes(high) > capacity, or high is past the limit
    while high - low > 1:
        middle = (low + high) // 2
        if total_bytes(middle) <= capacity:
            low = middle
        else:
            high = middle
    return low


def _compute_bytes(precision: str) -> int:
    if precision not in COMPUTE_BYTES:
        raise ValueError(f"precision={precision!r} is not one of {sorted(COMPUTE_BYTES)}.")
    return COMPUTE_BYTES[precision]


def _check_positive(**values: int) -> None:
    for name, value in values.items():
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive integer, got {value!r}.")


# --------------------------------------------------------------------- plan
@dataclasses.dataclass(frozen=True)
class Plan:
    """Everything `albert-plan` prints (built by `make_plan`).

    Args:
        config: the model.
        seq: sequence length.
        preds: masked positions per sequence.
        train_batch_size: global batch per optimizer step.
        num_replicas: data-parallel replicas (chips).
        gradient_accumulation_steps: micro-steps per optimizer step.
        precision: compute dtype.
        optimizer: "lamb" or "adamw".
        device: the device planned for.
        peak_fraction: the fraction of the peak rate the step time assumes.
        headroom: the fraction of device memory kept free.
        memory: the per-replica memory at the requested micro-batch.
        largest_micro_batch: the largest micro-batch that fits with the
            requested accumulation (0: not even one sequence).
        smallest_accumulation: the smallest accumulation whose micro-batch
            divides the batch and fits (None: none does).
        flops_per_step: model FLOPs of one optimizer step, all replicas.
        step_seconds: estimated time of one optimizer step.
    """

    config: AlbertConfig
    seq: int
    preds: int
    train_batch_size: int
    num_replicas: int
    gradient_accumulation_steps: int
    precision: str
    optimizer: str
    device: Device
    peak_fraction: float
    headroom: float
    memory: MemoryPlan
    largest_micro_batch: int
    smallest_accumulation: int | None
    flops_per_step: float
    step_seconds: float

    @property
    def usable_bytes(self) -> float:
        return self.device.memory_bytes * (1.0 - self.headroom)

    @property
    def fits(self) -> bool:
        return self.memory.total <= self.usable_bytes


def make_plan(config: AlbertConfig, *, seq: int, preds: int, train_batch_size: int, num_replicas: int = 1,
              gradient_accumulation_steps: int = 1, precision: str = "bfloat16", optimizer: str = "lamb",
              device: Device = DEVICES["h100"], peak_fraction: float = DEFAULT_PEAK_FRACTION,
              headroom: float = DEFAULT_HEADROOM) -> Plan:
    """Memory, largest micro-batch, FLOPs and step time of a pretraining setup.

    Args:
        config: the model.
        seq: sequence length (at most `config.max_position_embeddings`).
        preds: masked positions per sequence (at most `seq`).
        train_batch_size: global batch; a multiple of num_replicas x
            gradient_accumulation_steps.
        num_replicas: data-parallel replicas.
        gradient_accumulation_steps: micro-steps per optimizer step.
        precision: "float32", "bfloat16" or "float16".
        optimizer: "lamb" or "adamw".
        device: a `Device` (`DEVICES[name]` or `cpu_device`).
        peak_fraction: fraction of the peak matmul rate reached, in (0, 1].
        headroom: fraction of memory kept free (allocator fragmentation,
            the framework's own buffers), in [0, 1).

    Raises:
        ValueError: a value out of range, quoted.
    """
    _check_positive(max_seq_length=seq, train_batch_size=train_batch_size, num_replicas=num_replicas,
                    gradient_accumulation_steps=gradient_accumulation_steps)
    if seq > config.max_position_embeddings:
        raise ValueError(f"max_seq_length={seq} exceeds the model's max_position_embeddings="
                         f"{config.max_position_embeddings}.")
    if isinstance(preds, bool) or not isinstance(preds, int) or not 0 <= preds <= seq:
        raise ValueError(f"max_predictions_per_seq must be an integer in [0, max_seq_length={seq}], got {preds!r}.")
    per_step = num_replicas * gradient_accumulation_steps
    if train_batch_size % per_step:
        raise ValueError(f"train_batch_size={train_batch_size} is not a multiple of num_replicas x "
                         f"gradient_accumulation_steps = {num_replicas} x {gradient_accumulation_steps}.")
    if not 0 < peak_fraction <= 1:
        raise ValueError(f"peak_fraction must be in (0, 1], got {peak_fraction!r}.")
    if not 0 <= headroom < 1:
        raise ValueError(f"headroom must be in [0, 1), got {headroom!r}.")
    _compute_bytes(precision)
    if precision == "float16" and not device.float16:
        raise ValueError(f"precision='float16' is not available on {device.name} (no float16 matmul units); "
                         "use bfloat16.")

    def memory(micro_batch: int, accumulation: int) -> MemoryPlan:
        return memory_plan(config, seq, preds, micro_batch, precision=precision, optimizer=optimizer,
                           gradient_accumulation_steps=accumulation)

    usable = device.memory_bytes * (1.0 - headroom)
    per_replica = train_batch_size // num_replicas

    def largest(accumulation: int) -> int:
        return largest_fitting(lambda b: memory(b, accumulation).total, usable, limit=per_replica)

    smallest = None
    for accumulation in range(1, per_replica + 1):
        if per_replica % accumulation == 0 and per_replica // accumulation <= largest(accumulation):
            smallest = accumulation
            break
    rate = device.peak_flops if precision != "float32" else device.float32_flops
    flops = train_batch_size * training_flops_per_sequence(config, seq, preds)
    return Plan(
        config=config, seq=seq, preds=preds, train_batch_size=train_batch_size, num_replicas=num_replicas,
        gradient_accumulation_steps=gradient_accumulation_steps, precision=precision, optimizer=optimizer,
        device=device, peak_fraction=peak_fraction, headroom=headroom,
        memory=memory(train_batch_size // per_step, gradient_accumulation_steps),
        largest_micro_batch=largest(gradient_accumulation_steps), smallest_accumulation=smallest,
        flops_per_step=flops, step_seconds=flops / (num_replicas * rate * peak_fraction),
    )
