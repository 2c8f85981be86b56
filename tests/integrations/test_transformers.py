"""posenc's RoPE inside transformers models: same logits at small positions, exact cos/sin at large ones."""

from __future__ import annotations

import copy
import math
import subprocess
import sys

import pytest
import torch

from tests.integrations import tiny_models

transformers = pytest.importorskip("transformers", reason="peer oracle: install the 'peers' extra")

from transformers import GPTNeoXConfig, GPTNeoXForCausalLM, LlamaConfig, LlamaForCausalLM  # noqa: E402
from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding  # noqa: E402

from posenc.integrations.transformers import (  # noqa: E402
    PosencLayerTypeRotaryEmbedding,
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
    model.config.rope_parameters["rope_type"] = "sliding_rope"
    with pytest.raises(ValueError, match="rope_type 'sliding_rope' is not supported by posenc"):
        use_posenc_rope(model)


def test_proportional_rope_keeps_logits_and_turns_only_the_first_pairs():
    """Gemma 4's proportional RoPE on a Llama: θ_k = base^(−2k/d)/factor for the first quarter, 0 after."""
    parameters = {
        "rope_type": "proportional",
        "rope_theta": 1e6,
        "partial_rotary_factor": 0.25,
        "factor": 2.0,
    }
    model = small_llama(parameters)
    before = model(input_ids()).logits
    use_posenc_rope(model)
    (rotary,) = rotary_modules(model)
    assert (rotary.scaling, rotary.rotary_dim) == ("proportional", 16)
    assert bool((rotary.inv_freq[2:] == 0).all()) and bool((rotary.inv_freq[:2] > 0).all())
    torch.testing.assert_close(model(input_ids()).logits, before, rtol=0, atol=LOGITS_ATOL)


def test_hunyuan_dynamic_with_alpha_is_static_ntk_alpha():
    model = tiny("hunyuan_v1_dense")
    model.config.rope_parameters.update({"rope_type": "dynamic", "alpha": 1000.0, "factor": 1.0})
    model = type(model)(model.config).eval()  # rebuilt: its rotary module reads alpha when built
    before = tiny_models.answers(model)
    use_posenc_rope(model)
    (rotary,) = rotary_modules(model)
    assert rotary.scaling == "ntk_alpha" and rotary.scaling_args == {"alpha": 1000.0}
    assert tiny_models.difference(before, tiny_models.answers(model)) is None


def test_a_model_that_is_not_from_transformers_is_refused():
    with pytest.raises(TypeError, match="PreTrainedModel"):
        use_posenc_rope(torch.nn.Linear(2, 2))


def test_importing_posenc_and_the_integration_does_not_import_transformers():
    code = "import sys, posenc, posenc.integrations.transformers; sys.exit('transformers' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0


# --- families whose rotary module returns something other than the half layout, and refusals ----------


def tiny(model_type: str):
    return tiny_models.tiny_model(model_type)


def rotary_modules(model) -> list[PosencRotaryEmbedding]:
    return [m for m in model.modules() if isinstance(m, PosencRotaryEmbedding)]


@pytest.mark.parametrize(
    ("model_type", "output_format"),
    [
        ("cohere", "interleaved"),  # cos/sin repeat_interleave'd, rotated in pairs (2k, 2k+1)
        ("cohere2", "interleaved"),
        ("gpt_oss", "half_width"),  # cos/sin [b, s, r/2], applied to the two halves
        ("deepseek_v2", "complex"),  # freqs_cis = polar(1, angle), complex64
        ("llama4_text", "complex"),
    ],
)
def test_families_with_other_rotary_outputs_keep_their_logits(model_type, output_format):
    model = tiny(model_type)
    before = tiny_models.shifted_logits(model)  # left padding and a position offset
    use_posenc_rope(model)
    assert tiny_models.logits_difference(before, tiny_models.shifted_logits(model)) is None
    (rotary,) = rotary_modules(model)
    assert rotary.output_format == output_format


def test_patching_twice_keeps_the_first_output_format():
    model = tiny("cohere")
    before = tiny_models.shifted_logits(model)
    assert use_posenc_rope(use_posenc_rope(model)) is model
    assert [m.output_format for m in rotary_modules(model)] == ["interleaved"]
    assert tiny_models.logits_difference(before, tiny_models.shifted_logits(model)) is None


def test_olmo_keeps_float32_cos_sin_for_a_bfloat16_input():
    # OLMo returns its cos/sin in float32 whatever x is, and rotates q/k in float32 with them
    model = use_posenc_rope(tiny("olmo"))
    cos, sin = model.model.rotary_emb(torch.zeros(1, dtype=torch.bfloat16), torch.arange(4)[None])
    assert cos.dtype == sin.dtype == torch.float32


def test_granite_swa_per_theta_rotary_modules_are_replaced_and_keep_their_config():
    model = tiny("granite_swa")
    before = tiny_models.shifted_logits(model)
    use_posenc_rope(model)
    assert all(m.config.rope_parameters["rope_theta"] == m.base for m in rotary_modules(model))
    assert tiny_models.logits_difference(before, tiny_models.shifted_logits(model)) is None


def assert_refused_unchanged(model, *patterns: str) -> str:
    modules = [(name, id(module)) for name, module in model.named_modules()]
    with pytest.raises(ValueError) as refusal:
        use_posenc_rope(model)
    message = str(refusal.value)
    for pattern in (model.config.model_type, *patterns):
        assert pattern in message, f"{pattern!r} not in {message!r}"
    assert [(name, id(module)) for name, module in model.named_modules()] == modules
    assert not rotary_modules(model)
    return message


@pytest.mark.parametrize(
    ("model_type", "section_layout"), [("qwen2_vl", "contiguous"), ("qwen3_vl", "interleaved")]
)
def test_m_rope_models_keep_their_answers_with_posencs_sections(model_type, section_layout):
    """The text model turns pair k with the t, h or w coordinate of its section (Qwen2-VL's runs,
    Qwen3-VL's interleaving); the vision tower's axial RoPE turns with the patch's row and column."""
    model = tiny(model_type)
    before = tiny_models.answers(model)
    use_posenc_rope(model)
    text = model.model.language_model.rotary_emb
    assert text.sections is not None and text.section_layout == section_layout
    assert model.model.visual.rotary_pos_emb.rope_type == "axial"
    assert tiny_models.difference(before, tiny_models.answers(model)) is None
    ids = torch.randint(0, 100, (1, 6))
    position_ids = torch.stack((torch.arange(6), torch.arange(6) // 2 + 3, torch.arange(6) % 2 + 3))[:, None]
    before = tiny(model_type)(ids, position_ids=position_ids).logits  # [3, 1, 6]: t, h, w apart
    torch.testing.assert_close(model(ids, position_ids=position_ids).logits, before, rtol=0, atol=LOGITS_ATOL)


def test_qwen2_vl_text_model_alone_keeps_its_logits():
    text_config = tiny_models.tiny_config(tiny_models.rope_case("qwen2_vl")).text_config
    torch.manual_seed(0)
    model = transformers.Qwen2VLTextModel(text_config).eval()
    ids = torch.randint(0, 100, (2, 8))
    before = model(ids).last_hidden_state
    use_posenc_rope(model)
    torch.testing.assert_close(model(ids).last_hidden_state, before, rtol=0, atol=LOGITS_ATOL)


GEMMA3_ROPE = {
    "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
    "full_attention": {"rope_type": "linear", "rope_theta": 1_000_000.0, "factor": 8.0},
}


def test_gemma3_rope_per_layer_type_keeps_its_answers():
    """Local layers base 10⁴ unscaled, global layers base 10⁶ with linear ×8: one replacement per type."""
    config = tiny_models.tiny_config(tiny_models.rope_case("gemma3_text"))
    config.rope_parameters = {name: dict(parameters) for name, parameters in GEMMA3_ROPE.items()}
    model = tiny_models.build(tiny_models.rope_case("gemma3_text"), config)
    before = tiny_models.answers(model)
    use_posenc_rope(model)
    rotary = model.model.rotary_emb
    assert isinstance(rotary, PosencLayerTypeRotaryEmbedding)
    local, full = rotary.per_layer_type["sliding_attention"], rotary.per_layer_type["full_attention"]
    assert (local.base, local.scaling) == (10000.0, None)
    assert (full.base, full.scaling, full.scaling_args) == (1e6, "linear", {"factor": 8.0})
    assert tiny_models.difference(before, tiny_models.answers(model)) is None


def test_a_per_layer_type_module_that_posenc_does_not_reproduce_is_refused_naming_the_layer_type():
    model = tiny("gemma3_text")
    rotary = model.model.rotary_emb
    original = type(rotary).forward

    class ShiftedRotaryEmbedding(type(rotary)):
        def forward(self, x, position_ids, layer_type):
            if layer_type == "full_attention":
                position_ids = position_ids + 1
            return original(self, x, position_ids, layer_type)

    model.model.rotary_emb = ShiftedRotaryEmbedding(model.config)
    assert_refused_unchanged(model, "gemma3_text", "layer type 'full_attention'", "reproduces")


def test_a_model_without_rotary_module_is_refused_naming_the_model_type():
    torch.manual_seed(0)
    config = transformers.GPT2Config(vocab_size=128, n_embd=32, n_layer=1, n_head=2)
    assert_refused_unchanged(transformers.GPT2LMHeadModel(config), "no rotary embedding module")


class OffsetRotaryEmbedding(LlamaRotaryEmbedding):
    """A rotary module posenc does not reproduce: one extra radian on every angle."""

    def forward(self, x, position_ids):
        return super().forward(x, position_ids + 1)


def test_a_rotary_module_whose_output_posenc_does_not_reproduce_is_refused():
    model = small_llama(ROPE_PARAMETERS["default"][0])
    model.model.rotary_emb = OffsetRotaryEmbedding(model.config)
    message = assert_refused_unchanged(model, "model.rotary_emb (OffsetRotaryEmbedding)")
    assert "no posenc output format reproduces" in message


def test_a_rotary_module_changed_after_it_was_built_is_refused():
    model = small_llama(ROPE_PARAMETERS["default"][0])
    model.model.rotary_emb.attention_scaling = 1.25  # the probes run on a copy rebuilt from the config
    assert_refused_unchanged(model, "attention_scaling 1.25")


@pytest.mark.parametrize("rope_type", ["default", "llama3"])
def test_a_rotary_module_whose_inv_freq_was_replaced_is_refused(rope_type):
    # context-extension patches overwrite inv_freq after construction; original_inv_freq keeps the config's
    model = small_llama(*ROPE_PARAMETERS[rope_type])
    model.model.rotary_emb.inv_freq = model.model.rotary_emb.inv_freq * 1.5
    assert_refused_unchanged(model, "inv_freq is not the one its config gives")


def test_a_model_cast_to_bfloat16_before_patching_gets_the_config_frequencies():
    model = small_llama(ROPE_PARAMETERS["llama3"][0], ROPE_PARAMETERS["llama3"][1]).to(torch.bfloat16)
    use_posenc_rope(model)
    reference = PosencRotaryEmbedding(model.config)
    assert torch.equal(model.model.rotary_emb.inv_freq, reference.inv_freq)


def test_dynamic_ntk_keeps_transformers_state_across_calls():
    # transformers keeps the frequencies of the longest length seen until a call drops below the
    # original length: a call of 20 positions after one of 40 uses the 40-position frequencies
    config = llama_config({"rope_type": "dynamic", "rope_theta": 10000.0, "factor": 4.0}, 16)
    theirs, ours = LlamaRotaryEmbedding(config), PosencRotaryEmbedding(config)
    x = torch.zeros(1)
    for length in (40, 20, 8, 20):
        position_ids = torch.arange(length)[None]
        for their, our in zip(theirs(x, position_ids), ours(x, position_ids), strict=True):
            torch.testing.assert_close(our, their, rtol=0, atol=2e-6)


def test_dynamic_ntk_state_of_a_model_that_already_ran_long_is_carried_over():
    model = small_llama({"rope_type": "dynamic", "rope_theta": 10000.0, "factor": 4.0}, 16)
    ids = input_ids()
    with torch.no_grad():
        model(ids)  # 40 positions: transformers grows to the 40-position frequencies and keeps them
        twin = copy.deepcopy(model)
        use_posenc_rope(model)
        torch.testing.assert_close(
            model(ids[:, :20]).logits, twin(ids[:, :20]).logits, rtol=0, atol=LOGITS_ATOL
        )


SCALED = {
    # DeepSeek's YaRN with an attention factor mscale(40, 1) / mscale(40, 0.8) ≠ 1
    "deepseek_v3": {
        "rope_type": "yarn",
        "rope_theta": 10000.0,
        "factor": 40.0,
        "original_max_position_embeddings": 16,
        "mscale": 1.0,
        "mscale_all_dim": 0.8,
    },
    "deepseek_v2": {
        "rope_type": "yarn",
        "rope_theta": 10000.0,
        "factor": 40.0,
        "original_max_position_embeddings": 16,
        "mscale": 0.707,
        "mscale_all_dim": 0.707,
    },
    "qwen2": {
        "rope_type": "yarn",
        "rope_theta": 10000.0,
        "factor": 4.0,
        "original_max_position_embeddings": 16,
    },
    # the long factors take over past 16 positions, during the greedy decoding
    "phi3": {
        "rope_type": "longrope",
        "rope_theta": 10000.0,
        "short_factor": [1.0 + 0.1 * k for k in range(8)],
        "long_factor": [1.0 + k for k in range(8)],
        "original_max_position_embeddings": 16,
    },
    # grows past 16 positions at every decoding step
    "llama": {"rope_type": "dynamic", "rope_theta": 10000.0, "factor": 4.0},
    # GPT-OSS's YaRN: the ramp's ends (pairs 2.02 and 4.35 here) not rounded to whole pairs
    "gpt_oss": {
        "rope_type": "yarn",
        "rope_theta": 150000.0,
        "factor": 32.0,
        "original_max_position_embeddings": 4096,
        "beta_fast": 32.0,
        "beta_slow": 1.0,
        "truncate": False,
    },
}


@pytest.mark.parametrize("model_type", SCALED)
def test_scaled_rope_keeps_logits_and_greedy_tokens(model_type):
    case = tiny_models.rope_case(model_type)
    config = tiny_models.tiny_config(case)
    config.rope_parameters = SCALED[model_type]
    config.max_position_embeddings = 64 if model_type == "phi3" else 16
    model = tiny_models.build(case, config)
    patched = use_posenc_rope(copy.deepcopy(model))  # before either runs: dynamic NTK keeps state
    assert tiny_models.difference(tiny_models.answers(model), tiny_models.answers(patched)) is None


def test_a_dynamic_module_whose_inv_freq_was_replaced_is_refused():
    # transformers' dynamic module keeps a replaced inv_freq until a call grows past max_seq_len_cached:
    # it was accepted, and the config's frequencies moved the logits by up to 1.21
    model = small_llama({"rope_type": "dynamic", "rope_theta": 10000.0, "factor": 4.0}, 16)
    model.model.rotary_emb.inv_freq = model.model.rotary_emb.inv_freq * 1.5
    original = model.model.rotary_emb
    with pytest.raises(
        ValueError, match="its inv_freq is not the one its config gives at its max_seq_len_cached"
    ):
        use_posenc_rope(model)
    assert model.model.rotary_emb is original


def test_a_dynamic_module_whose_length_changed_after_it_was_built_is_refused():
    # the module keeps original_max_seq_len 16 from when it was built; posenc read 8 from the config and
    # scaled where transformers does not (logits off by up to 0.28)
    model = small_llama({"rope_type": "dynamic", "rope_theta": 10000.0, "factor": 4.0}, 16)
    model.config.max_position_embeddings = 8
    with pytest.raises(ValueError, match="its original_max_seq_len 16 is not the 8 its config gives"):
        use_posenc_rope(model)


def test_a_dynamic_module_that_has_grown_is_taken_with_its_state():
    # after a call of 40 tokens its inv_freq is the dynamic one at 40: that is the config's, not a change
    model = small_llama({"rope_type": "dynamic", "rope_theta": 10000.0, "factor": 4.0}, 16)
    ids = input_ids()  # [2, 40]
    with torch.no_grad():
        model(ids)
        assert model.model.rotary_emb.max_seq_len_cached == 40
        before = model(ids).logits
        use_posenc_rope(model)
        after = model(ids).logits
    torch.testing.assert_close(after, before, rtol=0, atol=LOGITS_ATOL)
