"""What a lab preset is made of: the model, the training budget and the evaluation of a task
(:class:`TaskSetup`), a context-extension study, and the named sweep (:class:`Preset`). The presets
themselves are in :mod:`posenc.lab.presets`."""

from __future__ import annotations

from dataclasses import dataclass, field

from posenc.lab.tasks import task_named, task_names


@dataclass(frozen=True)
class ModelConfig:
    """The transformer every encoding is trained in (``posenc.model.TransformerLM``)."""

    d_model: int = 64  # model width
    n_layers: int = 2  # transformer blocks
    n_heads: int = 4  # attention heads (d_head = d_model / n_heads)
    d_ff: int | None = None  # MLP width; None means 4·d_model
    embedding_scale: float = 1.0  # token embeddings × this before the encoding (√d_model: Vaswani et al.)


@dataclass(frozen=True)
class TrainConfig:
    """Optimisation budget: AdamW, linear warm-up then cosine decay to a tenth of ``lr``."""

    steps: int = 1000  # optimiser steps
    batch_size: int = 32  # global batch (split over ranks under DDP)
    lr: float = 2e-3  # peak learning rate
    warmup: int = 100  # linear warm-up steps
    weight_decay: float = 0.1  # AdamW weight decay (matrices only)
    grad_clip: float = 1.0  # global gradient-norm clip
    checkpoint_every: int = 250  # steps between checkpoints (model, optimiser, RNG)
    log_every: int = 50  # steps between recorded training losses
    #: steps between evaluations at L during training (the task's ``learning_point``: exact match at L),
    #: recorded as ``curve_at_L``: when a run first learns its task; None: none (and absent from the
    #: config's JSON, so runs recorded before it keep their hashes)
    curve_every: int | None = None


@dataclass(frozen=True)
class TaskSetup:
    """How one task is run under a preset."""

    model: ModelConfig  # the model shape
    train: TrainConfig  # the training budget
    train_length: int  # L: bytes per window (lm) or symbols per operand, trained on 1 … L (algorithmic)
    eval_multipliers: tuple[float, ...] = (1, 2, 4, 8)  # evaluation lengths as multiples of L (rounded)
    eval_size: int = 65536  # validation bytes (lm, the same bytes at every length) or examples per length
    encodings: tuple[str, ...] | None = None  # the encodings trained by default; None: every registered one

    def eval_lengths(self, length: int) -> tuple[int, ...]:
        """The evaluation lengths for a training length L: each multiplier × L, rounded."""
        return tuple(sorted({round(m * length) for m in self.eval_multipliers}))


@dataclass(frozen=True)
class ExtensionStudy:
    """The context-extension study (``posenc.lab.extension``): a RoPE language model trained at L, then
    evaluated at each ``factors`` × L with every scaling, zero-shot and after a short fine-tune at that
    length; the ``from_scratch`` encodings trained at L alongside."""

    scalings: tuple[str, ...] = ("unscaled", "linear", "ntk", "dynamic", "yarn", "llama3", "longrope")
    factors: tuple[int, ...] = (2, 4, 8)  # target lengths as multiples of L
    finetune_fraction: float = 0.05  # fine-tuning steps as a fraction of the pre-training steps
    finetune_lr_ratio: float = 0.25  # fine-tuning peak learning rate as a fraction of pre-training's
    from_scratch: tuple[str, ...] = ("alibi", "t5", "fire")  # trained at L and evaluated at the targets
    #: position remaps of the unscaled base (posenc.lab.remaps), after the scalings
    remaps: tuple[str, ...] = ("self_extend", "rerope", "pose", "continuous")
    remap_window_fraction: float = 0.5  # Self-Extend's neighbour window and ReRoPE's w, as a fraction of L
    base: str = "rope"  # the encoding that is extended
    task: str = "lm"  # the task it is trained and extended on


@dataclass(frozen=True)
class Preset:
    """A named sweep: tasks with their setups, seeds, and (by default) every applicable encoding.

    ``setups`` is keyed by task name or by family (:data:`posenc.lab.tasks.FAMILIES`): a task runs with
    its own setup, else with its family's, so a task registered anywhere runs under every preset that
    sets up its family.
    """

    name: str  # the preset's name
    description: str  # what it is for and how long it takes
    seeds: tuple[int, ...]  # seeds run for every (task, encoding)
    setups: dict[str, TaskSetup] = field(default_factory=dict)  # task name or family -> setup
    extension: ExtensionStudy | None = None  # a context-extension study instead of the task sweep
    default_tasks: tuple[str, ...] | None = None  # the tasks a sweep runs unless told; None: all of ``tasks``
    threads: int | None = None  # torch threads per process unless --threads says; None: cores / processes
    when_named: tuple[str, ...] = ()  # tasks of ``tasks`` a sweep runs only when named (--task)

    @property
    def tasks(self) -> dict[str, TaskSetup]:
        """The registered tasks this preset runs, in :func:`~posenc.lab.tasks.task_names`' order, each
        with its setup: its own, else its family's."""
        chosen = {}
        for name in task_names():
            setup = self.setups.get(name) or self.setups.get(task_named(name).family)
            if setup is not None:
                chosen[name] = setup
        return chosen

    @property
    def sweep_tasks(self) -> tuple[str, ...]:
        """The tasks a sweep of this preset runs when no task is named."""
        if self.default_tasks is not None:
            return self.default_tasks
        return tuple(task for task in self.tasks if task not in self.when_named)


__all__ = ["ExtensionStudy", "ModelConfig", "Preset", "TaskSetup", "TrainConfig"]
