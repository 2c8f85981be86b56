"""RoPE parity with the libraries that define its conventions: transformers (frequencies, scalings,
half layout, GPT-NeoX partial rotary) and rotary-embedding-torch (interleaved layout).

The peers are called as oracles. transformers computes frequencies in float32 and posenc in float64,
so frequencies are compared after rounding posenc's to float32 (rtol 1e-6, a few float32 ulps);
attention factors are plain Python floats in both and agree to rel 1e-12.
"""

from __future__ import annotations

import pytest
import torch

transformers = pytest.importorskip("transformers", reason="peer oracle: install the 'peers' extra")

from transformers import GPTNeoXConfig, LlamaConfig  # noqa: E402
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS  # noqa: E402
from transformers.models.gpt_neox.modeling_gpt_neox import (  # noqa: E402
    GPTNeoXRotaryEmbedding,
)
from transformers.models.gpt_neox.modeling_gpt_neox import (  # noqa: E402
    apply_rotary_pos_emb as neox_apply_rotary_pos_emb,
)
from transformers.models.llama.modeling_llama import (  # noqa: E402
    LlamaRotaryEmbedding,
)
from transformers.models.llama.modeling_llama import (  # noqa: E402
    apply_rotary_pos_emb as llama_apply_rotary_pos_emb,
)

from posenc.functional.rope import (  # noqa: E402
    apply_rope,
    permute_qk_weight,
    rope_cos_sin,
    rope_inv_freq,
)

FREQ_RTOL = 1e-6  # posenc's float64 frequencies rounded to float32 vs transformers' float32 ones
APPLY_ATOL = 1e-6  # same cos/sin, same float32 products: only the order of two additions can differ


def llama_config(rope_parameters: dict, *, head_dim: int = 64, max_position_embeddings: int = 2048):
    return LlamaConfig(
        hidden_size=256,
        num_attention_heads=4,
        head_dim=head_dim,
        max_position_embeddings=max_position_embeddings,
        rope_parameters=dict(rope_parameters),
    )


def assert_same_frequencies(posenc_result, transformers_result) -> None:
    (inv_freq, attention_factor), (hf_inv_freq, hf_attention_factor) = posenc_result, transformers_result
    assert inv_freq.dtype == torch.float64
    torch.testing.assert_close(inv_freq.float(), hf_inv_freq, rtol=FREQ_RTOL, atol=0)
    assert attention_factor == pytest.approx(hf_attention_factor, rel=1e-12)


def duplicated(values: torch.Tensor) -> torch.Tensor:
    """posenc's one value per frequency ``[..., r/2]`` -> transformers' ``[..., r]``."""
    return torch.cat((values, values), dim=-1)


# --- frequencies and attention factors -------------------------------------------------------------


@pytest.mark.parametrize("base", [10000.0, 500000.0])
def test_default_frequencies_equal_transformers_llama(base):
    config = llama_config({"rope_type": "default", "rope_theta": base})
    assert_same_frequencies(
        rope_inv_freq(64, base=base), LlamaRotaryEmbedding.compute_default_rope_parameters(config)
    )


@pytest.mark.parametrize("factor", [2.0, 4.0, 8.0])
def test_linear_scaling_equals_transformers(factor):
    config = llama_config({"rope_type": "linear", "rope_theta": 10000.0, "factor": factor})
    assert_same_frequencies(
        rope_inv_freq(64, base=10000.0, scaling="linear", factor=factor),
        ROPE_INIT_FUNCTIONS["linear"](config),
    )


@pytest.mark.parametrize("seq_len", [None, 1, 1000, 2048, 2049, 3000, 8192, 100_000])
@pytest.mark.parametrize("factor", [2.0, 4.0])
def test_dynamic_ntk_equals_transformers_at_every_length(factor, seq_len):
    # transformers names the original length config.max_position_embeddings; posenc names it
    # original_max_position_embeddings. Below it both give the unscaled frequencies.
    config = llama_config({"rope_type": "dynamic", "rope_theta": 10000.0, "factor": factor})
    length = {} if seq_len is None else {"seq_len": seq_len}
    assert_same_frequencies(
        rope_inv_freq(
            64,
            base=10000.0,
            scaling="dynamic",
            factor=factor,
            original_max_position_embeddings=config.max_position_embeddings,
            **length,
        ),
        ROPE_INIT_FUNCTIONS["dynamic"](config, seq_len=seq_len),
    )


