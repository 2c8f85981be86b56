"""One vector rotated across positions, against the float64 RoPE loop of seed 004 §4."""

from __future__ import annotations

import pytest
import torch

import posenc
from posenc.analysis import pair_channels, rotation_trajectory
from tests.reference.rope_loop import rope_vector


def test_pair_channels_of_both_layouts():
    first, second = pair_channels(8, "half")
    assert first.tolist() == [0, 1, 2, 3] and second.tolist() == [4, 5, 6, 7]
    first, second = pair_channels(8, "interleaved")
    assert first.tolist() == [0, 2, 4, 6] and second.tolist() == [1, 3, 5, 7]
    with pytest.raises(ValueError, match="layout must be one of"):
        pair_channels(8, "rows")


@pytest.mark.parametrize("layout", ["half", "interleaved"])
@pytest.mark.parametrize("rotary_dim", [None, 8])
def test_trajectory_is_the_loop_rotation_at_each_position(layout, rotary_dim):
    encoding = posenc.build("rope", d_head=16, layout=layout, rotary_dim=rotary_dim)
    r = encoding.rotary_dim
    vector = torch.randn(16, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    positions = [0, 1, 2, 5, 17, 100]
    trajectory = rotation_trajectory(encoding, vector, torch.tensor(positions))
    assert trajectory.shape == (len(positions), r // 2, 2) and trajectory.dtype == torch.float64
    first, second = pair_channels(r, layout)
    for row, position in enumerate(positions):
        rotated = rope_vector(vector.tolist(), position, layout=layout, rotary_dim=r)
        loop = torch.tensor(
            [[rotated[a], rotated[b]] for a, b in zip(first, second, strict=True)], dtype=torch.float64
        )
        torch.testing.assert_close(trajectory[row], loop, rtol=0, atol=1e-13)


def test_each_pair_keeps_its_radius():
    encoding = posenc.build("rope", d_head=32)
    vector = torch.randn(32, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    radius = rotation_trajectory(encoding, vector, 50).norm(dim=-1)  # [n, r/2]
    torch.testing.assert_close(radius, radius[:1].expand_as(radius), rtol=0, atol=1e-14)


def test_trajectory_refuses_other_encodings_and_wrong_vectors():
    with pytest.raises(TypeError, match="got SinusoidalEncoding"):
        rotation_trajectory(posenc.build("sinusoidal", d_model=8), torch.zeros(8), 4)
    with pytest.raises(ValueError, match=r"vector must be a tensor \[d_head=8\], got \(4,\)"):
        rotation_trajectory(posenc.build("rope", d_head=8), torch.zeros(4), 4)


@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_the_trajectory_reads_the_rotated_channels_after_unrotated_ones_that_come_first(layout):
    # with unrotated="first" the r rotated channels are the last r: the trajectory read the first r,
    # half of them channels that never turn
    encoding = posenc.build("rope", d_head=16, rotary_dim=8, layout=layout, unrotated="first")
    vector = torch.randn(16, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    positions = [0, 1, 3, 40]
    trajectory = rotation_trajectory(encoding, vector, torch.tensor(positions))
    first, second = pair_channels(8, layout)
    for row, position in enumerate(positions):
        rotated = rope_vector(vector[8:].tolist(), position, layout=layout, rotary_dim=8)
        loop = torch.tensor(
            [[rotated[a], rotated[b]] for a, b in zip(first, second, strict=True)], dtype=torch.float64
        )
        torch.testing.assert_close(trajectory[row], loop, rtol=0, atol=1e-13)
    assert pair_channels(8, layout, d_head=16, unrotated="first")[0].tolist() == (first + 8).tolist()


def test_ltx_pairs_turn_by_their_frequencies_along_the_diagonal():
    # LTX-Video: (t, h, w), d mod 6 unrotated channels first; each pair turns by m·ω_k at (m, m, m)
    encoding = posenc.build("ltx", d_head=16)
    vector = torch.randn(16, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    trajectory = rotation_trajectory(encoding, vector, torch.tensor([0, 1, 2]))  # [3, r/2, 2]
    turn = torch.view_as_complex(trajectory[1:].contiguous()) / torch.view_as_complex(
        trajectory[0].contiguous()
    )
    omega = posenc.encodings.views.frequencies(encoding)  # [r/2], in the order of the pairs
    expected = torch.polar(
        torch.ones(2, omega.shape[0], dtype=torch.float64), omega * torch.tensor([[1.0], [2.0]])
    )
    torch.testing.assert_close(turn, expected, rtol=0, atol=1e-12)


def test_pair_channels_refuses_unrotated_first_without_a_head_width():
    with pytest.raises(ValueError, match=r"needs d_head ≥ rotary_dim=8, got d_head=None"):
        pair_channels(8, "half", unrotated="first")
    with pytest.raises(ValueError, match="unrotated must be one of"):
        pair_channels(8, "half", d_head=16, unrotated="middle")
