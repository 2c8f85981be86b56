"""Exact RoPE for transformers models: swap their rotary embedding for posenc's, same outputs, exact angles.

transformers computes cos/sin of ``position·inv_freq`` as a float32 product, which at position 2^20
is off by up to ~0.06 rad; posenc reduces the angle exactly (:func:`posenc.functional.rope_cos_sin`).
``use_posenc_rope(model)`` keeps everything else, including the scaling read from
``config.rope_parameters``, so a model whose positions stay small gives the same logits within fp32
rounding. transformers itself is only imported when the function is called.
"""

from __future__ import annotations

import torch
from torch import nn

from posenc.functional.rope import rope_cos_sin, rope_inv_freq

#: transformers' ``rope_type`` -> posenc's scaling name.
ROPE_TYPES = {
    "default": None,
    "linear": "linear",
    "dynamic": "dynamic",
    "yarn": "yarn",
    "llama3": "llama3",
    "longrope": "longrope",
}

#: rope_parameters keys passed on unchanged, per rope_type.
_KEYS = {
    "default": (),
    "linear": ("factor",),
    "dynamic": ("factor",),
    "yarn": ("factor", "attention_factor", "mscale", "mscale_all_dim", "truncate"),
    "llama3": ("factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"),
    "longrope": ("factor", "short_factor", "long_factor", "attention_factor"),
}


def _rotary_dim(config) -> int:
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    return int(head_dim * config.rope_parameters.get("partial_rotary_factor", 1.0))


def posenc_rope_arguments(config) -> tuple[int, float, str | None, dict]:
    """``(rotary_dim, base, scaling, scaling_args)`` for posenc from a transformers config.

    Translates ``config.rope_parameters`` the way transformers' ``ROPE_INIT_FUNCTIONS`` read it:
    dynamic's length is ``config.max_position_embeddings``; yarn and longrope take ``factor`` as
    max_position_embeddings / original_max_position_embeddings when it is absent; yarn's
    ``beta_fast``/``beta_slow`` fall back to 32/1 when unset or zero.

    Raises:
        ValueError: rope_parameters nested per layer type, or a rope_type posenc does not implement.
    """
    parameters = getattr(config, "rope_parameters", None) or {}
    if "rope_type" not in parameters:
        raise ValueError(
            "config.rope_parameters must be a flat dict with 'rope_type' (per-layer-type RoPE is not supported), "
            f"got keys {sorted(parameters)}"
        )
    rope_type = parameters["rope_type"]
    if rope_type not in ROPE_TYPES:
        raise ValueError(
            f"rope_type {rope_type!r} is not supported by posenc; supported: {', '.join(map(repr, ROPE_TYPES))}"
        )
    args = {key: parameters[key] for key in _KEYS[rope_type] if parameters.get(key) is not None}
    original = parameters.get("original_max_position_embeddings") or config.max_position_embeddings
    if rope_type == "dynamic":
        args["original_max_position_embeddings"] = config.max_position_embeddings
    if rope_type in ("yarn", "longrope"):
        args["original_max_position_embeddings"] = original
        args.setdefault("factor", config.max_position_embeddings / original)
    if rope_type == "yarn":
        args["beta_fast"] = float(parameters.get("beta_fast") or 32)
        args["beta_slow"] = float(parameters.get("beta_slow") or 1)
    return _rotary_dim(config), float(parameters["rope_theta"]), ROPE_TYPES[rope_type], args


class PosencRotaryEmbedding(nn.Module):
    """Drop-in for transformers' ``*RotaryEmbedding``: ``forward(x, position_ids) -> (cos, sin)``.

    Returns cos and sin ``[b, s, r]`` in x's dtype with each frequency twice (``cat((c, c), -1)``,
    transformers' half layout), times the scaling's attention factor. The float64 frequencies are a
    plain attribute, not a buffer, so ``model.to(torch.bfloat16)`` cannot round them. Dynamic NTK and
    LongRoPE use the length ``max(position_ids) + 1`` of each call (transformers' dynamic NTK also
    keeps the largest length seen until a call drops below the original length; this module is stateless).
    """

    def __init__(self, config) -> None:
        super().__init__()
        self.rotary_dim, self.base, self.scaling, self.scaling_args = posenc_rope_arguments(config)
        self.rope_type = config.rope_parameters["rope_type"]
        self.inv_freq, self.attention_scaling = rope_inv_freq(
            self.rotary_dim, base=self.base, scaling=self.scaling, **self.scaling_args
        )  # [r/2] float64

    def frequencies(self, position_ids: torch.Tensor) -> torch.Tensor:
        """float64 ``[r/2]`` for these positions (they matter for dynamic and longrope only)."""
        if self.scaling not in ("dynamic", "longrope"):
            return self.inv_freq
        seq_len = int(position_ids.max()) + 1
        inv_freq, _ = rope_inv_freq(
            self.rotary_dim, base=self.base, scaling=self.scaling, seq_len=seq_len, **self.scaling_args
        )
        return inv_freq

    @torch.no_grad()
    def forward(self, x: torch.Tensor, position_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        inv_freq = self.frequencies(position_ids).to(position_ids.device)
        cos, sin = rope_cos_sin(
            position_ids, inv_freq, dtype=x.dtype, attention_factor=self.attention_scaling
        )  # [b, s, r/2]
        return torch.cat((cos, cos), dim=-1), torch.cat((sin, sin), dim=-1)  # [b, s, r]

    def extra_repr(self) -> str:
        return f"rotary_dim={self.rotary_dim}, base={self.base}, rope_type={self.rope_type!r}"


def use_posenc_rope(model: nn.Module) -> nn.Module:
    """Replace every rotary embedding module of a transformers model (Llama, GPT-NeoX, …) in place.

    A rotary embedding module is one whose class name ends in ``RotaryEmbedding`` and that holds
    ``config`` and ``inv_freq`` (``model.model.rotary_emb`` in Llama). Returns the model.

    Raises:
        TypeError: model is not a transformers ``PreTrainedModel``.
        ValueError: no rotary embedding found, an unsupported rope_type (named), or a width that
            differs from the replaced module's (e.g. Llama's default RoPE ignores partial_rotary_factor).
    """
    from transformers import PreTrainedModel

    if not isinstance(model, PreTrainedModel):
        raise TypeError(f"model must be a transformers PreTrainedModel, got {type(model).__name__}")
    found = [
        (name, module)
        for name, module in model.named_modules()
        if type(module).__name__.endswith("RotaryEmbedding")
        and hasattr(module, "config")
        and isinstance(getattr(module, "inv_freq", None), torch.Tensor)
    ]
    if not found:
        raise ValueError(
            f"no rotary embedding module (…RotaryEmbedding with inv_freq) in {type(model).__name__}"
        )
    for name, module in found:
        replacement = PosencRotaryEmbedding(module.config)
        if 2 * module.inv_freq.numel() != replacement.rotary_dim:
            raise ValueError(
                f"{name}: transformers rotates {2 * module.inv_freq.numel()} channels but the config gives "
                f"rotary_dim {replacement.rotary_dim}"
            )
        parent_name, _, child = name.rpartition(".")
        setattr(model.get_submodule(parent_name) if parent_name else model, child, replacement)
    return model
