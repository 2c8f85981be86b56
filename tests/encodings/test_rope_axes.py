"""RotaryEncoding on several axes: axial, sectioned (M-RoPE) and mixed (RoPE-Mixed), through build("rope", …)."""

from __future__ import annotations

import re

import pytest
import torch

import posenc
import posenc.model
from posenc.attention import MultiHeadAttention
from posenc.functional.coordinates import grid_positions
from tests.reference.axes_loop import axial_rope_vector, mixed_rope_vector, mrope_vector


def _qk(h=2, s=6, d=16, seed=0, dtype=torch.float64):
    generator = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(1, h, s, d, generator=generator, dtype=dtype) for _ in range(2))


@pytest.mark.parametrize("layout", ["interleaved", "half"])
def test_axial_rotation_is_each_axis_own_rope_concatenated(layout):
    rope = posenc.build("rope", d_head=16, axes=(4, 6, 6), layout=layout)
    coords = torch.tensor([[0, 0, 0], [1, 2, 3], [4, 0, 9], [2, 7, 1], [9, 9, 9], [3, 1, 4]])
    q, k = _qk()
    rq, rk = rope.rotate(q, k, coords, coords)
    for t in range(6):
        expected = axial_rope_vector(q[0, 0, t].tolist(), coords[t].tolist(), [4, 6, 6], layout=layout)
        torch.testing.assert_close(
            rq[0, 0, t], torch.tensor(expected, dtype=torch.float64), rtol=0, atol=1e-12
        )


def test_axes_as_a_count_splits_the_rotary_width_equally():
    rope = posenc.build("rope", d_head=64, axes=2)
    assert rope.axes == (32, 32) and rope.position_space.columns == 2
    torch.testing.assert_close(rope.inv_freq, posenc.build("rope", d_head=64, axes=(32, 32)).inv_freq)


@pytest.mark.parametrize(("sections", "layout"), [((2, 3, 3), "contiguous"), ((4, 2, 2), "interleaved")])
def test_sections_split_one_spectrum_as_qwen2_vl_and_qwen3_vl(sections, layout):
    rope = posenc.build("rope", d_head=16, sections=sections, section_layout=layout)
    coords = torch.tensor([[5, 5, 5], [6, 6, 6], [7, 7, 8], [7, 8, 7], [10, 3, 2], [0, 0, 0]])
    q, k = _qk()
    rq, _ = rope.rotate(q, k, coords, coords)
    for t in range(6):
        expected = mrope_vector(q[0, 1, t].tolist(), coords[t].tolist(), list(sections), layout=layout)
        torch.testing.assert_close(
            rq[0, 1, t], torch.tensor(expected, dtype=torch.float64), rtol=0, atol=1e-12
        )


def test_text_on_the_diagonal_is_one_dimensional_rope():
    # M-RoPE's text tokens (t = h = w) turn exactly as 1-D RoPE does
    mrope = posenc.build("rope", d_head=16, sections=(2, 3, 3))
    q, k = _qk()
    positions = torch.arange(100, 106)
    expected = posenc.build("rope", d_head=16).rotate(q, k, positions, positions)
    got = mrope.rotate(q, k, positions[:, None].expand(6, 3), positions[:, None].expand(6, 3))
    for a, b in zip(got, expected, strict=True):
        assert torch.equal(a, b)


@pytest.mark.parametrize("d_head", [6, 16, 64, 128, 256])
def test_mrope_defaults_to_qwen2_vl_sections_contiguous_and_qwen3_vl_sections_interleaved(d_head):
    # 128: Qwen2-VL's mrope_section (16, 24, 24) and Qwen3-VL's default (24, 20, 20) in transformers'
    # Qwen3VLTextRotaryEmbedding; other widths in the same proportion, every axis with a pair
    contiguous = posenc.build("mrope", d_head=d_head)
    interleaved = posenc.build("mrope", d_head=d_head, section_layout="interleaved")
    for rope in (contiguous, interleaved):
        assert sum(rope.sections) == d_head // 2 and min(rope.sections) >= 1
    if d_head == 128:
        assert contiguous.sections == (16, 24, 24) and interleaved.sections == (24, 20, 20)


