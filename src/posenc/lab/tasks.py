"""The lab's tasks: each one file describing itself (a :class:`Task`) and one :func:`register_task` line.

A task gives training batches ``(inputs, targets, mask)`` for a training length L, the positions an
encoding reads for them (None: 0 … s − 1), whether its model is causal, how many positions an example
of a given length occupies (so that the lab can tell beforehand whether an encoding with a position
table can run at an evaluation length), and its own evaluation. It declares the metrics every
evaluated length records and its ``family``: the report shows the tasks of one family in one section
(bits per byte, exact match per length, grid accuracy), and a preset's setup for a family serves every
task of it that the preset does not set up by name.

posenc's own tasks: ``lm`` (:mod:`posenc.lab.language_modelling`), the algorithmic tasks
(:mod:`posenc.lab.algorithmic`), the addition layouts (``addition_padded``, ``addition_hints``,
``addition_abacus``, ``addition_coupled``: :mod:`posenc.lab.addition_layout` and a file each) and
``grid`` (:mod:`posenc.lab.grid`). A plugin module calling
:func:`register_task`, or an entry point of the group ``posenc.tasks`` naming a task, adds one that
every lab command knows.
"""

from __future__ import annotations

import importlib
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from posenc import plugins

if TYPE_CHECKING:
    from posenc.encodings import PositionalEncoding
    from posenc.lab.presets import RunConfig
    from posenc.model import TransformerLM

#: Families: the report's section of a task, and the preset setup it falls back on. Bits per byte per
#: length and position; exact match per length; accuracy per grid side. A task of another family is
#: shown as its first metric per length.
BITS_PER_BYTE, EXACT_MATCH, GRID_ACCURACY = "bits per byte", "exact match", "grid accuracy"
FAMILIES = (BITS_PER_BYTE, EXACT_MATCH, GRID_ACCURACY)
#: The modules of posenc's own tasks, each registering what it defines when imported.
BUILT_IN = (
    "posenc.lab.language_modelling",
    "posenc.lab.algorithmic",
    "posenc.lab.addition_padded",
    "posenc.lab.addition_hints",
    "posenc.lab.addition_abacus",
    "posenc.lab.addition_coupled",
    "posenc.lab.grid",
)
#: A task name: lower-case letters, digits and underscores (it names records, options and figure lines).
_NAME = re.compile(r"[a-z][a-z0-9_]*")


@dataclass(frozen=True)
class Batch:
    """One batch of next-token prediction."""

    inputs: torch.Tensor  # [b, s] int64 tokens fed to the model
    targets: torch.Tensor  # [b, s] int64 the token expected at each position
    mask: torch.Tensor  # [b, s] bool, the positions that count in the loss and the metrics
    lengths: torch.Tensor | None = None  # [b] int64, each row's inputs before its padding; None: no padding
    positions: torch.Tensor | None = None  # [b, s] int64 positions of each example's own; None: the task's


class Task:
    """A lab task. Subclasses declare the attributes and implement ``sequence_length``, ``train_batch``
    and ``evaluate``; the other methods have defaults."""

    name: str = ""  # the registered name (set by register_task)
    family: str = ""  # the report section and preset fallback: one of FAMILIES, or a family of its own
    vocab_size: int = 0  # the model's vocabulary
    unit: str = ""  # what a length counts: "bytes", "symbols", "patches a side"
    causal: bool = True  # a decoder; False: every position sees every other (encodings may refuse it)
    axes: int = 1  # position axes of an example (an encoding's ``lab_skip_reason`` reads them)
    metrics: tuple[str, ...] = ()  # what every evaluated length records (a record without them is damaged)
    uses_corpus: bool = False  # reads a corpus: its fingerprint is recorded, sliding windows apply

    def sequence_length(self, length: int) -> int:
        """Positions an example of ``length`` occupies (without reading any data)."""
        raise NotImplementedError(f"task {self.name!r} does not say how long its examples are")

    def positions(self, encoding: PositionalEncoding, length: int) -> torch.Tensor | None:
        """The positions ``encoding`` reads for examples of ``length``; None: 0 … s − 1. A task whose
        examples carry positions of their own (``Batch.positions``) gives them per batch instead."""
        return None

    def position_count(self, length: int) -> int:
        """Distinct positions examples of ``length`` may read (a learned table's size): the tokens of an
        example unless the task gives positions of its own (coupled digits, random offsets)."""
        return self.sequence_length(length)

    def train_batch(self, batch_size: int, length: int, generator: torch.Generator) -> Batch:
        """A training batch at training length ``length``, drawn from ``generator``."""
        raise NotImplementedError(f"task {self.name!r} has no training batches")

    def evaluate(self, model: TransformerLM, config: RunConfig) -> dict[str, dict]:
        """``{str(length): entry}`` per evaluation length: ``{"status": "ok", metric: value, …}``, or
        another status (``cannot run past L``) with a reason."""
        raise NotImplementedError(f"task {self.name!r} has no evaluation")

    def fingerprint(self) -> dict | None:
        """What identifies the data (a corpus's files, bytes and sha256), recorded with each run; None."""
        return None

    def eval_size(self, size: int, lengths: tuple[int, ...]) -> int:
        """The evaluation size a run records, from its setup's ``size`` and its evaluation lengths."""
        return size

    def check(self, config: RunConfig) -> None:
        """Refuse (a ValueError naming the value) a planned run the data cannot supply, before training."""

    def summary(self, entry: dict) -> str:
        """A finished run's result at one length, for its progress line (``0.95 EM``)."""
        return f"{entry[self.metrics[0]]:.3g} {self.metrics[0]}"

    def learning_point(self, model: TransformerLM, config: RunConfig) -> float | None:
        """One number at L that says how far training has got (exact match at L), evaluated every
        ``curve_every`` steps while training; None: the task has none."""
        return None

    def learned(self, entries: list[dict]) -> bool:
        """Whether the seeds' evaluated entries at L say that an encoding learned the task."""
        raise NotImplementedError(f"task {self.name!r} does not say when it is learned")

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r})"


