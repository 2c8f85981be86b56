"""Golden Gate RoPE: the float64 loop reference, offsets alone in the logits, norms kept, bad input named."""

from __future__ import annotations

import pytest
import torch

import posenc
from posenc.functional.rotations import golden_directions
from tests.reference.golden_gate_loop import direction, golden_gate_vector


def _qk(b=1, h=2, s=6, d=8, dtype=torch.float64):
    return torch.randn(b, h, s, d, dtype=dtype), torch.randn(b, h, s, d, dtype=dtype)


@pytest.mark.parametrize(("axes", "layout"), [(2, "half"), (3, "interleaved")])
def test_rotation_is_the_float64_loop_reference(axes, layout):
    encoding = posenc.build("golden_gate", d_head=8, n_heads=2, axes=axes, layout=layout, min_freq=0.05)
    coords = torch.tensor([[0.0, 0.0, 0.0], [1.0, 2.0, 3.0], [4.5, -1.0, 9.0], [7.0, 7.0, 1.0]])[:, :axes]
    q, k = _qk(s=4)
    rq, rk = encoding.rotate(q, k, coords, coords)
    assert rq.dtype == torch.float64
    for h in range(2):
        for t in range(4):
            expected = golden_gate_vector(
                q[0, h, t].tolist(), coords[t].tolist(), h, min_freq=0.05, max_freq=1.0, layout=layout
            )
            torch.testing.assert_close(
                rq[0, h, t], torch.tensor(expected, dtype=torch.float64), rtol=0, atol=1e-12
            )


def test_directions_are_the_golden_sequence_on_the_sphere():
    got = golden_directions(20, 3)
    expected = torch.tensor([direction(j, 3) for j in range(1, 21)], dtype=torch.float64)
    torch.testing.assert_close(got, expected, rtol=0, atol=1e-9)
    torch.testing.assert_close(got.norm(dim=-1), torch.ones(20, dtype=torch.float64))


@pytest.mark.parametrize("axes", [2, 3])
def test_logits_depend_only_on_the_offset_and_norms_are_kept(axes):
    encoding = posenc.build("golden_gate", d_head=16, n_heads=2, axes=axes)
    q, k = _qk(b=2, s=9, d=16)
    positions = torch.randint(-20, 20, (2, 9, axes))
    shift = torch.randint(-50, 50, (2, 1, axes))
    rq, rk = encoding.rotate(q, k, positions, positions)
    sq, sk = encoding.rotate(q, k, positions + shift, positions + shift)
    torch.testing.assert_close(rq @ rk.transpose(-1, -2), sq @ sk.transpose(-1, -2), rtol=0, atol=1e-12)
    torch.testing.assert_close(rq.norm(dim=-1), q.norm(dim=-1), rtol=0, atol=1e-12)
    # and the logits do move with the offset (the check could fail)
    far_q, _ = encoding.rotate(q, k, positions + torch.tensor([5] + [0] * (axes - 1)), positions)
    assert (far_q @ rk.transpose(-1, -2) - rq @ rk.transpose(-1, -2)).abs().max() > 1e-3


def test_every_head_turns_along_its_own_directions():
    encoding = posenc.build("golden_gate", d_head=8, n_heads=2)
    directions = encoding.frequency_vectors / encoding.frequency_vectors.norm(dim=-1, keepdim=True)
    assert (directions[0] - directions[1]).abs().max() > 0.1


def test_frequencies_stay_float64_after_a_dtype_conversion():
    encoding = posenc.build("golden_gate", d_head=8, n_heads=2).to(torch.bfloat16)
    assert encoding.frequency_vectors.dtype == torch.float64


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"d_head": 7}, ValueError, "d_head must be even, got 7"),
        ({"d_head": 8, "axes": 0}, ValueError, "axes"),
        ({"d_head": 8, "min_freq": 2.0, "max_freq": 1.0}, ValueError, "min_freq must not exceed max_freq"),
        ({"d_head": 8, "layout": "diagonal"}, ValueError, "diagonal"),
    ],
)
def test_bad_arguments_are_named(kwargs, error, message):
    with pytest.raises(error, match=message):
        posenc.build("golden_gate", **kwargs)


def test_bad_inputs_are_named():
    encoding = posenc.build("golden_gate", d_head=8, n_heads=2)
    q, k = _qk(s=4)
    with pytest.raises(ValueError, match=r"one column per coordinate axis \(2\), got shape \(4, 3\)"):
        encoding.rotate(q, k, torch.zeros(4, 3), torch.zeros(4, 3))
    with pytest.raises(ValueError, match="needs 2 heads, got 1"):
        encoding.rotate(q[:, :1], k[:, :1])
    with pytest.raises(ValueError, match=r"d_head=8\], got \(1, 2, 4, 6\)"):
        encoding.rotate(q[..., :6], k[..., :6])
