"""posenc's per-layer pieces against transformers' layers, weights copied, outputs and gradients (of the
input, the q/k/v/o weights and the layer's own parameters: sinks, QK-norm gains): GPT-OSS's learned sinks in
its sliding-window and full layers; Llama 4's chunked RoPE layer with its L2 QK-norm after the rotation and
its NoPE layer with temperature tuning; Gemma 3's sliding (local, base 1e4) and global (base 1e6, linear
scaling) layers with their (1 + w) QK-norm before the rotation and query_pre_attn_scalar; Gemma 2's logit
soft cap; SmolLM3's NoPE and RoPE layers and its NoPE-every-n-th-layer stack; Ministral 3's query scaling.
Skipped where transformers is not installed."""

from __future__ import annotations

import pytest
import torch

from posenc import build
from posenc.attention import MultiHeadAttention
from posenc.masks import attention_mask
from posenc.qk_norm import QKNorm
from posenc.temperature import Llama4Temperature, Ministral3Temperature

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
    cotangent = torch.randn(2, SEQ, HIDDEN, dtype=torch.float64)
    positions = torch.arange(SEQ)[None]
    cos_sin = GptOssRotaryEmbedding(config).double()(x, positions)
    mask = _float_mask(attention_mask(SEQ, SEQ, "cpu", causal=True, window=window))
    expected = _output_and_gradients(
        theirs,
        x,
        lambda m, h: m(h, position_embeddings=cos_sin, attention_mask=mask)[0],
        cotangent,
        ("sinks",),
    )
    got = _output_and_gradients(ours, x, lambda m, h: m(h), cotangent, ("sinks",))
    # transformers' rotary tables are float32 (its inv_freq): agreement to their rounding, not float64's
    _assert_close_to_float32_rounding(got, expected, ("sinks",))
    unsunk = load_attention(
        MultiHeadAttention(
            HIDDEN, HEADS, n_kv_heads=KV_HEADS, bias=True, window=window, encoding=ours.encoding
        ).double(),
        theirs,
    )
    assert (unsunk(x) - expected[0]).abs().max() > 1e-3  # the sinks take weight at these logits


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


def _output_and_gradients(
    module, x: torch.Tensor, run, cotangent: torch.Tensor, parameters: tuple[str, ...] = ()
) -> list[torch.Tensor]:
    """The output of ``run(module, x)`` and the gradients of ⟨output, cotangent⟩ with respect to x, to the
    q/k/v/o weights (read in that order, whichever module names its output projection) and to the named
    ``parameters`` the two modules share by name (``sinks``, ``q_norm.weight`` …)."""
    x = x.detach().clone().requires_grad_(True)
    out = run(module, x)
    weights = [module.q_proj.weight, module.k_proj.weight, module.v_proj.weight]
    weights.append(module.o_proj.weight if hasattr(module, "o_proj") else module.out_proj.weight)
    weights += [module.get_parameter(name) for name in parameters]
    grads = torch.autograd.grad((out * cotangent).sum(), [x, *weights])
    return [out.detach(), *grads]


def _assert_close_to_float32_rounding(
    got: list[torch.Tensor], expected: list[torch.Tensor], parameters: tuple[str, ...] = ()
) -> None:
    """Output and gradients (as :func:`_output_and_gradients` lists them) within float32 rounding: transformers'
    eager layers take the softmax in float32 (and their rotary angles and norms too), so each differs from
    float64 by a few float32 ulps of its scale (measured: under 3e-7 × the tensor's largest entry, the
    QK-normed layers' gradients the most); allowed 1e-6 ×."""
    names = ("output", "x", "q", "k", "v", "o", *parameters)
    for name, mine, reference in zip(names, got, expected, strict=True):
        scale = reference.abs().max().item()
        torch.testing.assert_close(
            mine, reference, atol=1e-6 * scale, rtol=1e-5, msg=lambda m, n=name: f"{n}: {m}"
        )


def _smollm3_config(**kwargs):
    from transformers.models.smollm3.configuration_smollm3 import SmolLM3Config

    config = SmolLM3Config(
        hidden_size=HIDDEN,
        num_attention_heads=HEADS,
        num_key_value_heads=KV_HEADS,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        attention_dropout=0.0,
        **kwargs,
    )
    config._attn_implementation = "eager"
    return config


