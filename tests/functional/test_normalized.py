"""Normalised grids, video time at a base frame rate, VideoRoPE's diagonal layout, coordinate augmentation."""

from __future__ import annotations

import pytest
import torch

import posenc
from posenc.functional.normalized import (
    CoordinateAugmentation,
    augment_coordinates,
    diagonal_video_positions,
    normalized_grid,
    video_positions,
)


def test_centred_cells_normalised_per_axis_span_minus_one_to_one():
    grid = normalized_grid((2, 4))
    rows = [-0.5, 0.5]
    columns = [-0.75, -0.25, 0.25, 0.75]
    expected = torch.tensor([[r, c] for r in rows for c in columns], dtype=torch.float64)
    torch.testing.assert_close(grid, expected, rtol=0, atol=1e-15)


@pytest.mark.parametrize(("by", "extent"), [("min", 2.0), ("max", 4.0)])
def test_min_and_max_divide_both_axes_by_one_side(by, extent):
    grid = normalized_grid((2, 4), by=by)
    h = torch.tensor([2 * (i + 0.5) / extent - 1 for i in range(2)], dtype=torch.float64)
    w = torch.tensor([2 * (j + 0.5) / extent - 1 for j in range(4)], dtype=torch.float64)
    torch.testing.assert_close(grid[:, 0], h.repeat_interleave(4), rtol=0, atol=1e-15)
    torch.testing.assert_close(grid[:, 1], w.repeat(2), rtol=0, atol=1e-15)


def test_corner_cells_over_a_base_grid_are_ltx_coordinates():
    # LTX: index · scale · patch / base, then 2x − 1
    grid = normalized_grid((3, 2, 2), by=(20, 2048, 2048), centred=False, step=(8.0, 32.0, 32.0))
    t, h, w = torch.meshgrid(*(torch.arange(n, dtype=torch.float64) for n in (3, 2, 2)), indexing="ij")
    expected = torch.stack((t * 8 / 20, h * 32 / 2048, w * 32 / 2048), -1).reshape(-1, 3) * 2 - 1
    torch.testing.assert_close(grid, expected, rtol=0, atol=1e-15)


def test_video_time_is_rescaled_to_the_base_frame_rate():
    positions = video_positions((3, 1, 2), fps=12.0, base_fps=24.0)
    assert positions[:, 0].tolist() == [0.0, 0.0, 2.0, 2.0, 4.0, 4.0]
    assert positions[:, 2].tolist() == [0.0, 1.0] * 3
    assert video_positions((2, 1, 1))[:, 0].tolist() == [0.0, 1.0]


def test_the_diagonal_layout_puts_each_frame_centre_on_the_text_diagonal():
    positions = diagonal_video_positions((2, 4, 6), start=10.0, time_spacing=2.0)  # [48, 3]
    frames = positions.reshape(2, 24, 3)
    for t in range(2):
        centre = frames[t].mean(dim=0)  # offsets h − H/2, w − W/2 average to −1/2
        torch.testing.assert_close(
            centre,
            torch.tensor([10.0 + 2 * t] * 3, dtype=torch.float64)
            + torch.tensor([0, -0.5, -0.5], dtype=torch.float64),
        )


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: normalized_grid((0, 4)), r"sizes\[0\]"),
        (lambda: normalized_grid((3, 4), by=(1.0, 0.0)), r"by\[1\] must be positive and finite, got 0.0"),
        (lambda: normalized_grid((3, 4), by="mean"), "by must be one of"),
        (lambda: video_positions((2, 2, 2), fps=0.0), "fps must be positive and finite, got 0.0"),
        (lambda: video_positions((2, 2, 2), fps=-24.0), "fps must be positive and finite, got -24.0"),
        (lambda: video_positions((2, 2, 2), fps=24.0, base_fps=0), "base_fps must be positive"),
        (lambda: diagonal_video_positions((2, 2, 2), time_spacing=-1.0), "time_spacing must be positive"),
        (lambda: CoordinateAugmentation(jitter=0.5), r"jitter=0.5 would flip or shrink"),
        (lambda: CoordinateAugmentation(rescale=-2.0), r"rescale=-2.0 would flip or shrink"),
        (lambda: CoordinateAugmentation(shift=-0.1), r"shift must be finite and ≥ 0 .* got -0.1"),
        (lambda: CoordinateAugmentation(shift=float("nan")), r"got nan"),
    ],
)
def test_bad_coordinates_and_ranges_are_refused_naming_the_value(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_augmentation_draws_in_its_ranges_and_follows_its_seed():
    augmentation = CoordinateAugmentation(shift=0.1, jitter=2.0, rescale=1.5)
    offsets, factors = zip(
        *(augmentation.draw(2, torch.Generator().manual_seed(s)) for s in range(200)), strict=False
    )
    offsets, factors = torch.stack(offsets), torch.stack(factors)
    assert float(offsets.abs().max()) <= 0.1
    assert float(factors.min()) >= 1 / 3 - 1e-12 and float(factors.max()) <= 3 + 1e-12
    again = augmentation.draw(2, torch.Generator().manual_seed(7))
    assert torch.equal(again[0], offsets[7]) and torch.equal(again[1], factors[7])


def test_augmentation_moves_queries_and_keys_alike_in_training_only():
    rope = posenc.build(
        "rope", d_head=16, axes=2, augmentation=CoordinateAugmentation(shift=0.2, jitter=1.5, rescale=1.3)
    )
    x = torch.randn(1, 2, 6, 16, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    grid = normalized_grid((2, 3))
    rope.eval()
    plain, _ = rope.rotate(x, x, grid, grid)
    rope.train()
    first, first_k = rope.rotate(x, x, grid, grid)
    second, _ = rope.rotate(x, x, grid, grid)
    assert not torch.allclose(first, plain) and not torch.allclose(first, second)  # a new draw per call
    offset, factor = CoordinateAugmentation(shift=0.2, jitter=1.5, rescale=1.3).draw(
        2, torch.Generator().manual_seed(0)
    )
    moved = augment_coordinates(grid, offset, factor)
    rope.eval()
    expected, expected_k = rope.rotate(x, x, moved, moved)
    torch.testing.assert_close(first, expected, rtol=0, atol=1e-14)  # seed 0's first draw, on q and k
    torch.testing.assert_close(first_k, expected_k, rtol=0, atol=1e-14)


def test_augmentation_refuses_a_compiled_training_call_and_compiles_in_eval_mode():
    torch._dynamo.reset()
    rope = posenc.build("dinov3", d_head=16, shift_coords=0.1, jitter_coords=1.5)
    x = torch.randn(1, 2, 6, 16)
    grid = normalized_grid((2, 3))
    compiled = torch.compile(lambda x, p: rope.rotate(x, x, p, p)[0], backend="eager", fullgraph=True)
    with pytest.raises(Exception, match="augmentation draws from its own seeded generator"):
        compiled(x, grid)
    rope.eval()
    torch.testing.assert_close(compiled(x, grid), rope.rotate(x, x, grid, grid)[0], rtol=0, atol=0)