#: name -> task, in the order registered (listed by family: :func:`task_names`).
REGISTRY: dict[str, Task] = {}
_built_in_loaded = False


def _load_built_in() -> None:
    """Import posenc's own task modules, once (each registers its tasks)."""
    global _built_in_loaded
    if not _built_in_loaded:
        _built_in_loaded = True  # first: the modules' own registrations do not come back here
        for module in BUILT_IN:
            importlib.import_module(module)


def is_task(value: object) -> bool:
    """Whether ``value`` is a task or a task class (what an entry point of ``posenc.tasks`` may name)."""
    return isinstance(value, Task) or (isinstance(value, type) and issubclass(value, Task))


def register_task(name: str, task: Task | type[Task]) -> Task:
    """Register ``task`` (a :class:`Task`, or a subclass made without arguments) as ``name``: every lab
    command (``run``, ``report``, ``presets``) and ``posenc report`` then know it. Returns the task.

    Raises:
        TypeError: ``task`` is not a Task.
        ValueError: a name that is not lower-case letters, digits and underscores, one taken by a task
            of another class, or a declaration missing (family, vocab_size, axes, metrics).
    """
    _load_built_in()
    if not is_task(task):
        raise TypeError(f"a lab task is a Task or a Task subclass, got {task!r}")
    task = task() if isinstance(task, type) else task
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise ValueError(f"a task name is lower-case letters, digits and underscores, got {name!r}")
    if name in REGISTRY and type(REGISTRY[name]) is not type(task):
        raise ValueError(f"task name {name!r} is taken by {type(REGISTRY[name]).__name__}")
    _check_declared(task)
    task.name = name
    REGISTRY[name] = task
    plugins.remember_class(type(task))  # a task from outside posenc: its errors are its author's to see
    return task


def _check_declared(task: Task) -> None:
    cls = type(task).__name__
    if not isinstance(task.family, str) or not task.family:
        raise ValueError(
            f"{cls}.family must name the task's family (one of {', '.join(FAMILIES)}, or its own)"
        )
    for attribute in ("vocab_size", "axes"):
        value = getattr(task, attribute)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{cls}.{attribute} must be a positive integer, got {value!r}")
    if not task.metrics or not all(isinstance(metric, str) for metric in task.metrics):
        raise ValueError(f"{cls}.metrics must name what its evaluation records, got {task.metrics!r}")


def unregister_task(name: str) -> None:
    """Forget the task registered as ``name`` (a KeyError naming it when there is none)."""
    if name not in REGISTRY:
        raise KeyError(f"no task is registered as {name!r}")
    del REGISTRY[name]


def task_names() -> tuple[str, ...]:
    """The registered tasks by family (:data:`FAMILIES`' order, then other families), each family's
    built-in tasks in :data:`BUILT_IN`'s order of their modules, then the others in the order registered;
    installed plugins' entry points included."""
    _load_built_in()
    plugins.load_entry_points()
    rank = {family: index for index, family in enumerate(FAMILIES)}
    module = {name: index for index, name in enumerate(BUILT_IN)}  # posenc's own in BUILT_IN's order

    def key(name: str) -> tuple[int, int]:
        task = REGISTRY[name]
        return rank.get(task.family, len(FAMILIES)), module.get(type(task).__module__, len(BUILT_IN))

    return tuple(sorted(REGISTRY, key=key))


def registered(name: str) -> Task | None:
    """The task registered as ``name``, or None (a record of a plugin's task read without it)."""
    _load_built_in()
    if name not in REGISTRY:
        plugins.load_entry_points()
    return REGISTRY.get(name)


def task_named(name: str) -> Task:
    """The task registered as ``name``; a ValueError listing the valid tasks otherwise."""
    task = registered(name)
    if task is None:
        raise ValueError(f"unknown task {name!r}; valid tasks: {', '.join(task_names())}")
    return task


def check_task(name: str) -> str:
    """``name`` if it is a task; a ValueError listing the valid tasks otherwise."""
    task_named(name)
    return name


def make_task(name: str) -> Task:
    """The task registered as ``name`` (a corpus is read on first use)."""
    return task_named(name)


def make_task_shape(name: str, length: int) -> int:
    """Positions an example of ``length`` occupies in task ``name``, without reading any data."""
    return task_named(name).sequence_length(length)


def __getattr__(name: str) -> object:
    if name == "TASKS":  # the registered names when asked: a task registered later is among them
        return task_names()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "BITS_PER_BYTE",
    "BUILT_IN",
    "EXACT_MATCH",
    "FAMILIES",
    "GRID_ACCURACY",
    "REGISTRY",
    "Batch",
    "Task",
    "check_task",
    "is_task",
    "make_task",
    "make_task_shape",
    "register_task",
    "registered",
    "task_named",
    "task_names",
    "unregister_task",
]
