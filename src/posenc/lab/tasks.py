"""The lab's tasks behind one interface: byte-level language modelling, the algorithmic tasks and the
grid task of image patches.

A task gives training batches ``(inputs, targets, mask)`` for a training length L, the positions an
encoding reads for them (None: 0 … s − 1), whether its model is causal, and how many positions an
example of a given length occupies, so that the lab can tell beforehand whether an encoding with a
position table (learned) can run at an evaluation length.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from posenc._validation import check_positive_int
from posenc.encodings import PositionalEncoding
from posenc.lab import algorithmic, grid
from posenc.lab.corpus import Corpus, build_corpus

#: Registered task names; ``lm`` is byte-level language modelling on the stdlib corpus, then the
#: algorithmic tasks of :mod:`posenc.lab.algorithmic`, then ``grid`` (:mod:`posenc.lab.grid`).
TASKS = ("lm", *algorithmic.ALGORITHMIC_TASKS, "grid")
#: Beginning-of-sequence token of the byte-level task (bytes are 0 … 255).
BYTE_BOS = 256


@dataclass(frozen=True)
class Batch:
    """One batch of next-token prediction."""

    inputs: torch.Tensor  # [b, s] int64 tokens fed to the model
    targets: torch.Tensor  # [b, s] int64 the token expected at each position
    mask: torch.Tensor  # [b, s] bool, the positions that count in the loss and the metrics
    lengths: torch.Tensor | None = None  # [b] int64, each row's inputs before its padding; None: no padding


def check_task(name: str) -> str:
    """``name`` if it is a task; a ValueError listing the valid tasks otherwise."""
    if name not in TASKS:
        raise ValueError(f"unknown task {name!r}; valid tasks: {', '.join(TASKS)}")
    return name


class LanguageModelling:
    """Byte-level language modelling: windows of L bytes preceded by BOS, positions 0 … L − 1."""

    name = "lm"
    vocab_size = 257
    unit = "bytes"
    causal = True  # a decoder
    axes = 1  # position axes of an example

    def positions(self, encoding: PositionalEncoding, length: int) -> None:
        return None  # 0 … s − 1

    def __init__(self, corpus: Corpus | None = None) -> None:
        self.corpus = build_corpus() if corpus is None else corpus

    def sequence_length(self, length: int) -> int:
        return length

    def fingerprint(self) -> dict | None:
        return self.corpus.fingerprint

    def train_batch(self, batch_size: int, length: int, generator: torch.Generator) -> Batch:
        data = self.corpus.train
        starts = torch.randint(0, data.numel() - length, (batch_size,), generator=generator)  # [b]
        windows = data[starts[:, None] + torch.arange(length)].long()  # [b, L]
        return windows_batch(windows)


def windows_batch(windows: torch.Tensor) -> Batch:
    """Byte windows ``[b, n]`` as a batch predicting every byte from BOS and the bytes before it."""
    bos = torch.full((windows.shape[0], 1), BYTE_BOS, dtype=torch.int64)
    inputs = torch.cat((bos, windows[:, :-1]), dim=1)  # [b, n]
    return Batch(inputs, windows, torch.ones_like(windows, dtype=torch.bool))


class AlgorithmicTask:
    """An algorithmic task (copy, sort, parity, …): train on lengths 1 … L drawn uniformly, score the
    answer tokens."""

    vocab_size = algorithmic.VOCAB_SIZE
    unit = "symbols"
    causal = True
    axes = 1

    def __init__(self, name: str) -> None:
        self.name = name

    def positions(self, encoding: PositionalEncoding, length: int) -> None:
        return None  # 0 … s − 1

    def sequence_length(self, length: int) -> int:
        return algorithmic.sequence_length(self.name, length)

    def fingerprint(self) -> dict | None:
        return None

    def train_batch(self, batch_size: int, length: int, generator: torch.Generator) -> Batch:
        lengths = algorithmic.training_lengths(batch_size, length, generator)
        return examples_batch(algorithmic.make_examples(self.name, lengths, generator))


def examples_batch(examples: algorithmic.Examples) -> Batch:
    """Examples as a next-token batch whose mask selects the answer tokens and EOS."""
    inputs = examples.tokens[:, :-1]  # [b, s]
    lengths = (inputs != algorithmic.PAD).sum(dim=-1)  # [b]: the inputs before each row's padding
    return Batch(inputs, examples.tokens[:, 1:], examples.answer[:, 1:], lengths)


class GridTask:
    """The grid task (:mod:`posenc.lab.grid`): a bidirectional model on side × side grids of patches,
    trained at side L and scored on the patches with two neighbours."""

    name = "grid"
    vocab_size = grid.CLASSES  # the answers' classes; patches are the first 10 tokens
    unit = "patches a side"
    causal = False  # every patch sees its neighbours, before and after it in raster order
    axes = 2

    def sequence_length(self, length: int) -> int:
        return grid_sequence_length(length)

    def fingerprint(self) -> dict | None:
        return None

    def positions(self, encoding: PositionalEncoding, length: int) -> torch.Tensor:
        return grid.positions_for(encoding, length)

    def train_batch(self, batch_size: int, length: int, generator: torch.Generator) -> Batch:
        symbols, answers = grid.make_grids(batch_size, length, generator)
        return Batch(symbols, answers, grid.scored(length).expand(batch_size, -1))


def grid_sequence_length(side: int) -> int:
    """Patches of a side × side grid; a ValueError for a side below 2 (no patch with two neighbours)."""
    if check_positive_int("side", side) < 2:
        raise ValueError(f"a grid needs a side of at least 2 (a patch with both neighbours), got {side}")
    return side * side


Task = LanguageModelling | AlgorithmicTask | GridTask


def task_class(name: str) -> type[Task]:
    """The class of the task registered as ``name`` (what it declares, without reading any data)."""
    check_task(name)
    return {"lm": LanguageModelling, "grid": GridTask}.get(name, AlgorithmicTask)


def make_task(name: str) -> Task:
    """The task registered as ``name`` (the language-modelling corpus is read on first use)."""
    cls = task_class(name)
    return cls(name) if cls is AlgorithmicTask else cls()


def make_task_shape(name: str, length: int) -> int:
    """Positions an example of ``length`` occupies in task ``name``, without reading any data."""
    cls = task_class(name)
    if cls is LanguageModelling:
        return length
    return grid_sequence_length(length) if cls is GridTask else algorithmic.sequence_length(name, length)
