"""Sinusoidal and learned encodings acting on token embeddings, by addition or concatenation."""

from __future__ import annotations

import pytest
import torch

import posenc
from posenc.encodings import LearnedEncoding, SinusoidalEncoding
from posenc.functional import grid_positions, sinusoidal_table


def test_add_mode_adds_the_table_to_every_sequence():
    encoding = SinusoidalEncoding(16)
    x = torch.randn(3, 10, 16)
    torch.testing.assert_close(encoding(x), x + sinusoidal_table(10, 16), rtol=0, atol=0)


def test_concat_mode_widens_by_the_encodings_own_width():
    encoding = posenc.build("sinusoidal", d_model=8, mode="concat")
    x = torch.randn(2, 5, 24)
    out = encoding.embed(x)
    assert out.shape == (2, 5, 32) and encoding.output_width(24) == 32
    assert torch.equal(out[..., :24], x)
    assert torch.equal(out[0, :, 24:], sinusoidal_table(5, 8))


def test_explicit_positions_shift_the_codes_for_a_kv_cache_offset():
    encoding = SinusoidalEncoding(16)
    x = torch.randn(2, 4, 16)
    out = encoding.embed(x, torch.arange(100, 104))
    torch.testing.assert_close(out, x + sinusoidal_table(torch.arange(100, 104), 16), rtol=0, atol=0)


def test_batched_positions_let_packed_sequences_restart_at_zero():
    encoding = SinusoidalEncoding(8)
    positions = torch.tensor([[0, 1, 2, 0, 1], [0, 1, 2, 3, 4]])
    out = encoding.embed(torch.zeros(2, 5, 8), positions)
    assert torch.equal(out[0, 3:], out[0, :2]) and torch.equal(out[1], out[1])
    assert torch.equal(out[0, :3], out[1, :3])


def test_negative_positions_are_computed_not_indexed():
    encoding = SinusoidalEncoding(8)
    out = encoding.embed(torch.zeros(1, 3, 8), torch.tensor([-1, 0, 1]))
    torch.testing.assert_close(out[0], sinusoidal_table(torch.tensor([-1, 0, 1]), 8), rtol=0, atol=0)


def test_a_bfloat16_round_trip_never_quantises_the_table():
    encoding = SinusoidalEncoding(64)
    x = torch.zeros(1, 300, 64)
    before = encoding(x)
    encoding.to(torch.bfloat16).to(torch.float32)
    assert encoding.table.dtype == torch.float64
    assert torch.equal(encoding(x), before)
    half = encoding.to(torch.bfloat16)(x.to(torch.bfloat16))
    assert torch.equal(half, sinusoidal_table(300, 64, dtype=torch.bfloat16)[None])  # one rounding


def test_the_cached_table_is_not_saved_in_the_state_dict():
    assert SinusoidalEncoding(16).state_dict() == {}


def test_add_mode_refuses_a_width_mismatch():
    with pytest.raises(ValueError, match="mode='add' needs inputs of width d_model=16, got width 12"):
        SinusoidalEncoding(16).embed(torch.zeros(1, 4, 12))


@pytest.mark.parametrize("positions", [torch.arange(5), torch.zeros(3, 4, dtype=torch.long)])
def test_positions_that_do_not_match_the_input_are_refused(positions):
    with pytest.raises(ValueError, match=r"positions must have shape \[4\], \[1, 4\] or \[2, 4\]"):
        SinusoidalEncoding(8).embed(torch.zeros(2, 4, 8), positions)


def test_float_positions_are_refused():
    with pytest.raises(ValueError, match="positions must be integers, got dtype torch.float32"):
        SinusoidalEncoding(8).embed(torch.zeros(1, 3, 8), torch.tensor([0.0, 1.0, 2.0]))


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"d_model": 7}, "d_model must be even, got 7"),
        ({"d_model": -2}, "d_model must be positive, got -2"),
        ({"d_model": 8, "base": 0}, "base must be positive and finite, got 0.0"),
        ({"d_model": 8, "mode": "prepend"}, "mode must be one of 'add', 'concat'; got 'prepend'"),
    ],
)
def test_sinusoidal_bad_arguments_are_named(kwargs, message):
    with pytest.raises(ValueError, match=message):
        SinusoidalEncoding(**kwargs)


def test_learned_codes_are_rows_of_its_table():
    encoding = LearnedEncoding(32, 8)
    positions = torch.tensor([[0, 5, 31], [1, 1, 2]])
    out = encoding.embed(torch.zeros(2, 3, 8), positions)
    assert torch.equal(out, encoding.weight[positions].detach())


def test_learned_table_has_L_times_d_parameters_and_receives_gradients():
    encoding = LearnedEncoding(50, 12)
    assert sum(p.numel() for p in encoding.parameters()) == 50 * 12 == encoding.count_parameters(50, 12, 4)
    encoding.embed(torch.zeros(1, 7, 12)).sum().backward()
    assert encoding.weight.grad[:7].abs().sum() > 0 and encoding.weight.grad[7:].abs().sum() == 0


