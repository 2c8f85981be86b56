"""The per-distance CPU attention (and ALiBi on it) gives softmax(q·kᵀ/√d + bias + mask)·v to 1e-5 of a float64 reference."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from posenc.attention import MultiHeadAttention
from posenc.encodings.bias import ALiBi, T5RelativeBias
from posenc.functional.alibi import alibi_attention, alibi_slopes
from posenc.kernels.per_distance import decay_windows as alibi_windows
from posenc.kernels.per_distance import per_distance_attention as relative_attention

TOLERANCE = 1e-5


def _qkv(b, h, s_q, s_k=None, d=32, h_kv=None, seed=0, dtype=torch.float32):
    generator = torch.Generator().manual_seed(seed)
    s_k = s_q if s_k is None else s_k
    h_kv = h if h_kv is None else h_kv
    q = torch.randn(b, h, s_q, d, generator=generator, dtype=dtype)
    k = torch.randn(b, h_kv, s_k, d, generator=generator, dtype=dtype)
    v = torch.randn(b, h_kv, s_k, d, generator=generator, dtype=dtype)
    return q, k, v


def _reference(q, k, v, bias_of_distance, *, causal=True):
    """float64 eager softmax(q·kᵀ/√d + bias(i − j) + mask)·v; queries are the last s_q key positions."""
    q, k, v = q.double(), k.double(), v.double()
    h, s_q, s_k, d = q.shape[1], q.shape[2], k.shape[2], q.shape[3]
    k, v = k.repeat_interleave(h // k.shape[1], dim=1), v.repeat_interleave(h // v.shape[1], dim=1)
    i = torch.arange(s_k - s_q, s_k)[:, None]
    j = torch.arange(s_k)[None, :]
    distance = i - j  # [s_q, s_k]
    scores = q @ k.transpose(-1, -2) / math.sqrt(d) + bias_of_distance(distance).double()  # [b, h, i, j]
    if causal:
        scores = scores.masked_fill(distance < 0, float("-inf"))
    return scores.softmax(dim=-1) @ v


def _alibi(slopes, symmetric=False):
    slopes = torch.as_tensor(slopes, dtype=torch.float64)

    def bias(distance):  # [i, j] -> [h, i, j]
        distance = distance.double().abs() if symmetric else distance.double()
        return -slopes[:, None, None] * distance

    return bias


def _error(got, expected):
    return float((got.double() - expected).abs().max())


@pytest.mark.parametrize("s", [1, 7, 255, 256, 257, 700])
@pytest.mark.parametrize("h", [1, 3, 8])
def test_causal_alibi_matches_the_float64_reference_within_1e_5(s, h):
    q, k, v = _qkv(1, h, s)
    slopes = alibi_slopes(h)
    got = alibi_attention(q, k, v, slopes)
    assert got.shape == q.shape and got.dtype == torch.float32
    assert _error(got, _reference(q, k, v, _alibi(slopes))) <= TOLERANCE


@pytest.mark.parametrize("block", [1, 16, 100, 4096])
def test_every_block_size_gives_the_same_exact_result(block):
    q, k, v = _qkv(2, 4, 300)
    slopes = alibi_slopes(4)
    expected = _reference(q, k, v, _alibi(slopes))
    assert _error(alibi_attention(q, k, v, slopes, block=block), expected) <= TOLERANCE


@pytest.mark.parametrize(
    "slopes",
    [
        [8.0, 2.0, 0.5, 2.0**-8],  # steeper than any paper slope: far keys vanish within a few rows
        [1e-4, 1e-6, 0.0, -0.01],  # nearly flat, flat, and growing with distance (no window possible)
        [0.5, 0.5, 2.0**-8, 2.0**-8],  # adjacent heads sharing a window run in one call
    ],
)
def test_steep_flat_and_negative_slopes_stay_exact(slopes):
    q, k, v = _qkv(1, 4, 1100)
    got = alibi_attention(q, k, v, slopes)
    assert _error(got, _reference(q, k, v, _alibi(slopes))) <= TOLERANCE


def test_stays_exact_at_4096_where_m_j_folded_into_q_k_does_not():
    """Softmax ignores −m·i, but m·j as an extra q·k channel is ~2048 at j=4096 for slope 1/2 and
    float32 resolves it to 2.4e-4: the folded form misses 1e-5, the strided bias does not."""
    s, d, slopes = 4096, 64, [0.5]
    q, k, v = _qkv(1, 1, s, d=d)
    expected = _reference(q, k, v, _alibi(slopes))
    extra = (0.5 * torch.arange(s, dtype=torch.float64)).float()  # [s]
    folded = F.scaled_dot_product_attention(
        torch.cat((q, torch.full((1, 1, s, 1), math.sqrt(d))), dim=-1),
        torch.cat((k, extra.view(1, 1, s, 1)), dim=-1),
        v,
        is_causal=True,
        scale=1 / math.sqrt(d),
    )
    assert _error(folded, expected) > 2 * TOLERANCE
    assert _error(alibi_attention(q, k, v, slopes), expected) <= TOLERANCE
    assert _error(alibi_attention(q, k, v, slopes, window_tolerance=None), expected) <= TOLERANCE


def test_window_widens_when_a_distant_key_dominates_the_scores():
    """Key 0 aligned with every query (q·k/√d ≈ 80): for slope 1/2 it still outweighs keys ~100 rows
    away. The bound sees the large norms and reads it; a window cut at 64 keys would be wrong."""
    s, d = 512, 64
    q, k, v = _qkv(1, 1, s, d=d)
    direction = torch.zeros(d)
    direction[0] = 1.0
    q = q + 12.0 * direction
    k[0, 0, 0] = 60.0 * direction
    slopes = [0.5]
    expected = _reference(q, k, v, _alibi(slopes))
    (window,) = alibi_windows(q, k, v, slopes)
    assert window is None or window > 200
    assert _error(alibi_attention(q, k, v, slopes), expected) <= TOLERANCE
    truncated = relative_attention(q, k, v, lambda t: -0.5 * t.double()[None], block=16, windows=[64])
    assert _error(truncated, expected) > 0.1


@pytest.mark.parametrize("tolerance", [1e-3, 1e-2])
def test_leaving_out_keys_beyond_the_window_costs_at_most_the_tolerance(tolerance):
    q, k, v = _qkv(1, 8, 1500, d=64)
    slopes = alibi_slopes(8)
    windows = alibi_windows(q, k, v, slopes, tolerance=tolerance)
    assert windows[0] is not None and windows[0] < 100  # the bound really cuts
    got = alibi_attention(q, k, v, slopes, window_tolerance=tolerance)
    assert _error(got, _reference(q, k, v, _alibi(slopes))) <= tolerance + TOLERANCE


def test_windows_shrink_with_the_slope_and_cover_every_key_for_shallow_heads():
    q, k, v = _qkv(1, 8, 4096, d=64)
    windows = alibi_windows(q, k, v, alibi_slopes(8))  # slopes 1/2 … 1/256
    cut = [w for w in windows if w is not None]
    assert cut == sorted(cut) and len(cut) >= 4 and windows[-1] is None


def test_queries_after_a_kv_cache_see_every_earlier_key():
    q, k, v = _qkv(2, 4, 37, s_k=300)  # queries at positions 263 … 299
    slopes = alibi_slopes(4)
    expected = _reference(q, k, v, _alibi(slopes))
    assert _error(alibi_attention(q, k, v, slopes, block=16), expected) <= TOLERANCE


def test_grouped_query_heads_share_their_key_value_head():
    q, k, v = _qkv(2, 8, 333, h_kv=2)
    slopes = alibi_slopes(8)
    assert _error(alibi_attention(q, k, v, slopes), _reference(q, k, v, _alibi(slopes))) <= TOLERANCE


@pytest.mark.parametrize("symmetric", [False, True])
def test_bidirectional_attention_uses_one_strided_bias_over_all_keys(symmetric):
    q, k, v = _qkv(2, 4, 200, s_k=260)
    slopes = alibi_slopes(4)
    got = alibi_attention(q, k, v, slopes, causal=False, symmetric=symmetric)
    expected = _reference(q, k, v, _alibi(slopes, symmetric), causal=False)
    assert _error(got, expected) <= TOLERANCE


def test_float64_inputs_give_float64_accuracy():
    q, k, v = _qkv(1, 2, 300, dtype=torch.float64)
    slopes = alibi_slopes(2)
    got = alibi_attention(q, k, v, slopes)
    assert got.dtype == torch.float64
    assert _error(got, _reference(q, k, v, _alibi(slopes))) <= 1e-12


def test_t5_table_through_relative_attention_matches_the_materialised_bias():
    t5 = T5RelativeBias(4, bidirectional=False)
    with torch.no_grad():
        t5.table.normal_(0.0, 1.0, generator=torch.Generator().manual_seed(1))
    q, k, v = _qkv(1, 4, 400)
    with torch.no_grad():
        got = relative_attention(q, k, v, lambda t: t5.table[t5.buckets(-t)].T)
        expected = _reference(q, k, v, lambda t: t5.table[t5.buckets(-t)].movedim(-1, 0))
    assert _error(got, expected) <= TOLERANCE


def test_agrees_with_multi_head_attention_sdpa_backend_and_its_gradients():
    alibi = ALiBi(4)
    layer = MultiHeadAttention(4 * 16, 4, encoding=alibi, backend="sdpa")
    q, k, v = (t.requires_grad_() for t in _qkv(2, 4, 200, d=16))
    positions = torch.arange(200)
    expected = layer.attend(q, k, v, positions, positions)
    got = alibi_attention(q, k, v, alibi.slopes)
    assert _error(got, expected.detach().double()) <= TOLERANCE
    upstream = torch.randn_like(got)
    for g, e in zip(
        torch.autograd.grad(got, (q, k, v), upstream),
        torch.autograd.grad(expected, (q, k, v), upstream),
        strict=True,
    ):
        assert _error(g, e.double()) <= 1e-4


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"slopes": [0.5, 0.25]}, r"slopes must be \[h=4\] real numbers"),
        ({"slopes": [0.5, float("nan"), 0.1, 0.1]}, "slopes must be finite"),
        ({"block": 0}, "block must be positive, got 0"),
        ({"window_tolerance": -1.0}, "window_tolerance must be ≥ 0 or None, got -1.0"),
    ],
)
def test_bad_arguments_raise_value_errors_naming_them(kwargs, message):
    q, k, v = _qkv(1, 4, 8)
    arguments = {"slopes": alibi_slopes(4), **kwargs}
    with pytest.raises(ValueError, match=message):
        alibi_attention(q, k, v, **arguments)


def test_bad_shapes_raise_value_errors_naming_them():
    q, k, v = _qkv(1, 4, 8, s_k=6)
    with pytest.raises(ValueError, match="causal attention needs s_q ≤ s_k"):
        alibi_attention(q, k, v, alibi_slopes(4))
    q, k, v = _qkv(1, 4, 8, h_kv=3)
    with pytest.raises(ValueError, match="h_kv=3 must divide query heads h=4"):
        alibi_attention(q, k, v, alibi_slopes(4))
    q, k, v = _qkv(1, 4, 8)
    with pytest.raises(ValueError, match="windows apply to causal attention only"):
        relative_attention(q, k, v, lambda t: t[None].expand(4, -1).double(), causal=False, windows=[1] * 4)
    with pytest.raises(ValueError, match=r"bias must map .* distances to \[h=4"):
        relative_attention(q, k, v, lambda t: t[None].double())


def test_the_former_module_name_still_serves_the_kernel_and_points_at_alibi_attention():
    from posenc.kernels import alibi_cpu, per_distance

    assert alibi_cpu.relative_attention is per_distance.per_distance_attention
    assert alibi_cpu.alibi_windows is per_distance.decay_windows
    with pytest.raises(AttributeError, match="moved to posenc.functional.alibi_attention"):
        alibi_cpu.alibi_attention  # noqa: B018
