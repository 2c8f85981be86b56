"""Presets of the lab (model, training budget and evaluation per task) and the config of one run.

A run is one (task, encoding, seed) under one preset's settings. Its :class:`RunConfig` holds every
setting that changes its result; the sha256 of its canonical JSON is the run's identity in the
records, so re-running a sweep skips what is done and a changed setting is a new run.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import asdict, dataclass, replace

import torch

from posenc._validation import check_int, check_positive_float
from posenc.encodings import available, describe, encoding_class
from posenc.functional.normalized import CoordinateAugmentation
from posenc.lab.setups import ExtensionStudy, ModelConfig, Preset, TaskSetup, TrainConfig
from posenc.lab.stacks import recorded_arguments, stack_named, stack_names
from posenc.lab.stacks import skip_reason as stack_skip_reason
from posenc.lab.study_setups import (
    ADDITION_POSITION_ENCODINGS,
    ADDITION_POSITION_LAYOUTS,
    ADDITION_TOKEN_LAYOUTS,
    CPU_ADDITION,
    CPU_ALGORITHMIC,
    CPU_SUMMATION,
    GPU_ADDITION,
    GPU_ALGORITHMIC,
    GPU_SUMMATION,
    GRID_ENCODINGS,
    KAZEMNEJAD_ENCODINGS,
    STACKS,
    algorithmic_setup,
)
from posenc.lab.tasks import BITS_PER_BYTE, EXACT_MATCH, GRID_ACCURACY, task_named, task_names

#: Version of the run config's layout; part of every hash, so a change never reuses old results.
CONFIG_VERSION = 5
#: Largest seed a run accepts: seeds feed torch's generators (which wrap negative seeds onto large
#: ones) and are stored as sqlite integers, so they are kept to 0 … 2³² − 1.
MAX_SEED = 2**32 - 1


PRESETS: dict[str, Preset] = {
    "smoke": Preset(
        "smoke",
        "every task and encoding for a few steps on a tiny model, one seed: under a minute, for CI",
        (0,),
        {
            BITS_PER_BYTE: TaskSetup(
                ModelConfig(32, 1, 2),
                TrainConfig(12, 8, 3e-3, 2, checkpoint_every=5, log_every=4),
                16,
                eval_size=1024,
            ),
            EXACT_MATCH: algorithmic_setup(
                ModelConfig(32, 1, 2), TrainConfig(12, 16, 3e-3, 2, checkpoint_every=5, log_every=4), 3, 32
            ),
            GRID_ACCURACY: TaskSetup(  # 100 answer classes: a larger batch and step, so 12 steps lower every loss
                ModelConfig(32, 1, 2),
                TrainConfig(12, 64, 1e-2, 2, checkpoint_every=5, log_every=4),
                3,
                eval_multipliers=(1, 2),
                eval_size=16,
            ),
        },
        # one thread: its models are too small for a second to pay, and on two cores shared with other
        # work each step's wait for a second thread took its 108 runs from 26 s to 350 s
        threads=1,
        # the addition layouts are the addition preset's study: run here when named
        when_named=(*ADDITION_TOKEN_LAYOUTS[1:], *ADDITION_POSITION_LAYOUTS),
    ),
    "cpu": Preset(
        "cpu",
        "Kazemnejad et al.'s five encodings on lm (L=64) and on copy, reverse and sort (trained on 1 … 20 "
        "symbols, tested to 40), 3 seeds, on CPU; its summation (trained on 1 … 8, tested to 16, as in "
        "Kazemnejad et al.), addition and parity run only when named (--task)",
        (0, 1, 2),
        {
            BITS_PER_BYTE: TaskSetup(
                ModelConfig(64, 2, 4),
                TrainConfig(1000, 32, 2e-3, 100, checkpoint_every=250),
                64,
                eval_size=65536,
                encodings=KAZEMNEJAD_ENCODINGS,
            ),
            EXACT_MATCH: CPU_ALGORITHMIC,
            "summation": CPU_SUMMATION,
        },
        default_tasks=("lm", "copy", "reverse", "sort"),
    ),
    "gpu": Preset(
        "gpu",
        "Kazemnejad et al.'s five encodings on copy, reverse, addition, sort (trained on 1 … 20 symbols, tested "
        "to 40) and summation (on 1 … 8, tested to 16) with a wider model and 8× the cpu preset's batch, 3 seeds, "
        "on one GPU; its lm, grid and parity, and every other encoding, run when named (--task, --encodings); "
        "the addition and extension studies on one GPU are the gpu-addition and gpu-extension presets",
        (0, 1, 2),
        {
            BITS_PER_BYTE: TaskSetup(
                ModelConfig(384, 6, 6),
                TrainConfig(20000, 64, 1e-3, 1000, checkpoint_every=1000, log_every=200),
                256,
                eval_size=1 << 20,
            ),
            EXACT_MATCH: GPU_ALGORITHMIC,
            "summation": GPU_SUMMATION,
            GRID_ACCURACY: TaskSetup(
                ModelConfig(256, 6, 8),
                TrainConfig(20000, 64, 1e-3, 1000, checkpoint_every=1000, log_every=200),
                16,
                eval_multipliers=(1, 1.5, 2),
                eval_size=1024,
            ),
        },
        default_tasks=("copy", "reverse", "addition", "sort", "summation"),
        when_named=(*ADDITION_TOKEN_LAYOUTS[1:], *ADDITION_POSITION_LAYOUTS),
    ),
    "gpu-addition": Preset(
        "gpu-addition",
        "the addition study on one GPU: addends of 1 … 20 digits, tested to 50, written unpadded, zero-padded "
        "with the sum reversed and with index hints for Kazemnejad et al.'s five encodings, and at Abacus and "
        "coupled position ids for a learned table and RoPE; the gpu preset's model, 10,000 steps; 3 seeds",
        (0, 1, 2),
        {
            "addition": GPU_ADDITION,
            **{task: GPU_ADDITION for task in ADDITION_TOKEN_LAYOUTS[1:]},
            **{
                task: replace(GPU_ADDITION, encodings=ADDITION_POSITION_ENCODINGS)
                for task in ADDITION_POSITION_LAYOUTS
            },
        },
    ),
    "gpu-extension": Preset(
        "gpu-extension",
        "the context-extension study on one GPU: RoPE trained on lm at L=256 with the gpu preset's language "
        "model (d_model 384, 6 layers, 20,000 steps), then every scaling and position remap at 2L, 4L and 8L, "
        "zero-shot and after a fine-tune of 5% of the steps; ALiBi, T5 and FIRE from scratch; 3 seeds",
        (0, 1, 2),
        {
            "lm": TaskSetup(
                ModelConfig(384, 6, 6),
                TrainConfig(20000, 64, 1e-3, 1000, checkpoint_every=1000, log_every=200),
                256,
                eval_size=1 << 20,
            )
        },
        ExtensionStudy(),
    ),
    "gpu-stacks": Preset(
        "gpu-stacks",
        "the stacks study on one GPU: the stack designs beside pure RoPE, NoPE and ALiBi on lm at L=64 (the "
        "designs' windows and temperature are set for it), an 8-layer model of width 384 for 10,000 steps, "
        "evaluated to 8L, and on copy with the gpu preset's model (1 … 20 symbols, tested to 40); the other "
        "algorithmic tasks when named; 3 seeds",
        (0, 1, 2),
        {
            BITS_PER_BYTE: TaskSetup(
                ModelConfig(384, 8, 6),
                TrainConfig(10000, 64, 1e-3, 500, checkpoint_every=1000, log_every=200),
                64,
                eval_size=1 << 20,
                encodings=STACKS,
            ),
            EXACT_MATCH: replace(GPU_ALGORITHMIC, encodings=STACKS),
        },
        default_tasks=("lm", "copy"),
    ),
    "grid": Preset(
        "grid",
        "resolution generalisation: a bidirectional model trained on 8×8 grids of patches (each patch names "
        "its upper and its left neighbour), tested on 12×12 and 16×16; the encodings of image patches (a "
        "learned table resampled, DINOv3 on its normalised coordinates, STRING) and 1-D RoPE on the raster "
        "order; 3 seeds",
        (0, 1, 2),
        {
            GRID_ACCURACY: TaskSetup(
                ModelConfig(64, 4, 4),
                TrainConfig(1500, 16, 1e-3, 100, checkpoint_every=500),
                8,
                eval_multipliers=(1, 1.5, 2),
                eval_size=256,
                encodings=GRID_ENCODINGS,
            )
        },
    ),
    "addition": Preset(
        "addition",
        "addition that can be learned: addends of 1 … 8 digits, tested to 16, written unpadded, zero-padded "
        "with the sum reversed (Lee et al.) and with index hints (Zhou et al.) for Kazemnejad et al.'s five "
        "encodings, and at Abacus (McLeish et al.) and coupled (Cho et al.) position ids for a learned "
        "table and RoPE; 3 seeds, on CPU",
        (0, 1, 2),
        {
            **{task: CPU_ADDITION for task in ADDITION_TOKEN_LAYOUTS},
            **{
                task: replace(CPU_ADDITION, encodings=ADDITION_POSITION_ENCODINGS)
                for task in ADDITION_POSITION_LAYOUTS
            },
        },
        threads=1,
    ),
    "extension": Preset(
        "extension",
        "the context-extension study: RoPE trained on lm at L=64, then every scaling and position remap "
        "(Self-Extend, ReRoPE, PoSE, continuous random positions) at 2L, 4L and 8L, zero-shot and after a "
        "fine-tune of 5% of the steps (as many tokens a step); ALiBi, T5 and FIRE from scratch; 3 seeds",
        (0, 1, 2),
        {
            "lm": TaskSetup(
                ModelConfig(64, 2, 4),
                TrainConfig(2000, 32, 2e-3, 100, checkpoint_every=250),
                64,
                eval_size=65536,
            )
        },
        ExtensionStudy(),
    ),
    "stacks": Preset(
        "stacks",
        "stacks whose layers differ (posenc.lab.stacks) against pure RoPE, NoPE and ALiBi: RNoPE, RNoPE-SWA, "
        "RNoPE with Llama 4's temperature and FoX, a 4-layer lm at L=64 (300 steps) evaluated to 8L, and copy "
        "(trained on 1 … 20 symbols, tested to 40, the cpu preset's setup); the other algorithmic tasks when "
        "named; 3 seeds",
        (0, 1, 2),
        {
            BITS_PER_BYTE: TaskSetup(
                ModelConfig(64, 4, 4),
                TrainConfig(300, 32, 2e-3, 30, checkpoint_every=100),
                64,
                eval_size=32768,
                encodings=STACKS,
            ),
            EXACT_MATCH: replace(CPU_ALGORITHMIC, encodings=STACKS),
        },
        default_tasks=("lm", "copy"),
    ),
}


def check_preset(name: str) -> Preset:
    """The preset called ``name``; a ValueError listing the valid presets otherwise."""
    if name not in PRESETS:
        raise ValueError(f"unknown preset {name!r}; valid presets: {', '.join(PRESETS)}")
    return PRESETS[name]


def task_setup(preset: Preset, task: str) -> TaskSetup:
    """How ``preset`` runs ``task``; a ValueError naming the preset's tasks if it has none for it."""
    task_named(task)  # an unknown task: the valid ones listed
    tasks = preset.tasks
    if task not in tasks:
        raise ValueError(
            f"the {preset.name} preset does not run task {task!r}; its tasks: {', '.join(tasks)}"
        )
    return tasks[task]


