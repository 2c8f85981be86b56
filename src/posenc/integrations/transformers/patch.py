"""``use_posenc_rope``: find a model's rotary modules, check posenc reproduces each one, then swap them."""

from __future__ import annotations

import copy
import inspect

import torch
from torch import nn

from posenc.functional.coordinates import from_mrope_layout
from posenc.functional.rope import (
    SECTION_LAYOUTS,
)
from posenc.integrations.transformers.rotary import (
    OUTPUT_FORMATS,
    PosencLayerTypeRotaryEmbedding,
    PosencRotaryEmbedding,
    layer_config,
    mrope_sections,
    rope_parameters,
)

#: Probe tolerance on cos/sin, relative to the attention factor: float32 rounding of values near 1.
_ATOL = 2e-6
#: ... plus this much of the angle |pos·θ|: transformers rounds θ and the float32 product pos·θ (a few
#: 2^-24 each); 2^-19 leaves a margin and still catches any frequency that is not the same one.
_ANGLE_RTOL = 2.0**-19
#: bfloat16 outputs: one rounding of bfloat16 (8 significant bits) either side.
_BFLOAT16_ATOL = 2.0**-7


def use_posenc_rope(model: nn.Module) -> nn.Module:
    """Replace the rotary embedding modules of a transformers model in place, or refuse before changing it.

    A rotary module is one whose class name ends in ``RotaryEmbedding`` and whose forward takes
    ``(x, position_ids)`` (``model.model.rotary_emb`` in Llama), or ``(x, position_ids, layer_type)``
    (rope_parameters nested per layer type: Gemma 3 and 4, …). Each is replaced by a
    :class:`PosencRotaryEmbedding` (one per layer type inside a :class:`PosencLayerTypeRotaryEmbedding`)
    in the output format that the module returns ("half", "interleaved", "half_width" or "complex",
    and for M-RoPE the section layout, read from the module itself), after checking that the
    replacement reproduces a float32 copy of the module, rebuilt from its config, on probe positions:
    rows that start at different positions, a decoding step, positions past the scaling's original
    length, a bfloat16 input and ``[3, b, s]`` multi-axis position ids. Every output must match in
    structure, shape and dtype, and in value within float32 rounding. Nothing is changed on the model
    unless every rotary module passes. Rotary modules whose forward takes something else (vision
    towers' patch grids) are left as they are. Supported and refused families: see
    :mod:`posenc.integrations.transformers`.

    Returns:
        the model.

    Raises:
        TypeError: model is not a transformers ``PreTrainedModel``.
        ValueError: the model is refused; the message names ``config.model_type``, the module and the
            reason (no rotary module; an unsupported rope_type; a forward with other arguments than
            ``(x, position_ids[, layer_type])``; a rotated width other than the config's; an output that
            posenc does not reproduce on a probe).
    """
    from transformers import PreTrainedModel

    if not isinstance(model, PreTrainedModel):
        raise TypeError(f"model must be a transformers PreTrainedModel, got {type(model).__name__}")
    model_type = getattr(model.config, "model_type", None) or type(model).__name__
    rotary = _rotary_modules(model)
    if not rotary and any(isinstance(m, _POSENC_MODULES) for m in model.modules()):
        return model  # patched already
    if not rotary:
        tables = sorted(
            {
                type(m).__name__
                for m in model.modules()
                if isinstance(getattr(m, "embed_positions", None), torch.Tensor)
            }
        )
        table = (
            f"; its RoPE is a sin/cos table precomputed in each {', '.join(tables)} (embed_positions), "
            "not a module posenc can replace"
            if tables
            else ""
        )
        raise ValueError(
            f"{model_type}: no rotary embedding module to replace in {type(model).__name__} "
            f"(none whose class name ends in RotaryEmbedding and whose forward takes (x, position_ids)){table}"
        )
    replacements, refusals = {}, []
    for name, module in rotary:
        try:
            replacements[id(module)] = _checked_replacement(module)
        except ValueError as error:
            refusals.append(f"{name} ({type(module).__name__}): {error}")
    if refusals:
        raise ValueError(f"{model_type}: refused, the model is unchanged: " + "; ".join(refusals))
    # every parent that holds a rotary module gets the replacement, shared ones included
    for _, parent in list(model.named_modules(remove_duplicate=False)):
        for child_name, child in list(parent.named_children()):
            if id(child) in replacements:
                setattr(parent, child_name, replacements[id(child)])
    return model