@pytest.mark.parametrize(("factor", "original"), [(2.0, 2048), (4.0, 2048), (8.0, 4096)])
def test_static_ntk_equals_transformers_dynamic_ntk_where_its_multiplier_is_factor(factor, original):
    # transformers has no static NTK. Its dynamic NTK raises base to
    # base·(factor·L'/L − (factor − 1))^(r/(r−2)); at L' = L·(2·factor − 1)/factor the bracket equals
    # factor, which is posenc's static "ntk" base·factor^(r/(r−2)). The lengths chosen make L' an integer.
    seq_len = original * (2 * factor - 1) / factor
    assert seq_len == int(seq_len)
    config = llama_config(
        {"rope_type": "dynamic", "rope_theta": 10000.0, "factor": factor}, max_position_embeddings=original
    )
    assert_same_frequencies(
        rope_inv_freq(64, base=10000.0, scaling="ntk", factor=factor),
        ROPE_INIT_FUNCTIONS["dynamic"](config, seq_len=int(seq_len)),
    )


@pytest.mark.parametrize("factor", [2.0, 8.0])
def test_static_ntk_equals_rotary_embedding_torch_theta_rescale(factor):
    rotary_embedding_torch = pytest.importorskip(
        "rotary_embedding_torch", reason="peer oracle: install the 'peers' extra"
    )
    rotary = rotary_embedding_torch.RotaryEmbedding(dim=64, theta_rescale_factor=factor)
    inv_freq, attention_factor = rope_inv_freq(64, base=10000.0, scaling="ntk", factor=factor)
    torch.testing.assert_close(inv_freq.float(), rotary.freqs.detach(), rtol=FREQ_RTOL, atol=0)
    assert attention_factor == 1.0


YARN_CASES = {
    "defaults": {},
    "beta_fast_slow": {"beta_fast": 16.0, "beta_slow": 2.0},
    "mscale_equal": {"mscale": 0.707, "mscale_all_dim": 0.707},
    "mscale_ratio": {"mscale": 1.0, "mscale_all_dim": 0.8},
    "attention_factor": {"attention_factor": 1.3},
    "no_truncate": {"truncate": False},
    "no_truncate_beta": {"truncate": False, "beta_fast": 24.0, "beta_slow": 1.5},
}


@pytest.mark.parametrize("extra", YARN_CASES.values(), ids=YARN_CASES.keys())
@pytest.mark.parametrize(("factor", "original", "base"), [(4.0, 2048, 10000.0), (40.0, 4096, 10000.0)])
def test_yarn_equals_transformers(extra, factor, original, base):
    # transformers derives factor from max_position_embeddings / original when factor is absent:
    # pass it explicitly and keep the two consistent.
    config = llama_config(
        {
            "rope_type": "yarn",
            "rope_theta": base,
            "factor": factor,
            "original_max_position_embeddings": original,
            **extra,
        },
        max_position_embeddings=int(factor * original),
    )
    assert_same_frequencies(
        rope_inv_freq(
            64, base=base, scaling="yarn", factor=factor, original_max_position_embeddings=original, **extra
        ),
        ROPE_INIT_FUNCTIONS["yarn"](config),
    )


@pytest.mark.parametrize("head_dim", [64, 128])
def test_llama3_scaling_equals_transformers(head_dim):
    arguments = {
        "factor": 8.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 8192,
    }
    config = llama_config(
        {"rope_type": "llama3", "rope_theta": 500000.0, **arguments},
        head_dim=head_dim,
        max_position_embeddings=131072,
    )
    inv_freq, _ = result = rope_inv_freq(head_dim, base=500000.0, scaling="llama3", **arguments)
    assert_same_frequencies(result, ROPE_INIT_FUNCTIONS["llama3"](config))
    unscaled, _ = rope_inv_freq(head_dim, base=500000.0)
    ratio = unscaled / inv_freq
    # all three regimes are exercised: kept, divided by factor, smoothed between
    assert (ratio == 1).any() and torch.isclose(ratio, torch.tensor(8.0, dtype=torch.float64)).any()
    assert ((ratio > 1.001) & (ratio < 7.999)).any()


SHORT_FACTOR = [1.0 + 0.05 * k for k in range(32)]
LONG_FACTOR = [1.0 + 0.5 * k for k in range(32)]