def skip_reason(encoding: str, task: str) -> str | None:
    """Why the lab does not train ``encoding`` on ``task``, or None: the encoding's own answer for a task
    of that many position axes, else its refusal of the task's model (CoPE refuses a bidirectional one);
    for a stack design (:mod:`posenc.lab.stacks`), the first such answer of an encoding its layers name."""
    declared, stack = task_named(task), stack_named(encoding)
    if stack is not None:
        return stack_skip_reason(
            stack, declared.axes, declared.causal, {"d_model": 64, "n_heads": 4, "max_len": 64}
        )
    cls = encoding_class(encoding)
    reason = describe(encoding).lab_skip_reason(declared.axes)
    if reason is not None:
        return reason
    try:
        cls.model_arguments(d_model=64, n_heads=4, max_len=64, causal=declared.causal)
    except ValueError as refusal:
        return str(refusal)
    return None


def not_applicable(task: str) -> dict[str, str]:
    """The registered encodings the lab does not train on ``task``, each with its own reason."""
    reasons = {name: skip_reason(name, task) for name in available()}
    return {name: reason for name, reason in reasons.items() if reason is not None}


def lab_encodings() -> list[str]:
    """Every registered encoding the lab trains on some task."""
    tasks = task_names()
    return [name for name in available() if any(skip_reason(name, t) is None for t in tasks)]


