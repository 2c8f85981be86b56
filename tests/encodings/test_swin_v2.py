"""Swin v2's continuous position bias against a float64 loop written from the paper, and what it refuses."""

from __future__ import annotations

import math
import re

import pytest
import torch

import posenc
import posenc.attention
from posenc.encodings.swin_v2 import log_spaced_offsets
from posenc.functional import grid_positions


def _reference_bias(module, q_at, k_at, window):
    """16·sigmoid(MLP(Δ̂)) for one pair, in float64: Δ = query − key, each axis scaled so that W − 1
    becomes 8, then sign·log2(1 + |x|)/log2(8) (Liu et al., 2022, §3.2 and their code)."""
    offsets = [(q - k) / (w - 1) * 8 for q, k, w in zip(q_at, k_at, window, strict=True)]
    spaced = torch.tensor(
        [math.copysign(math.log2(1 + abs(x)) / 3, x) if x else 0.0 for x in offsets], dtype=torch.float64
    )
    first, second = module.mlp[0], module.mlp[2]
    hidden = (first.weight.double() @ spaced + first.bias.double()).clamp(min=0)
    return 16 / (1 + torch.exp(-(second.weight.double() @ hidden)))  # [h]


@pytest.mark.parametrize("window", [(8, 8), (4, 6)])
def test_the_bias_is_the_papers_formula_for_every_pair(window):
    torch.manual_seed(0)
    swin_v2 = posenc.build("swin_v2", n_heads=3, window=window, hidden=16).double()
    grid = grid_positions((3, 4))
    bias = swin_v2.bias(grid, grid)  # [h, 12, 12]
    for i in range(12):
        for j in range(12):
            expected = _reference_bias(swin_v2, grid[i].tolist(), grid[j].tolist(), window)
            torch.testing.assert_close(bias[:, i, j], expected, rtol=0, atol=1e-12)


def test_one_set_of_weights_serves_a_larger_window_and_fractional_coordinates():
    swin_v2 = posenc.build("swin_v2", n_heads=2, window=8, hidden=32)
    small, large = grid_positions((8, 8)), grid_positions((24, 24))
    assert swin_v2.bias(large, large).shape == (2, 576, 576)
    # the offsets the small window has are given the same bias inside the large one
    torch.testing.assert_close(
        swin_v2.bias(small[:1], small),
        swin_v2.bias(large[:1], large[[r * 24 + c for r in range(8) for c in range(8)]]),
    )
    half = swin_v2.bias(small.double() * 0.5, small.double() * 0.5)
    assert torch.isfinite(half).all()


def test_the_windows_largest_offsets_map_to_log2_9_over_3():
    offsets = torch.tensor([[7.0, -3.0], [-7.0, 3.0]], dtype=torch.float64)
    spaced = log_spaced_offsets(offsets, (8, 4))  # ±7/7·8 and ±3/3·8: ±8 on each axis
    expected = math.log2(9) / 3  # ≈ 1.057
    torch.testing.assert_close(spaced, torch.tensor([[expected, -expected], [-expected, expected]]).double())


def test_parameters_at_size_zero_are_the_instances_own():
    swin_v2 = posenc.build("swin_v2", n_heads=3, window=8, hidden=16)
    counted = sum(p.numel() for p in swin_v2.parameters())
    assert swin_v2.count_parameters(0, 0, 0) == counted == 3 * 16 + 16 * 3
    assert swin_v2.count_parameters(0, 0, 5) == 3 * 16 + 16 * 5


