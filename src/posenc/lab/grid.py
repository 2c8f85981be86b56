"""The grid task: resolution generalisation of encodings of image patches, on a synthetic image.

An "image" is a side × side grid of patches, each one of 10 symbols drawn uniformly; a bidirectional
model reads it in raster order (row by row, as ViTs flatten patches) and names at every patch the
pair (upper neighbour, left neighbour): one of 100 classes, 10·upper + left. Patches in the first row
or column, which lack one of them, are not scored. Each neighbour alone lowers the loss, so either
offset can be learned first; a patch is right when both are. The answer sits at two fixed 2-D
offsets, (−1, 0) and (0, −1), at every resolution: an encoding that lets attention find an offset on
the grid solves a larger grid as it solves the trained one; on raster positions the upper neighbour
is ``side`` tokens back, an offset that changes with the resolution.

Trained at one side and evaluated at larger ones, as a ViT pre-trained at 224² is used at 384²
(Dosovitskiy et al., 2021, §3.2): a learned table is resampled to the new grid
(:meth:`posenc.encodings.PositionalEncoding.for_grid`), the other encodings read the new coordinates.
Registered as the task ``grid`` (:class:`GridTask`).
"""

from __future__ import annotations

import copy

import torch
import torch.nn.functional as F

from posenc._validation import at_least_float32, check_positive_int
from posenc.encodings import PositionalEncoding, describe
from posenc.functional.coordinates import grid_positions
from posenc.lab.evaluate import TEST_SEED, cannot_run, position_limit
from posenc.lab.tasks import GRID_ACCURACY, Batch, Task, register_task

#: Symbols of a patch (tokens 0 … 9).
SYMBOLS = 10
#: Answer classes: 10·upper + left for every pair of neighbours (the model's vocabulary).
CLASSES = SYMBOLS * SYMBOLS


