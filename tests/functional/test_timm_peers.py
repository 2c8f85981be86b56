"""Positions on grids against timm: resample_abs_pos_embed, RotaryEmbeddingCat (language bands), RelPosMlp.

timm imports torchvision, whose registry builds do not install beside the pinned CPU torch; these tests
run in their own environment with ``make test-timm`` (CI does) and are skipped elsewhere.
"""

from __future__ import annotations

import pytest
import torch

timm = pytest.importorskip("timm", reason="timm's own environment: run `make test-timm`")

from timm.layers import RelPosMlp, RotaryEmbeddingCat, resample_abs_pos_embed  # noqa: E402
from timm.layers.pos_embed_sincos import apply_rot_embed_cat  # noqa: E402

import posenc  # noqa: E402
from posenc.functional import grid_positions, resample_table  # noqa: E402


@pytest.mark.parametrize(
    ("old", "new", "prefix"),
    [((14, 14), (24, 24), 1), ((4, 6), (8, 5), 1), ((16, 16), (7, 9), 0), ((6, 6), (6, 6), 2)],
)
@pytest.mark.parametrize("mode", ["bicubic", "bilinear"])
def test_resampling_a_vit_table_is_timms(old, new, prefix, mode):
    table = torch.randn(1, prefix + old[0] * old[1], 32, generator=torch.Generator().manual_seed(0))
    theirs = resample_abs_pos_embed(
        table, list(new), list(old), num_prefix_tokens=prefix, interpolation=mode, antialias=True
    )
    ours = resample_table(table, old, new, prefix_tokens=prefix, mode=mode, antialias=True)
    torch.testing.assert_close(ours, theirs, rtol=0, atol=1e-6)


@pytest.mark.parametrize(("feat", "reference"), [((6, 4), None), ((8, 8), (16, 16)), ((5, 7), (14, 14))])
def test_axial_rope_rotates_as_timms_rotary_embedding_cat(feat, reference):
    # language bands (in_pixels=False), as EVA-02: θ_i = temperature^(−i/(dim/4)) per axis, positions
    # 0 … size − 1 scaled to the reference grid when one is given (fractional coordinates)
    dim = 32
    timm_rope = RotaryEmbeddingCat(dim, temperature=100.0, in_pixels=False, ref_feat_shape=reference)
    x = torch.randn(2, 3, feat[0] * feat[1], dim, generator=torch.Generator().manual_seed(1))
    expected = apply_rot_embed_cat(x, timm_rope.get_embed(list(feat)))
    positions = grid_positions(feat).double()
    if reference is not None:
        positions = positions / torch.tensor(feat) * torch.tensor(reference)
    rope = posenc.build("rope", d_head=dim, axes=(dim // 2, dim // 2), base=100.0, layout="interleaved")
    got, _ = rope.rotate(x, x, positions, positions)
    torch.testing.assert_close(got, expected, rtol=0, atol=2e-6)


@pytest.mark.parametrize(("window", "pretrained"), [((8, 8), (0, 0)), ((6, 10), (0, 0)), ((12, 12), (8, 8))])
def test_swin_v2_bias_is_timms_rel_pos_mlp_in_swin_mode(window, pretrained):
    torch.manual_seed(0)
    theirs = RelPosMlp(
        window, num_heads=4, hidden_dim=128, mode="swin", pretrained_window_size=pretrained
    ).eval()
    ours = posenc.build("swin_v2", n_heads=4, window=pretrained if pretrained[0] else window, hidden=128)
    with torch.no_grad():
        ours.mlp[0].weight.copy_(theirs.mlp.fc1.weight)
        ours.mlp[0].bias.copy_(theirs.mlp.fc1.bias)
        ours.mlp[2].weight.copy_(theirs.mlp.fc2.weight)
        grid = grid_positions(window)
        torch.testing.assert_close(ours.bias(grid, grid), theirs.get_bias()[0], rtol=0, atol=1e-5)


@pytest.mark.parametrize(
    ("feat", "normalize", "periods", "augment"),
    [
        ((6, 4), "separate", None, False),
        ((5, 7), "min", (0.5, 40.0), False),
        ((4, 8), "max", None, True),
        ((6, 6), "separate", (1.0, 100.0), True),
    ],
)
def test_dinov3_rotates_as_timms_rotary_embedding_dinov3(feat, normalize, periods, augment):
    from timm.layers.pos_embed_sincos import RotaryEmbeddingDinoV3

    from posenc.functional.normalized import normalized_grid

    dim, seed = 32, 11
    bounds = {} if periods is None else {"min_period": periods[0], "max_period": periods[1]}
    augmentation = {"shift_coords": 0.2, "jitter_coords": 1.5, "rescale_coords": 2.0} if augment else {}
    theirs = RotaryEmbeddingDinoV3(dim, normalize_coords=normalize, **bounds, **augmentation)
    theirs.train(augment)
    torch.manual_seed(seed)  # their draws come from the global generator; ours from a seeded one
    embed = theirs.get_embed(list(feat))
    x = torch.randn(2, 3, feat[0] * feat[1], dim, generator=torch.Generator().manual_seed(1))
    expected = apply_rot_embed_cat(x, embed, half=True)
    ours = posenc.build("dinov3", d_head=dim, augmentation_seed=seed, **bounds, **augmentation)
    ours.train(augment)
    coordinates = normalized_grid(feat, by=normalize)
    got, _ = ours.rotate(x, x, coordinates, coordinates)
    torch.testing.assert_close(got, expected, rtol=0, atol=2e-5)
