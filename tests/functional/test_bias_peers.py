"""ALiBi, T5 buckets and Swin's index against transformers' BLOOM, MPT, T5 and Swin as oracles."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("transformers", reason="peer oracle: install the 'peers' extra")

from transformers.models.bloom.modeling_bloom import build_alibi_tensor  # noqa: E402
from transformers.models.mpt.modeling_mpt import build_mpt_alibi_tensor  # noqa: E402
from transformers.models.swin import modeling_swin  # noqa: E402
from transformers.models.t5.modeling_t5 import T5Attention  # noqa: E402

from posenc.functional.alibi import alibi_bias, alibi_slopes  # noqa: E402
from posenc.functional.relative import swin_relative_index, t5_relative_bucket  # noqa: E402
from tests.reference.bias_loop import t5_bucket  # noqa: E402

# BLOOM raises a float32 2^(−8/n) to the k-th power in float32: 4.8e-7 at most over 1 … 64 heads.
BLOOM_SLOPE_RTOL = 1e-6
# MPT takes 1/2^x in float32: 3.2e-8 at most in the cases below (half a float32 ulp is 6e-8).
MPT_SLOPE_RTOL = 1e-7


def as_float64(tensor: torch.Tensor) -> torch.Tensor:
    return tensor.detach().to(torch.float64)


# --- BLOOM -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("n_heads", range(1, 65))
def test_slopes_equal_bloom_for_every_head_count(n_heads):
    mask = torch.ones(1, 2, dtype=torch.long)
    bloom = build_alibi_tensor(mask, n_heads, torch.float32).view(n_heads, 2)  # m·(position 0, 1)
    assert torch.equal(bloom[:, 0], torch.zeros(n_heads))
    torch.testing.assert_close(as_float64(bloom[:, 1]), alibi_slopes(n_heads), rtol=BLOOM_SLOPE_RTOL, atol=0)
    if n_heads <= 10:  # slopes 2^-k and 2^(-k/2), k ≤ 8, which BLOOM's float32 powers reach exactly
        assert torch.equal(bloom[:, 1], alibi_slopes(n_heads).float())


@pytest.mark.parametrize("n_heads", [1, 5, 12, 16, 20, 40, 64])
def test_bias_equals_bloom_up_to_a_constant_per_row_with_left_padding(n_heads):
    mask = torch.tensor(
        [
            [1, 1, 1, 1, 1, 1, 1, 1, 1],
            [0, 0, 0, 1, 1, 1, 1, 1, 1],
            [0, 0, 0, 0, 0, 0, 0, 1, 1],
        ]
    )
    b, s = mask.shape
    bloom = as_float64(build_alibi_tensor(mask, n_heads, torch.float32)).view(b, n_heads, s)  # [b, h, j]
    positions = (mask.cumsum(-1) - 1) * mask  # BLOOM's key positions: pads at 0
    ours = alibi_bias(positions, positions, n_heads, dtype=torch.float64)  # [b, h, i, j]
    assert ours.shape == (b, n_heads, s, s)
    # softmax over j ignores a constant per row: compare each row with its value at the first key
    ours_shifted = ours - ours[..., :1]  # [b, h, i, j]
    bloom_shifted = (bloom - bloom[..., :1]).unsqueeze(-2).expand_as(ours_shifted)  # [b, h, i, j]
    torch.testing.assert_close(ours_shifted, bloom_shifted, rtol=BLOOM_SLOPE_RTOL, atol=1e-12)


# --- MPT -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("bias_max", [8, 16])
@pytest.mark.parametrize("n_heads", [1, 2, 3, 4, 6, 8, 12, 16, 20, 24, 32, 40, 48, 64])
def test_slopes_and_bias_equal_mpt(n_heads, bias_max):
    s = 11
    mpt = as_float64(build_mpt_alibi_tensor(n_heads, s, alibi_bias_max=bias_max)).view(
        n_heads, s
    )  # m·(j − s + 1)
    slopes = alibi_slopes(n_heads, bias_max=bias_max)
    torch.testing.assert_close(-mpt[:, -2], slopes, rtol=MPT_SLOPE_RTOL, atol=0)
    ours = alibi_bias(s, s, n_heads, bias_max=bias_max, dtype=torch.float64)  # [h, i, j]
    # MPT's single row is the last query's: −m·(s − 1 − j)
    torch.testing.assert_close(ours[:, -1, :], mpt, rtol=MPT_SLOPE_RTOL, atol=0)
    # and every other row differs from it by a constant
    difference = ours - mpt[:, None, :]  # [h, i, j]
    torch.testing.assert_close(difference, difference[..., :1].expand_as(difference), rtol=0, atol=1e-5)


@pytest.mark.parametrize("n_heads", [3, 5, 12, 20, 40])
def test_mpt_with_bias_max_8_gives_bloom_slopes_at_any_head_count(n_heads):
    # MPT reorders the 2n-head slopes as (even k, odd k): the paper's n slopes, then its extra ones
    mpt = -build_mpt_alibi_tensor(n_heads, 2, alibi_bias_max=8).view(n_heads, 2)[:, 0]
    mask = torch.ones(1, 2, dtype=torch.long)
    bloom = build_alibi_tensor(mask, n_heads, torch.float32).view(n_heads, 2)[:, 1]
    torch.testing.assert_close(as_float64(mpt), as_float64(bloom), rtol=BLOOM_SLOPE_RTOL, atol=0)
    mpt16 = -build_mpt_alibi_tensor(n_heads, 2, alibi_bias_max=16).view(n_heads, 2)[:, 0]
    assert not torch.allclose(mpt16, bloom)


# --- T5 --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("max_distance", [16, 128, 1000])
@pytest.mark.parametrize("num_buckets", [8, 32, 64])
@pytest.mark.parametrize("bidirectional", [True, False])
def test_buckets_equal_t5(bidirectional, num_buckets, max_distance):
    exact = (num_buckets // 2 if bidirectional else num_buckets) // 2
    relative = torch.arange(-3000, 3001)
    if max_distance <= exact:  # T5 would divide by ln(max_distance/exact) ≤ 0; posenc refuses
        with pytest.raises(ValueError, match=f"max_distance must exceed the {exact} exact buckets"):
            t5_relative_bucket(
                relative, bidirectional=bidirectional, num_buckets=num_buckets, max_distance=max_distance
            )
        return
    t5 = T5Attention._relative_position_bucket(relative, bidirectional, num_buckets, max_distance)
    ours = t5_relative_bucket(
        relative, bidirectional=bidirectional, num_buckets=num_buckets, max_distance=max_distance
    )
    assert ours.dtype == t5.dtype == torch.int64
    assert torch.equal(ours, t5)


# Parameters where ln(d/e)/ln(D/e)·(n − e) is a whole number for some distance d, so that float rounding
# decides the truncation: T5 (float32) and a float64 loop disagree there by one bucket, and posenc is T5's.
# With (34, 27) at d = 18 the exact value is 6 (bucket 14 of the lower half) and T5's float32 gives 13.
TIES = [(18, 128), (20, 160), (34, 27), (38, 16), (38, 196), (38, 288), (72, 32), (96, 81)]


@pytest.mark.parametrize(("num_buckets", "max_distance"), TIES)
def test_buckets_equal_t5_where_float_rounding_decides(num_buckets, max_distance):
    relative = torch.arange(-3000, 3001)
    t5 = T5Attention._relative_position_bucket(relative, True, num_buckets, max_distance)
    ours = t5_relative_bucket(relative, num_buckets=num_buckets, max_distance=max_distance)
    assert torch.equal(ours, t5)
    loop = torch.tensor([t5_bucket(p, True, num_buckets, max_distance) for p in relative.tolist()])
    assert (loop != t5).any()  # the case has power: float64 rounding would give another bucket somewhere


def test_buckets_equal_t5_for_a_query_key_matrix():
    q, k = torch.arange(40), torch.arange(300)
    relative = k[None, :] - q[:, None]  # [i, j], as T5Attention.compute_bias builds it
    t5 = T5Attention._relative_position_bucket(relative, False, 32, 128)
    assert torch.equal(t5_relative_bucket(relative, bidirectional=False), t5)


# --- Swin ------------------------------------------------------------------------------------------


def swin_index(window: tuple[int, int]) -> torch.Tensor:
    """The relative_position_index buffer of transformers' Swin attention, as [N, N]."""
    n = window[0] * window[1]
    if hasattr(modeling_swin, "SwinRelativePositionBias"):  # transformers ≥ 5
        module = modeling_swin.SwinRelativePositionBias(num_heads=2, window_size=window)
    else:  # transformers 4: built inside SwinSelfAttention, square windows only
        config = modeling_swin.SwinConfig(embed_dim=8, num_heads=[2], depths=[1])
        module = modeling_swin.SwinSelfAttention(config, dim=8, num_heads=2, window_size=window[0])
    return module.relative_position_index.view(n, n)


@pytest.mark.parametrize("window", [(1, 1), (2, 2), (7, 7), (3, 5), (5, 3)])
def test_index_equals_swin(window):
    if window[0] != window[1] and not hasattr(modeling_swin, "SwinRelativePositionBias"):
        pytest.skip("this transformers builds Swin's index for square windows only")
    ours = swin_relative_index(window)
    assert torch.equal(ours, swin_index(window))
    if window[0] == window[1]:
        assert torch.equal(swin_relative_index(window[0]), ours)
