"""Evaluation at lengths L, 2L, 4L, …: bits per byte per position (lm) and exact match (algorithmic).

Language modelling evaluates every length over the same validation bytes (the first ``eval_size``
bytes of the validation split, cut into non-overlapping windows of the length; each window starts
with BOS), so lengths differ only in how much context each byte has. Reported per length: bits per
byte over all positions, at positions < L and ≥ L, and per position. Sliding-window evaluation
(windows every ``stride`` bytes, scoring each window's last ``stride`` bytes) is optional.

Algorithmic tasks score exact match by one teacher-forced forward pass: an example is right when
every answer token and EOS is the argmax prediction, the same verdict as greedy decoding. The accuracy
at each answer position is kept too: it shows which tokens a model that fails the example misses.

The grid task scores, per grid side, the patches with both neighbours and whole grids, with the
encoding the model declares for the new grid (a learned table resampled; :mod:`posenc.lab.grid`).

A model with a position table (learned) is not run past its table: the length is reported as
``cannot run past L`` before any forward pass.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from posenc.lab import algorithmic
from posenc.lab.grid import at_side, grid_accuracy
from posenc.lab.presets import RunConfig
from posenc.lab.tasks import AlgorithmicTask, GridTask, LanguageModelling, Task, examples_batch, windows_batch
from posenc.model import TransformerLM

#: Tokens per forward pass during evaluation.
EVAL_TOKENS = 16384
#: Seed of the algorithmic test sets: the same examples for every run, encoding and seed.
TEST_SEED = 20_240_004
CANNOT_RUN = "cannot run past L"


def position_limit(model: TransformerLM) -> int | None:
    """Positions the model can encode (a learned table's size), or None when unbounded."""
    return model.encoding.position_limit


def _cannot_run(limit: int, positions: int) -> dict:
    return {
        "status": CANNOT_RUN,
        "reason": f"needs {positions} positions; the learned table holds {limit} (the training length)",
    }


@torch.no_grad()
def _nll(model: TransformerLM, inputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    device = next(model.parameters()).device
    logits = model(inputs.to(device))  # [b, s, vocab]
    nll = F.cross_entropy(logits.flatten(0, 1).float(), targets.to(device).flatten(), reduction="none")
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


def evaluate_lm(model: TransformerLM, task: LanguageModelling, config: RunConfig) -> dict:
    """Per evaluation length: bits per byte (all positions, < L, ≥ L, per position)."""
    data = task.corpus.validation[: config.eval_size]
    if data.numel() < config.eval_size:
        raise ValueError(f"eval_size={config.eval_size} exceeds the validation split ({data.numel()} bytes)")
    limit, length_l = position_limit(model), config.train_length
    results = {}
    for length in config.eval_lengths:
        if limit is not None and length > limit:
            results[str(length)] = _cannot_run(limit, length)
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


def exact_match(model: TransformerLM, task: str, n: int, examples: int, batch_size: int = 256) -> dict:
    """Exact match, token accuracy and answer loss on ``examples`` test examples of length n
    (teacher-forced), and the accuracy at each answer position (EOS last): which tokens a model misses."""
    generator = torch.Generator().manual_seed(
        TEST_SEED + 7919 * n + algorithmic.ALGORITHMIC_TASKS.index(task)
    )
    exact, nll_sum = 0, 0.0
    correct_at = None  # [answer tokens]: right predictions at each answer position, summed over examples
    for first in range(0, examples, batch_size):
        count = min(batch_size, examples - first)
        batch = examples_batch(algorithmic.make_examples(task, torch.full((count,), n), generator))
        device = next(model.parameters()).device
        with torch.no_grad():
            logits = model(batch.inputs.to(device)).float().cpu()  # [b, s, vocab]
        right = logits.argmax(-1) == batch.targets  # [b, s]
        exact += int((right | ~batch.mask).all(dim=1).sum())
        answer_right = right[batch.mask].view(count, -1)  # [b, answer tokens]: every example is n long
        correct_at = answer_right.sum(0) if correct_at is None else correct_at + answer_right.sum(0)
        nll = F.cross_entropy(logits.flatten(0, 1), batch.targets.flatten(), reduction="none")
        nll_sum += float(nll[batch.mask.flatten()].sum())
    tokens = examples * len(correct_at)
    return {
        "status": "ok",
        "examples": examples,
        "exact_match": exact / examples,
        "token_accuracy": int(correct_at.sum()) / tokens,
        "position_accuracy": [int(correct) / examples for correct in correct_at],
        "loss": nll_sum / tokens,
    }


def evaluate_algorithmic(model: TransformerLM, task: AlgorithmicTask, config: RunConfig) -> dict:
    """Per evaluation length n: exact match, token accuracy, accuracy per answer position and answer loss."""
    limit = position_limit(model)
    results = {}
    for n in config.eval_lengths:
        positions = task.sequence_length(n) - 1  # the model sees the example without its last token
        if limit is not None and positions > limit:
            results[str(n)] = _cannot_run(limit, positions)
            continue
        results[str(n)] = exact_match(model, task.name, n, config.eval_size)
    return results


def evaluate_grid(model: TransformerLM, config: RunConfig) -> dict:
    """Per evaluation side: accuracy per scored patch and per whole grid, and the patches' loss, on test
    grids drawn from a seed of the side alone (the same grids for every run)."""
    results = {}
    for side in config.eval_lengths:
        moved = at_side(model, config.train_length, side)
        limit = position_limit(moved)
        if limit is not None and side * side > limit:
            results[str(side)] = _cannot_run(limit, side * side)
            continue
        results[str(side)] = grid_accuracy(moved, side, config.eval_size, TEST_SEED + 7919 * side)
    return results


def evaluate(model: TransformerLM, task: Task, config: RunConfig) -> dict:
    """The task's metrics per evaluation length."""
    if isinstance(task, LanguageModelling):
        return evaluate_lm(model, task, config)
    if isinstance(task, GridTask):
        return evaluate_grid(model, config)
    return evaluate_algorithmic(model, task, config)