def check_encodings(names: list[str]) -> list[str]:
    """``names`` if each is a registered encoding or stack design; a ValueError listing the valid ones otherwise."""
    for name in names:
        if name not in available() and stack_named(name) is None:
            raise ValueError(
                f"unknown encoding {name!r}; valid encodings: {', '.join(available())}; "
                f"stacks: {', '.join(stack_names())}"
            )
    return names


@dataclass(frozen=True)
class RunConfig:
    """Everything that determines one run's result; hashed into the run's identity."""

    task: str  # task name
    encoding: str  # registered encoding name
    seed: int  # model initialisation and data order
    model: ModelConfig  # transformer shape
    train: TrainConfig  # optimisation budget
    train_length: int  # L
    eval_lengths: tuple[int, ...]  # lengths evaluated (each ≥ L)
    eval_size: int  # validation bytes (a corpus task) or examples per length
    sliding_stride: int | None  # a corpus task: also evaluate windows overlapping by (n − stride); None: off
    encoding_kwargs: dict  # arguments for posenc.build on top of the model's defaults (recorded)
    train_backend: str  # attention backend while training ("flex" for bias encodings)
    eval_backend: str  # attention backend for evaluation (same function; no compilation per length)
    corpus_sha256: str | None  # fingerprint of the task's corpus; None for a task without one
    random_positions: int | None = None  # Ruoss et al.'s randomized positions: training range; None: off
    init_from: str | None = None  # config hash of the run whose trained weights this one starts from
    finetune_length: int | None = None  # with init_from: the training windows' length (None: train_length)
    version: int = CONFIG_VERSION  # layout of this config
    #: a position remap of the extension study (``posenc.lab.remaps``: Self-Extend, ReRoPE, PoSE, continuous
    #: random positions) as {"name": …, its settings}; None: none (and absent from the config's JSON, so the
    #: runs recorded before remaps keep their hashes)
    position_remap: dict | None = None
    #: DINOv3's augmentation of the grid's coordinates in training, (shift, jitter, rescale) as
    #: :class:`~posenc.functional.normalized.CoordinateAugmentation` takes them (None: that part off),
    #: drawn once per step from the run's seeded generator; None: off (and absent from the config's JSON,
    #: so the runs recorded before it keep their hashes)
    coordinate_augmentation: tuple[float | None, float | None, float | None] | None = None

    def to_dict(self) -> dict:
        config = asdict(self)
        if config["position_remap"] is None:
            del config["position_remap"]
        if config["coordinate_augmentation"] is None:
            del config["coordinate_augmentation"]
        if config["train"]["curve_every"] is None:
            del config["train"]["curve_every"]
        return config

    def canonical_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"))

    @property
    def config_hash(self) -> str:
        """sha256 of the canonical JSON config: the run's identity in the records."""
        return hashlib.sha256(self.canonical_json().encode()).hexdigest()

    @property
    def label(self) -> str:
        if self.init_from is None:
            return f"{self.task} {self.encoding} seed {self.seed}"
        scaling = self.encoding_kwargs.get("scaling") or "unscaled"
        if self.position_remap is not None:
            scaling = self.position_remap["name"]
        how = f"fine-tuned at {self.finetune_length}" if self.train.steps else "zero-shot"
        return f"{self.task} {self.encoding} {scaling} to {max(self.eval_lengths)}, {how}, seed {self.seed}"

    @property
    def batch_length(self) -> int:
        """The length training batches are drawn at: the fine-tuning length of a run that starts from
        another's weights, L otherwise (L stays the split of evaluation into positions < L and ≥ L)."""
        return self.finetune_length or self.train_length


