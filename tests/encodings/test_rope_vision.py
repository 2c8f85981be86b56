"""The vision and video presets of RoPE against the code that defines them (diffusers' LTX-Video and Cosmos)
and float64 references from the papers (DINOv3's periods; timm's DINOv3 is in tests/functional/test_timm_peers.py)."""

from __future__ import annotations

import math

import pytest
import torch

import posenc
from posenc.functional.normalized import normalized_grid, video_positions
from tests.reference.axes_loop import per_axis_rope_vector


def random(*shape, seed=0, dtype=torch.float64):
    return torch.randn(*shape, dtype=dtype, generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("periods", [None, (0.5, 40.0)])
def test_dinov3_turns_each_axis_by_two_pi_coordinate_over_period(periods):
    kwargs = {} if periods is None else {"min_period": periods[0], "max_period": periods[1]}
    rope = posenc.build("dinov3", d_head=16, **kwargs)
    quarter = 4
    if periods is None:
        period = [100.0 ** (2 * i / 8) for i in range(quarter)]
    else:
        period = [periods[0] * (periods[1] / periods[0]) ** (i / (quarter - 1)) for i in range(quarter)]
    theta = [2 * math.pi / p for p in period]
    coordinates = normalized_grid((3, 5))
    x = random(2, 15, 16)
    got, _ = rope.rotate(x[None], x[None], coordinates, coordinates)
    expected = [
        [per_axis_rope_vector(x[h, s].tolist(), coordinates[s].tolist(), [theta, theta]) for s in range(15)]
        for h in range(2)
    ]
    torch.testing.assert_close(got[0], torch.tensor(expected, dtype=torch.float64), rtol=0, atol=1e-13)


def test_dinov3_refuses_one_period_bound_and_a_width_not_in_quarters():
    with pytest.raises(ValueError, match="min_period and max_period together"):
        posenc.build("dinov3", d_head=16, min_period=1.0)
    with pytest.raises(ValueError, match="d_head=18 is not a multiple of 4"):
        posenc.build("dinov3", d_head=18)
    with pytest.raises(ValueError, match="jitter=0.0 would flip"):
        posenc.build("dinov3", d_head=16, jitter_coords=0.0)


diffusers = pytest.importorskip(
    "diffusers", reason="diffusers is the oracle of LTX-Video's and Cosmos's RoPE"
)
from diffusers.models.embeddings import apply_rotary_emb as diffusers_apply_rotary_emb  # noqa: E402
from diffusers.models.transformers.transformer_cosmos import CosmosRotaryPosEmbed  # noqa: E402
from diffusers.models.transformers.transformer_ltx import LTXVideoRotaryPosEmbed  # noqa: E402
from diffusers.models.transformers.transformer_ltx import apply_rotary_emb as ltx_apply_rotary_emb  # noqa: E402


@pytest.mark.parametrize(("dim", "theta"), [(64, 10000.0), (40, 100.0), (18, 10000.0)])
def test_ltx_rotates_as_diffusers_ltx_video_rotary_pos_embed(dim, theta):
    frames, height, width = 3, 4, 5
    scale = (8.0 / 25, 32.0, 32.0)  # LTX's rope_interpolation_scale (time: VAE stride / frame rate)
    theirs = LTXVideoRotaryPosEmbed(dim, patch_size=1, patch_size_t=1, theta=theta)
    x = random(2, frames * height * width, dim, dtype=torch.float32)
    cos, sin = theirs(x, frames, height, width, rope_interpolation_scale=scale)
    expected = ltx_apply_rotary_emb(x, (cos, sin))
    rope = posenc.build("ltx", d_head=dim, theta=theta)
    coordinates = normalized_grid((frames, height, width), by=(20, 2048, 2048), centred=False, step=scale)
    got, _ = rope.rotate(x[:, None], x[:, None], coordinates, coordinates)  # the inner width, one "head"
    # diffusers' angles are float32 products up to θ·π/2: an error of a few float32 roundings of them
    atol = 8 * theta * math.pi / 2 * 2.0**-24 * float(x.abs().max())
    torch.testing.assert_close(got[:, 0], expected, rtol=0, atol=max(atol, 1e-5))
    assert torch.equal(got[:, 0, :, : dim % 6], x[..., : dim % 6])  # the leftover channels at the front


@pytest.mark.parametrize(("head", "fps"), [(24, None), (30, 12.0), (128, 30.0)])
def test_cosmos_rotates_as_diffusers_cosmos_rotary_pos_embed(head, fps):
    frames, height, width = 3, 4, 6
    theirs = CosmosRotaryPosEmbed(head, max_size=(16, 16, 16), patch_size=(1, 1, 1), base_fps=24)
    cos, sin = theirs(torch.zeros(1, 1, frames, height, width), fps=fps)
    x = random(1, 2, frames * height * width, head, dtype=torch.float32)
    expected = diffusers_apply_rotary_emb(x, (cos, sin), use_real=True, use_real_unbind_dim=-2)
    rope = posenc.build("cosmos", d_head=head)
    positions = video_positions((frames, height, width), fps=fps, base_fps=24)
    got, _ = rope.rotate(x, x, positions, positions)
    torch.testing.assert_close(got, expected, rtol=0, atol=2e-5)


@pytest.mark.parametrize(("sizes", "max_size"), [((6, 4), 8), ((8, 8), 8), ((3, 7), 10)])
def test_sd3_codes_are_diffusers_centre_cropped_patch_embed(sizes, max_size):
    from diffusers.models.embeddings import PatchEmbed

    from posenc.functional.normalized import sincos_grid_positions

    embed = PatchEmbed(height=64, width=64, patch_size=8, embed_dim=32, pos_embed_max_size=max_size)
    expected = embed.cropped_pos_embed(sizes[0] * 8, sizes[1] * 8)[0]  # [h·w, d]
    positions = sincos_grid_positions(sizes, base_size=64 // 8, max_size=max_size)
    codes = posenc.build("sinusoidal_2d", d_model=32).codes(positions)
    torch.testing.assert_close(codes.float(), expected, rtol=0, atol=2e-6)


@pytest.mark.parametrize(("sizes", "scale"), [((4, 4), 1.0), ((6, 3), 2.0)])
def test_pixart_codes_are_diffusers_get_2d_sincos_pos_embed(sizes, scale):
    from diffusers.models.embeddings import get_2d_sincos_pos_embed

    from posenc.functional.normalized import sincos_grid_positions

    expected = get_2d_sincos_pos_embed(32, sizes, base_size=4, interpolation_scale=scale, output_type="pt")
    positions = sincos_grid_positions(sizes, base_size=4, interpolation_scale=scale)
    codes = posenc.build("sinusoidal_2d", d_model=32).codes(positions)
    torch.testing.assert_close(codes.float(), expected.float(), rtol=0, atol=2e-6)


def test_sd3_and_pixart_are_options_of_the_2d_sincos_reading_patch_indices():
    from diffusers.models.embeddings import PatchEmbed, get_2d_sincos_pos_embed

    from posenc.functional import grid_positions

    sd3 = posenc.build("sinusoidal_2d", d_model=32, base_size=8, max_size=10, grid=(6, 4))
    embed = PatchEmbed(height=64, width=64, patch_size=8, embed_dim=32, pos_embed_max_size=10)
    for sizes, encoding in (((6, 4), sd3), ((3, 9), sd3.for_grid((6, 4), (3, 9)))):
        expected = embed.cropped_pos_embed(sizes[0] * 8, sizes[1] * 8)[0]
        codes = encoding.codes(grid_positions(sizes))
        torch.testing.assert_close(codes.float(), expected, rtol=0, atol=2e-6)
    pixart = posenc.build("sinusoidal_2d", d_model=32, base_size=4, interpolation_scale=2.0, grid=(6, 3))
    expected = get_2d_sincos_pos_embed(32, (6, 3), base_size=4, interpolation_scale=2.0, output_type="pt")
    torch.testing.assert_close(
        pixart.codes(grid_positions((6, 3))).float(), expected.float(), rtol=0, atol=2e-6
    )


def test_the_2d_sincos_options_refuse_what_they_cannot_place():
    with pytest.raises(ValueError, match="max_size place patches for base_size"):
        posenc.build("sinusoidal_2d", d_model=32, max_size=8)
    with pytest.raises(ValueError, match=r"give grid=\(height, width\)"):
        posenc.build("sinusoidal_2d", d_model=32, base_size=8)
    with pytest.raises(ValueError, match="height 12 .* larger than max_size=8"):
        posenc.build("sinusoidal_2d", d_model=32, base_size=8, max_size=8, grid=(12, 4))
    with pytest.raises(ValueError, match="integer patch indices"):
        posenc.build("sinusoidal_2d", d_model=32, base_size=8, grid=(2, 2)).codes(torch.zeros(4, 2))
