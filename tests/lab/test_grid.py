"""The grid task: its answers from the definition, the patches it scores, the positions each encoding
reads, the resampled table of a learned encoding on a larger grid, and the scoring itself."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import posenc
from posenc.functional.normalized import NormalizedCoordinates
from posenc.lab.grid import (
    CLASSES,
    SYMBOLS,
    GridTask,
    at_side,
    grid_accuracy,
    grid_sequence_length,
    make_grids,
    positions_for,
    scored,
)
from posenc.lab.tasks import make_task_shape
from posenc.model import TransformerLM


def _answers_from_the_definition(grid: list[list[int]]) -> list[list[int | None]]:
    """The class 10·upper + left where both neighbours exist, None elsewhere."""
    side = len(grid)
    return [
        [10 * grid[r - 1][c] + grid[r][c - 1] if r and c else None for c in range(side)] for r in range(side)
    ]


@pytest.mark.parametrize("side", [2, 3, 7])
def test_answers_name_the_upper_and_the_left_neighbour(side):
    symbols, answers = make_grids(5, side, torch.Generator().manual_seed(side))
    for row_symbols, row_answers in zip(symbols, answers, strict=True):
        grid = row_symbols.view(side, side).tolist()
        expected = _answers_from_the_definition(grid)
        got = row_answers.view(side, side).tolist()
        for r in range(side):
            for c in range(side):
                assert got[r][c] == (0 if expected[r][c] is None else expected[r][c])
    assert symbols.min() >= 0 and symbols.max() < SYMBOLS


def test_a_planted_wrong_neighbour_disagrees_with_the_definition():
    symbols, answers = make_grids(64, 5, torch.Generator().manual_seed(0))
    grids = symbols.view(64, 5, 5)
    upper_and_right = torch.zeros_like(grids)
    upper_and_right[:, 1:, :-1] = 10 * grids[:, :-1, :-1] + grids[:, 1:, 1:]
    mask = scored(5)
    assert not torch.equal(upper_and_right.flatten(1)[:, mask], answers[:, mask])


def test_only_patches_with_both_neighbours_are_scored():
    mask = scored(4).view(4, 4)
    assert not mask[0].any() and not mask[:, 0].any() and mask[1:, 1:].all()
    assert int(scored(16).sum()) == 15 * 15
    batch = GridTask().train_batch(3, 4, torch.Generator().manual_seed(0))
    assert batch.inputs.shape == batch.targets.shape == batch.mask.shape == (3, 16)
    assert torch.equal(batch.mask[2], scored(4))


def test_a_grid_needs_two_patches_a_side():
    assert make_task_shape("grid", 8) == grid_sequence_length(8) == 64
    with pytest.raises(ValueError, match="a grid needs a side of at least 2 .* got 1"):
        grid_sequence_length(1)


@pytest.mark.parametrize(
    ("encoding", "expected"),
    [
        ("rope", [0, 1, 2, 3, 4, 5]),  # the raster index, row by row
        ("rope_axial", [[0, 0], [0, 1], [0, 2], [1, 0], [1, 1], [1, 2]]),
        ("mrope", [[0, 0, 0], [0, 0, 1], [0, 0, 2], [0, 1, 0], [0, 1, 1], [0, 1, 2]]),
    ],
)
def test_each_encoding_reads_the_grid_on_its_own_axes(encoding, expected):
    positions = positions_for(posenc.build(encoding, d_head=16), 3)
    assert positions[:6].tolist() == expected
    assert positions.shape[0] == 9


def test_a_learned_table_is_resampled_to_a_larger_grid_and_other_encodings_are_kept():
    torch.manual_seed(0)
    learned = TransformerLM(
        SYMBOLS, d_model=16, n_heads=2, encoding="learned", encoding_kwargs={"max_len": 16}
    )
    assert at_side(learned, 4, 4) is learned
    moved = at_side(learned, 4, 6)
    assert moved is not learned and moved.encoding.weight.shape == (36, 16)
    assert learned.encoding.weight.shape == (16, 16)  # the trained model is left as it was
    table = learned.encoding.weight.detach().view(1, 4, 4, 16).permute(0, 3, 1, 2)
    expected = F.interpolate(table, size=(6, 6), mode="bicubic", antialias=True, align_corners=False)
    torch.testing.assert_close(moved.encoding.weight.detach(), expected.permute(0, 2, 3, 1).reshape(36, 16))
    axial = TransformerLM(CLASSES, d_model=16, n_heads=2, encoding="rope_axial", causal=False)
    assert at_side(axial, 4, 6) is axial


class _Oracle(nn.Module):
    """Logits that put all weight on the class 10·upper + the neighbour at ``other``, read from the tokens."""

    def __init__(self, side: int, other: tuple[int, int]) -> None:
        super().__init__()
        self.encoding = posenc.build("rope_axial", d_head=8)
        self.scale = nn.Parameter(torch.ones(()))
        self.side, self.other = side, other

    def forward(self, tokens: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        assert positions.shape == (self.side * self.side, 2)
        grids = tokens.view(-1, self.side, self.side)
        dr, dc = self.other
        shifted = torch.roll(grids, shifts=(-dr, -dc), dims=(1, 2))  # the neighbour at (dr, dc)
        answer = 10 * torch.roll(grids, shifts=1, dims=1) + shifted
        return F.one_hot(answer.flatten(1), CLASSES).float() * 20 * self.scale


def test_a_model_that_computes_the_answer_scores_one_and_a_wrong_neighbour_does_not():
    right = grid_accuracy(_Oracle(6, (0, -1)), 6, 32, seed=1)
    assert right["token_accuracy"] == right["exact_match"] == 1.0 and right["loss"] < 1e-6
    wrong = grid_accuracy(_Oracle(6, (0, 1)), 6, 32, seed=1)
    assert wrong["exact_match"] == 0.0 and wrong["token_accuracy"] < 0.2


def test_dinov3_reads_the_grid_normalised_as_it_declares():
    """DINOv3 reads cell centres in [−1, 1] per axis, (i + ½)·2/side − 1, at every side, for training and
    evaluation alike (both ask positions_for)."""
    dinov3 = posenc.build("dinov3", d_head=16)
    for side in (4, 8):
        positions = positions_for(dinov3, side)
        centres = [(i + 0.5) * 2 / side - 1 for i in range(side)]
        expected = torch.tensor([[r, c] for r in centres for c in centres], dtype=torch.float64)
        assert positions.dtype == torch.float64
        torch.testing.assert_close(positions, expected, rtol=0, atol=1e-15)
        assert torch.equal(GridTask().positions(dinov3, side), positions)
    assert positions_for(dinov3, 4)[0].tolist() == [-0.75, -0.75]


def test_an_encoding_that_declares_nothing_reads_integer_patch_indices():
    """The safe default: a new author's encoding of two axes, registered with no grid_coordinates, reads
    (row, column) as integers, as the encodings of the first grid study did."""

    class Plain(posenc.encodings.rope_axes.AxialRotaryEncoding):
        pass

    assert posenc.encodings.describe(Plain).grid_coordinates is None
    positions = positions_for(Plain(16), 3)
    assert positions.dtype == torch.int64 and positions[:4].tolist() == [[0, 0], [0, 1], [0, 2], [1, 0]]


def test_the_declaration_not_the_name_sets_the_coordinates():
    """A class declaring normalised coordinates (as a class attribute, as plugins do) reads them on two
    axes and, on three, the one frame of a (1, side, side) grid: t at its cell centre, 0."""

    class Declared(posenc.encodings.rope_axes.AxialRotaryEncoding):
        grid_coordinates = NormalizedCoordinates(by="max")

    positions = positions_for(Declared(16), 2)
    assert positions.tolist() == [[-0.5, -0.5], [-0.5, 0.5], [0.5, -0.5], [0.5, 0.5]]

    class Frames(posenc.encodings.rope_axes.MultimodalRotaryEncoding):
        grid_coordinates = NormalizedCoordinates()

    positions = positions_for(Frames(16), 2)
    assert positions[:, 0].tolist() == [0.0] * 4 and positions[3].tolist() == [0.0, 0.5, 0.5]


def test_a_raster_index_refuses_declared_grid_coordinates():
    class Flat(posenc.encodings.rope.RotaryEncoding):
        grid_coordinates = NormalizedCoordinates()

    with pytest.raises(ValueError, match="takes positions on one axis but declares grid_coordinates"):
        positions_for(Flat(16), 3)


def test_normalized_coordinates_refuse_bad_settings():
    with pytest.raises(ValueError, match="by must be one of"):
        NormalizedCoordinates(by="diagonal")
    with pytest.raises(TypeError, match="centred must be a bool"):
        NormalizedCoordinates(centred=1)
    with pytest.raises(ValueError, match="offset must be a finite number"):
        NormalizedCoordinates(offset=float("nan"))