@pytest.mark.parametrize("layer_idx", [3, 2])  # no_rope_layers[3] = 0 (NoPE), no_rope_layers[2] = 1 (RoPE)
def test_smollm3_nope_and_rope_layers_match_its_attention_with_gradients(layer_idx):
    from transformers.models.smollm3.modeling_smollm3 import SmolLM3Attention, SmolLM3RotaryEmbedding

    config = _smollm3_config(num_hidden_layers=4, no_rope_layer_interval=4)
    assert config.no_rope_layers == [1, 1, 1, 0]
    torch.manual_seed(0)
    theirs = SmolLM3Attention(config, layer_idx=layer_idx).double().eval()
    assert theirs.use_rope == (layer_idx != 3)
    encoding = (
        build("rope", d_head=HEAD_DIM, base=10000.0, layout="half") if theirs.use_rope else build("nope")
    )
    ours = load_attention(
        MultiHeadAttention(HIDDEN, HEADS, n_kv_heads=KV_HEADS, encoding=encoding).double(), theirs
    )
    x = torch.randn(2, SEQ, HIDDEN, dtype=torch.float64)
    cotangent = torch.randn(2, SEQ, HIDDEN, dtype=torch.float64)
    cos_sin = SmolLM3RotaryEmbedding(config).double()(x, torch.arange(SEQ)[None])
    mask = _float_mask(attention_mask(SEQ, SEQ, "cpu", causal=True))
    expected = _output_and_gradients(
        theirs, x, lambda m, h: m(h, position_embeddings=cos_sin, attention_mask=mask)[0], cotangent
    )
    got = _output_and_gradients(ours, x, lambda m, h: m(h), cotangent)
    _assert_close_to_float32_rounding(got, expected)
    # the layer's choice matters at these positions: the other encoding gives another layer
    other = build("nope") if theirs.use_rope else build("rope", d_head=HEAD_DIM, base=10000.0, layout="half")
    swapped = load_attention(
        MultiHeadAttention(HIDDEN, HEADS, n_kv_heads=KV_HEADS, encoding=other).double(), theirs
    )
    assert (swapped(x) - expected[0]).abs().max() > 1e-3


@pytest.mark.parametrize("interval", [4, 3])
def test_smollm3_pattern_gives_its_rope_or_nope_per_layer(interval):
    from posenc.model import TransformerLM
    from posenc.stacks import layer, pattern

    config = _smollm3_config(num_hidden_layers=4 * interval, no_rope_layer_interval=interval)
    model = TransformerLM(
        64,
        d_model=HIDDEN,
        n_heads=HEADS,
        n_kv_heads=KV_HEADS,
        n_layers=config.num_hidden_layers,
        layers=pattern("R" * (interval - 1) + "N", R=layer("rope"), N=layer("nope")),
    )
    uses_rope = [int(encoding.kind == "rotary") for encoding in model.layer_encodings]
    assert {encoding.kind for encoding in model.layer_encodings} == {"rotary", "none"}
    assert uses_rope == config.no_rope_layers  # transformers' 1: RoPE, 0: NoPE


def test_ministral3_query_scaling_past_its_threshold_matches_its_attention_with_gradients():
    from transformers.models.ministral3.configuration_ministral3 import Ministral3Config
    from transformers.models.ministral3.modeling_ministral3 import (
        Ministral3Attention,
        Ministral3RotaryEmbedding,
    )

    beta, threshold = 0.5, 4  # positions 3 … 13: ⌊p / 4⌋ runs 0 … 3, the factor 1 … 1 + 0.5·log 4
    config = Ministral3Config(
        hidden_size=HIDDEN,
        num_attention_heads=HEADS,
        num_key_value_heads=KV_HEADS,
        head_dim=HEAD_DIM,
        num_hidden_layers=1,
        rope_parameters={
            "rope_type": "default",
            "rope_theta": 10000.0,
            "llama_4_scaling_beta": beta,
            # read by the scaling alone (transformers warns the default RoPE does not use it)
            "original_max_position_embeddings": threshold,
        },
        attention_dropout=0.0,
    )
    config._attn_implementation = "eager"
    torch.manual_seed(0)
    theirs = Ministral3Attention(config, layer_idx=0).double().eval()
    schedule = Ministral3Temperature(llama_4_scaling_beta=beta, original_max_position_embeddings=threshold)
    rope = build("rope", d_head=HEAD_DIM, base=10000.0, layout="half")
    ours = load_attention(
        MultiHeadAttention(HIDDEN, HEADS, n_kv_heads=KV_HEADS, encoding=rope, temperature=schedule).double(),
        theirs,
    )
    positions = torch.arange(3, 3 + SEQ)
    x = torch.randn(2, SEQ, HIDDEN, dtype=torch.float64)
    cotangent = torch.randn(2, SEQ, HIDDEN, dtype=torch.float64)
    cos_sin = Ministral3RotaryEmbedding(config).double()(x, positions[None])
    mask = _float_mask(attention_mask(SEQ, SEQ, "cpu", causal=True))
    expected = _output_and_gradients(
        theirs,
        x,
        lambda m, h: m(h, position_embeddings=cos_sin, attention_mask=mask, position_ids=positions[None])[0],
        cotangent,
    )
    got = _output_and_gradients(ours, x, lambda m, h: m(h, positions=positions), cotangent)
    _assert_close_to_float32_rounding(got, expected)
    # the factor moves within these positions: the same layer without it is another layer
    untempered = load_attention(
        MultiHeadAttention(HIDDEN, HEADS, n_kv_heads=KV_HEADS, encoding=rope).double(), theirs
    )
    assert (untempered(x, positions=positions) - expected[0]).abs().max() > 1e-3


