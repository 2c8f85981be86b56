"""RoPE's module keeps cos/sin in the dtype the kernels read, and never serves them where they no longer hold."""

from __future__ import annotations

import pytest
import torch

from posenc.encodings.rope import KERNEL_TABLES, RotaryEncoding
from posenc.functional.rope import apply_rope_qk


def _heads(dtype, s=12, d=16, seed=0):
    generator = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(2, 3, s, d, generator=generator).to(dtype) for _ in range(2))


def _expected(rope, q, k, positions):
    """The rotation by the module's own float64 tables, as the kernels take them before any keeping."""
    cos, sin = rope.cos_sin(positions)
    return apply_rope_qk(q, k, cos, sin, layout=rope.layout)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64])
def test_kept_tables_are_the_float64_cache_rounded_once_and_rotate_alike(dtype):
    rope = RotaryEncoding(16)
    q, k = _heads(dtype)
    positions = torch.arange(3, 15)
    got = rope.rotate(q, k, positions, positions)
    again = rope.rotate(q, k, positions, positions)  # served from what was kept
    expected = _expected(rope, q, k, positions)
    for g, a, e in zip(got, again, expected, strict=True):
        assert torch.equal(g, e) and torch.equal(a, e)
    kept = list(rope._kernel_cache.values())
    if dtype == torch.float64:  # float64 heads read the float64 cache as it is: nothing kept
        assert kept == []
    else:
        assert len(kept) == 1 and kept[0].cos.dtype == torch.float32
        assert torch.equal(kept[0].cos, rope.cos_cached[3:15].float())


def test_other_positions_never_meet_tables_kept_for_a_run():
    rope = RotaryEncoding(16)
    q, k = _heads(torch.float32)
    for start in (0, 5, 0, 7):
        positions = torch.arange(start, start + 12)
        got = rope.rotate(q, k, positions, positions)
        for g, e in zip(got, _expected(rope, q, k, positions), strict=True):
            assert torch.equal(g, e)
    scattered = torch.tensor([0, 2, 4, 6, 8, 10, 1, 3, 5, 7, 9, 11])  # gathered: cast, not kept
    for g, e in zip(rope.rotate(q, k, scattered, scattered), _expected(rope, q, k, scattered), strict=True):
        assert torch.equal(g, e)
    assert len(rope._kernel_cache) == 3  # the runs at 0, 5 and 7


def test_a_modified_cache_is_never_read_through_kept_tables():
    rope = RotaryEncoding(16)
    q, k = _heads(torch.float32)
    positions = torch.arange(12)
    rope.rotate(q, k, positions, positions)
    with torch.no_grad():
        rope.cos_cached.mul_(0.5)  # changed in place: its version moves
    got = rope.rotate(q, k, positions, positions)
    for g, e in zip(got, _expected(rope, q, k, positions), strict=True):
        assert torch.equal(g, e)


def test_a_grown_or_converted_module_keeps_nothing_from_before():
    rope = RotaryEncoding(16)
    q, k = _heads(torch.float32)
    rope.rotate(q, k, torch.arange(12), torch.arange(12))
    assert rope._kernel_cache
    rope.rotate(*_heads(torch.float32, s=300), torch.arange(300), torch.arange(300))  # grows the cache
    assert all(entry.source[0] is rope.cos_cached for entry in rope._kernel_cache.values())
    rope.to(torch.bfloat16)  # a dtype conversion (and any .to()) empties it
    assert not rope._kernel_cache
    q16, k16 = _heads(torch.bfloat16)
    got = rope.rotate(q16, k16, torch.arange(12), torch.arange(12))
    for g, e in zip(got, _expected(rope, q16, k16, torch.arange(12)), strict=True):
        assert torch.equal(g, e)


def test_at_most_a_few_runs_are_kept_as_a_decoder_steps_through_positions():
    rope = RotaryEncoding(16)
    q, k = _heads(torch.float32, s=1)
    for step in range(3 * KERNEL_TABLES):
        position = torch.tensor([step])
        got = rope.rotate(q, k, position, position)
        for g, e in zip(got, _expected(rope, q, k, position), strict=True):
            assert torch.equal(g, e)
    assert len(rope._kernel_cache) == KERNEL_TABLES
