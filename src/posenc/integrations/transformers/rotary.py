"""posenc's drop-in rotary modules for transformers models, and how they read a model's config."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import nn

from posenc._validation import check_choice, check_positive_ints
from posenc.functional.angles import split_frequencies
from posenc.functional.coordinates import from_mrope_layout
from posenc.functional.rope import (
    SECTION_LAYOUTS,
    cos_sin_of_pieces,
    rope_axial_frequencies,
    rope_inv_freq,
    rope_section_axes,
)

#: transformers' ``rope_type`` -> posenc's scaling name (``dynamic`` with an ``alpha`` key is
#: ``ntk_alpha``, as Hunyuan's modules read it).
ROPE_TYPES = {
    "default": None,
    "linear": "linear",
    "dynamic": "dynamic",
    "yarn": "yarn",
    "llama3": "llama3",
    "longrope": "longrope",
    "proportional": "proportional",
}

#: rope_parameters keys passed on unchanged, per posenc scaling (None: the default).
_KEYS = {
    None: (),
    "linear": ("factor",),
    "dynamic": ("factor",),
    "ntk_alpha": ("alpha",),
    "yarn": ("factor", "attention_factor", "mscale", "mscale_all_dim", "truncate"),
    "llama3": ("factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"),
    "longrope": ("factor", "short_factor", "long_factor", "attention_factor"),
    "proportional": ("factor", "partial_rotary_factor"),
}


def _half(cos: torch.Tensor, sin: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.cat((cos, cos), dim=-1), torch.cat((sin, sin), dim=-1)  # [..., r]


def _interleaved(cos: torch.Tensor, sin: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return cos.repeat_interleave(2, dim=-1), sin.repeat_interleave(2, dim=-1)  # [..., r]


def _half_width(cos: torch.Tensor, sin: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return cos, sin  # [..., r/2]


def _complex(cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    return torch.complex(cos.float(), sin.float())  # [..., r/2] complex64, as torch.polar of float32 angles


#: output format -> how cos and sin ``[..., r/2]`` become the module's output (see the module docstring).
OUTPUT_FORMATS: dict[str, Callable[[torch.Tensor, torch.Tensor], object]] = {
    "half": _half,
    "interleaved": _interleaved,
    "half_width": _half_width,
    "complex": _complex,
}


def layer_config(config, layer_type: str | None):
    """The config a layer type's RoPE is computed from: ``config.per_layer_config[layer_type]`` where the
    config resolves one (Gemma 4: the global layers' own head_dim), else the config itself."""
    if layer_type is None:
        return config
    try:
        return config.per_layer_config[layer_type]
    except (AttributeError, KeyError, IndexError, TypeError, ValueError):
        return config


def rope_parameters(config, layer_type: str | None = None) -> dict:
    """``config.rope_parameters``, or its entry for ``layer_type`` when they are nested per layer type.

    Raises:
        ValueError: nested parameters without a layer type, or a layer type they do not name.
    """
    parameters = getattr(config, "rope_parameters", None) or {}
    if layer_type is not None:
        if layer_type not in parameters or not isinstance(parameters[layer_type], dict):
            raise ValueError(
                f"config.rope_parameters has no parameters for layer type {layer_type!r} (keys {sorted(parameters)})"
            )
        parameters = parameters[layer_type]
    if "rope_type" not in parameters:
        raise ValueError(
            "config.rope_parameters must be a flat dict with 'rope_type' or a dict of them per layer type "
            f"(read with the layer type), got keys {sorted(parameters)}"
        )
    return parameters


def _head_dim(config) -> int:
    return getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads


def _rotary_dim(config, parameters: dict, scaling: str | None) -> int:
    """r: the head width times partial_rotary_factor; proportional RoPE spans the whole head (its factor
    stops pairs instead)."""
    if scaling == "proportional":
        return _head_dim(config)
    return int(_head_dim(config) * parameters.get("partial_rotary_factor", 1.0))


def posenc_rope_arguments(config, layer_type: str | None = None) -> tuple[int, float, str | None, dict]:
    """``(rotary_dim, base, scaling, scaling_args)`` for posenc from a transformers config.

    Translates ``config.rope_parameters`` (the entry for ``layer_type`` where they are nested per layer
    type, read from :func:`layer_config`) the way transformers' ``ROPE_INIT_FUNCTIONS`` read it:
    dynamic's length is ``config.max_position_embeddings``, and ``dynamic`` with ``alpha`` is
    ``ntk_alpha`` (Hunyuan); yarn and longrope take ``factor`` as max_position_embeddings /
    original_max_position_embeddings when it is absent; yarn's ``beta_fast``/``beta_slow`` fall back to
    32/1 when unset or zero; ``proportional`` spans the whole head_dim.

    Raises:
        ValueError: parameters missing for the layer type, a rope_type posenc does not implement, or a
            length the rope_type needs that the config lacks.
    """
    config = layer_config(config, layer_type)
    parameters = rope_parameters(config, layer_type)
    rope_type = parameters["rope_type"]
    if rope_type not in ROPE_TYPES:
        raise ValueError(
            f"rope_type {rope_type!r} is not supported by posenc; supported: "
            f"{', '.join(map(repr, ROPE_TYPES))} and, on coordinates [n, 2], 'axial'"
        )
    scaling = ROPE_TYPES[rope_type]
    if rope_type == "dynamic" and parameters.get("alpha"):
        scaling = "ntk_alpha"  # a fixed alpha: static frequencies, whatever the length
    args = {key: parameters[key] for key in _KEYS[scaling] if parameters.get(key) is not None}
    if scaling in ("dynamic", "yarn", "longrope"):
        length = getattr(config, "max_position_embeddings", None)
        if length is None:
            raise ValueError(
                f"rope_type {rope_type!r} needs config.max_position_embeddings, which is not set"
            )
        original = parameters.get("original_max_position_embeddings") or length
    if scaling == "dynamic":
        args["original_max_position_embeddings"] = length
    if scaling in ("yarn", "longrope"):
        args["original_max_position_embeddings"] = original
        args.setdefault("factor", length / original)
    if scaling == "yarn":
        args["beta_fast"] = float(parameters.get("beta_fast") or 32)
        args["beta_slow"] = float(parameters.get("beta_slow") or 1)
    return _rotary_dim(config, parameters, scaling), float(parameters["rope_theta"]), scaling, args


def axial_rope_arguments(config) -> tuple[int, float, tuple[int, int]]:
    """``(rotary_dim, base, axis widths)`` of transformers' ``axial`` RoPE (Qwen2-VL's vision tower): the
    head width d split in two halves, rows and columns, each turning with base^(−2i/(d/2))
    (:func:`posenc.functional.rope_axial_frequencies`)."""
    parameters = rope_parameters(config)
    width = (
        getattr(config, "embed_dim", None) or config.hidden_size
    )  # Qwen2-VL: embed_dim; later: hidden_size
    head_dim = getattr(config, "head_dim", None) or width // config.num_attention_heads
    spatial = head_dim // 2
    return head_dim, float(parameters["rope_theta"]), (spatial, spatial)


def mrope_sections(config, layer_type: str | None = None) -> tuple[int, ...] | None:
    """Qwen2-VL's ``mrope_section`` (pairs per axis t, h, w) from the RoPE parameters, or None."""
    sections = rope_parameters(layer_config(config, layer_type), layer_type).get("mrope_section")
    return None if sections is None else tuple(int(size) for size in sections)


class PosencRotaryEmbedding(nn.Module):
    """Drop-in for transformers' ``*RotaryEmbedding``: ``forward(x, position_ids)`` -> cos/sin with exact angles.

    Returns cos and sin in x's dtype (or ``output_dtype``; complex64 for ``output_format="complex"``)
    times the scaling's attention factor, laid out as ``output_format`` says (:data:`OUTPUT_FORMATS`; ``"half"`` is
    transformers' ``cat((c, c), -1)``, ``[b, s, r]``). The float64 frequencies are a plain attribute,
    not a buffer, so ``model.to(torch.bfloat16)`` cannot round them. Dynamic NTK keeps transformers'
    state: the frequencies of the longest length seen (starting from ``max_seq_len_cached``, by default
    ``config.max_position_embeddings``), back to the original ones when a call is shorter than that;
    LongRoPE picks its long factors per call when ``max(position_ids) + 1`` exceeds the original length.

    M-RoPE (``mrope_section`` in the parameters: Qwen2-VL, Qwen2.5-VL, Qwen3-VL): position ids
    ``[3, b, s]`` (or text-only ``[b, s]``, the same on every axis) turn pair k with the coordinate of
    its axis (:func:`posenc.functional.rope_section_axes`, ``section_layout`` ``"contiguous"`` for
    Qwen2-VL, ``"interleaved"`` for Qwen3-VL), one ``[b, s, r]`` output as those models return.

    ``layer_type``: the entry of rope_parameters nested per layer type that this module computes (one
    module per layer type; :class:`PosencLayerTypeRotaryEmbedding` serves them all). ``sections``:
    M-RoPE's pairs per axis where the config leaves them to the module's default (Qwen3.5's
    ``[11, 11, 10]``); default the config's ``mrope_section``.
    """

    def __init__(
        self,
        config,
        *,
        output_format: str = "half",
        output_dtype: torch.dtype | None = None,
        max_seq_len_cached: int | None = None,
        layer_type: str | None = None,
        section_layout: str = "contiguous",
        sections: Sequence[int] | None = None,
    ) -> None:
        super().__init__()
        self.config = config  # read by some models (GraniteSWA keys its per-layer tables by rope_theta)
        self.output_format = check_choice("output_format", output_format, OUTPUT_FORMATS)
        if output_dtype is not None and not isinstance(output_dtype, torch.dtype):
            raise TypeError(f"output_dtype must be a torch.dtype or None, got {output_dtype!r}")
        self.output_dtype = output_dtype
        self.layer_type = layer_type
        self.rope_type = rope_parameters(layer_config(config, layer_type), layer_type)["rope_type"]
        self.section_layout = check_choice("section_layout", section_layout, SECTION_LAYOUTS)
        self.sections = None
        self.frequency_axis = None  # [r/2] int64: the axis each pair turns with (M-RoPE, axial), or None
        if self.rope_type == "axial":
            self.rotary_dim, self.base, self.axial_widths = axial_rope_arguments(config)
            self.scaling, self.scaling_args = None, {}
            self.frequency_axis = rope_axial_frequencies(self.axial_widths, base=self.base)[1]
        else:
            self.rotary_dim, self.base, self.scaling, self.scaling_args = posenc_rope_arguments(
                config, layer_type
            )
            self.sections = mrope_sections(config, layer_type)
            if sections is not None:
                self.sections = check_positive_ints("sections", sections)
        if self.sections is not None:
            if 2 * sum(self.sections) != self.rotary_dim:
                raise ValueError(
                    f"mrope_section {list(self.sections)} holds {sum(self.sections)} pairs, but the rotary "
                    f"width {self.rotary_dim} has {self.rotary_dim // 2}"
                )
            self.frequency_axis = rope_section_axes(self.sections, layout=self.section_layout)
        self.axes = None if self.frequency_axis is None else int(self.frequency_axis.max()) + 1
        self.original_max_seq_len = getattr(config, "max_position_embeddings", None)
        self.max_seq_len_cached = max_seq_len_cached or self.original_max_seq_len
        self.inv_freq, self.attention_scaling = self._inv_freq(
            self.max_seq_len_cached if self.scaling == "dynamic" else None
        )  # [r/2] float64

    @property
    def inv_freq(self) -> torch.Tensor:
        """The float64 frequencies ``[r/2]`` this module turns with."""
        return self._inv_freq_value

    @inv_freq.setter
    def inv_freq(self, value: torch.Tensor) -> None:
        # split once, here, outside any compiled graph: each call reads the pieces
        self._inv_freq_value = value
        self._frequency_pieces = split_frequencies(value.to(torch.float64))  # [r/2, P]

    def _inv_freq(self, seq_len: int | None) -> tuple[torch.Tensor, float]:
        if self.rope_type == "axial":
            return rope_axial_frequencies(self.axial_widths, base=self.base)[0], 1.0
        length = {"seq_len": seq_len} if seq_len is not None else {}
        return rope_inv_freq(
            self.rotary_dim, base=self.base, scaling=self.scaling, **self.scaling_args, **length
        )

    def frequencies(self, position_ids: torch.Tensor) -> torch.Tensor:
        """float64 ``[r/2]`` for these positions (they matter for dynamic and longrope only)."""
        if self.scaling == "longrope":  # as transformers, the set of this call stays in inv_freq
            self.inv_freq = self._inv_freq(int(position_ids.max()) + 1)[0]
        if self.scaling == "dynamic":
            # transformers' dynamic_rope_update: grow past the longest length seen, reset below the original
            seq_len, cached = int(position_ids.max()) + 1, self.max_seq_len_cached
            if seq_len > cached:
                self.inv_freq, self.max_seq_len_cached = self._inv_freq(seq_len)[0], seq_len
            if seq_len < self.original_max_seq_len < cached:
                self.inv_freq = self._inv_freq(self.original_max_seq_len)[0]
                self.max_seq_len_cached = self.original_max_seq_len
        return self.inv_freq

    @torch.no_grad()
    def forward(self, x: torch.Tensor, position_ids: torch.Tensor):
        self.frequencies(position_ids)  # dynamic NTK and LongRoPE set this call's frequencies
        pieces = self._frequency_pieces.to(position_ids.device)  # [r/2, P]
        dtype = torch.float32 if self.output_format == "complex" else self.output_dtype or x.dtype
        axis = None
        if self.frequency_axis is not None:
            axis = self.frequency_axis.to(position_ids.device)
        if self.sections is not None:
            if position_ids.dim() == 2:  # text only: the same position on every axis
                position_ids = position_ids[None].expand(len(self.sections), *position_ids.shape)
            position_ids = from_mrope_layout(position_ids)  # [3, b, s] -> [b, s, 3]
        cos, sin = cos_sin_of_pieces(
            position_ids,
            pieces,
            dtype=dtype,
            attention_factor=self.attention_scaling,
            axis=axis,
            axes=self.axes,
        )  # [b, s, r/2] (axial: [n, r/2] from coordinates [n, 2])
        return OUTPUT_FORMATS[self.output_format](cos, sin)

    def extra_repr(self) -> str:
        layer_type = f", layer_type={self.layer_type!r}" if self.layer_type is not None else ""
        sections = (
            f", mrope_section={list(self.sections)}, section_layout={self.section_layout!r}"
            if self.sections is not None
            else ""
        )
        return (
            f"rotary_dim={self.rotary_dim}, base={self.base}, rope_type={self.rope_type!r}, "
            f"output_format={self.output_format!r}{layer_type}{sections}"
        )


class PosencLayerTypeRotaryEmbedding(nn.Module):
    """Drop-in for a rotary module whose forward takes ``(x, position_ids, layer_type)`` (Gemma 3 and 4,
    OLMo 3, …: rope_parameters nested per layer type): one :class:`PosencRotaryEmbedding` per layer type.

    Gemma 3, for one, turns its local (sliding-window) layers with base 10⁴ unscaled and its global
    layers with base 10⁶ and linear scaling ×8; each layer type keeps its own dynamic-NTK state, as
    transformers does.
    """

    def __init__(self, config, per_layer_type: dict[str, PosencRotaryEmbedding]) -> None:
        super().__init__()
        self.config = config
        self.layer_types = sorted(per_layer_type)
        self.per_layer_type = nn.ModuleDict(per_layer_type)

    def forward(self, x: torch.Tensor, position_ids: torch.Tensor, layer_type: str):
        if layer_type not in self.per_layer_type:
            raise ValueError(
                f"layer_type must be one of {', '.join(map(repr, self.layer_types))}, got {layer_type!r}"
            )
        return self.per_layer_type[layer_type](x, position_ids)
