"""ComRoPE-LD: the float64 loop reference, commuting angle matrices, offsets alone in the logits on several
axes, orthogonal maps, gradients to both parameters, bad input named."""

from __future__ import annotations

import pytest
import torch

import posenc
from tests.reference.liere_loop import comrope_vector

COORDS = torch.tensor([[0.0, 0.0], [1.0, 2.0], [4.5, -1.0], [7.0, 7.0], [-3.0, 2.5]])


def _qk(b=1, h=2, s=5, d=8):
    return torch.randn(b, h, s, d, dtype=torch.float64), torch.randn(b, h, s, d, dtype=torch.float64)


@pytest.mark.parametrize("block", [2, 4])
def test_rotation_is_the_float64_loop_reference(block):
    encoding = posenc.build("comrope", d_head=8, axes=2, block=block)
    q, k = _qk()
    rq, _ = encoding.rotate(q, k, COORDS, COORDS)
    bases, scales = encoding.base_entries.tolist(), encoding.axis_scales.tolist()
    for t in range(5):
        expected = comrope_vector(q[0, 0, t].tolist(), COORDS[t].tolist(), bases, scales, block)
        torch.testing.assert_close(
            rq[0, 0, t], torch.tensor(expected, dtype=torch.float64), rtol=0, atol=1e-12
        )


@pytest.mark.parametrize("axes", [2, 3])
def test_the_angle_matrices_commute_and_the_logits_depend_only_on_the_offset(axes):
    encoding = posenc.build("comrope", d_head=8, axes=axes, block=4)
    with torch.no_grad():  # far from the initial θ ≈ 1: any parameters commute
        encoding.axis_scales.copy_(torch.randn_like(encoding.axis_scales) * 3)
    a = encoding.generators()
    torch.testing.assert_close(a[0] @ a[1], a[1] @ a[0], rtol=0, atol=1e-12)
    q, k = _qk(b=2, s=7)
    positions = torch.randint(-20, 20, (2, 7, axes)).double() + 0.25
    shift = torch.randn(2, 1, axes) * 10
    rq, rk = encoding.rotate(q, k, positions, positions)
    sq, sk = encoding.rotate(q, k, positions + shift, positions + shift)
    torch.testing.assert_close(rq @ rk.mT, sq @ sk.mT, rtol=0, atol=1e-10)
    torch.testing.assert_close(rq.norm(dim=-1), q.norm(dim=-1), rtol=0, atol=1e-12)
    moved, _ = encoding.rotate(q, k, positions + 2, positions)
    assert (moved @ rk.mT - rq @ rk.mT).abs().max() > 1e-3


def test_maps_are_orthogonal_and_compose_as_a_group():
    encoding = posenc.build("comrope", d_head=8, axes=2, block=8)
    x, y = COORDS.double(), torch.randn(5, 2, dtype=torch.float64) * 5
    rx, ry, rxy = encoding.rotation(x), encoding.rotation(y), encoding.rotation(x + y)
    torch.testing.assert_close(
        rx @ rx.mT, torch.eye(8, dtype=torch.float64).expand_as(rx), rtol=0, atol=1e-12
    )
    torch.testing.assert_close(rx @ ry, rxy, rtol=0, atol=1e-11)


def test_gradients_reach_the_matrices_and_the_scales():
    encoding = posenc.build("comrope", d_head=8, axes=2, block=4)
    q, k = _qk()
    rq, rk = encoding.rotate(q.float(), k.float(), COORDS, COORDS)
    (rq @ rk.mT).square().sum().backward()
    assert encoding.base_entries.grad.abs().max() > 0 and encoding.axis_scales.grad.abs().max() > 0


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"d_head": 8, "block": 5}, "block must be at least 2 and divide d_head=8, got 5"),
        ({"d_head": 8, "axes": 0}, "axes"),
        ({"d_head": 8, "scale": 0}, "scale"),
    ],
)
def test_bad_arguments_are_named(kwargs, message):
    with pytest.raises(ValueError, match=message):
        posenc.build("comrope", **kwargs)


def test_bad_positions_are_named():
    encoding = posenc.build("comrope", d_head=8, axes=2, block=4)
    q, k = _qk()
    with pytest.raises(ValueError, match="finite"):
        encoding.rotate(q, k, torch.full((5, 2), float("inf")), COORDS)