def encoding_kwargs(encoding: str, task_sequence: int, setup: TaskSetup, causal: bool = True) -> dict:
    """The encoding's constructor arguments, recorded with each run: its own ``model_arguments`` for the
    run's model (causal or not, as its task) and a training sequence of ``task_sequence`` positions (a
    learned table holds exactly that; T5 sizes its buckets so the far ones are reached while training,
    as LAB-NOTES asks). A stack design records the layers it expands to."""
    model = setup.model
    stack = stack_named(encoding)
    if stack is not None:
        return recorded_arguments(stack, model.n_layers)
    return encoding_class(encoding).model_arguments(
        d_model=model.d_model, n_heads=model.n_heads, max_len=task_sequence, causal=causal
    )


def backends(encoding: str) -> tuple[str, str]:
    """(training, evaluation) attention backends: SDPA for every encoding, the fastest correct CPU path
    (a materialised bias, or the per-distance table for a bias of the distance alone)."""
    if stack_named(encoding) is None:
        encoding_class(encoding)  # unknown names: the registry's error
    return "sdpa", "sdpa"


def _embedding_scale(scale: float | str, d_model: int) -> float:
    """√d_model for ``"sqrt"``, else ``scale`` if it is a positive finite number; an error naming it otherwise."""
    if scale == "sqrt":
        return math.sqrt(d_model)
    if isinstance(scale, str):
        raise ValueError(f"embedding_scale must be a positive number or 'sqrt', got {scale!r}")
    return check_positive_float("embedding_scale", scale)


