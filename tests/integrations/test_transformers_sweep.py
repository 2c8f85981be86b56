"""Every transformers causal LM with RoPE: after use_posenc_rope it gives the same answers, or it was
refused at patch time with a ValueError naming its model type, and left unchanged.

One tiny random model per model type (see tiny_models), checked on float32 logits at shifted positions
and 20 greedy tokens from a left-padded batch. The types in DEFAULT run by default (the families whose
rotary output is not transformers' usual one, M-RoPE, RoPE per layer type, a refusal, the Llama family);
the full sweep is marked slow.
"""

from __future__ import annotations

import copy

import pytest

from tests.integrations import tiny_models

transformers = pytest.importorskip("transformers", reason="peer oracle: install the 'peers' extra")

from posenc.integrations.transformers import PosencRotaryEmbedding, use_posenc_rope  # noqa: E402

DEFAULT = (
    "llama",
    "mistral",
    "qwen2",
    "phi3",
    "gpt_neox",
    "olmo",  # cos/sin stay float32 whatever the input dtype
    "granite_swa",  # reads rotary_emb.config
    "cohere",  # interleaved layout
    "cohere2",
    "gpt_oss",  # half-width cos/sin
    "deepseek_v2",  # complex frequencies
    "deepseek_v3",
    "llama4_text",  # complex frequencies
    "qwen2_vl",  # M-RoPE in contiguous sections; axial RoPE in the vision tower
    "qwen3_vl",  # M-RoPE in interleaved sections
    "gemma3_text",  # RoPE per layer type
    "gemma4_text",  # per layer type, proportional RoPE on the global layers
    "gptj",  # refused: a sin/cos table in each attention layer, no rotary module
)


def _params():
    return [
        pytest.param(model_type, id=model_type, marks=() if model_type in DEFAULT else pytest.mark.slow)
        for model_type in tiny_models.causal_lm_model_types()
    ]


def patch_outcome(model_type: str) -> str:
    """'matched …' or 'refused …' for this model type; fails the test when it is neither, skips it when
    no tiny model can be built or run."""
    case = tiny_models.rope_case(model_type)
    if case is None:
        pytest.skip(f"{model_type}: no RoPE parameters in its config, outside the sweep")
    try:
        model = tiny_models.build(case, tiny_models.tiny_config(case))
    except tiny_models.CannotBuild as error:
        pytest.skip(f"{model_type}: no tiny model: {error}")
    name = model.config.model_type
    patched = copy.deepcopy(model)
    modules = [(path, id(module)) for path, module in patched.named_modules()]
    try:
        use_posenc_rope(patched)
    except ValueError as error:
        assert name in str(error), f"the refusal does not name the model type {name!r}: {error}"
        unchanged = [(path, id(module)) for path, module in patched.named_modules()] == modules
        assert unchanged, "refused, but the model was changed"
        return f"refused: {error}"
    replaced = [m for m in patched.modules() if isinstance(m, PosencRotaryEmbedding)]
    assert replaced, "accepted without replacing any rotary module"
    try:
        before = tiny_models.answers(model)
    except Exception as error:
        pytest.skip(f"{model_type}: the unpatched tiny model does not run: {tiny_models.first_line(error)}")
    after = tiny_models.answers(patched)  # a crash here fails the test: accepted, then broken
    difference = tiny_models.difference(before, after)
    assert difference is None, f"{name}: accepted but {difference}"
    assert rope_moves_the_logits(patched, replaced, after.logits), f"{name}: the tiny model ignores its RoPE"
    formats = {f"{m.output_format} {m.output_dtype or ''}".strip() for m in replaced}
    return "matched: " + ", ".join(sorted(formats))


def _reversed(module, args, output):
    """Forward hook: the rotation by −angle (sin negated, or the conjugate frequencies)."""
    return (output[0], -output[1]) if isinstance(output, tuple) else output.conj()


def rope_moves_the_logits(model, rotary, logits) -> bool:
    """Control: with every rotation reversed the logits move by far more than the tolerance, so the
    comparison above could have failed (a tiny model whose kept layers never rotate would not)."""
    hooks = [module.register_forward_hook(_reversed) for module in rotary]
    try:
        reversed_logits = tiny_models.shifted_logits(model)
    finally:
        for hook in hooks:
            hook.remove()
    return bool((reversed_logits - logits).abs().max() > 100 * tiny_models.LOGITS_RTOL * logits.abs().max())


@pytest.mark.parametrize("model_type", _params())
def test_patched_model_answers_as_before_or_is_refused_at_patch_time(model_type):
    print(f"{model_type}: {patch_outcome(model_type)}")


def test_sweep_covers_the_families_that_used_to_go_wrong():
    types = set(tiny_models.causal_lm_model_types())
    assert {"cohere", "cohere2", "gpt_oss", "deepseek_v2", "deepseek_v3", "llama4_text", "qwen2_vl"} <= types
    assert {"qwen2_5_vl", "qwen3_vl", "gemma3_text", "gemma4_text", "phi3", "gptj"} <= types
    assert set(DEFAULT) <= types