#: posenc's replacements (skipped when looking for modules to replace).
_POSENC_MODULES = (PosencRotaryEmbedding, PosencLayerTypeRotaryEmbedding)


def _rotary_modules(model: nn.Module) -> list[tuple[str, nn.Module]]:
    """The ``*RotaryEmbedding`` modules whose forward's second argument is ``position_ids`` (posenc's own
    excepted: rebuilding one from its config would lose the output format it was given)."""
    found = []
    for name, module in model.named_modules():
        if isinstance(module, _POSENC_MODULES) or not type(module).__name__.endswith("RotaryEmbedding"):
            continue
        arguments = _forward_arguments(module)
        if len(arguments) >= 2 and arguments[1] == "position_ids":
            found.append((name, module))
    return found


def _forward_arguments(module: nn.Module) -> list[str]:
    """Names of the forward's arguments (decorators unwrapped; ``*args`` as ``*``)."""
    parameters = inspect.signature(type(module).forward).parameters.values()
    names = [p.name if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) else "*" for p in parameters]
    return names[1:]  # without self


def _checked_replacement(module: nn.Module) -> nn.Module:
    """The replacement for `module`, or ValueError saying why posenc does not reproduce it."""
    arguments = _forward_arguments(module)
    if arguments[2:] not in ([], ["layer_type"]):
        raise ValueError(
            f"its forward takes ({', '.join(arguments)}), other arguments than (x, position_ids) or "
            "(x, position_ids, layer_type)"
        )
    config = getattr(module, "config", None)
    if config is None:
        raise ValueError("it holds no config to read its RoPE parameters from")
    if not arguments[2:]:
        return _checked_spectrum(module, config, None)
    per_layer_type = {}
    for layer_type in _layer_types(module, config):
        try:
            per_layer_type[layer_type] = _checked_spectrum(module, config, layer_type)
        except ValueError as error:
            raise ValueError(f"layer type {layer_type!r}: {error}") from None
    return PosencLayerTypeRotaryEmbedding(config, per_layer_type)


def _layer_types(module: nn.Module, config) -> list[str]:
    """The layer types a per-layer-type rotary module computes: the keys of its ``rope_type`` dict, else
    the config's layer types that have RoPE parameters."""
    own = getattr(module, "rope_type", None)
    if isinstance(own, dict) and own:
        return sorted(own)
    nested = getattr(config, "rope_parameters", None) or {}
    types = sorted(set(getattr(config, "layer_types", None) or nested))
    found = [t for t in types if isinstance(nested.get(t), dict)]
    if not found:
        raise ValueError(
            "its forward takes a layer_type, but the config names no layer type with RoPE parameters"
        )
    return found


def _candidates(config, layer_type: str | None, module: nn.Module) -> dict[str, dict]:
    """name -> constructor arguments of each replacement to probe: every output format, and for
    M-RoPE every section layout (the sections the config gives, else the module's own default)."""
    formats = {name: {"output_format": name} for name in OUTPUT_FORMATS}
    sections = {}
    if mrope_sections(config, layer_type) is None:
        own = getattr(module, "mrope_section", None)
        if isinstance(own, dict):
            own = own.get(layer_type)
        if own is None:
            return formats
        sections = {"sections": tuple(own)}
    return {
        f"{name} with {layout} sections": {**arguments, **sections, "section_layout": layout}
        for name, arguments in formats.items()
        for layout in SECTION_LAYOUTS
    }


def _checked_spectrum(module: nn.Module, config, layer_type: str | None) -> PosencRotaryEmbedding:
    """The replacement of one spectrum of `module` (its only one, or that of `layer_type`), or ValueError."""
    try:
        arguments = _candidates(config, layer_type, module)
        candidates, unbuilt = {}, []
        for name, kwargs in arguments.items():
            try:
                candidates[name] = PosencRotaryEmbedding(config, layer_type=layer_type, **kwargs)
            except ValueError as error:  # a layout these parameters cannot have (interleaved sections)
                unbuilt.append(error)
    except (AttributeError, KeyError, TypeError) as error:
        raise ValueError(f"its config cannot be translated ({type(error).__name__}: {error})") from None
    if not candidates:
        raise unbuilt[0]
    prefix = "" if layer_type is None else f"{layer_type}_"
    width = getattr(module, f"{prefix}inv_freq", None)
    first = next(iter(candidates.values()))
    rotary_dim = first.rotary_dim
    axial = first.rope_type == "axial"  # its inv_freq holds one axis's frequencies, shared by both
    if isinstance(width, torch.Tensor) and not axial and 2 * width.numel() != rotary_dim:
        raise ValueError(
            f"transformers rotates {2 * width.numel()} channels but the config gives rotary_dim {rotary_dim}"
        )
    reference = _reference_copy(module)  # one per spectrum: each probe sequence starts from a fresh state
    _check_built_from_config(module, reference, layer_type)
    if first.scaling == "dynamic":
        _check_dynamic_state(module, reference, first, prefix)
    name, output_dtype = _probe(reference, candidates, config, layer_type)
    cached = getattr(module, f"{prefix}max_seq_len_cached", getattr(module, "max_seq_len_cached", None))
    return PosencRotaryEmbedding(
        config,
        output_dtype=output_dtype,
        max_seq_len_cached=cached,
        layer_type=layer_type,
        **arguments[name],
    )


