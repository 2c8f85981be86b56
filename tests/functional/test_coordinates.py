"""Positions on several axes: patch grids, M-RoPE's index from a float64-free loop, layouts, bad input."""

from __future__ import annotations

import re

import pytest
import torch

from posenc.functional.coordinates import (
    from_mrope_layout,
    grid_positions,
    mrope_decode_positions,
    mrope_positions,
    to_mrope_layout,
)


def test_grid_positions_number_patches_row_major_after_the_prefix_tokens():
    grid = grid_positions((2, 3), prefix_tokens=1)
    assert grid.tolist() == [[0, 0], [0, 0], [0, 1], [0, 2], [1, 0], [1, 1], [1, 2]]
    video = grid_positions((2, 2, 2))
    assert video.tolist()[:3] == [[0, 0, 0], [0, 0, 1], [0, 1, 0]] and video.shape == (8, 3)
    prefix = grid_positions((2, 2), prefix_tokens=2, prefix_position=(-1, 5))
    assert prefix[:2].tolist() == [[-1, 5], [-1, 5]]


def _index_loop(types, image_grids, merge):
    """M-RoPE's index written out token by token: text on the diagonal, an image's patches at
    (p + t, p + row, p + col), text after it from p + max(h, w)/merge; delta = max + 1 − length."""
    positions, current, images = [], 0, iter(image_grids)
    index = 0
    while index < len(types):
        if types[index] == 0:
            positions.append([current] * 3)
            current += 1
            index += 1
            continue
        t, h, w = next(images)
        for frame in range(t):
            for row in range(h // merge):
                for col in range(w // merge):
                    positions.append([current + frame, current + row, current + col])
        index += t * h * w // merge**2
        current += max(h, w) // merge
    return positions, max(max(p) for p in positions) + 1 - len(types)


def test_mrope_positions_follow_the_index_written_token_by_token():
    types = [0, 0, 0, 1, 1, 1, 1, 1, 1, 0, 0, 1, 1, 1, 1, 0]
    grids = [(1, 4, 6), (1, 2, 8)]  # 2×3 and 1×4 merged patches
    positions, deltas = mrope_positions(torch.tensor([types]), grids, spatial_merge_size=2)
    expected, delta = _index_loop(types, grids, 2)
    assert positions[0].tolist() == expected and deltas.tolist() == [[delta]]


def test_layouts_convert_both_ways():
    positions = torch.randint(0, 50, (2, 7, 3))
    assert to_mrope_layout(positions).shape == (3, 2, 7)
    assert torch.equal(from_mrope_layout(to_mrope_layout(positions)), positions)
    assert torch.equal(
        from_mrope_layout(torch.arange(5)[None]), torch.arange(5)[None, :, None].expand(1, 5, 3)
    )


def test_decoding_continues_after_the_prompt_on_every_axis():
    _, deltas = mrope_positions(torch.tensor([[0, 1, 1, 1, 1, 0]]), [(1, 2, 8)], spatial_merge_size=2)
    steps = mrope_decode_positions(deltas, 6, steps=2)
    assert steps.tolist() == [
        [
            [
                6 + int(deltas),
            ]
            * 3,
            [7 + int(deltas)] * 3,
        ]
    ]


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: grid_positions((2, 0)), "sizes[1] must be positive, got 0"),
        (lambda: grid_positions((2, 2), prefix_tokens=-1), "prefix_tokens must be ≥ 0, got -1"),
        (
            lambda: grid_positions((2, 2), prefix_tokens=1, prefix_position=(0, 0, 0)),
            "prefix_position must be one int or one per axis (2)",
        ),
        (
            lambda: mrope_positions(torch.tensor([[0, 3]])),
            "token_types must be 0 (text), 1 (image) or 2 (video), got [3]",
        ),
        (
            lambda: mrope_positions(torch.tensor([[0, 1, 1]]), [(1, 2, 2)]),
            "the image at batch row 0, position 1 has 2 tokens, but its grid (1, 2, 2) with spatial_merge_size=1 gives 4",
        ),
        (
            lambda: mrope_positions(torch.tensor([[0, 1]])),
            "image tokens at batch row 0, position 1 have no image grid left",
        ),
        (
            lambda: mrope_positions(torch.tensor([[0, 0]]), [(1, 2, 2)]),
            "grids left over after the last vision token: {'image': 1}",
        ),
        (
            lambda: mrope_positions(torch.tensor([[1] * 4]), [(1, 3, 4)], spatial_merge_size=2),
            "image_grids[0] = (1, 3, 4) must be positive with h and w divisible by spatial_merge_size=2",
        ),
        (
            lambda: mrope_positions(torch.tensor([[2] * 4]), None, [(1, 2, 2)], video_time_intervals=[1, 2]),
            "video_time_intervals must give one interval per video (1), got 2",
        ),
        (lambda: mrope_decode_positions(torch.zeros(2), 3), "rope_deltas must be [b, 1], got (2,)"),
    ],
)
def test_bad_grids_and_token_types_are_refused_naming_the_value(call, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        call()
