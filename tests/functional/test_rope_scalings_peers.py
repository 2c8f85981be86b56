"""The serving-engine scalings against transformers, where it defines them: ``proportional`` (Gemma 4),
``ntk_alpha`` (Hunyuan) and YaRN with DeepSeek's mscale / mscale_all_dim. transformers computes in
float32, so the comparisons allow float32 rounding."""

from __future__ import annotations

import pytest
import torch

transformers = pytest.importorskip("transformers", reason="peer oracle: install the 'peers' extra")

from transformers import LlamaConfig  # noqa: E402
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS  # noqa: E402

from posenc.functional.rope import rope_inv_freq  # noqa: E402


def _config(head_dim: int = 64, **rope_parameters) -> LlamaConfig:
    return LlamaConfig(
        hidden_size=4 * head_dim,
        num_attention_heads=4,
        head_dim=head_dim,
        max_position_embeddings=163840,
        rope_parameters=rope_parameters,
    )


@pytest.mark.parametrize(
    ("head_dim", "partial", "factor"), [(64, 0.25, 1.0), (256, 0.25, 8.0), (32, 1.0, 2.0)]
)
def test_proportional_equals_transformers(head_dim, partial, factor):
    config = _config(
        head_dim, rope_type="proportional", rope_theta=1e6, partial_rotary_factor=partial, factor=factor
    )
    theirs, their_factor = ROPE_INIT_FUNCTIONS["proportional"](config, "cpu")
    ours, our_factor = rope_inv_freq(
        head_dim, base=1e6, scaling="proportional", partial_rotary_factor=partial, factor=factor
    )
    torch.testing.assert_close(ours, theirs.double(), rtol=2e-7, atol=0)
    assert bool(((ours == 0) == (theirs == 0)).all()) and our_factor == their_factor


@pytest.mark.parametrize("alpha", [1000.0, 2.5])
def test_ntk_alpha_equals_hunyuan(alpha):
    from transformers.models.hunyuan_v1_dense.modeling_hunyuan_v1_dense import HunYuanDenseV1RotaryEmbedding

    config = _config(128, rope_type="dynamic", rope_theta=10000.0, alpha=alpha, factor=1.0)
    theirs, their_factor = HunYuanDenseV1RotaryEmbedding.compute_ntk_alpha_rope_parameters(config)
    ours, our_factor = rope_inv_freq(128, base=10000.0, scaling="ntk_alpha", alpha=alpha)
    torch.testing.assert_close(ours, theirs.double(), rtol=2e-6, atol=0)
    assert our_factor == their_factor


@pytest.mark.parametrize(("mscale", "mscale_all_dim"), [(1.0, 1.0), (0.707, 0.707), (1.0, 0.5)])
def test_deepseek_yarn_equals_transformers_yarn_with_mscale(mscale, mscale_all_dim):
    config = _config(
        64,
        rope_type="yarn",
        rope_theta=10000.0,
        factor=40.0,
        original_max_position_embeddings=4096,
        mscale=mscale,
        mscale_all_dim=mscale_all_dim,
        beta_fast=32,
        beta_slow=1,
    )
    theirs, their_factor = ROPE_INIT_FUNCTIONS["yarn"](config, "cpu")
    ours, our_factor = rope_inv_freq(
        64,
        scaling="deepseek_yarn",
        factor=40.0,
        original_max_position_embeddings=4096,
        mscale=mscale,
        mscale_all_dim=mscale_all_dim,
    )
    torch.testing.assert_close(ours, theirs.double(), rtol=2e-6, atol=0)
    assert our_factor == pytest.approx(their_factor, rel=1e-12)