GEMMA3_ROPE = {
    "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
    "full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1000000.0},
}
NORMS = ("q_norm.weight", "k_norm.weight")


def _gemma3_layer(layer_type: str, query_pre_attn_scalar: float) -> MultiHeadAttention:
    """posenc's Gemma 3 layer of one type: RoPE of the type's base (and linear scaling), the sliding
    window on local layers, the (1 + w) QK-norm before the rotation, the query pre-attention scalar."""
    rope = GEMMA3_ROPE[layer_type]
    scaling = {"scaling": "linear", "scaling_args": {"factor": rope["factor"]}} if "factor" in rope else {}
    return MultiHeadAttention(
        HIDDEN,
        HEADS,
        n_kv_heads=KV_HEADS,
        encoding=build("rope", d_head=HEAD_DIM, base=rope["rope_theta"], layout="half", **scaling),
        backend="sdpa",
        window=4 if layer_type == "sliding_attention" else None,
        qk_norm=QKNorm(weight="unit_offset", eps=1e-6),
        query_pre_attn_scalar=query_pre_attn_scalar,
    ).double()


@pytest.mark.parametrize(("layer_idx", "layer_type"), [(0, "sliding_attention"), (5, "full_attention")])
def test_gemma3_sliding_and_global_layers_match_its_attention_with_gradients(layer_idx, layer_type):
    from transformers.models.gemma3.configuration_gemma3 import Gemma3TextConfig
    from transformers.models.gemma3.modeling_gemma3 import Gemma3Attention, Gemma3RotaryEmbedding

    config = Gemma3TextConfig(
        head_dim=HEAD_DIM,
        hidden_size=HIDDEN,
        num_attention_heads=HEADS,
        num_key_value_heads=KV_HEADS,
        num_hidden_layers=6,
        sliding_window=4,
        query_pre_attn_scalar=12,  # ≠ head_dim, so d_head^(−½) would be another layer
        rope_parameters=GEMMA3_ROPE,
        attention_dropout=0.0,
    )
    config._attn_implementation = "eager"
    assert config.layer_types[layer_idx] == layer_type and config.rms_norm_eps == 1e-6
    torch.manual_seed(0)
    theirs = Gemma3Attention(config, layer_idx=layer_idx).double().eval()
    with torch.no_grad():  # gains away from the identity (they start at w = 0)
        theirs.q_norm.weight.normal_()
        theirs.k_norm.weight.normal_()
    ours = load_attention(_gemma3_layer(layer_type, config.query_pre_attn_scalar), theirs)
    ours.q_norm.load_state_dict(theirs.q_norm.state_dict())
    ours.k_norm.load_state_dict(theirs.k_norm.state_dict())
    positions = torch.arange(3, 3 + SEQ)
    x = torch.randn(2, SEQ, HIDDEN, dtype=torch.float64)
    cotangent = torch.randn(2, SEQ, HIDDEN, dtype=torch.float64)
    cos_sin = Gemma3RotaryEmbedding(config).double()(x, positions[None], layer_type=layer_type)
    mask = _float_mask(attention_mask(SEQ, SEQ, "cpu", causal=True, window=ours.window))
    expected = _output_and_gradients(
        theirs, x, lambda m, h: m(h, position_embeddings=cos_sin, attention_mask=mask)[0], cotangent, NORMS
    )
    got = _output_and_gradients(ours, x, lambda m, h: m(h, positions=positions), cotangent, NORMS)
    # transformers' norms, angles and softmax are float32: agreement to their rounding
    _assert_close_to_float32_rounding(got, expected, NORMS)
    # each piece matters here: the other type's rotation, d_head's scale, no norm, or Qwen's gain w
    other = "full_attention" if layer_type == "sliding_attention" else "sliding_attention"
    variants = {
        "rotation": _gemma3_layer(other, config.query_pre_attn_scalar),
        "scale": _gemma3_layer(layer_type, HEAD_DIM),
        "norm": _gemma3_layer(layer_type, config.query_pre_attn_scalar),
        "gain": _gemma3_layer(layer_type, config.query_pre_attn_scalar),
    }
    variants["rotation"].window = ours.window
    variants["norm"].qk_norm = None
    for name, variant in variants.items():
        load_attention(variant, theirs)
        for norm in ("q_norm", "k_norm"):
            getattr(variant, norm).load_state_dict(getattr(theirs, norm).state_dict())
            if name == "gain":
                getattr(variant, norm).mode = "gain"
        difference = (variant(x, positions=positions) - expected[0]).abs().max()
        assert difference > 1e-3, (name, difference)


