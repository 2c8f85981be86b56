"""LieRE: the float64 loop reference, orthogonal maps, relative on one axis but not (in general) on several,
gradients to the generators, bad input named."""

from __future__ import annotations

import pytest
import torch

import posenc
from tests.reference.liere_loop import liere_vector

COORDS = torch.tensor([[0.0, 0.0], [1.0, 2.0], [4.5, -1.0], [7.0, 7.0], [-3.0, 2.5]])


def _qk(b=1, h=2, s=5, d=8):
    return torch.randn(b, h, s, d, dtype=torch.float64), torch.randn(b, h, s, d, dtype=torch.float64)


@pytest.mark.parametrize("block", [2, 4, 8])
def test_rotation_is_the_float64_loop_reference(block):
    encoding = posenc.build("liere", d_head=8, axes=2, block=block)
    q, k = _qk()
    rq, rk = encoding.rotate(q, k, COORDS, COORDS)
    entries = encoding.generator_entries.tolist()
    for t in range(5):
        expected = liere_vector(k[0, 1, t].tolist(), COORDS[t].tolist(), entries, block)
        torch.testing.assert_close(
            rk[0, 1, t], torch.tensor(expected, dtype=torch.float64), rtol=0, atol=1e-12
        )


def test_every_map_is_orthogonal_and_keeps_norms():
    encoding = posenc.build("liere", d_head=8, axes=3, block=4)
    rotation = encoding.rotation(torch.randn(6, 3) * 10)  # [1, 1, s, blocks, B, B]
    eye = torch.eye(4, dtype=torch.float64).expand_as(rotation)
    torch.testing.assert_close(rotation @ rotation.mT, eye, rtol=0, atol=1e-12)
    q, k = _qk(s=5)
    rq, _ = encoding.rotate(q, k, torch.randn(5, 3), torch.randn(5, 3))
    torch.testing.assert_close(rq.norm(dim=-1), q.norm(dim=-1), rtol=0, atol=1e-12)


def test_on_one_axis_the_logits_depend_only_on_the_distance():
    encoding = posenc.build("liere", d_head=8, axes=1, block=8)
    q, k = _qk(b=2, s=7)
    positions = torch.randint(0, 50, (2, 7))
    rq, rk = encoding.rotate(q, k, positions, positions)
    sq, sk = encoding.rotate(q, k, positions + 37, positions + 37)
    torch.testing.assert_close(rq @ rk.mT, sq @ sk.mT, rtol=0, atol=1e-11)


def test_on_several_axes_generators_that_do_not_commute_make_the_logits_move_with_the_grid():
    # the claim ComRoPE exists for: LieRE's generators in general do not commute
    encoding = posenc.build("liere", d_head=8, axes=2, block=4)
    a = encoding.generators()
    assert (a[0] @ a[1] - a[1] @ a[0]).abs().max() > 1e-3
    q, k = _qk(s=5)
    rq, rk = encoding.rotate(q, k, COORDS, COORDS)
    sq, sk = encoding.rotate(q, k, COORDS + 3, COORDS + 3)
    assert (rq @ rk.mT - sq @ sk.mT).abs().max() > 1e-3


def test_gradients_reach_the_generators_in_float32():
    encoding = posenc.build("liere", d_head=8, axes=2, block=4)
    q, k = _qk()
    rq, rk = encoding.rotate(q.float(), k.float(), COORDS, COORDS)
    assert rq.dtype == torch.float32
    (rq @ rk.mT).square().sum().backward()
    assert encoding.generator_entries.grad.abs().max() > 0


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"d_head": 8, "block": 3}, "block must be at least 2 and divide d_head=8, got 3"),
        ({"d_head": 8, "block": 1}, "got 1"),
        ({"d_head": 8, "scale": -1.0}, "scale"),
        ({"d_head": 0}, "d_head"),
    ],
)
def test_bad_arguments_are_named(kwargs, message):
    with pytest.raises(ValueError, match=message):
        posenc.build("liere", **kwargs)


def test_bad_positions_are_named():
    encoding = posenc.build("liere", d_head=8, axes=2, block=4)
    q, k = _qk()
    with pytest.raises(ValueError, match=r"one column per coordinate axis \(2\), got shape \(5,\)"):
        encoding.rotate(q, k, torch.arange(5), torch.arange(5))
