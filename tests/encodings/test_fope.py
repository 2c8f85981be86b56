"""FoPE: the float64 loop reference, RoPE at identity coefficients, the floor clipping slow pairs to zero,
per-key-head coefficient sets with their query groups, bad input named."""

from __future__ import annotations

import math

import pytest
import torch

import posenc
from posenc.encodings.fope import fope_frequencies
from tests.reference.fope_loop import fope_vector


def test_rotation_is_the_float64_loop_reference():
    encoding = posenc.build("fope", d_head=16, max_len=64, n_heads=2, init_std=0.3)
    assert encoding.kept_pairs == 3  # ω_k = 10000^(−2k/16) = 10^(−k/2) > 2π/64 ≈ 0.098 for k = 0, 1, 2
    x = torch.randn(1, 2, 4, 16, dtype=torch.float64)
    positions = torch.tensor([0, 5, 63, 1000])
    got, _ = encoding.rotate(x, x, positions, positions)
    for h in range(2):
        cos_coef, sin_coef = encoding.cos_coef[h].tolist(), encoding.sin_coef[h].tolist()
        for t in range(4):
            expected = fope_vector(x[0, h, t].tolist(), positions[t].item(), cos_coef, sin_coef, max_len=64)
            torch.testing.assert_close(
                got[0, h, t], torch.tensor(expected, dtype=torch.float64), rtol=0, atol=1e-12
            )


def test_identity_coefficients_with_no_clipped_pair_are_rope():
    encoding = posenc.build("fope", d_head=8, max_len=10**6, init_std=0.0)
    assert encoding.kept_pairs == 4
    q, k = torch.randn(2, 2, 6, 8, dtype=torch.float64), torch.randn(2, 2, 6, 8, dtype=torch.float64)
    positions = torch.randint(0, 10**5, (2, 6))
    expected = posenc.build("rope", d_head=8).rotate(q, k, positions, positions)
    for got, want in zip(encoding.rotate(q, k, positions, positions), expected, strict=True):
        torch.testing.assert_close(got, want, rtol=0, atol=1e-12)


def test_pairs_below_the_floor_do_not_turn_and_the_floor_is_two_pi_over_the_training_length():
    omega = 10000.0 ** (-2 * torch.arange(8, dtype=torch.float64) / 16)
    torch.testing.assert_close(fope_frequencies(16, 10000.0, 64), omega[omega > 2 * math.pi / 64])
    encoding = posenc.build("fope", d_head=16, max_len=64)
    x = torch.randn(1, 1, 3, 16, dtype=torch.float64)
    got, _ = encoding.rotate(x, x, torch.tensor([0, 7, 5000]), torch.tensor([0, 7, 5000]))
    slow = [3, 4, 5, 6, 7, 11, 12, 13, 14, 15]  # pairs 3 … 7: channels k and k + 8
    torch.testing.assert_close(got[..., slow], x[..., slow], rtol=0, atol=0)


def test_mixed_coefficients_make_the_logits_depend_on_more_than_the_distance():
    encoding = posenc.build("fope", d_head=8, max_len=1000, init_std=0.3)
    q, k = torch.randn(1, 1, 5, 8, dtype=torch.float64), torch.randn(1, 1, 5, 8, dtype=torch.float64)
    positions = torch.arange(5)
    rq, rk = encoding.rotate(q, k, positions, positions)
    sq, sk = encoding.rotate(q, k, positions + 17, positions + 17)
    assert (rq @ rk.mT - sq @ sk.mT).abs().max() > 1e-3
    identity = posenc.build("fope", d_head=8, max_len=1000, init_std=0.0)
    rq, rk = identity.rotate(q, k, positions, positions)
    sq, sk = identity.rotate(q, k, positions + 17, positions + 17)
    torch.testing.assert_close(rq @ rk.mT, sq @ sk.mT, rtol=0, atol=1e-12)


def test_each_key_head_has_its_set_and_its_query_group_shares_it():
    encoding = posenc.build("fope", d_head=8, max_len=100, n_heads=2, init_std=0.3)
    q, k = torch.randn(1, 4, 3, 8, dtype=torch.float64), torch.randn(1, 2, 3, 8, dtype=torch.float64)
    rq, rk = encoding.rotate(q, k)
    alone = posenc.build("fope", d_head=8, max_len=100, init_std=0.3)
    with torch.no_grad():
        alone.cos_coef.copy_(encoding.cos_coef[1:]), alone.sin_coef.copy_(encoding.sin_coef[1:])
    torch.testing.assert_close(alone.rotate(q[:, 2:], k[:, 1:])[0], rq[:, 2:], rtol=0, atol=1e-14)
    with pytest.raises(ValueError, match="one per key head: k has 4 heads"):
        encoding.rotate(q, q)


def test_gradients_reach_both_coefficient_sets():
    encoding = posenc.build("fope", d_head=8, max_len=100)
    x = torch.randn(1, 2, 5, 8)
    q, k = encoding.rotate(x, x)
    (q @ k.mT).square().sum().backward()
    assert encoding.cos_coef.grad.abs().max() > 0 and encoding.sin_coef.grad.abs().max() > 0


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"d_head": 7, "max_len": 10}, "d_head must be even, got 7"),
        ({"d_head": 8, "max_len": 0}, "max_len"),
        ({"d_head": 8, "max_len": 10, "init_std": -0.1}, "init_std must be a finite number ≥ 0, got -0.1"),
        ({"d_head": 8, "max_len": 10, "n_heads": 0}, "n_heads"),
    ],
)
def test_bad_arguments_are_named(kwargs, message):
    with pytest.raises(ValueError, match=message):
        posenc.build("fope", **kwargs)


def test_decoding_with_a_cache_of_turned_keys_equals_the_full_forward():
    # the cache holds keys as turned: each depends on its own position alone
    from posenc.model import TransformerLM

    torch.manual_seed(0)
    model = TransformerLM(50, d_model=32, n_layers=2, n_heads=4, encoding="fope", backend="sdpa", max_len=64)
    assert model.encoding.capabilities.rotated_keys_are_cacheable
    x = torch.randint(0, 50, (2, 10))
    with torch.no_grad():
        caches = model.new_caches()
        steps = [model(x[:, :4], caches=caches)] + [
            model(x[:, t : t + 1], caches=caches) for t in range(4, 10)
        ]
        torch.testing.assert_close(torch.cat(steps, dim=1), model(x), rtol=0, atol=1e-4)