def check_at_least_one(name: str, value: int) -> int:
    """``value`` if it is an integer ≥ 1; a TypeError or a ValueError naming ``name`` otherwise.

    Steps, lengths and intervals below 1 would record untrained runs or divide by zero.
    """
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an integer, got {value!r}")
    if value < 1:
        raise ValueError(f"{name} must be at least 1, got {value}")
    return value


def check_seeds(seeds: list[int] | tuple[int, ...]) -> list[int]:
    """``seeds`` if each is an integer in 0 … MAX_SEED and none repeats; an error naming the seed otherwise."""
    seen = set()
    for seed in seeds:
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise TypeError(f"seed must be an integer, got {seed!r}")
        if not 0 <= seed <= MAX_SEED:
            raise ValueError(f"seed must be between 0 and {MAX_SEED}, got {seed}")
        if seed in seen:
            raise ValueError(f"seeds must be distinct; seed {seed} is given twice")
        seen.add(seed)
    if not seen:
        raise ValueError("seeds must name at least one seed")
    return list(seeds)


def check_eval_lengths(train_length: int, eval_lengths: tuple[int, ...]) -> tuple[int, ...]:
    """Evaluation lengths, each at least the training length; a ValueError otherwise."""
    check_at_least_one("train_length", train_length)
    if not eval_lengths:
        raise ValueError("eval_lengths must name at least one length")
    for length in eval_lengths:
        if length < train_length:
            raise ValueError(
                f"evaluation length {length} is shorter than the training length L={train_length}; "
                "the lab measures generalisation to lengths ≥ L"
            )
    return tuple(sorted(set(eval_lengths)))