def _reference_copy(module: nn.Module) -> nn.Module:
    """A float32 CPU copy of the module to probe: rebuilt from its config (so a model cast to bfloat16 is
    compared with the frequencies it was built with), else a deep copy. The model itself is not touched."""
    try:
        with torch.device("cpu"):
            reference = type(module)(module.config)
    except Exception:  # a constructor that takes more than the config
        try:
            reference = copy.deepcopy(module).to("cpu")
        except Exception as error:  # meta tensors, modules that cannot be copied
            raise ValueError(
                f"it cannot be copied to compare with ({type(error).__name__}: {error})"
            ) from None
    return reference.float().eval()


#: rope types whose modules overwrite inv_freq on each call (from original_inv_freq and the length).
_FREQUENCIES_PER_CALL = ("dynamic", "longrope")


def _check_built_from_config(module: nn.Module, reference: nn.Module, layer_type: str | None = None) -> None:
    """ValueError unless the module still computes what its config says: the probes run on the rebuilt
    copy, so frequencies or an attention factor changed after construction must not go unseen. Its
    frequencies may be rounded to its own dtype (a model cast to bfloat16), which is what posenc undoes."""
    prefix = "" if layer_type is None else f"{layer_type}_"
    scaling = f"{prefix}attention_scaling"
    if getattr(module, scaling, None) != getattr(reference, scaling, None):
        raise ValueError(
            f"its {scaling} {getattr(module, scaling, None)!r} is not the "
            f"{getattr(reference, scaling, None)!r} its config gives"
        )
    rope_type = getattr(module, "rope_type", None)
    if isinstance(rope_type, dict):
        rope_type = rope_type.get(layer_type)
    # dynamic NTK and LongRoPE overwrite inv_freq per call and keep the config's in original_inv_freq;
    # every other type must still hold the config's in both
    keys = [f"{prefix}original_inv_freq"]
    if rope_type not in _FREQUENCIES_PER_CALL:
        keys.append(f"{prefix}inv_freq")
    for key in keys:
        own, built = getattr(module, key, None), getattr(reference, key, None)
        if not isinstance(own, torch.Tensor) or not isinstance(built, torch.Tensor) or own.is_meta:
            continue  # nothing to compare (the probes still compare what the module returns)
        rounding = torch.finfo(own.dtype).eps if own.is_floating_point() else 0.0
        if own.shape != built.shape or not torch.allclose(
            own.detach().cpu().double(), built.double(), rtol=max(rounding, 2e-7), atol=0.0
        ):
            raise ValueError(f"its {key} is not the one its config gives (changed after it was built)")


def _check_dynamic_state(module: nn.Module, reference: nn.Module, posenc_rope, prefix: str) -> None:
    """ValueError unless a dynamic-NTK module holds what its config gives at its own state: its original
    length the config's (a max_position_embeddings changed after it was built would move where posenc
    starts to scale), and its inv_freq the config's frequencies at its ``max_seq_len_cached`` (it keeps
    a replaced inv_freq until a call grows past that length, so the replacement would be used)."""

    def attribute(module_: nn.Module, name: str):
        return getattr(module_, f"{prefix}{name}", getattr(module_, name, None))

    own_original, built_original = (
        attribute(module, "original_max_seq_len"),
        attribute(reference, "original_max_seq_len"),
    )
    if own_original is not None and built_original is not None and own_original != built_original:
        raise ValueError(
            f"its original_max_seq_len {own_original} is not the {built_original} its config gives "
            "(max_position_embeddings changed after it was built)"
        )
    own, cached = attribute(module, "inv_freq"), attribute(module, "max_seq_len_cached")
    if (
        not isinstance(own, torch.Tensor)
        or own.is_meta
        or not isinstance(cached, int)
        or built_original is None
    ):
        return  # nothing to compare (the probes still compare what the module returns)
    expected, _ = posenc_rope._inv_freq(max(cached, built_original))  # [r/2] float64
    rounding = torch.finfo(own.dtype).eps if own.is_floating_point() else 0.0
    if own.shape != expected.shape or not torch.allclose(
        own.detach().cpu().double(), expected, rtol=max(2 * rounding, 2e-7), atol=0.0
    ):
        raise ValueError(
            f"its inv_freq is not the one its config gives at its max_seq_len_cached {cached} "
            "(changed after it was built)"
        )