def make_grids(batch_size: int, side: int, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """``batch_size`` random grids of ``side`` × ``side`` patches, flattened row by row, and their answers.

    Returns:
        (symbols, answers): int64 ``[b, side²]`` each; an unscored patch's answer is 0 (see :func:`scored`).
    """
    check_positive_int("batch_size", batch_size)
    check_positive_int("side", side)
    grids = torch.randint(0, SYMBOLS, (batch_size, side, side), generator=generator)  # [b, side, side]
    answers = torch.zeros_like(grids)
    answers[:, 1:, 1:] = SYMBOLS * grids[:, :-1, 1:] + grids[:, 1:, :-1]  # 10·upper + left
    return grids.flatten(1), answers.flatten(1)


def scored(side: int) -> torch.Tensor:
    """``[side²]`` bool: the patches with both neighbours (not in the first row or column)."""
    mask = torch.zeros(side, side, dtype=torch.bool)
    mask[1:, 1:] = True
    return mask.flatten()


def positions_for(encoding: PositionalEncoding, side: int) -> torch.Tensor:
    """The positions the encoding reads for a side × side grid in raster order: (row, column) for an
    encoding of two axes, (0, row, column) for three (M-RoPE's one frame: t = 0), the raster index
    row·side + column for one (what a 1-D encoding of a flattened image sees).

    The coordinates are those the encoding declares (its description's ``grid_coordinates``): the
    integer patch indices unless it declares others, as DINOv3 declares its grid normalised into
    [−1, 1] (:class:`~posenc.functional.normalized.NormalizedCoordinates`): the (1, side, side) grid
    on three axes, so that the one frame sits where that normalisation puts it.

    Raises:
        ValueError: an encoding of more than three columns, or one of one column that declares
            coordinates of a grid (a raster index has none).
    """
    columns = encoding.position_space.columns
    declared = describe(encoding).grid_coordinates
    if columns == 1:
        if declared is not None:
            raise ValueError(
                f"{type(encoding).__name__} takes positions on one axis but declares grid_coordinates "
                f"{declared}: a raster index has no coordinates to normalise"
            )
        return torch.arange(side * side)
    if columns not in (2, 3):
        raise ValueError(f"an encoding of {columns} position columns has no reading of a 2-D grid")
    sizes = (side, side) if columns == 2 else (1, side, side)
    if declared is not None:
        return declared.grid(sizes)  # [side², columns] float64
    return grid_positions(sizes)  # [side², columns] int64


def at_side(model, trained_side: int, side: int):
    """The model as used on a side × side grid: itself, or a copy whose encoding is the one it declares
    for the new grid (a learned table resampled, :meth:`PositionalEncoding.for_grid`)."""
    encoding = model.encoding.for_grid((trained_side, trained_side), (side, side))
    if encoding is model.encoding:
        return model
    moved = copy.deepcopy(model)
    old = moved.encoding
    moved.encoding = encoding
    for block in moved.blocks:
        if block.attention.encoding is old:
            block.attention.encoding = encoding
    return moved


def grid_accuracy(model, side: int, examples: int, seed: int, batch_size: int = 64) -> dict:
    """Accuracy of ``model`` (as used at this side: :func:`at_side`) on ``examples`` test grids of
    ``side``: per scored patch, per whole grid (every scored patch right), and the scored patches' loss."""
    generator = torch.Generator().manual_seed(seed)
    mask = scored(side)
    positions = positions_for(model.encoding, side)
    device = next(model.parameters()).device
    exact, correct, loss_sum = 0, 0, 0.0
    for first in range(0, examples, batch_size):
        count = min(batch_size, examples - first)
        symbols, answers = make_grids(count, side, generator)
        with torch.no_grad():
            logits = at_least_float32(model(symbols.to(device), positions.to(device))).cpu()  # [b, s, 100]
            logits = logits[:, mask]  # [b, n, 100]
        right = logits.argmax(-1) == answers[:, mask]  # [b, n]
        exact += int(right.all(dim=1).sum())
        correct += int(right.sum())
        loss_sum += float(F.cross_entropy(logits.flatten(0, 1), answers[:, mask].flatten(), reduction="sum"))
    patches = examples * int(mask.sum())
    return {
        "status": "ok",
        "examples": examples,
        "exact_match": exact / examples,
        "token_accuracy": correct / patches,
        "loss": loss_sum / patches,
    }


def grid_sequence_length(side: int) -> int:
    """Patches of a side × side grid; a ValueError for a side below 2 (no patch with two neighbours)."""
    if check_positive_int("side", side) < 2:
        raise ValueError(f"a grid needs a side of at least 2 (a patch with both neighbours), got {side}")
    return side * side


class GridTask(Task):
    """The grid task: a bidirectional model on side × side grids of patches, trained at side L and
    scored on the patches with two neighbours."""

    family = GRID_ACCURACY
    vocab_size = CLASSES  # the answers' classes; patches are the first 10 tokens
    unit = "patches a side"
    causal = False  # every patch sees its neighbours, before and after it in raster order
    axes = 2
    metrics = ("exact_match", "token_accuracy")

    def __init__(self) -> None:
        self.name = "grid"

    def sequence_length(self, length: int) -> int:
        return grid_sequence_length(length)

    def positions(self, encoding: PositionalEncoding, length: int) -> torch.Tensor:
        return positions_for(encoding, length)

    def train_batch(self, batch_size: int, length: int, generator: torch.Generator) -> Batch:
        symbols, answers = make_grids(batch_size, length, generator)
        return Batch(symbols, answers, scored(length).expand(batch_size, -1))

    def evaluate(self, model, config) -> dict:
        """Per evaluation side: accuracy per scored patch and per whole grid, and the patches' loss, on
        test grids drawn from a seed of the side alone (the same grids for every run)."""
        results = {}
        for side in config.eval_lengths:
            moved = at_side(model, config.train_length, side)
            limit = position_limit(moved)
            if limit is not None and side * side > limit:
                results[str(side)] = cannot_run(limit, side * side)
                continue
            results[str(side)] = grid_accuracy(moved, side, config.eval_size, TEST_SEED + 7919 * side)
        return results

    def summary(self, entry: dict) -> str:
        return f"{entry['exact_match']:.2f} EM"


register_task("grid", GridTask())
