"""The video-language presets of M-RoPE: Hunyuan's XD-RoPE and Ernie 4.5-VL's 3-D RoPE against their serving
formulas re-derived in float64 (vLLM's xdrope.py and ernie45_vl_rope.py; vLLM is not installed), VideoRoPE's
and HoPE's frequency allocation from their papers."""

from __future__ import annotations

import pytest
import torch

import posenc
from posenc.functional.normalized import diagonal_video_positions


def random(*shape, seed=0):
    return torch.randn(*shape, dtype=torch.float64, generator=torch.Generator().manual_seed(seed))


def half_rotation(x, cos, sin):
    """NeoX's rotation of x [..., s, r] by tables [s, r/2]: pairs (k, k + r/2)."""
    first, second = x.chunk(2, dim=-1)
    return torch.cat((first * cos - second * sin, second * cos + first * sin), dim=-1)


def table(positions, theta):
    """cos and sin of every position against every frequency, float64 [..., r/2]."""
    angle = positions.double()[..., None] * theta
    return angle.cos(), angle.sin()


@pytest.mark.parametrize("alpha", [1.0, 1000.0])
def test_xdrope_is_vllms_four_sections_on_an_ntk_alpha_base(alpha):
    d, sections, base = 32, (4, 4, 4, 4), 10000.0
    theta = (base * alpha ** (d / (d - 2))) ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    positions = torch.randint(0, 50, (4, 7), generator=torch.Generator().manual_seed(2))  # [P/W/H/T, s]
    cos, sin = table(positions, theta)  # [4, s, r/2]: every axis's table, as vLLM's cache lookup
    # each section takes its own axis's table, in order (vLLM: cat of m[i] for the i-th split)
    cos = torch.cat([part[i] for i, part in enumerate(cos.split(sections, dim=-1))], dim=-1)
    sin = torch.cat([part[i] for i, part in enumerate(sin.split(sections, dim=-1))], dim=-1)
    x = random(1, 2, 7, d)
    expected = half_rotation(x, cos, sin)
    rope = posenc.build("xdrope", d_head=d, sections=sections, alpha=alpha)
    got, _ = rope.rotate(x, x, positions.T, positions.T)
    torch.testing.assert_close(got, expected, rtol=0, atol=1e-12)


def test_ernie_is_vllms_h_w_alternating_then_time():
    d, (h, w, t), base = 32, (6, 6, 4), 500000.0
    theta = base ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    positions = torch.randint(0, 50, (3, 5), generator=torch.Generator().manual_seed(3))  # [t, h, w] × s
    cos, sin = table(positions, theta)  # [3, s, r/2]

    def arrange(values):  # [h w h w … t t t]: even pairs from h, odd from w, the last t from time
        hw = torch.stack((values[1, :, : h + w : 2], values[2, :, 1 : h + w : 2]), dim=-1).flatten(-2)
        return torch.cat((hw, values[0, :, -t:]), dim=-1)

    x = random(1, 2, 5, d)
    expected = half_rotation(x, arrange(cos), arrange(sin))
    rope = posenc.build("ernie_3d", d_head=d, sections=(t, h, w), base=base)
    got, _ = rope.rotate(x, x, positions.T, positions.T)
    torch.testing.assert_close(got, expected, rtol=0, atol=1e-12)


def test_videorope_gives_time_the_lowest_frequencies_and_hope_stops_them():
    video = posenc.build("videorope", d_head=128)
    hope = posenc.build("hope", d_head=128)
    assert video.sections == (16, 24, 24)
    axis = video.frequency_axis
    assert axis[-16:].eq(0).all() and axis[:48].tolist() == [1, 2] * 24
    assert torch.equal(hope.frequency_axis, axis)
    torch.testing.assert_close(hope.inv_freq[:48], video.inv_freq[:48], rtol=0, atol=0)
    assert hope.inv_freq[48:].eq(0).all()
    assert float(video.inv_freq[48:].max()) < float(video.inv_freq[:48].min())  # LTA: time is slowest


def test_hope_ignores_time_and_videorope_follows_it():
    x = random(1, 1, 8, 16)
    positions = diagonal_video_positions((2, 2, 2), start=3.0, time_spacing=2.0)
    later = positions.clone()
    later[:, 0] += 5.0  # only the time coordinate moves
    for name, moves in (("hope", False), ("videorope", True)):
        rope = posenc.build(name, d_head=16)
        before, _ = rope.rotate(x, x, positions, positions)
        after, _ = rope.rotate(x, x, later, later)
        assert torch.allclose(before, after, atol=1e-14) != moves


def test_time_last_sections_refuse_unequal_spatial_counts():
    with pytest.raises(
        ValueError, match=r"one count s for every spatial axis, got \(2, 3, 3, 4\)|got \(2, 3, 4\)"
    ):
        posenc.build("ernie_3d", d_head=18, sections=(2, 3, 4))


def test_the_presets_refuse_arguments_that_contradict_them():
    with pytest.raises(ValueError, match="alpha=1000.0 is XD-RoPE's ntk_alpha scaling"):
        posenc.build("xdrope", d_head=16, alpha=1000.0, scaling="ntk", scaling_args={"factor": 2.0})
    with pytest.raises(ValueError, match="alpha must be positive and finite, got -1.0"):
        posenc.build("xdrope", d_head=16, alpha=-1.0)
    with pytest.raises(ValueError, match="not both"):
        from posenc.functional import CoordinateAugmentation

        posenc.build("dinov3", d_head=16, shift_coords=0.1, augmentation=CoordinateAugmentation(jitter=2.0))
    with pytest.raises(ValueError, match=r"rope_scale\[0\] must be positive and finite, got 0.0"):
        posenc.build("cosmos", d_head=24, rope_scale=(0.0, 1.0, 1.0))
    with pytest.raises(ValueError, match="rope_scale must hold"):
        posenc.build("cosmos", d_head=24, rope_scale=(2.0, 1.0))
    with pytest.raises(ValueError, match="HoPE|sections"):
        posenc.build("hope", d_head=16, sections=(2, 3, 2))
