"""STRING: the float64 loop reference (Cayley and circulant forms), an orthogonal P, offsets alone in the
logits, norms kept, gradients to the learned map, bad input named."""

from __future__ import annotations

import pytest
import torch

import posenc
from tests.reference.string_loop import cayley_map, cayley_string_vector, circulant_string_vector


def _randomised(encoding):
    with torch.no_grad():
        for parameter in encoding.parameters():
            parameter.copy_(torch.randn_like(parameter) * 0.3)
    return encoding


def _qk(b=1, h=2, s=5, d=8):
    return torch.randn(b, h, s, d, dtype=torch.float64), torch.randn(b, h, s, d, dtype=torch.float64)


COORDS = torch.tensor([[0.0, 0.0], [1.0, 2.0], [4.5, -1.0], [7.0, 7.0], [-3.0, 2.5]])


def test_cayley_string_is_the_float64_loop_reference():
    encoding = _randomised(posenc.build("string", d_head=8, axes=2))
    q, k = _qk()
    rq, _ = encoding.rotate(q, k, COORDS, COORDS)
    upper, vectors = encoding.skew.tolist(), encoding.frequency_vectors.tolist()
    for h in range(2):
        for t in range(5):
            expected = cayley_string_vector(q[0, h, t].tolist(), COORDS[t].tolist(), upper, vectors)
            torch.testing.assert_close(
                rq[0, h, t], torch.tensor(expected, dtype=torch.float64), rtol=0, atol=1e-12
            )


def test_circulant_string_is_the_float64_loop_reference():
    encoding = _randomised(posenc.build("string", d_head=6, axes=2, form="circulant"))
    q, k = _qk(d=6)
    rq, _ = encoding.rotate(q, k, COORDS, COORDS)
    rows = encoding.circulant_rows.tolist()
    for t in range(5):
        expected = circulant_string_vector(q[0, 1, t].tolist(), COORDS[t].tolist(), rows)
        torch.testing.assert_close(
            rq[0, 1, t], torch.tensor(expected, dtype=torch.float64), rtol=0, atol=1e-11
        )


def test_the_cayley_map_is_orthogonal_with_determinant_one():
    encoding = _randomised(posenc.build("string", d_head=8))
    p = encoding.orthogonal_map()
    assert p.dtype == torch.float64
    torch.testing.assert_close(p @ p.T, torch.eye(8, dtype=torch.float64), rtol=0, atol=1e-13)
    torch.testing.assert_close(torch.linalg.det(p), torch.tensor(1.0, dtype=torch.float64))
    torch.testing.assert_close(p, torch.tensor(cayley_map(encoding.skew.tolist(), 8), dtype=torch.float64))
    assert (p - torch.eye(8, dtype=torch.float64)).abs().max() > 0.1  # a map, not the identity


@pytest.mark.parametrize(("form", "axes"), [("cayley", 2), ("cayley", 3), ("circulant", 2), ("cayley", 1)])
def test_logits_depend_only_on_the_offset_and_norms_are_kept(form, axes):
    encoding = _randomised(posenc.build("string", d_head=8, axes=axes, form=form))
    q, k = _qk(b=2, s=7)
    shape = (2, 7) if axes == 1 else (2, 7, axes)
    positions = torch.randint(-20, 20, shape)
    shift = torch.randint(-40, 40, (2, 1) if axes == 1 else (2, 1, axes))
    rq, rk = encoding.rotate(q, k, positions, positions)
    sq, sk = encoding.rotate(q, k, positions + shift, positions + shift)
    torch.testing.assert_close(rq @ rk.transpose(-1, -2), sq @ sk.transpose(-1, -2), rtol=0, atol=1e-10)
    torch.testing.assert_close(rq.norm(dim=-1), q.norm(dim=-1), rtol=0, atol=1e-12)
    moved, _ = encoding.rotate(q, k, positions + 3, positions)
    assert (moved @ rk.transpose(-1, -2) - rq @ rk.transpose(-1, -2)).abs().max() > 1e-3


def test_a_fresh_cayley_string_starts_near_the_identity_map_and_gradients_reach_it():
    encoding = posenc.build("string", d_head=8, axes=2, base=100.0)
    assert 0 < (encoding.orthogonal_map() - torch.eye(8, dtype=torch.float64)).abs().max() < 0.2
    q, k = _qk(s=5)
    rq, rk = encoding.rotate(q.float(), k.float(), COORDS, COORDS)
    (rq @ rk.transpose(-1, -2)).square().sum().backward()
    assert encoding.skew.grad.abs().max() > 0 and encoding.frequency_vectors.grad.abs().max() > 0
    assert rq.dtype == torch.float32


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"d_head": 7}, "d_head must be even, got 7"),
        ({"d_head": 8, "form": "hadamard"}, "hadamard"),
        ({"d_head": 8, "axes": -1}, "axes"),
        ({"d_head": 8, "base": 0.0}, "base"),
    ],
)
def test_bad_arguments_are_named(kwargs, message):
    with pytest.raises(ValueError, match=message):
        posenc.build("string", **kwargs)


def test_bad_positions_are_named():
    encoding = posenc.build("string", d_head=8, axes=2)
    q, k = _qk(s=5)
    with pytest.raises(ValueError, match=r"one column per coordinate axis \(2\)"):
        encoding.rotate(q, k, torch.zeros(5, 3), torch.zeros(5, 3))
    with pytest.raises(ValueError, match="finite"):
        encoding.rotate(q, k, torch.full((5, 2), float("nan")), COORDS)


@pytest.mark.parametrize("form", ["cayley", "circulant"])
def test_the_rotations_compose_as_a_group(form):
    # R(x)·R(y) = R(x + y): the generators commute, and Cayley's Pᵀ is applied back
    encoding = _randomised(posenc.build("string", d_head=8, axes=2, form=form))
    q = torch.randn(1, 1, 5, 8, dtype=torch.float64)
    x, y = COORDS, COORDS.flip(0) * 0.5
    once, _ = encoding.rotate(q, q, x, x)
    twice, _ = encoding.rotate(once, once, y, y)
    together, _ = encoding.rotate(q, q, x + y, x + y)
    torch.testing.assert_close(twice, together, rtol=0, atol=1e-12)


@pytest.mark.parametrize("name", ["string", "mochi", "rope_mixed"])
def test_learned_frequencies_start_in_the_default_dtype(name):
    # they were created with .float(): under a float64 default they were float32 parameters
    import posenc
    from posenc.encodings import describe, encoding_class

    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        encoding = posenc.build(name, **describe(name).specimen_arguments(encoding_class(name)))
    finally:
        torch.set_default_dtype(previous)
    assert {p.dtype for p in encoding.parameters()} == {torch.float64}