@pytest.mark.parametrize("seq_len", [None, 1, 4095, 4096, 4097, 100_000])
@pytest.mark.parametrize("attention_factor", [None, 1.25])
def test_longrope_equals_transformers_short_and_long(seq_len, attention_factor):
    # posenc's `factor` is the context extension max_position_embeddings / original_max_position_embeddings
    original, factor = 4096, 32.0
    parameters = {
        "rope_type": "longrope",
        "rope_theta": 10000.0,
        "factor": factor,
        "short_factor": SHORT_FACTOR,
        "long_factor": LONG_FACTOR,
        "original_max_position_embeddings": original,
    }
    extra = {} if attention_factor is None else {"attention_factor": attention_factor}
    config = llama_config({**parameters, **extra}, max_position_embeddings=int(factor * original))
    length = {} if seq_len is None else {"seq_len": seq_len}
    assert_same_frequencies(
        rope_inv_freq(
            64,
            base=10000.0,
            scaling="longrope",
            factor=factor,
            short_factor=SHORT_FACTOR,
            long_factor=LONG_FACTOR,
            original_max_position_embeddings=original,
            **extra,
            **length,
        ),
        ROPE_INIT_FUNCTIONS["longrope"](config, seq_len=seq_len),
    )


@pytest.mark.parametrize(
    ("rope_type", "arguments"),
    [
        ("linear", {"factor": 4.0}),
        ("yarn", {"factor": 4.0, "original_max_position_embeddings": 2048}),
        (
            "llama3",
            {
                "factor": 8.0,
                "low_freq_factor": 1.0,
                "high_freq_factor": 4.0,
                "original_max_position_embeddings": 1024,
            },
        ),
    ],
)
def test_partial_rotary_factor_is_rotary_dim_int_head_dim_times_factor(rope_type, arguments):
    head_dim, partial_rotary_factor = 80, 0.4
    config = llama_config(
        {
            "rope_type": rope_type,
            "rope_theta": 10000.0,
            "partial_rotary_factor": partial_rotary_factor,
            **arguments,
        },
        head_dim=head_dim,
        max_position_embeddings=8192,  # yarn: factor · original; llama3: above the original length
    )
    rotary_dim = int(head_dim * partial_rotary_factor)
    hf = ROPE_INIT_FUNCTIONS[rope_type](config)
    assert hf[0].shape == (rotary_dim // 2,)
    assert_same_frequencies(rope_inv_freq(rotary_dim, base=10000.0, scaling=rope_type, **arguments), hf)


def test_gpt_neox_default_frequencies_use_partial_rotary_dim():
    config = GPTNeoXConfig(hidden_size=256, num_attention_heads=4, rotary_pct=0.25)
    rotary_dim = int(64 * 0.25)
    assert_same_frequencies(
        rope_inv_freq(rotary_dim, base=10000.0),
        GPTNeoXRotaryEmbedding.compute_default_rope_parameters(config),
    )


# --- applying the rotation -------------------------------------------------------------------------


def left_padded_positions(mask: torch.Tensor) -> torch.Tensor:
    """transformers' position_ids for a left-padded batch: cumsum of the mask − 1, pads set to 1."""
    return (mask.cumsum(-1) - 1).masked_fill(mask == 0, 1)


POSITIONS = {
    "prefill": torch.arange(7).expand(2, 7),
    "decode_at_1000": torch.tensor([[1000], [1000]]),
    "cached_chunk_from_1000": torch.arange(1000, 1007).expand(2, 7),
    "left_padded": left_padded_positions(torch.tensor([[0, 0, 0, 1, 1, 1, 1], [1, 1, 1, 1, 1, 1, 1]])),
}


@pytest.mark.parametrize("positions", POSITIONS.values(), ids=POSITIONS.keys())
@pytest.mark.parametrize("scaling", [None, "yarn"])
def test_half_layout_equals_transformers_llama(positions, scaling):
    torch.manual_seed(0)
    b, h, s, d = positions.shape[0], 3, positions.shape[1], 64
    q, k = torch.randn(b, h, s, d), torch.randn(b, h, s, d)
    arguments = {} if scaling is None else {"factor": 4.0, "original_max_position_embeddings": 256}
    inv_freq, attention_factor = rope_inv_freq(d, base=10000.0, scaling=scaling, **arguments)
    cos, sin = rope_cos_sin(positions, inv_freq, attention_factor=attention_factor)  # [b, s, d/2]
    hf_q, hf_k = llama_apply_rotary_pos_emb(q, k, duplicated(cos), duplicated(sin), unsqueeze_dim=1)
    torch.testing.assert_close(apply_rope(q, cos, sin, layout="half"), hf_q, rtol=0, atol=APPLY_ATOL)
    torch.testing.assert_close(apply_rope(k, cos, sin, layout="half"), hf_k, rtol=0, atol=APPLY_ATOL)


@pytest.mark.parametrize("positions", POSITIONS.values(), ids=POSITIONS.keys())
def test_partial_half_layout_equals_transformers_gpt_neox(positions):
    # GPT-NeoX's apply_rotary_pos_emb rotates the first cos.shape[-1] channels and passes the rest.
    config = GPTNeoXConfig(hidden_size=256, num_attention_heads=4, rotary_pct=0.25)
    head_dim = config.hidden_size // config.num_attention_heads
    rotary_dim = int(head_dim * config.rope_parameters["partial_rotary_factor"])
    assert rotary_dim == 16
    torch.manual_seed(1)
    b, h, s = positions.shape[0], 4, positions.shape[1]
    q, k = torch.randn(b, h, s, head_dim), torch.randn(b, h, s, head_dim)
    inv_freq, _ = rope_inv_freq(rotary_dim, base=config.rope_parameters["rope_theta"])
    cos, sin = rope_cos_sin(positions, inv_freq)  # [b, s, r/2]
    hf_q, hf_k = neox_apply_rotary_pos_emb(q, k, duplicated(cos), duplicated(sin))
    ours_q = apply_rope(q, cos, sin, layout="half", rotary_dim=rotary_dim)
    ours_k = apply_rope(k, cos, sin, layout="half", rotary_dim=rotary_dim)
    torch.testing.assert_close(ours_q, hf_q, rtol=0, atol=APPLY_ATOL)
    torch.testing.assert_close(ours_k, hf_k, rtol=0, atol=APPLY_ATOL)
    assert torch.equal(ours_q[..., rotary_dim:], q[..., rotary_dim:])


@pytest.mark.parametrize("offset", [0, 7])
@pytest.mark.parametrize("dim", [16, 64])
def test_interleaved_layout_equals_rotary_embedding_torch(dim, offset):
    rotary_embedding_torch = pytest.importorskip(
        "rotary_embedding_torch", reason="peer oracle: install the 'peers' extra"
    )
    rotary = rotary_embedding_torch.RotaryEmbedding(dim=dim)  # interleaved pairs, theta 10000 'lang'
    inv_freq, _ = rope_inv_freq(dim, base=10000.0)
    torch.testing.assert_close(inv_freq.float(), rotary.freqs.detach(), rtol=FREQ_RTOL, atol=0)
    torch.manual_seed(2)
    x = torch.randn(2, 3, 9, dim)  # [b, h, s, d]
    cos, sin = rope_cos_sin(torch.arange(offset, offset + 9), inv_freq)  # [s, d/2]
    # rotary-embedding-torch builds its angles as float32 products: within float32 rounding at positions < 16
    torch.testing.assert_close(
        apply_rope(x, cos, sin, layout="interleaved"),
        rotary.rotate_queries_or_keys(x, offset=offset),
        rtol=0,
        atol=2e-6,
    )


# --- the layout converter (no peer needed) ---------------------------------------------------------


@pytest.mark.parametrize("rotary_dim", [None, 8])
def test_permuted_qk_weights_with_half_layout_give_the_interleaved_attention_scores(rotary_dim):
    torch.manual_seed(3)
    n_heads, head_dim, d_in, s = 3, 16, 24, 11
    w_q = torch.randn(n_heads * head_dim, d_in, dtype=torch.float64)
    w_k = torch.randn(n_heads * head_dim, d_in, dtype=torch.float64)
    b_k = torch.randn(n_heads * head_dim, dtype=torch.float64)
    x = torch.randn(s, d_in, dtype=torch.float64)
    r = head_dim if rotary_dim is None else rotary_dim
    positions = torch.arange(500, 500 + s)
    cos, sin = rope_cos_sin(positions, rope_inv_freq(r)[0], dtype=torch.float64)  # [s, r/2]

    def scores(w_q, w_k, b_k, layout):
        q = (x @ w_q.T).view(s, n_heads, head_dim).transpose(0, 1)  # [h, s, d]
        k = (x @ w_k.T + b_k).view(s, n_heads, head_dim).transpose(0, 1)
        q = apply_rope(q, cos, sin, layout=layout, rotary_dim=rotary_dim)
        k = apply_rope(k, cos, sin, layout=layout, rotary_dim=rotary_dim)
        return q @ k.transpose(-1, -2)  # [h, s, s]: every query-key pair

    def to_half(tensor):
        return permute_qk_weight(tensor, n_heads, rotary_dim=rotary_dim, to="half")

    interleaved = scores(w_q, w_k, b_k, "interleaved")
    half = scores(to_half(w_q), to_half(w_k), to_half(b_k), "half")
    torch.testing.assert_close(half, interleaved, rtol=0, atol=1e-11)
    # and the comparison has power: unpermuted weights with the half layout give other scores
    assert (scores(w_q, w_k, b_k, "half") - interleaved).abs().max() > 1.0

    for weight in (w_q, w_k, b_k):
        back = permute_qk_weight(to_half(weight), n_heads, rotary_dim=rotary_dim, to="interleaved")
        assert torch.equal(back, weight)