@dataclass(frozen=True)
class Overrides:
    """Settings of ``posenc lab run`` that replace a preset's for every planned run; None keeps the
    preset's. Each is recorded in the run's config at its ``OVERRIDE_PLACES`` entry."""

    steps: int | None = None  # optimiser steps
    lr: float | None = None  # peak learning rate
    warmup: int | None = None  # linear warm-up steps
    train_length: int | None = None  # L
    eval_lengths: tuple[int, ...] | None = None  # evaluation lengths, each ≥ L
    sliding_stride: int | None = None  # lm: also evaluate sliding windows with this stride
    checkpoint_every: int | None = None  # steps between checkpoints
    random_positions: int | None = None  # train and evaluate at sorted positions drawn from 0 … R − 1
    embedding_scale: float | str | None = None  # token embeddings × this (or "sqrt": √d_model)
    #: (shift, jitter, rescale): DINOv3's augmentation of a grid's coordinates in training (None: that part off)
    coordinate_augmentation: tuple[float | None, float | None, float | None] | None = None

    def given(self) -> list[str]:
        """The names of the settings that are overridden."""
        return [name for name, value in asdict(self).items() if value is not None]

    @classmethod
    def of_config(cls, config: dict) -> Overrides:
        """Every overridable setting as a recorded config (JSON) holds it: what re-plans that run."""
        values = {}
        for name, place in OVERRIDE_PLACES.items():
            value = config
            for key in place.split("."):
                value = value.get(key) if isinstance(value, dict) else None
            values[name] = tuple(value) if isinstance(value, list) else value
        return cls(**values)


#: Every setting as the preset has it.
NO_OVERRIDES = Overrides()

#: Where each override lands in a run's config (dotted keys of its JSON).
OVERRIDE_PLACES = {
    "steps": "train.steps",
    "lr": "train.lr",
    "warmup": "train.warmup",
    "train_length": "train_length",
    "eval_lengths": "eval_lengths",
    "sliding_stride": "sliding_stride",
    "checkpoint_every": "train.checkpoint_every",
    "random_positions": "random_positions",
    "embedding_scale": "model.embedding_scale",
    "coordinate_augmentation": "coordinate_augmentation",
}


def _train_config(train: TrainConfig, overrides: Overrides, source: str = "the preset's") -> TrainConfig:
    """``train`` with the budget's overrides. A warm-up of at least the steps, overridden or
    ``source``'s (``"the smoke preset's for task copy"``), is refused naming both: the learning rate
    would climb for the whole run, never reaching its peak or decaying."""
    if overrides.steps is not None:
        train = replace(train, steps=check_at_least_one("steps", overrides.steps))
    if overrides.lr is not None:
        train = replace(train, lr=check_positive_float("lr", overrides.lr))
    if overrides.warmup is not None:
        if check_int("warmup", overrides.warmup) < 0:
            raise ValueError(f"warmup must be at least 0, got {overrides.warmup}")
        train = replace(train, warmup=overrides.warmup)
    if overrides.checkpoint_every is not None:
        train = replace(
            train, checkpoint_every=check_at_least_one("checkpoint_every", overrides.checkpoint_every)
        )
    if train.warmup >= train.steps:
        steps = "" if overrides.steps is not None else f" ({source})"
        warmup = "" if overrides.warmup is not None else f" ({source})"
        raise ValueError(
            f"warmup={train.warmup}{warmup} must be less than steps={train.steps}{steps}: the learning "
            "rate would warm up for the whole run and never decay"
        )
    return train