def _llama4_config(**kwargs):
    from transformers.models.llama4.configuration_llama4 import Llama4TextConfig

    config = Llama4TextConfig(
        hidden_size=HIDDEN,
        num_attention_heads=HEADS,
        num_key_value_heads=KV_HEADS,
        head_dim=HEAD_DIM,
        num_hidden_layers=4,
        no_rope_layers=[1, 1, 1, 0],
        attention_chunk_size=4,
        **kwargs,
    )
    config._attn_implementation = "eager"
    return config


#: Llama 3's frequency scaling as Llama 4 configures it, its original length cut to 64 so that it moves
#: two of the four frequencies of an 8-wide head.
LLAMA4_ROPE = {
    "rope_type": "llama3",
    "rope_theta": 500000.0,
    "factor": 8.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 64,
}


def test_llama4_chunked_rope_layer_with_its_l2_norm_matches_its_attention_with_gradients():
    from transformers.models.llama4.modeling_llama4 import Llama4TextAttention, Llama4TextRotaryEmbedding

    config = _llama4_config(use_qk_norm=True, rope_parameters=LLAMA4_ROPE)
    assert config.layer_types[0] == "chunked_attention"
    torch.manual_seed(0)
    theirs = Llama4TextAttention(config, layer_idx=0).double().eval()
    assert theirs.use_rope and hasattr(theirs, "qk_norm")
    scaling_args = {
        name: LLAMA4_ROPE[name] for name in LLAMA4_ROPE if name not in ("rope_type", "rope_theta")
    }
    rope = build(
        "rope",
        d_head=HEAD_DIM,
        base=500000.0,
        layout="interleaved",
        scaling="llama3",
        scaling_args=scaling_args,
    )
    norm = QKNorm(weight=None, eps=config.rms_norm_eps, after_rotation=True)
    ours = load_attention(
        MultiHeadAttention(HIDDEN, HEADS, n_kv_heads=KV_HEADS, encoding=rope, chunk=4, qk_norm=norm).double(),
        theirs,
    )
    positions = torch.arange(3, 3 + SEQ)
    x = torch.randn(2, SEQ, HIDDEN, dtype=torch.float64)
    cotangent = torch.randn(2, SEQ, HIDDEN, dtype=torch.float64)
    freqs_cis = Llama4TextRotaryEmbedding(config)(x, positions[None])
    mask = _float_mask(attention_mask(SEQ, SEQ, "cpu", causal=True, chunk=4))

    def run(module, h):
        return module(h, position_embeddings=freqs_cis, attention_mask=mask, position_ids=positions[None])[0]

    expected = _output_and_gradients(theirs, x, run, cotangent)
    got = _output_and_gradients(ours, x, lambda m, h: m(h, positions=positions), cotangent)
    _assert_close_to_float32_rounding(got, expected)  # its rotation, norm and softmax in float32
    unnormed = load_attention(
        MultiHeadAttention(HIDDEN, HEADS, n_kv_heads=KV_HEADS, encoding=rope, chunk=4).double(), theirs
    )
    assert (unnormed(x, positions=positions) - expected[0]).abs().max() > 1e-3


