"""Positions on several axes against diffusers: its 1-D rotary table, Flux's axial RoPE and 2-D sin-cos."""

from __future__ import annotations

import pytest
import torch

diffusers = pytest.importorskip("diffusers", reason="peer oracle: install the 'peers' extra")

from diffusers.models.embeddings import apply_rotary_emb, get_1d_rotary_pos_embed, get_2d_sincos_pos_embed  # noqa: E402
from diffusers.models.transformers.transformer_flux import FluxPosEmbed  # noqa: E402

import posenc  # noqa: E402
from posenc.functional import rope_cos_sin, rope_inv_freq, sinusoidal_table  # noqa: E402
from posenc.functional.coordinates import grid_positions  # noqa: E402


@pytest.mark.parametrize(
    ("linear_factor", "ntk_factor", "scaling"),
    [(1.0, 1.0, {}), (4.0, 1.0, {"scaling": "linear", "factor": 4.0}), (1.0, 2.0, {})],
)
def test_the_one_axis_table_is_diffusers_get_1d_rotary_pos_embed(linear_factor, ntk_factor, scaling):
    positions = torch.arange(0, 300, 7)
    cos, sin = get_1d_rotary_pos_embed(
        32,
        positions,
        theta=10000.0,
        use_real=True,
        linear_factor=linear_factor,
        ntk_factor=ntk_factor,
        repeat_interleave_real=True,
        freqs_dtype=torch.float64,
    )
    inv_freq, _ = rope_inv_freq(32, base=10000.0 * ntk_factor, **scaling)
    ours = rope_cos_sin(positions, inv_freq, dtype=torch.float64)
    for theirs, mine in zip((cos, sin), ours, strict=True):
        torch.testing.assert_close(theirs.double(), mine.repeat_interleave(2, dim=-1), rtol=0, atol=1e-6)


def test_axial_rope_rotates_as_flux():
    axes_dim = [8, 28, 28]  # Flux's split of 64 (its own is [16, 56, 56] of 128)
    # Flux's ids: its text tokens at (0, 0, 0), then the image's patches at (0, row, col), as floats
    image = torch.cat((torch.zeros(12, 1), grid_positions((3, 4)).float()), dim=1)
    ids = torch.cat((torch.zeros(5, 3), image))
    cos, sin = FluxPosEmbed(theta=10000, axes_dim=axes_dim)(ids)
    x = torch.randn(2, 3, ids.shape[0], 64, generator=torch.Generator().manual_seed(0))
    expected = apply_rotary_emb(x, (cos, sin))
    rope = posenc.build("rope", d_head=64, axes=axes_dim, layout="interleaved")
    got, _ = rope.rotate(x, x, ids, ids)
    torch.testing.assert_close(got, expected, rtol=0, atol=2e-6)


def _diffusers_positions(grid, base_size, scale=1.0):
    """diffusers' coordinates of an h×w grid: index / (size / base_size) / scale per axis, in float32."""
    rows, cols = (torch.arange(size, dtype=torch.float32) / (size / base_size) / scale for size in grid)
    return torch.stack(torch.meshgrid(rows, cols, indexing="ij"), dim=-1).reshape(-1, 2)


@pytest.mark.parametrize(("grid", "base_size"), [((4, 4), 4), ((3, 5), 3), ((6, 2), 16)])
def test_the_mae_table_is_diffusers_get_2d_sincos_pos_embed(grid, base_size):
    theirs = get_2d_sincos_pos_embed(32, grid, base_size=base_size, output_type="pt")
    ours = sinusoidal_table(_diffusers_positions(grid, base_size), 32, layout="mae", dtype=torch.float64)
    torch.testing.assert_close(theirs.double(), ours, rtol=0, atol=1e-6)


def test_integer_grid_positions_give_mae_s_own_table():
    # MAE: arange(h), arange(w) on a grid whose own size is the base size (diffusers' base_size = grid)
    theirs = get_2d_sincos_pos_embed(32, (4, 4), base_size=4, output_type="pt")
    ours = sinusoidal_table(grid_positions((4, 4)), 32, layout="mae", dtype=torch.float64)
    torch.testing.assert_close(theirs.double(), ours, rtol=0, atol=1e-6)


def test_the_mae_table_with_fractional_positions_and_a_cls_token():
    grid, base_size, scale = (4, 4), 8, 2.0
    theirs = get_2d_sincos_pos_embed(
        32, grid, cls_token=True, extra_tokens=1, base_size=base_size, interpolation_scale=scale
    )
    patches = sinusoidal_table(
        _diffusers_positions(grid, base_size, scale), 32, layout="mae", dtype=torch.float64
    )
    ours = torch.cat((torch.zeros(1, 32, dtype=torch.float64), patches))  # MAE's CLS gets a zero code
    torch.testing.assert_close(theirs.double(), ours, rtol=0, atol=1e-6)


def test_sinusoidal_2d_with_a_cls_token_embeds_diffusers_table_with_cls_token():
    # grid_positions(prefix_tokens=1) gave the CLS token the code of patch (0, 0), 1.0 from the zero one
    theirs = get_2d_sincos_pos_embed(
        32, (4, 4), cls_token=True, extra_tokens=1, base_size=4, output_type="pt"
    )
    encoding = posenc.build("sinusoidal_2d", d_model=32, prefix_tokens=1).double()
    zeros = torch.zeros(1, 17, 32, dtype=torch.float64)
    ours = encoding.embed(zeros, grid_positions((4, 4), prefix_tokens=1))[0]
    torch.testing.assert_close(ours, theirs.double(), rtol=0, atol=1e-6)


def test_axial_rope_rotates_as_rotary_embedding_torch_axial_frequencies():
    rotary_embedding_torch = pytest.importorskip(
        "rotary_embedding_torch", reason="peer oracle: the 'peers' extra"
    )
    rotary = rotary_embedding_torch.RotaryEmbedding(dim=16, freqs_for="lang", theta=100)  # per axis
    freqs = rotary.get_axial_freqs(3, 5)  # [3, 5, 32]: each axis 16 channels, concatenated
    x = torch.randn(2, 4, 3, 5, 32, generator=torch.Generator().manual_seed(2))  # [b, h, rows, cols, d]
    expected = rotary_embedding_torch.apply_rotary_emb(freqs, x).reshape(2, 4, 15, 32)
    rope = posenc.build("rope", d_head=32, axes=(16, 16), base=100.0, layout="interleaved")
    grid = grid_positions((3, 5))
    got, _ = rope.rotate(x.reshape(2, 4, 15, 32), x.reshape(2, 4, 15, 32), grid, grid)
    torch.testing.assert_close(got, expected, rtol=0, atol=2e-6)