def _probes(config, layer_type: str | None = None) -> list[tuple[str, torch.dtype, torch.Tensor, bool]]:
    """``(what, x dtype, position_ids, required)`` in call order; the order exercises dynamic NTK's state
    (grow past the original length, stay grown, reset). ``required``: the module must accept it."""
    parameters = rope_parameters(layer_config(config, layer_type), layer_type)
    if parameters["rope_type"] == "axial":
        return _axial_probes()
    lengths = (
        getattr(config, "max_position_embeddings", None),
        parameters.get("original_max_position_embeddings"),
    )
    # past the longest original length, within float32's exact integers
    length = min(max((n for n in lengths if isinstance(n, int) and n > 0), default=64), 2**22)
    row = torch.arange(16)
    batch = torch.stack((row, row + 37))  # [2, 16], rows starting at different positions (left padding)
    long = torch.tensor([[0, 1, 2, 3, 5, 8, 13, length - 1, length, length + 1, 2 * length + 1]])  # [1, 11]
    multi_axis = torch.stack((batch, batch + 7, batch + 19))  # [3, 2, 16]
    return [
        ("position ids [[0..15], [37..52]]", torch.float32, batch, True),
        (f"positions up to 2·{length}+1", torch.float32, long, True),
        (f"positions up to {length}+3", torch.float32, torch.tensor([[0, 1, 2, length + 3]]), True),
        ("position ids [[0..15], [37..52]] again", torch.float32, batch, True),
        ("a decoding step [[53], [20]]", torch.float32, torch.tensor([[53], [20]]), True),
        ("bfloat16 input", torch.bfloat16, batch, True),
        ("multi-axis position ids [3, b, s] (M-RoPE)", torch.float32, multi_axis, False),
    ]


def _axial_probes() -> list[tuple[str, torch.dtype, torch.Tensor, bool]]:
    """Probes of a vision tower's axial RoPE: (row, column) coordinates ``[n, 2]`` of patches."""
    side = torch.arange(4)
    grid = torch.stack(torch.meshgrid(side, side, indexing="ij"), dim=-1).reshape(-1, 2)  # [16, 2]
    far = torch.tensor([[0, 0], [1, 3], [1000, 7], [5, 4095], [4095, 4095]])  # [5, 2]
    return [
        ("coordinates of a 4×4 patch grid [16, 2]", torch.float32, grid, True),
        ("coordinates up to 4095 [5, 2]", torch.float32, far, True),
        ("the grid moved by (9, 2)", torch.float32, grid + torch.tensor([9, 2]), True),
        ("bfloat16 input", torch.bfloat16, grid, True),
    ]


def _call(module: nn.Module, dtype: torch.dtype, position_ids: torch.Tensor, layer_type: str | None = None):
    x = torch.zeros(*position_ids.shape[-2:], 8, dtype=dtype)  # [b, s, 8]: only dtype and device are read
    return module(x, position_ids) if layer_type is None else module(x, position_ids, layer_type)


def _probe(
    reference: nn.Module,
    candidates: dict[str, PosencRotaryEmbedding],
    config,
    layer_type: str | None = None,
) -> tuple[str, torch.dtype | None]:
    """The name of the first candidate that reproduces `reference` on every probe, and the output dtype
    it needs (None: x's), or ValueError: why the closest one does not (the first probe: every
    candidate's miss)."""
    outputs = []  # (what, dtype, position_ids, reference output), the reference called once, in order
    for what, dtype, position_ids, required in _probes(config, layer_type):
        try:
            outputs.append(
                (what, dtype, position_ids, _run_reference(reference, what, dtype, position_ids, layer_type))
            )
        except ValueError:
            if required:
                raise
            # the module cannot be called this way, so the model does not call it so
    what, dtype, position_ids, theirs = outputs[0]
    first_misses, later_miss = {}, None
    for name, ours in candidates.items():
        miss = _mismatch(theirs, _call(ours, dtype, position_ids), ours, position_ids)
        if miss is not None:
            first_misses[name] = miss
            continue
        miss = _later_mismatch(name, ours, outputs[1:])
        if miss is None:
            return name, ours.output_dtype
        later_miss = later_miss or miss
    if later_miss is not None:
        raise ValueError(later_miss)
    raise ValueError(
        f"on {what} it returns {_describe(theirs)}, which no posenc output format reproduces ("
        + "; ".join(f"{name}: {miss}" for name, miss in first_misses.items())
        + ")"
    )


