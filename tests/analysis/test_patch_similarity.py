"""The patch-similarity picture reads a grid as the encoding takes it, its declared coordinates included."""

from __future__ import annotations

import torch

from posenc.analysis import specimen
from posenc.analysis.grid import _rotated_similarity, patch_similarity
from posenc.encodings import describe
from posenc.functional.coordinates import grid_positions


def test_patch_similarity_reads_the_grid_coordinates_an_encoding_declares():
    # DINOv3 declares its grid normalised into [-1, 1]; the figure fed it integer patch indices
    encoding = specimen("dinov3")
    declared = describe(encoding).grid_coordinates
    assert declared is not None and encoding.position_space.columns == 2
    centre = 3 * 6 + 3
    got = patch_similarity(encoding, (6, 6))  # [6, 6]
    expected = _rotated_similarity(encoding, declared.grid((6, 6)), centre).reshape(6, 6)
    integers = _rotated_similarity(encoding, grid_positions((6, 6)), centre).reshape(6, 6)
    torch.testing.assert_close(got, expected, rtol=0, atol=1e-12)
    assert not torch.allclose(got, integers)
    assert got[3, 3] == 1.0