def test_llama4_nope_layer_with_temperature_tuning_matches_its_attention_with_gradients():
    from transformers.models.llama4.modeling_llama4 import Llama4TextAttention

    config = _llama4_config(use_qk_norm=True, floor_scale=4, attn_scale=0.5, attn_temperature_tuning=True)
    assert config.layer_types[3] == "full_attention"  # NoPE layers attend to every key
    torch.manual_seed(0)
    theirs = Llama4TextAttention(config, layer_idx=3).double().eval()
    assert not theirs.use_rope and not hasattr(theirs, "qk_norm")  # no QK-norm on NoPE layers
    schedule = Llama4Temperature(floor_scale=config.floor_scale, attn_scale=config.attn_scale)
    ours = load_attention(
        MultiHeadAttention(HIDDEN, HEADS, n_kv_heads=KV_HEADS, temperature=schedule).double(), theirs
    )
    x = torch.randn(2, SEQ, HIDDEN, dtype=torch.float64)
    cotangent = torch.randn(2, SEQ, HIDDEN, dtype=torch.float64)
    mask = _float_mask(attention_mask(SEQ, SEQ, "cpu", causal=True))
    positions = torch.arange(SEQ)  # its temperature counts the tokens from 0, whatever position_ids say

    def run(module, h):
        return module(
            h,
            position_embeddings=None,
            attention_mask=mask,
            cache_position=positions,
            position_ids=positions[None],
        )[0]

    expected = _output_and_gradients(theirs, x, run, cotangent)
    # transformers computes the factors of float32 positions in float32: agreement to that rounding
    _assert_close_to_float32_rounding(_output_and_gradients(ours, x, lambda m, h: m(h), cotangent), expected)
    untempered = load_attention(MultiHeadAttention(HIDDEN, HEADS, n_kv_heads=KV_HEADS).double(), theirs)
    assert (untempered(x) - expected[0]).abs().max() > 1e-3  # the factor moves within these positions


@pytest.mark.parametrize("backend", ["eager", "flex"])
def test_gemma2_logit_soft_cap_matches_its_attention_with_gradients(backend):
    from transformers.models.gemma2.configuration_gemma2 import Gemma2Config
    from transformers.models.gemma2.modeling_gemma2 import Gemma2Attention, Gemma2RotaryEmbedding

    config = Gemma2Config(
        head_dim=HEAD_DIM,
        hidden_size=HIDDEN,
        num_attention_heads=HEADS,
        num_key_value_heads=KV_HEADS,
        num_hidden_layers=2,
        query_pre_attn_scalar=12,
        attn_logit_softcapping=0.5,  # a cap the logits of these weights pass, so it bends them
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        attention_dropout=0.0,
    )
    config._attn_implementation = "eager"
    torch.manual_seed(0)
    theirs = Gemma2Attention(config, layer_idx=1).double().eval()  # a global layer
    assert theirs.sliding_window is None
    rope = build("rope", d_head=HEAD_DIM, base=10000.0, layout="half")

    def layer(softcap):
        return load_attention(
            MultiHeadAttention(
                HIDDEN,
                HEADS,
                n_kv_heads=KV_HEADS,
                encoding=rope,
                backend=backend,
                query_pre_attn_scalar=12,
                softcap=softcap,
            ).double(),
            theirs,
        )

    x = torch.randn(2, SEQ, HIDDEN, dtype=torch.float64)
    cotangent = torch.randn(2, SEQ, HIDDEN, dtype=torch.float64)
    cos_sin = Gemma2RotaryEmbedding(config).double()(x, torch.arange(SEQ)[None])
    mask = _float_mask(attention_mask(SEQ, SEQ, "cpu", causal=True))
    expected = _output_and_gradients(
        theirs, x, lambda m, h: m(h, position_embeddings=cos_sin, attention_mask=mask)[0], cotangent
    )
    _assert_close_to_float32_rounding(
        _output_and_gradients(layer(0.5), x, lambda m, h: m(h), cotangent), expected
    )
    assert (layer(None)(x) - expected[0]).abs().max() > 1e-3