def run_config(
    preset: Preset,
    task: str,
    encoding: str,
    seed: int,
    *,
    corpus_sha256: str | None = None,
    overrides: Overrides = NO_OVERRIDES,
) -> RunConfig:
    """The config of one run of ``preset``, with the settings ``overrides`` replaces: the budget (steps,
    peak learning rate, warm-up steps, checkpoints), the lengths, randomized positions (training
    sequences placed in 0 … random_positions − 1) and the token embeddings' scale (a number, or
    ``"sqrt"`` for √d_model).

    Raises:
        ValueError: ``steps``, ``train_length``, ``checkpoint_every`` or ``random_positions`` below 1, an
            ``lr`` that is not positive and finite, a ``warmup`` below 0 or not below the steps, an
            embedding scale that is not positive and finite (nor ``"sqrt"``),
            a randomized range shorter than the longest evaluated sequence, a seed outside
            0 … MAX_SEED, an evaluation length below the training length, a sliding stride outside
            1 … L.
    """
    setup = task_setup(preset, task)
    declared = task_named(task)
    check_seeds([seed])
    length = setup.train_length
    if overrides.train_length is not None:
        length = check_at_least_one("train_length", overrides.train_length)
    lengths = setup.eval_lengths(length) if overrides.eval_lengths is None else overrides.eval_lengths
    lengths = check_eval_lengths(length, lengths)
    train = _train_config(setup.train, overrides, f"the {preset.name} preset's for task {task}")
    eval_size = declared.eval_size(setup.eval_size, lengths)
    stride = overrides.sliding_stride
    if stride is not None and not 1 <= stride <= length:
        raise ValueError(f"sliding_stride must be between 1 and the training length {length}, got {stride}")
    model = setup.model
    if overrides.embedding_scale is not None:
        model = replace(model, embedding_scale=_embedding_scale(overrides.embedding_scale, model.d_model))
    training, evaluation = backends(encoding)
    sequence = declared.position_count(length)
    random_positions = overrides.random_positions
    if random_positions is not None:
        check_at_least_one("random_positions", random_positions)
        longest = declared.sequence_length(max(lengths))
        if random_positions < longest:
            raise ValueError(
                f"random_positions={random_positions} must cover the longest evaluated sequence, {longest} "
                f"positions (the randomized range is where every trained position lies)"
            )
        sequence = random_positions  # a learned table or T5's buckets sized for the whole range
    kwargs = encoding_kwargs(encoding, sequence, setup, declared.causal)
    augmentation = overrides.coordinate_augmentation
    if augmentation is not None:
        augmentation = check_coordinate_augmentation(augmentation, task, declared.axes, encoding, kwargs)
    return RunConfig(
        task=task,
        encoding=encoding,
        seed=seed,
        model=model,
        train=train,
        train_length=length,
        eval_lengths=lengths,
        eval_size=eval_size,
        sliding_stride=stride if declared.uses_corpus else None,
        encoding_kwargs=kwargs,
        train_backend=training,
        eval_backend=evaluation,
        corpus_sha256=corpus_sha256 if declared.uses_corpus else None,
        random_positions=random_positions,
        coordinate_augmentation=augmentation,
    )


def check_coordinate_augmentation(
    augmentation: tuple, task: str, axes: int, encoding: str, kwargs: dict
) -> tuple[float | None, float | None, float | None]:
    """``augmentation`` as (shift, jitter, rescale) if the run can take it: a task of several axes and
    an encoding whose positions are coordinates on them; a ValueError naming the task or the encoding
    otherwise, or the part out of range (:class:`~posenc.functional.normalized.CoordinateAugmentation`)."""
    if not isinstance(augmentation, tuple | list) or len(augmentation) != 3:
        raise ValueError(f"coordinate_augmentation must be (shift, jitter, rescale), got {augmentation!r}")
    drawn = CoordinateAugmentation(*augmentation)
    if not drawn.active:
        raise ValueError("coordinate_augmentation must set at least one of shift, jitter and rescale")
    if axes < 2:
        raise ValueError(
            f"coordinate augmentation moves a grid's coordinates; task {task} has positions on one axis"
        )
    if stack_named(encoding) is None:
        with torch.random.fork_rng(devices=[]):  # building it must not move the caller's RNG
            columns = encoding_class(encoding)(**kwargs).position_space.columns
        if columns < 2:
            raise ValueError(
                f"coordinate augmentation moves coordinates on axes; encoding {encoding} reads one position "
                "per patch (the raster index)"
            )
    shift = None if drawn.shift is None else float(drawn.shift)
    return (shift, drawn.jitter, drawn.rescale)


__all__ = [
    "MAX_SEED",
    "NO_OVERRIDES",
    "PRESETS",
    "GRID_ENCODINGS",
    "KAZEMNEJAD_ENCODINGS",
    "ExtensionStudy",
    "ModelConfig",
    "OVERRIDE_PLACES",
    "Overrides",
    "Preset",
    "RunConfig",
    "TaskSetup",
    "TrainConfig",
    "check_at_least_one",
    "check_coordinate_augmentation",
    "check_encodings",
    "check_eval_lengths",
    "check_preset",
    "check_seeds",
    "lab_encodings",
    "not_applicable",
    "run_config",
    "skip_reason",
    "task_setup",
]
