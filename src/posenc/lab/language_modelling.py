"""The ``lm`` task: byte-level language modelling of the Python standard library's source
(:mod:`posenc.lab.corpus`), scored in bits per byte.

Training draws windows of L bytes preceded by BOS, at positions 0 … L − 1. Every length is evaluated
over the same validation bytes (the first ``eval_size`` bytes of the validation split, cut into
non-overlapping windows of the length; each window starts with BOS), so lengths differ only in how
much context each byte has. Reported per length: bits per byte over all positions, at positions < L
and ≥ L, and per position. Sliding-window evaluation (windows every ``stride`` bytes, scoring each
window's last ``stride`` bytes) is optional.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F

from posenc._validation import at_least_float32
from posenc.lab.corpus import Corpus, build_corpus
from posenc.lab.evaluate import EVAL_TOKENS, cannot_run, position_limit
from posenc.lab.tasks import BITS_PER_BYTE, Batch, Task, register_task

if TYPE_CHECKING:
    from posenc.lab.presets import RunConfig
    from posenc.model import TransformerLM

#: Beginning-of-sequence token (bytes are 0 … 255).
BYTE_BOS = 256


def windows_batch(windows: torch.Tensor) -> Batch:
    """Byte windows ``[b, n]`` as a batch predicting every byte from BOS and the bytes before it."""
    bos = torch.full((windows.shape[0], 1), BYTE_BOS, dtype=torch.int64)
    inputs = torch.cat((bos, windows[:, :-1]), dim=1)  # [b, n]
    return Batch(inputs, windows, torch.ones_like(windows, dtype=torch.bool))


@torch.no_grad()
def _nll(model: TransformerLM, inputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    device = next(model.parameters()).device
    logits = model(inputs.to(device))  # [b, s, vocab]
    nll = F.cross_entropy(
        at_least_float32(logits.flatten(0, 1)), targets.to(device).flatten(), reduction="none"
    )
    return nll.view(targets.shape).double().cpu()  # [b, s] nats


def bits_per_position(model: TransformerLM, data: torch.Tensor, length: int) -> tuple[torch.Tensor, int]:
    """Mean bits per byte at each position of non-overlapping windows of ``length`` over ``data``.

    Returns the curve ``[length]`` and the number of windows.
    """
    windows = data[: data.numel() // length * length].view(-1, length)  # [w, n]
    total = torch.zeros(length, dtype=torch.float64)  # [n]
    for chunk in windows.split(max(1, EVAL_TOKENS // length)):
        batch = windows_batch(chunk.long())
        total += _nll(model, batch.inputs, batch.targets).sum(0)
    return total / windows.shape[0] / math.log(2), windows.shape[0]


def sliding_bits_per_byte(model: TransformerLM, data: torch.Tensor, length: int, stride: int) -> float:
    """Bits per byte with windows of ``length`` every ``stride`` bytes, each scoring its last ``stride``
    bytes (the first window scores all of its bytes), so every byte but the first few has at least
    ``length − stride`` bytes of context."""
    starts = list(range(0, data.numel() - length + 1, stride))
    total, count = 0.0, 0
    rows = max(1, EVAL_TOKENS // length)
    for first in range(0, len(starts), rows):
        chunk = starts[first : first + rows]
        windows = torch.stack([data[s : s + length] for s in chunk]).long()  # [b, n]
        batch = windows_batch(windows)
        nll = _nll(model, batch.inputs, batch.targets)  # [b, n]
        for row, start in enumerate(chunk):
            scored = nll[row] if start == 0 else nll[row, length - stride :]
            total, count = total + float(scored.sum()), count + scored.numel()
    return total / count / math.log(2)


class LanguageModelling(Task):
    """Byte-level language modelling: windows of L bytes preceded by BOS, positions 0 … L − 1."""

    family = BITS_PER_BYTE
    vocab_size = 257  # 256 bytes and BOS
    unit = "bytes"
    causal = True  # a decoder
    axes = 1
    metrics = ("bpb", "curve")
    uses_corpus = True

    def __init__(self, corpus: Corpus | None = None) -> None:
        self.name = "lm"
        self._corpus = corpus

    @property
    def corpus(self) -> Corpus:
        """The corpus, read on first use."""
        if self._corpus is None:
            self._corpus = build_corpus()
        return self._corpus

    def sequence_length(self, length: int) -> int:
        return length

    def fingerprint(self) -> dict | None:
        return self.corpus.fingerprint

    def train_batch(self, batch_size: int, length: int, generator: torch.Generator) -> Batch:
        data = self.corpus.train
        starts = torch.randint(0, data.numel() - length, (batch_size,), generator=generator)  # [b]
        windows = data[starts[:, None] + torch.arange(length)].long()  # [b, L]
        return windows_batch(windows)

    def eval_size(self, size: int, lengths: tuple[int, ...]) -> int:
        """Whole windows of every length, so that every length reads the same bytes."""
        window = math.lcm(*lengths)
        return window * max(1, size // window)

    def check(self, config: RunConfig) -> None:
        """Refuse now, not after training, lengths the corpus cannot supply."""
        corpus = self.fingerprint()
        train_bytes = corpus["bytes"] - corpus["validation_bytes"]
        if config.train_length >= train_bytes:
            raise ValueError(
                f"train_length={config.train_length} does not fit the corpus's {train_bytes} training bytes"
            )
        if config.eval_size > corpus["validation_bytes"]:
            raise ValueError(
                f"eval_lengths={list(config.eval_lengths)} need {config.eval_size} validation bytes (whole "
                f"windows of every length over the same bytes); the corpus has {corpus['validation_bytes']}"
            )

    def evaluate(self, model: TransformerLM, config: RunConfig) -> dict:
        """Per evaluation length: bits per byte (all positions, < L, ≥ L, per position)."""
        data = self.corpus.validation[: config.eval_size]
        if data.numel() < config.eval_size:
            raise ValueError(
                f"eval_size={config.eval_size} exceeds the validation split ({data.numel()} bytes)"
            )
        limit, length_l = position_limit(model), config.train_length
        results = {}
        for length in config.eval_lengths:
            if limit is not None and length > limit:
                results[str(length)] = cannot_run(limit, length)
                continue
            curve, windows = bits_per_position(model, data, length)
            entry = {
                "status": "ok",
                "windows": windows,
                "bpb": float(curve.mean()),
                "bpb_before_L": float(curve[:length_l].mean()),
                "bpb_from_L": float(curve[length_l:].mean()) if length > length_l else None,
                "curve": [round(float(v), 6) for v in curve],
            }
            if config.sliding_stride is not None:
                entry["bpb_sliding"] = sliding_bits_per_byte(model, data, length, config.sliding_stride)
            results[str(length)] = entry
        return results

    def summary(self, entry: dict) -> str:
        return f"{entry['bpb']:.3f} bpb"


register_task("lm", LanguageModelling())