def test_gradients_reach_the_mlp_through_attention():
    swin_v2 = posenc.build("swin_v2", n_heads=2, window=4, hidden=8)
    attention = posenc.attention.MultiHeadAttention(16, 2, encoding=swin_v2, causal=False)
    attention(torch.randn(1, 16, 16), positions=grid_positions((4, 4))).square().sum().backward()
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in swin_v2.parameters())


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: posenc.build("swin_v2", n_heads=2, window=1), "each side must be ≥ 2, got (1, 1)"),
        (
            lambda: posenc.build("swin_v2", n_heads=2, window=(8, 8, 8)),
            "window must be a side or (height, width)",
        ),
        (
            lambda: posenc.build("swin_v2", n_heads=2).bias(torch.zeros(4, 3), torch.zeros(4, 3)),
            "q_positions must be [..., s, 2]",
        ),
        (
            lambda: posenc.build("swin_v2", n_heads=2).bias(
                torch.tensor([[0.0, float("nan")]]), torch.zeros(1, 2)
            ),
            "q_positions must be finite coordinates, got nan",
        ),
    ],
)
def test_bad_windows_and_coordinates_are_refused_naming_the_value(call, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        call()


@pytest.mark.parametrize(
    ("q_at", "k_at"),
    [
        (grid_positions((6, 7)), grid_positions((6, 7))),
        (grid_positions((6, 7))[:5], grid_positions((6, 7))),  # queries of a corner: a smaller box
        (grid_positions((4, 4)).double() + 3, grid_positions((4, 4))),  # integral float coordinates
        (grid_positions((3, 4))[None] + torch.arange(2)[:, None, None], grid_positions((3, 4))),  # batched
    ],
)
def test_the_mlp_runs_once_per_offset_of_the_box_found_without_unique(q_at, k_at, monkeypatch):
    swin_v2 = posenc.build("swin_v2", n_heads=3, window=8, hidden=16).double()
    pairs = q_at.unsqueeze(-2) - k_at.unsqueeze(-3)  # [(b,) i, j, 2]
    expected = swin_v2.offset_bias(pairs).movedim(-1, -3)  # the MLP on every pair

    def refused(*args, **kwargs):
        raise AssertionError(
            "torch.unique sorts every pair's offset: the box of offsets is known by arithmetic"
        )

    monkeypatch.setattr(torch, "unique", refused)
    monkeypatch.setattr(torch.Tensor, "unique", refused)
    rows = []
    original = swin_v2.offset_bias
    monkeypatch.setattr(
        swin_v2, "offset_bias", lambda offsets: rows.append(offsets.shape[0]) or original(offsets)
    )
    torch.testing.assert_close(swin_v2.bias(q_at, k_at), expected, rtol=0, atol=1e-12)
    span = [
        int(q_at[..., a].max() - k_at[..., a].min() - q_at[..., a].min() + k_at[..., a].max()) + 1
        for a in (0, 1)
    ]
    assert rows == [span[0] * span[1]]  # one row per offset of the box, not one per pair


def test_a_windows_offsets_are_indexed_as_dy_then_dx_over_2w_minus_1():
    from posenc.encodings.swin_v2 import offset_index

    grid = grid_positions((4, 4))
    offsets, index = offset_index(grid, grid)
    assert offsets.shape == (49, 2)
    dy, dx = (grid[:, None, a] - grid[None, :, a] for a in (0, 1))  # [i, j]
    assert torch.equal(index, (dy + 3) * 7 + (dx + 3))
    assert torch.equal(offsets[index], torch.stack((dy, dx), dim=-1))


def test_fractional_coordinates_take_one_row_per_distinct_offset_and_far_apart_ones_every_pair(monkeypatch):
    from posenc.encodings.swin_v2 import offset_index

    swin_v2 = posenc.build("swin_v2", n_heads=2, window=8, hidden=8).double()
    half = grid_positions((3, 4)).double() * 0.5
    offsets, index = offset_index(half, half)
    assert offsets.shape == (5 * 7, 2)  # 0.5·(−2 … 2) by 0.5·(−3 … 3)
    pairs = half.unsqueeze(-2) - half.unsqueeze(-3)
    assert torch.equal(offsets[index], pairs)
    far = torch.tensor([[0, 0], [1000, 1000]])
    assert offset_index(far, far) is None
    for at in (half, far):
        pairs = at.unsqueeze(-2) - at.unsqueeze(-3)
        torch.testing.assert_close(swin_v2.bias(at, at), swin_v2.offset_bias(pairs).movedim(-1, -3))


@pytest.mark.parametrize("tokens", [6, 40])
def test_tokens_along_a_line_run_the_mlp_once_per_offset_that_occurs(tokens, monkeypatch):
    # (p, p) for p = 0 … s − 1: a box of (2s − 1)² offsets for s² pairs, of which 2s − 1 occur; the box was
    # refused and the MLP ran on every pair (4 GiB and 104x unbiased SDPA at s = 1024, h = 8)
    swin_v2 = posenc.build("swin_v2", n_heads=3, window=8, hidden=16).double()
    line = torch.arange(tokens)[:, None].expand(tokens, 2)
    pairs = line.unsqueeze(-2) - line.unsqueeze(-3)  # [i, j, 2]
    expected = swin_v2.offset_bias(pairs).movedim(-1, -3)
    monkeypatch.setattr(torch, "unique", lambda *a, **k: pytest.fail("torch.unique over the pairs"))
    rows = []
    original = swin_v2.offset_bias
    monkeypatch.setattr(
        swin_v2, "offset_bias", lambda offsets: rows.append(offsets.shape[0]) or original(offsets)
    )
    torch.testing.assert_close(swin_v2.bias(line, line), expected, rtol=0, atol=1e-12)
    assert rows == [2 * tokens - 1]