def test_learned_init_follows_gpt2_and_bert():
    torch.manual_seed(0)
    gpt2 = LearnedEncoding(1024, 256, init="gpt2").weight
    bert = LearnedEncoding(1024, 256, init="bert").weight
    assert gpt2.std().item() == pytest.approx(0.01, rel=0.02)
    assert bert.abs().max().item() <= 0.04  # truncated at two standard deviations
    assert LearnedEncoding(4, 4, std=0.5).std == 0.5


@pytest.mark.parametrize(
    ("positions", "message"),
    [
        (torch.tensor([0, 1, 32]), "position 32 is at or past max_len=32"),
        (torch.tensor([0, 100, 3]), "position 100 is at or past max_len=32"),
        (torch.tensor([-1, 0, 1]), "positions must be non-negative for a learned table, got -1"),
    ],
)
def test_learned_positions_outside_the_table_are_refused_not_clamped(positions, message):
    with pytest.raises(ValueError, match=message):
        LearnedEncoding(32, 8).embed(torch.zeros(1, 3, 8), positions)


def test_learned_sequences_longer_than_max_len_are_refused():
    with pytest.raises(ValueError, match="position 9 is at or past max_len=8"):
        LearnedEncoding(8, 4).embed(torch.zeros(1, 10, 4))


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"max_len": 0, "d_model": 8}, ValueError, "max_len must be positive, got 0"),
        ({"max_len": 8, "d_model": 0}, ValueError, "d_model must be positive, got 0"),
        ({"max_len": 8.5, "d_model": 8}, TypeError, "max_len must be an integer, got 8.5"),
        (
            {"max_len": 8, "d_model": 8, "init": "xavier"},
            ValueError,
            "init must be one of 'gpt2', 'bert'; got 'xavier'",
        ),
        ({"max_len": 8, "d_model": 8, "std": -1.0}, ValueError, "std must be positive and finite, got -1.0"),
    ],
)
def test_learned_bad_arguments_are_named(kwargs, error, message):
    with pytest.raises(error, match=message):
        LearnedEncoding(**kwargs)


def test_nope_leaves_everything_unchanged():
    nope = posenc.build("nope")
    x = torch.randn(2, 5, 8)
    assert nope(x) is x and nope.kind == "none"
    assert sum(p.numel() for p in nope.parameters()) == 0


def test_far_positions_are_computed_without_caching_every_position_before_them():
    from posenc.encodings.sinusoidal import CACHE_POSITIONS

    encoding = SinusoidalEncoding(16)
    positions = torch.tensor([3, 2**21 - 1, 2**21 + 5])
    out = encoding.embed(torch.zeros(1, 3, 16, dtype=torch.float64), positions)[0]
    assert encoding.table.shape[0] <= CACHE_POSITIONS
    expected = sinusoidal_table(positions, 16, dtype=torch.float64)
    torch.testing.assert_close(out, expected, rtol=0, atol=0)


@pytest.mark.parametrize("name", ["learned", "sinusoidal"])
def test_an_empty_sequence_is_refused_naming_its_shape(name):
    # used to crash inside torch.min with a message about reduction dims
    encoding = posenc.build(name, **({"max_len": 8, "d_model": 8} if name == "learned" else {"d_model": 8}))
    with pytest.raises(ValueError, match=r"x must have shape \[b, s, d\] with s ≥ 1, got \(1, 0, 8\)"):
        encoding.embed(torch.ones(1, 0, 8))


def test_learned_codes_of_no_positions_are_an_empty_table():
    # an empty position tensor used to fail inside torch.min
    learned = posenc.build("learned", max_len=8, d_model=4)
    assert learned.codes(torch.zeros(0, dtype=torch.long)).shape == (0, 4)


def test_prefix_tokens_get_no_code_and_the_grid_keeps_its_own():
    encoding = posenc.build("sinusoidal_2d", d_model=16, prefix_tokens=2)
    positions = grid_positions((3, 3), prefix_tokens=2)
    x = torch.randn(2, 11, 16)
    out = encoding.embed(x, positions)
    torch.testing.assert_close(out[:, :2], x[:, :2], rtol=0, atol=0)
    plain = posenc.build("sinusoidal_2d", d_model=16)
    torch.testing.assert_close(out[:, 2:], plain.embed(x[:, 2:], positions[2:]))


@pytest.mark.parametrize(
    ("prefix_tokens", "error"), [(-1, "prefix_tokens must be ≥ 0, got -1"), (1.5, "prefix_tokens")]
)
def test_bad_prefix_tokens_are_named(prefix_tokens, error):
    with pytest.raises((ValueError, TypeError), match=error):
        posenc.build("sinusoidal_2d", d_model=16, prefix_tokens=prefix_tokens)


def test_a_call_shorter_than_its_prefix_is_refused():
    encoding = posenc.build("sinusoidal", d_model=16, prefix_tokens=3)
    with pytest.raises(ValueError, match="a call of 2 tokens holds fewer than the prefix_tokens=3"):
        encoding.embed(torch.randn(1, 2, 16))