def test_mixed_rotation_uses_each_heads_learned_frequencies():
    torch.manual_seed(0)
    rope = posenc.build("rope", d_head=16, axes=2, mixed=True, n_heads=2, layout="interleaved")
    coords = grid_positions((2, 3)).double() * 0.5
    q, k = _qk(h=2, s=6)
    rq, _ = rope.rotate(q, k, coords, coords)
    frequencies = rope.mixed_frequencies.detach().double()  # [h, r/2, n]
    for head in range(2):
        for t in range(6):
            expected = mixed_rope_vector(
                q[0, head, t].tolist(), coords[t].tolist(), frequencies[head].tolist()
            )
            torch.testing.assert_close(
                rq[0, head, t], torch.tensor(expected, dtype=torch.float64), rtol=0, atol=1e-12
            )


def test_mixed_initialisation_is_the_papers_two_perpendicular_directions_per_head():
    torch.manual_seed(0)
    rope = posenc.build("rope", d_head=32, axes=2, mixed=True, n_heads=3)
    frequencies = rope.mixed_frequencies.detach().double()  # [h, 16, 2]: groups of 8 pairs
    magnitude = 10.0 ** (-torch.arange(8, dtype=torch.float64) * 4 / 32)  # base 10, the paper's
    torch.testing.assert_close(frequencies.norm(dim=-1), magnitude.repeat(2).expand(3, 16), rtol=1e-6, atol=0)
    first, second = frequencies[:, 0], frequencies[:, 8]  # one pair of each group, per head
    torch.testing.assert_close(
        (first * second).sum(-1), torch.zeros(3, dtype=torch.float64), rtol=0, atol=1e-7
    )


def test_mixed_initialisation_on_three_axes_draws_rotations_uniformly():
    # the groups of head h point along the rows of a random rotation: det +1, and uniform (Haar), so that
    # no direction is favoured; plain QR of a Gaussian gave rows biased by its sign convention (an entry
    # averaged 0.49 over heads)
    from posenc.functional.rope import rope_mixed_frequencies

    frequencies = rope_mixed_frequencies(4000, 6, 3, generator=torch.Generator().manual_seed(0))  # [h, 3, 3]
    directions = frequencies / frequencies.norm(dim=-1, keepdim=True)  # magnitude 1 for r/(2n) = 1
    torch.testing.assert_close(
        directions @ directions.transpose(-1, -2), torch.eye(3, dtype=torch.float64).expand(4000, 3, 3)
    )
    assert (torch.linalg.det(directions) > 0).all()
    # uniform rows: each entry averages 0 (within 4 standard errors of 1/√(3·4000))
    assert directions.mean(dim=0).abs().max() < 4 / (3 * 4000) ** 0.5


def test_gradients_reach_the_mixed_frequencies_through_attention():
    torch.manual_seed(0)
    rope = posenc.build("rope", d_head=8, axes=2, mixed=True, n_heads=2)
    attention = MultiHeadAttention(16, 2, encoding=rope, causal=False)
    positions = grid_positions((3, 3))
    attention(torch.randn(2, 9, 16), positions=positions).square().sum().backward()
    assert rope.mixed_frequencies.grad is not None and rope.mixed_frequencies.grad.abs().sum() > 0


def test_axial_logits_depend_only_on_the_offsets_along_each_axis():
    rope = posenc.build("rope", d_head=16, axes=(8, 8))
    q, k = _qk(h=1, s=1)

    def logit(q_at, k_at):
        rq, rk = rope.rotate(q, k, torch.tensor([q_at]), torch.tensor([k_at]))
        return float((rq * rk).sum())

    base = logit((3, 7), (1, 2))
    assert logit((50, 7), (48, 2)) == pytest.approx(base, abs=1e-11)
    assert logit((3, 90), (1, 85)) == pytest.approx(base, abs=1e-11)
    assert abs(logit((3, 7), (2, 1)) - base) > 1e-3


@pytest.mark.parametrize("backend", ["eager", "sdpa", "flex"])
@pytest.mark.parametrize(
    "kwargs", [{"axes": (4, 4)}, {"sections": (2, 1, 1)}, {"axes": 2, "mixed": True, "n_heads": 2}]
)
def test_kv_cache_decoding_on_axes_equals_the_full_forward(kwargs, backend):
    torch.manual_seed(0)
    rope = posenc.build("rope", d_head=8, **kwargs)
    columns = rope.position_space.columns
    model = posenc.model.TransformerLM(32, d_model=16, n_heads=2, n_layers=2, encoding=rope, backend=backend)
    tokens = torch.randint(0, 32, (2, 7))
    positions = torch.randint(0, 20, (7, columns))
    full = model(tokens, positions=positions)
    caches = model.new_caches()
    steps = [model(tokens[:, :3], positions=positions[:3], caches=caches)]
    steps += [model(tokens[:, t : t + 1], positions=positions[t : t + 1], caches=caches) for t in range(3, 7)]
    torch.testing.assert_close(torch.cat(steps, dim=1), full, rtol=0, atol=1e-5)


