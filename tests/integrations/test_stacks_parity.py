"""posenc's per-layer pieces against transformers' layers, weights copied: GPT-OSS's learned sinks in its
sliding-window and full layers, Llama 4's temperature on a NoPE layer and its chunked attention, and
Ministral 3's query scaling. Skipped where transformers is not installed."""

from __future__ import annotations

import pytest
import torch

from posenc import build
from posenc.attention import MultiHeadAttention
from posenc.masks import attention_mask
from posenc.temperature import Llama4Temperature

transformers = pytest.importorskip("transformers", reason="peer oracle: install the 'peers' extra")

HIDDEN, HEADS, KV_HEADS, HEAD_DIM, SEQ = 32, 4, 2, 8, 11


def load_attention(ours: MultiHeadAttention, theirs, out: str = "o_proj") -> MultiHeadAttention:
    """Copy an HF attention's q/k/v/o projections into a posenc layer (the same [out, in] Linear layout)."""
    for mine, name in (("q_proj", "q_proj"), ("k_proj", "k_proj"), ("v_proj", "v_proj"), ("out_proj", out)):
        getattr(ours, mine).load_state_dict(getattr(theirs, name).state_dict())
    return ours


def _float_mask(mask: torch.Tensor) -> torch.Tensor:
    """posenc's bool mask ``[i, j]`` as the additive ``[1, 1, i, j]`` mask transformers' eager layers read."""
    return torch.zeros(mask.shape, dtype=torch.float64).masked_fill(~mask, float("-inf"))[None, None]


@pytest.mark.parametrize("layer_type", ["sliding_attention", "full_attention"])
def test_gpt_oss_sinks_and_window_match_its_attention(layer_type):
    from transformers.models.gpt_oss.configuration_gpt_oss import GptOssConfig
    from transformers.models.gpt_oss.modeling_gpt_oss import GptOssAttention, GptOssRotaryEmbedding

    config = GptOssConfig(
        hidden_size=HIDDEN,
        num_attention_heads=HEADS,
        num_key_value_heads=KV_HEADS,
        head_dim=HEAD_DIM,
        num_hidden_layers=2,
        layer_types=[layer_type, layer_type],
        sliding_window=4,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        attention_dropout=0.0,
    )
    config._attn_implementation = "eager"
    torch.manual_seed(0)
    theirs = GptOssAttention(config, layer_idx=0).double().eval()
    with torch.no_grad():
        theirs.sinks.normal_()
    window = theirs.sliding_window
    ours = MultiHeadAttention(
        HIDDEN,
        HEADS,
        n_kv_heads=KV_HEADS,
        bias=True,
        backend="sdpa",
        window=window,
        encoding=build("rope", d_head=HEAD_DIM, base=10000.0, layout="half"),
        sinks=theirs.sinks.detach(),
    ).double()
    load_attention(ours, theirs)
    x = torch.randn(2, SEQ, HIDDEN, dtype=torch.float64)
    positions = torch.arange(SEQ)[None]
    cos_sin = GptOssRotaryEmbedding(config).double()(x, positions)
    mask = _float_mask(attention_mask(SEQ, SEQ, "cpu", causal=True, window=window))
    expected, _ = theirs(x, position_embeddings=cos_sin, attention_mask=mask)
    # transformers' rotary tables are float32 (its inv_freq): agreement to their rounding, not float64's
    torch.testing.assert_close(ours(x), expected, atol=1e-7, rtol=1e-5)


def test_llama4_temperature_on_a_nope_layer_and_its_chunks_match_its_attention():
    from transformers.models.llama4.configuration_llama4 import Llama4TextConfig
    from transformers.models.llama4.modeling_llama4 import Llama4TextAttention

    config = Llama4TextConfig(
        hidden_size=HIDDEN,
        num_attention_heads=HEADS,
        num_key_value_heads=KV_HEADS,
        head_dim=HEAD_DIM,
        num_hidden_layers=4,
        no_rope_layers=[1, 1, 1, 0],
        attention_chunk_size=4,
        floor_scale=4,
        attn_scale=0.5,
        attn_temperature_tuning=True,
        use_qk_norm=False,
    )
    config._attn_implementation = "eager"
    torch.manual_seed(0)
    theirs = Llama4TextAttention(config, layer_idx=3).double().eval()  # a NoPE layer (no_rope_layers[3] = 0)
    assert not theirs.use_rope
    schedule = Llama4Temperature(floor_scale=config.floor_scale, attn_scale=config.attn_scale)
    ours = MultiHeadAttention(HIDDEN, HEADS, n_kv_heads=KV_HEADS, temperature=schedule, chunk=4).double()
    load_attention(ours, theirs)
    x = torch.randn(2, SEQ, HIDDEN, dtype=torch.float64)
    mask = _float_mask(attention_mask(SEQ, SEQ, "cpu", causal=True, chunk=4))
    positions = torch.arange(SEQ)
    expected, _ = theirs(
        x,
        position_embeddings=None,
        attention_mask=mask,
        cache_position=positions,
        position_ids=positions[None],
    )
    # transformers computes the factors of float32 positions in float32: agreement to that rounding
    torch.testing.assert_close(ours(x), expected, atol=1e-7, rtol=1e-5)
    untempered = load_attention(
        MultiHeadAttention(HIDDEN, HEADS, n_kv_heads=KV_HEADS, chunk=4).double(), theirs
    )
    assert (untempered(x) - expected).abs().max() > 1e-3  # the factor moves within these positions


def test_gemma3_local_and_global_layers_rotate_as_its_rotary_embedding_per_layer_type():
    from transformers.models.gemma3.configuration_gemma3 import Gemma3TextConfig
    from transformers.models.gemma3.modeling_gemma3 import Gemma3RotaryEmbedding

    from posenc.model import TransformerLM
    from posenc.stacks import layer, pattern

    config = Gemma3TextConfig(
        head_dim=HEAD_DIM,
        hidden_size=HIDDEN,
        num_attention_heads=HEADS,
        num_key_value_heads=KV_HEADS,
        num_hidden_layers=6,
        sliding_window=4,
        rope_parameters={
            "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
            "full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1000000.0},
        },
    )
    local, full = config.rope_parameters["sliding_attention"], config.rope_parameters["full_attention"]
    model = TransformerLM(
        64,
        d_model=HIDDEN,
        n_heads=HEADS,
        n_kv_heads=KV_HEADS,
        n_layers=6,
        layers=pattern(
            "LLLLLG",
            L=layer("rope", base=local["rope_theta"], window=config.sliding_window),
            G=layer(
                "rope", base=full["rope_theta"], scaling="linear", scaling_args={"factor": full["factor"]}
            ),
        ),
    )
    rotary = Gemma3RotaryEmbedding(config)
    positions = torch.arange(0, 5000, 7)
    for layer_type, block, encoding in zip(
        config.layer_types, model.blocks, model.layer_encodings, strict=True
    ):
        cos, sin = rotary(torch.zeros(1, 1, HIDDEN), positions[None], layer_type=layer_type)  # [1, s, d]
        ours_cos, ours_sin = encoding.rotation_tables(positions)  # [s, d/2]
        # transformers' angles are float32 products: off by up to about one float32 ulp of 5000 (5e-4)
        torch.testing.assert_close(ours_cos.float(), cos[0, :, : HEAD_DIM // 2], atol=1e-3, rtol=0)
        torch.testing.assert_close(ours_sin.float(), sin[0, :, : HEAD_DIM // 2], atol=1e-3, rtol=0)
        assert block.attention.window == (
            config.sliding_window if layer_type == "sliding_attention" else None
        )
