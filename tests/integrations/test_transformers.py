"""posenc's RoPE inside transformers models: same logits at small positions, exact cos/sin at large ones."""

from __future__ import annotations

import math
import subprocess
import sys

import pytest
import torch

transformers = pytest.importorskip("transformers", reason="peer oracle: install the 'peers' extra")

from transformers import GPTNeoXConfig, GPTNeoXForCausalLM, LlamaConfig, LlamaForCausalLM  # noqa: E402
from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding  # noqa: E402

from posenc.integrations.transformers import (  # noqa: E402
    PosencRotaryEmbedding,
    posenc_rope_arguments,
    use_posenc_rope,
)

LOGITS_ATOL = 1e-5  # fp32 rounding of cos/sin (≤ 6e-8 here) propagated through two layers; logits ~3

# head_dim 16, so every scaling below changes some of its 8 frequencies; original lengths are 16
# and the input is 40 tokens, so dynamic NTK and LongRoPE run in their scaled (long) regime.
ROPE_PARAMETERS = {
    "default": ({"rope_type": "default", "rope_theta": 10000.0}, 64),
    "linear": ({"rope_type": "linear", "rope_theta": 10000.0, "factor": 4.0}, 64),
    "dynamic": ({"rope_type": "dynamic", "rope_theta": 10000.0, "factor": 4.0}, 16),
    "yarn": (
        {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0, "original_max_position_embeddings": 16},
        64,
    ),
    "yarn_mscale": (
        {
            "rope_type": "yarn",
            "rope_theta": 10000.0,
            "factor": 4.0,
            "original_max_position_embeddings": 16,
            "mscale": 1.0,
            "mscale_all_dim": 0.8,
            "beta_fast": 8.0,
        },
        64,
    ),
    "llama3": (
        {
            "rope_type": "llama3",
            "rope_theta": 500000.0,
            "factor": 8.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 16,
        },
        128,
    ),
    "longrope": (
        {
            "rope_type": "longrope",
            "rope_theta": 10000.0,
            "factor": 4.0,
            "short_factor": [1.0 + 0.1 * k for k in range(8)],
            "long_factor": [1.0 + k for k in range(8)],
            "original_max_position_embeddings": 16,
        },
        64,
    ),
}


def llama_config(rope_parameters: dict, max_position_embeddings: int = 64) -> LlamaConfig:
    return LlamaConfig(
        vocab_size=128,
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=128,
        max_position_embeddings=max_position_embeddings,
        initializer_range=0.1,  # sharp enough attention that positions move the logits
        rope_parameters=dict(rope_parameters),
    )


def small_llama(rope_parameters: dict, max_position_embeddings: int = 64) -> LlamaForCausalLM:
    torch.manual_seed(0)
    return LlamaForCausalLM(llama_config(rope_parameters, max_position_embeddings)).eval()


def input_ids() -> torch.Tensor:
    return torch.randint(0, 128, (2, 40), generator=torch.Generator().manual_seed(1))


@pytest.mark.parametrize("name", ROPE_PARAMETERS)
def test_llama_logits_are_unchanged_by_posenc_rope(name):
    rope_parameters, max_position_embeddings = ROPE_PARAMETERS[name]
    model = small_llama(rope_parameters, max_position_embeddings)
    ids = input_ids()
    with torch.no_grad():
        before = model(ids).logits  # [b, s, vocab]
        assert use_posenc_rope(model) is model
        assert isinstance(model.model.rotary_emb, PosencRotaryEmbedding)
        after = model(ids).logits
    torch.testing.assert_close(after, before, rtol=0, atol=LOGITS_ATOL)


def test_llama_logits_depend_on_rope_more_than_the_tolerance():
    # control for the test above: another rope_theta with the same weights moves the logits by far more
    model = small_llama(ROPE_PARAMETERS["default"][0])
    other = small_llama({"rope_type": "default", "rope_theta": 20000.0})
    ids = input_ids()
    with torch.no_grad():
        difference = (model(ids).logits - other(ids).logits).abs().max()
    assert difference > 1000 * LOGITS_ATOL


def test_llama_logits_are_unchanged_with_kv_cache_decoding():
    model = small_llama(ROPE_PARAMETERS["llama3"][0], ROPE_PARAMETERS["llama3"][1])
    ids = input_ids()
    with torch.no_grad():
        reference = model(ids).logits[:, -1]
        use_posenc_rope(model)
        prefix = model(ids[:, :-1], use_cache=True)
        step = model(ids[:, -1:], past_key_values=prefix.past_key_values).logits[:, -1]
    torch.testing.assert_close(step, reference, rtol=0, atol=LOGITS_ATOL)