def test_decoding_after_a_grid_continues_past_its_largest_coordinate():
    # M-RoPE: text after an image resumes one past the image's largest position, on every axis
    rope = posenc.build("rope", d_head=8, sections=(2, 1, 1))
    model = posenc.model.TransformerLM(32, d_model=16, n_heads=2, n_layers=1, encoding=rope)
    caches = model.new_caches()
    prompt = torch.tensor([[0, 0, 0], [1, 1, 1], [2, 2, 2], [2, 2, 3], [2, 3, 2], [2, 3, 3]])
    model(torch.zeros(1, 6, dtype=torch.long), positions=prompt, caches=caches)
    step = model(torch.ones(1, 1, dtype=torch.long), caches=caches)
    explicit = model.new_caches()
    model(torch.zeros(1, 6, dtype=torch.long), positions=prompt, caches=explicit)
    expected = model(torch.ones(1, 1, dtype=torch.long), positions=torch.tensor([[4, 4, 4]]), caches=explicit)
    torch.testing.assert_close(step, expected, rtol=0, atol=0)


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"axes": (8, 7)}, ValueError, "axes[1] must be even, got 7"),
        (
            {"axes": (8, 8), "rotary_dim": 12},
            ValueError,
            "axes (8, 8) add up to 16 channels, not rotary_dim=12",
        ),
        ({"axes": 3}, ValueError, "rotary_dim=16 does not split into 3 even axis widths"),
        ({"sections": (2, 2, 2)}, ValueError, "sections (2, 2, 2) hold 6 pairs, but rotary_dim=16 has 8"),
        ({"axes": 2, "sections": (4, 4)}, ValueError, "give axes (one spectrum per axis) or sections"),
        ({"axes": 2, "xpos": True}, ValueError, "xpos scales by the distance along one line"),
        (
            {
                "sections": (4, 4),
                "scaling": "dynamic",
                "scaling_args": {"factor": 2.0, "original_max_position_embeddings": 8},
            },
            ValueError,
            "scaling='dynamic' follows",
        ),
        (
            {"axes": 2, "scaling": "linear", "scaling_args": {"factor": 2.0}},
            ValueError,
            "with axes, each axis has its own",
        ),
        ({"mixed": True, "n_heads": 2}, ValueError, "give axes=n and n_heads"),
        (
            {"mixed": True, "axes": (8, 8), "n_heads": 2},
            ValueError,
            "mixed=True takes axes as the number of axes",
        ),
        ({"n_heads": 2}, ValueError, "n_heads is for mixed=True"),
        ({"section_layout": "zigzag", "sections": (4, 4)}, ValueError, "section_layout must be one of"),
    ],
)
def test_axes_that_do_not_fit_are_refused_naming_the_value(kwargs, error, message):
    with pytest.raises(error, match=re.escape(message)):
        posenc.build("rope", d_head=16, **kwargs)


@pytest.mark.parametrize(
    ("positions", "message"),
    [
        (torch.zeros(5, 2, dtype=torch.long), "positions must have shape [6, 2] or [1, 6, 2]"),
        (
            torch.zeros(6, 3, dtype=torch.long),
            "positions must be [..., s, 2] with one column per coordinate axis (2)",
        ),
        (
            torch.zeros(6, dtype=torch.long),
            "positions must be [..., s, 2] with one column per coordinate axis (2)",
        ),
        (
            torch.tensor([[0.0, 1.0]] * 5 + [[float("inf"), 0.0]]),
            "positions must be finite coordinates, got inf",
        ),
    ],
)
def test_coordinates_that_do_not_fit_are_refused_naming_them(positions, message):
    rope = posenc.build("rope", d_head=16, axes=2)
    q, k = _qk()
    with pytest.raises(ValueError, match=re.escape(message)):
        rope.rotate(q, k, positions, positions)


def test_mixed_refuses_keys_with_fewer_heads():
    rope = posenc.build("rope", d_head=16, axes=2, mixed=True, n_heads=4)
    q, k = torch.zeros(1, 4, 3, 16), torch.zeros(1, 2, 3, 16)
    with pytest.raises(ValueError, match="q and k need 4 heads, got 4 and 2"):
        rope.rotate(q, k, grid_positions((1, 3)), grid_positions((1, 3)))
