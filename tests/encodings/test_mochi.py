"""Mochi's rotary embedding: parity with diffusers' MochiRoPE on the same coordinates and weights, the
area-normalised coordinates, offsets alone in the logits, per-head maps, bad input named."""

from __future__ import annotations

import pytest
import torch

import posenc
from posenc.encodings.mochi import mochi_positions
from tests.reference.matrix_loop import rotate_pairs


def _interleaved(x, cos, sin):
    # diffusers' MochiAttnProcessor2_0 rotation, re-derived: pairs (2k, 2k + 1), x [s, h, d], tables [s, h, d/2]
    even, odd = x[..., 0::2], x[..., 1::2]
    return torch.stack((even * cos - odd * sin, even * sin + odd * cos), dim=-1).flatten(-2)


def test_coordinates_are_frame_indices_and_area_normalised_centred_patches():
    positions = mochi_positions(2, 3, 4, base_height=6, base_width=8)  # scale √(48/12) = 2
    assert positions.dtype == torch.float64 and positions.shape == (24, 3)
    assert positions[:, 0].unique().tolist() == [0.0, 1.0]
    assert positions[:, 1].unique().tolist() == [-2.0, 0.0, 2.0]  # centres of 3 cells of [−3, 3]
    assert positions[:, 2].unique().tolist() == [-3.0, -1.0, 1.0, 3.0]
    assert positions[5].tolist() == [0.0, 0.0, -1.0]  # raster order: t, then h, then w


@pytest.mark.filterwarnings("ignore:CPU Autocast only supports")
def test_rotation_matches_diffusers_mochi_rope_on_the_same_coordinates_and_weights():
    mochi = pytest.importorskip(
        "diffusers.models.transformers.transformer_mochi", reason="diffusers is a test oracle (extra)"
    )
    encoding = posenc.build("mochi", d_head=16, n_heads=2)
    oracle = mochi.MochiRoPE(base_height=12, base_width=16)
    frames, height, width = 2, 3, 4
    positions = oracle._get_positions(frames, height, width, dtype=torch.float32)  # [24, 3]
    torch.testing.assert_close(
        positions.double(),
        mochi_positions(frames, height, width, base_height=12, base_width=16),
        rtol=1e-6,
        atol=1e-6,
    )
    cos, sin = oracle(
        encoding.pos_frequencies.detach(), frames, height, width, dtype=torch.float32
    )  # [s, h, d/2]
    x = torch.randn(1, 2, 24, 16)
    expected = _interleaved(x[0].transpose(0, 1), cos, sin).transpose(0, 1)[None]  # back to [b, h, s, d]
    got, _ = encoding.rotate(x, x, positions, positions)
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)


def test_rotation_is_the_float64_loop_reference():
    encoding = posenc.build("mochi", d_head=8, n_heads=2)
    positions = mochi_positions(2, 2, 3)
    x = torch.randn(1, 2, 12, 8, dtype=torch.float64)
    got, _ = encoding.rotate(x, x, positions, positions)
    f = encoding.pos_frequencies.double()
    for h in range(2):
        for t in range(12):
            angles = [sum(positions[t, a].item() * f[a, h, k].item() for a in range(3)) for k in range(4)]
            expected = rotate_pairs(x[0, h, t].tolist(), angles, "interleaved")
            torch.testing.assert_close(
                got[0, h, t], torch.tensor(expected, dtype=torch.float64), rtol=0, atol=1e-12
            )


def test_logits_depend_only_on_the_offset_norms_are_kept_and_heads_differ():
    encoding = posenc.build("mochi", d_head=8, n_heads=2)
    q, k = torch.randn(2, 2, 12, 8, dtype=torch.float64), torch.randn(2, 2, 12, 8, dtype=torch.float64)
    positions = mochi_positions(2, 2, 3)
    shift = torch.tensor([3.0, -1.5, 0.25], dtype=torch.float64)
    rq, rk = encoding.rotate(q, k, positions, positions)
    sq, sk = encoding.rotate(q, k, positions + shift, positions + shift)
    torch.testing.assert_close(rq @ rk.mT, sq @ sk.mT, rtol=0, atol=1e-12)
    torch.testing.assert_close(rq.norm(dim=-1), q.norm(dim=-1), rtol=0, atol=1e-12)
    same = q[:, :1].expand(2, 2, 12, 8)
    turned, _ = encoding.rotate(same, same, positions, positions)
    assert (turned[:, 0] - turned[:, 1]).abs().max() > 1e-3


def test_gradients_reach_the_frequency_matrix():
    encoding = posenc.build("mochi", d_head=8, n_heads=2)
    x = torch.randn(1, 2, 12, 8)
    q, k = encoding.rotate(x, x, mochi_positions(2, 2, 3), mochi_positions(2, 2, 3))
    (q @ k.mT).square().sum().backward()
    assert encoding.pos_frequencies.grad.abs().max() > 0


def test_bad_input_is_named():
    with pytest.raises(ValueError, match="d_head must be even, got 9"):
        posenc.build("mochi", d_head=9, n_heads=2)
    with pytest.raises(ValueError, match="height"):
        mochi_positions(2, 0, 3)
    encoding = posenc.build("mochi", d_head=8, n_heads=2)
    x = torch.randn(1, 2, 6, 8)
    with pytest.raises(ValueError, match=r"one column per coordinate axis \(3\), got shape \(6, 2\)"):
        encoding.rotate(x, x, torch.zeros(6, 2), torch.zeros(6, 2))
    with pytest.raises(ValueError, match="needs 2 heads, got 1"):
        encoding.rotate(x, x[:, :1])