def test_gpt_neox_partial_rotary_logits_are_unchanged_by_posenc_rope():
    config = GPTNeoXConfig(
        vocab_size=128,
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=128,
        initializer_range=0.1,
        rotary_pct=0.25,
    )
    torch.manual_seed(0)
    model = GPTNeoXForCausalLM(config).eval()
    ids = input_ids()
    with torch.no_grad():
        before = model(ids).logits
        use_posenc_rope(model)
        after = model(ids).logits
    (rotary,) = [m for m in model.modules() if isinstance(m, PosencRotaryEmbedding)]
    assert rotary.rotary_dim == 4  # int(16 · 0.25)
    torch.testing.assert_close(after, before, rtol=0, atol=LOGITS_ATOL)


@pytest.mark.parametrize("name", ["default", "yarn", "llama3"])
def test_posenc_cos_sin_are_exact_at_position_2_pow_20_where_transformers_float32_is_not(name):
    rope_parameters, max_position_embeddings = ROPE_PARAMETERS[name]
    config = llama_config(rope_parameters, max_position_embeddings)
    position_ids = (2**20 + torch.arange(64)).unsqueeze(0)  # [1, s]
    x = torch.zeros(1, dtype=torch.float32)  # only its dtype is used
    hf_cos, hf_sin = LlamaRotaryEmbedding(config)(x, position_ids)  # [1, s, d]
    ours = PosencRotaryEmbedding(config)
    cos, sin = ours(x, position_ids)
    assert cos.dtype == sin.dtype == torch.float32 and cos.shape == hf_cos.shape == (1, 64, 16)

    # float64 reference from posenc's own float64 frequencies: pos·θ is rounded once in float64
    # (error ≤ 2^20 · 2^-53 ≈ 1e-10 rad), far below float32's resolution
    inv_freq, scale = ours.inv_freq.tolist(), ours.attention_scaling
    angles = [[p * f for f in inv_freq] for p in position_ids[0].tolist()]
    reference_cos = torch.tensor([[scale * math.cos(a) for a in row] for row in angles], dtype=torch.float64)
    reference_sin = torch.tensor([[scale * math.sin(a) for a in row] for row in angles], dtype=torch.float64)
    for ours_half, reference in ((cos, reference_cos), (sin, reference_sin)):
        assert torch.equal(ours_half[..., :8], ours_half[..., 8:])
        assert (ours_half[0, :, :8].double() - reference).abs().max() < 2e-7

    hf_error = max((hf_cos - cos).abs().max(), (hf_sin - sin).abs().max())
    assert hf_error > 1e-3
    # and not only because transformers rounds θ to float32: against its own float32 θ taken exactly,
    # its float32 product pos·θ is still off by more than 1e-3
    hf_inv_freq = LlamaRotaryEmbedding(config).inv_freq.double().tolist()
    own_reference = torch.tensor(
        [[scale * math.cos(p * f) for f in hf_inv_freq] for p in position_ids[0].tolist()],
        dtype=torch.float64,
    )
    assert (hf_cos[0, :, :8].double() - own_reference).abs().max() > 1e-3


def test_frequencies_stay_float64_when_the_model_is_cast_to_bfloat16():
    model = use_posenc_rope(small_llama(ROPE_PARAMETERS["yarn"][0], ROPE_PARAMETERS["yarn"][1]))
    model.to(torch.bfloat16)
    rotary = model.model.rotary_emb
    assert rotary.inv_freq.dtype == torch.float64
    cos, sin = rotary(torch.zeros(1, dtype=torch.bfloat16), torch.arange(8).unsqueeze(0))
    assert cos.dtype == sin.dtype == torch.bfloat16
    with torch.no_grad():
        assert torch.isfinite(model(input_ids()).logits).all()


def test_dynamic_translation_uses_max_position_embeddings_as_original_length():
    config = llama_config({"rope_type": "dynamic", "rope_theta": 10000.0, "factor": 4.0}, 16)
    assert posenc_rope_arguments(config) == (
        16,
        10000.0,
        "dynamic",
        {"factor": 4.0, "original_max_position_embeddings": 16},
    )


def test_unsupported_rope_type_is_refused_by_name():
    model = small_llama(ROPE_PARAMETERS["default"][0])
    model.config.rope_parameters["rope_type"] = "proportional"
    with pytest.raises(ValueError, match="'proportional'"):
        use_posenc_rope(model)


def test_a_model_that_is_not_from_transformers_is_refused():
    with pytest.raises(TypeError, match="PreTrainedModel"):
        use_posenc_rope(torch.nn.Linear(2, 2))


def test_importing_posenc_and_the_integration_does_not_import_transformers():
    code = "import sys, posenc, posenc.integrations.transformers; sys.exit('transformers' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0