def _later_mismatch(name: str, ours: PosencRotaryEmbedding, outputs: list) -> str | None:
    """None when `ours` reproduces every later probe's output, else why not (the first that it misses)."""
    for what, dtype, position_ids, theirs in outputs:
        if dtype != torch.float32 and _all_float32(theirs):
            ours.output_dtype = torch.float32  # cos/sin kept in float32 whatever x is (OLMo, Ernie 4.5)
        try:
            output = _call(ours, dtype, position_ids)
        except Exception as error:
            return f"on {what} it returns {_describe(theirs)}; posenc fails ({type(error).__name__}: {error})"
        miss = _mismatch(theirs, output, ours, position_ids)
        if miss is not None:
            return f"on {what} it returns {_describe(theirs)}; posenc's {name!r} output does not reproduce it: {miss}"
    return None


def _all_float32(output) -> bool:
    parts = list(output) if isinstance(output, tuple | list) else [output]
    return all(isinstance(part, torch.Tensor) and part.dtype == torch.float32 for part in parts)


def _run_reference(
    reference: nn.Module,
    what: str,
    dtype: torch.dtype,
    position_ids: torch.Tensor,
    layer_type: str | None = None,
):
    try:
        return _call(reference, dtype, position_ids, layer_type)
    except Exception as error:
        raise ValueError(f"its forward fails on {what} ({type(error).__name__}: {error})") from None


def _describe(output) -> str:
    if isinstance(output, torch.Tensor):
        return f"a {str(output.dtype).removeprefix('torch.')} tensor {list(output.shape)}"
    if isinstance(output, tuple | list):
        return f"a {type(output).__name__} of ({', '.join(_describe(part) for part in output)})"
    return f"a {type(output).__name__}"


def _mismatch(theirs, ours, candidate: PosencRotaryEmbedding, position_ids: torch.Tensor) -> str | None:
    """None when `ours` reproduces `theirs` (structure, shapes, dtypes, values), else how it does not."""
    their_parts = list(theirs) if isinstance(theirs, tuple | list) else [theirs]
    our_parts = list(ours) if isinstance(ours, tuple | list) else [ours]
    if type(theirs) is not type(ours) or len(their_parts) != len(our_parts):
        return f"returns {_describe(ours)}"
    # the angle |pos·θ| of every output value, laid out as the output: the float32 error grows with it
    if candidate.rope_type == "axial":  # coordinates [n, 2]: pair k at the coordinate of its axis
        angle = position_ids[..., candidate.frequency_axis].abs().double() * candidate.inv_freq
    elif candidate.frequency_axis is not None:  # M-RoPE: pair k at the coordinate of its axis
        axes = len(candidate.sections)
        coordinates = (
            position_ids if position_ids.dim() == 3 else position_ids.expand(axes, *position_ids.shape)
        )
        per_pair = from_mrope_layout(coordinates)[..., candidate.frequency_axis]  # [b, s, r/2]
        angle = per_pair.abs().double() * candidate.inv_freq
    else:
        angle = position_ids.abs().double()[..., None] * candidate.inv_freq  # [..., r/2]
    angles = OUTPUT_FORMATS[candidate.output_format](angle, angle)
    angle_parts = list(angles) if isinstance(angles, tuple | list) else [angles]
    scale = max(1.0, abs(candidate.attention_scaling))
    for their, our, angle in zip(their_parts, our_parts, angle_parts, strict=True):
        if not isinstance(their, torch.Tensor) or their.shape != our.shape or their.dtype != our.dtype:
            return f"returns {_describe(ours)}"
        if their.is_complex():
            their, our, angle = torch.view_as_real(their), torch.view_as_real(our), angle.real[..., None]
        atol = _BFLOAT16_ATOL if their.dtype == torch.bfloat16 else _ATOL
        error = (their.double() - our.double()).abs()
        if not (error <= scale * (atol + _ANGLE_RTOL * angle)).all():
            return f"values differ by up to {float(error.max()):.3g}"
    return None
