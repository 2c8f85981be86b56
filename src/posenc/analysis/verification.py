"""The claims of the seeds, measured on any registered encoding: each a number, a threshold and a verdict.

``properties(encoding)`` returns one ``Property`` per claim of seed 004 (and seeds 000/002):
bounded values, unique codes, dot products that depend only on distance (and their closed form),
PE(pos + k) as a fixed linear map of PE(pos), relative position in the attention logits, decay
of similarity with distance, parameters as a function of L, d and h, and float error at
positions up to 2^21. A claim that does not concern an encoding, or needs a view it does not declare
(``views``: ``codes``, ``rotation_tables``, ``frequencies`` …), is returned with ``holds=None`` and the
reason it does not apply, so every encoding has the same rows. A claim whose measurement raises is
returned with the error (verdict ``error``, ``holds=False``): one failing hook never hides the others.
"""

from __future__ import annotations

import functools
import math

import torch

from posenc._memory import out_of_memory
from posenc._validation import check_positive_int
from posenc.analysis.dot_product import dot_by_distance
from posenc.analysis.float_error import precision
from posenc.analysis.property import Property, _at_most, _not_applicable, _worst, failed
from posenc.analysis.rotation import linear_map_residual, norm_change
from posenc.analysis.shift import logit_shift_change, position_sensitivity, probe_widths
from posenc.analysis.specimens import specimen
from posenc.encodings import PositionalEncoding, available, describe
from posenc.encodings.base import trainable_parameters
from posenc.encodings.views import along_line, view

#: Relative error accepted where a claim is an identity (float64 arithmetic throughout).
IDENTITY_TOLERANCE = 1e-9
#: Far-over-near similarity below which similarity is said to decay with distance.
DECAY_RATIO = 0.75
#: Roundings of its dtype by which a bias's largest |value| may move between T and 4T and still be
#: bounded: the same bounded function evaluated at other distances, not a growth (see ``_bias_bounded``).
BOUNDED_ROUNDINGS = 4
#: Property names, in the order ``properties`` returns them.
PROPERTY_NAMES = (
    "bounded",
    "unique",
    "translation_invariant",
    "closed_form",
    "linear_map",
    "relative",
    "decay",
    "parameters",
    "precision",
)


def _codes(encoding: PositionalEncoding, length: int) -> torch.Tensor | None:
    """The position codes ``[T, d]`` in float64 (what ``embed`` adds or concatenates), or None."""
    if "codes" not in encoding.views:
        return None
    with torch.no_grad():
        return view(encoding, "codes", along_line(encoding, torch.arange(length))).to(torch.float64)


def _rotary_codes(encoding: PositionalEncoding, length: int) -> torch.Tensor | None:
    """The rotation of each position as a code ``[T, r]``: (cos mθ_k, sin mθ_k) for every pair k, or None."""
    if "rotation_tables" not in encoding.views:
        return None
    return torch.cat(view(encoding, "rotation_tables", along_line(encoding, torch.arange(length))), dim=-1)


#: Why a bias claim has nothing to measure on a bias encoding that declares no ``bias`` view.
NO_BIAS = "it gives no bias view: its scores are not a bias of positions alone"


def _no_codes(encoding: PositionalEncoding) -> str:
    """Why a claim about position codes has nothing to measure on an encoding without a ``codes`` view."""
    if encoding.kind == "additive":
        return "it gives no codes view: the code embed joins is not exposed to measure"
    return "acts inside attention: see 'relative' for its shift test"


def _head_vectors(encoding: PositionalEncoding, *shape: int, ones: bool = False) -> torch.Tensor:
    """float64 heads ``[*shape, d_head]`` to probe ``rotate`` with (random, or ones), d_head the
    encoding's own or the probe's (:func:`posenc.analysis.shift.probe_widths`); as many heads as the
    encoding keeps, where it keeps a count (RoPE-Mixed turns each head by its own frequencies)."""
    width = probe_widths(encoding)["d_head"]
    if encoding.n_heads is not None and len(shape) >= 2:  # an encoding that turns each head its own way
        shape = (shape[0], encoding.n_heads, *shape[2:])
    if ones:
        return torch.ones(*shape, width, dtype=torch.float64)
    return torch.randn(*shape, width, generator=torch.Generator().manual_seed(1), dtype=torch.float64)


def _rotation_scale(encoding: PositionalEncoding) -> float:
    """‖rotate(x)‖ / ‖x‖ at position 0: the factor a rotation applies on top of turning (RoPE's
    attention factor; 1 for a plain rotation), read from the hook rather than from an attribute."""
    x = _head_vectors(encoding, 1, 1, 1)  # [1, 1, 1, d]
    origin = along_line(encoding, torch.arange(1))
    rotated, _ = encoding.rotate(x, x, origin, origin)
    return float(rotated.norm() / x.norm())


def _measured_length(encoding: PositionalEncoding, length: int) -> int:
    """Positions 0 … T−1 that a 1-D claim is measured over: ``length``, within the encoding's positions."""
    limit = encoding.position_space.limit
    return length if limit is None else min(length, limit)


def _bias_sides(encoding: PositionalEncoding, length: int) -> list[torch.Tensor] | None:
    """The bias of each head, in its own dtype, at distances 0 … length−1 from the query at length−1:
    ``[[h, T]]`` for keys before the query (j = i − d), and a second ``[h, T]`` for keys after it
    (j = i + d) when the encoding is ``two_sided``; None where it gives no bias view."""
    if "bias" not in encoding.views:
        return None
    line = functools.partial(along_line, encoding)
    keys = torch.arange(2 * length - 1 if encoding.capabilities.two_sided else length)  # the query in the middle
    with torch.no_grad():
        bias = encoding.bias(line(torch.tensor([length - 1])), line(keys))  # [h, 1, T or 2T − 1]
    before = bias[:, 0, :length].flip(-1)  # [h, T]: distance d at column d
    return [before] if keys.numel() == length else [before, bias[:, 0, length - 1 :]]


def _no_distance(encoding: PositionalEncoding) -> str | None:
    """Why 1-D distances mean nothing for the encoding's positions, or None when they do."""
    if encoding.position_space.axes == 1:
        return None
    return f"its positions index tokens on {encoding.position_space.axes} axes: i − j is no distance"


def _pairwise_min_distance(codes: torch.Tensor) -> float:
    """The smallest ‖c_i − c_j‖ over i ≠ j for codes ``[T, w]``."""
    distances = torch.cdist(codes, codes)  # [T, T]
    distances.fill_diagonal_(math.inf)
    return float(distances.min())


def _worst_of_sides(codes: torch.Tensor) -> float:
    """``_pairwise_min_distance`` of codes ``[T, w]``, or its smallest over sides for ``[sides, T, w]``
    (a bidirectional bias: distances before and after the query are told apart on each side; a
    symmetric bias gives d and −d the same value by design). NaN when a side is NaN."""
    if codes.dim() == 2:
        return _pairwise_min_distance(codes)
    values = [_pairwise_min_distance(side) for side in codes]
    return math.nan if any(math.isnan(v) for v in values) else min(values)


# --- the claims -------------------------------------------------------------------------------


def bounded(encoding: PositionalEncoding, length: int) -> Property:
    """Seed 004 property 1: codes stay in [−1, 1] (additive), rotations keep norms, biases stop growing.

    Biases: max |bias| within 4T over max |bias| within T (1 when bounded).
    """
    codes = _codes(encoding, length)
    if codes is not None:
        value = float(codes.abs().max())
        if "frequencies" in encoding.views:
            why = "the codes are sin and cos pairs: they lie in [−1, 1] at every position"
        elif trainable_parameters(encoding):
            why = "measured on the current codes: nothing bounds a learned table by construction"
        else:
            why = "measured on its codes along the diagonal (fixed: no learned table to drift)"
        return _at_most("bounded", value, 1.0, why, f"a code value reaches {value:.3g}; {why}")
    if encoding.kind == "rotary":
        change = norm_change(encoding, d_head=probe_widths(encoding)["d_head"], seq_len=length)
        return _at_most(
            "bounded",
            change,
            IDENTITY_TOLERANCE,
            "a rotation keeps ‖q‖ and ‖k‖: position cannot dominate the content",
            "q and k change norm with position (xPos scaling or an attention factor ≠ 1)",
        )
    if encoding.kind == "bias":
        return _bias_bounded(encoding, length)
    if encoding.kind == "additive":
        return _not_applicable("bounded", _no_codes(encoding))
    return _not_applicable("bounded", "no position code")


def _bias_bounded(encoding: PositionalEncoding, length: int) -> Property:
    """``bounded`` for a bias: the largest |bias| within 4T against that within T."""
    if (why := _no_distance(encoding)) or encoding.position_space.limit is not None:
        return _not_applicable(
            "bounded", why or f"its positions end at {encoding.position_space.limit}: nothing grows"
        )
    near, far = _bias_sides(encoding, length), _bias_sides(encoding, 4 * length)
    if near is None:
        return _not_applicable("bounded", NO_BIAS)
    dtype = near[0].dtype
    near, far = (float(torch.cat(sides, dim=-1).abs().max()) for sides in (near, far))
    return _at_most(
        "bounded",
        far / near if near else 1.0,
        1.0 + _rounding_tolerance(dtype),
        f"|bias| ≤ {near:.3g} within {4 * length} as within {length}: it stops growing with distance",
        f"|bias| grows with distance ({near:.3g} within {length}, {far:.3g} within {4 * length}: "
        f"×{far / near if near else 1.0:.3g} over 4× the distance)",
    )


def _rounding_tolerance(dtype: torch.dtype) -> float:
    """Relative change of a value that rounding in ``dtype`` explains: ``BOUNDED_ROUNDINGS`` float32
    roundings (5e-7) for a float32 bias, never below ``IDENTITY_TOLERANCE`` (float64). FIRE's float32
    bias lies in a bounded range by construction, yet its max moves by one rounding (1e-7) between
    T and 4T; a bias that grows, even as slowly as a log, moves by far more (Kerple: ×1.28)."""
    eps = torch.finfo(dtype).eps if dtype.is_floating_point else 0.0
    return max(IDENTITY_TOLERANCE, BOUNDED_ROUNDINGS * eps)


def _position_codes(encoding: PositionalEncoding, length: int) -> tuple[torch.Tensor | None, str]:
    """What tells positions apart, as rows ``[T, w]``, and what the rows are: codes, rotations, or the
    biases of each distance; None (and why) where the encoding gives no such view."""
    codes = _codes(encoding, length)
    if codes is not None:
        return codes, "position codes"
    if encoding.kind == "rotary":
        codes = _rotary_codes(encoding, length)
        why = "it gives no rotation_tables view: the rotation of each position is not exposed"
        return codes, ("rotations (cos, sin of every pair)" if codes is not None else why)
    if encoding.kind == "bias":
        sides = _bias_sides(encoding, _measured_length(encoding, length))
        what = "per-head biases of " + ("2-D offsets" if _no_distance(encoding) else "distances")
        if sides is None:
            return None, NO_BIAS
        if len(sides) == 2:
            what += " (keys before and after the query, each side on its own)"
        return torch.stack([side.T.to(torch.float64) for side in sides]), what  # [sides, T, h]
    if encoding.kind == "additive":
        return None, "it gives no codes view: the code of each position is not exposed"
    return None, "no position code: every position looks the same"


def unique(encoding: PositionalEncoding, length: int) -> Property:
    """Seed 004 property 2: the smallest distance between two codes of different positions (distances)."""
    codes, what = _position_codes(encoding, length)
    if codes is None:
        return _not_applicable("unique", what)
    value = _worst_of_sides(codes)
    limit = 1e-6
    holds = value > limit
    reason = (
        f"every two of the {codes.shape[-2]} {what} differ"
        if holds
        else f"two of the {codes.shape[-2]} {what} coincide"
        + (
            "; far distances share buckets: told apart only within the exact range"
            if encoding.kind == "bias"
            else ""
        )
    )
    return Property("unique", value, f"> {limit:g}", holds, reason)


def translation_invariant(encoding: PositionalEncoding, length: int) -> Property:
    """Seeds 000/002: PE[i]·PE[i+d] depends only on d (spread over i, relative to ‖PE‖²)."""
    codes = _codes(encoding, length)
    if codes is None:
        return _not_applicable("translation_invariant", _no_codes(encoding))
    dots = dot_by_distance(codes, range(length // 2))
    scale = float((codes * codes).sum(dim=-1).mean())
    spread = _worst(float(values.max() - values.min()) for values in dots.values()) / scale
    return _at_most(
        "translation_invariant",
        spread,
        IDENTITY_TOLERANCE,
        "Σ_k sin·sin + cos·cos = Σ_k cos(d·ω_k): each dot product is a function of the distance",
        "the dot product of two codes changes with where the pair starts, not only with their distance",
    )


def closed_form(encoding: PositionalEncoding, length: int) -> Property:
    """Seed 002: PE[i]·PE[i+d] equals the encoding's closed form (Σ_k cos(d·ω_k)), relative to ‖PE‖²."""
    codes = _codes(encoding, length)
    distances = torch.arange(length // 2)
    expected = None if codes is None else view(encoding, "closed_form_dot", distances)
    if expected is None:
        return _not_applicable("closed_form", "no closed form for the dot product of its codes")
    dots = dot_by_distance(codes, distances.tolist())
    scale = float((codes * codes).sum(dim=-1).mean())
    deviation = _worst(float((dots[d] - expected[d]).abs().max()) for d in distances.tolist()) / scale
    return _at_most(
        "closed_form",
        deviation,
        IDENTITY_TOLERANCE,
        "the measured dot products equal the closed form at every start and distance",
        "the measured dot products differ from the closed form",
    )


def linear_map(encoding: PositionalEncoding, length: int) -> Property:
    """Seed 004 property 3: PE(pos + k) = M_k·PE(pos) with M_k fixed (relative residual, k = 1, 7, T/2)."""
    offsets = (1, 7, length // 2)
    codes = _codes(encoding, length)
    if codes is not None and "shift_map" in encoding.views:
        residual = _worst(linear_map_residual(codes, k, view(encoding, "shift_map", k)) for k in offsets)
        why = "[sin, cos](a + b) is the rotation by b of [sin, cos](a): M_k is block-diagonal rotations"
    elif encoding.kind == "rotary":
        residual = _worst(_rotary_map_residual(encoding, length, k) for k in offsets)
        why = "R(m + k) = R(k)·R(m): rotating by the position composes"
    else:
        return _not_applicable(
            "linear_map", "no fixed map claimed: only codes of sin/cos pairs and rotations"
        )
    return _at_most(
        "linear_map", residual, IDENTITY_TOLERANCE, why, "no fixed M_k maps PE(pos) to PE(pos + k)"
    )


def _rotary_map_residual(encoding: PositionalEncoding, length: int, offset: int) -> float:
    """max |rot(x, m + k) − rot(rot(x, m), k) / a| / max |x| for one vector x at every m (a: the factor
    a rotation applies at position 0, ``_rotation_scale``)."""
    x = _head_vectors(encoding, 1, 1, 1)
    x = x.expand(1, x.shape[1], length, x.shape[-1])  # [1, h, T, d]
    line = functools.partial(along_line, encoding)
    positions, origin = torch.arange(length), line(torch.arange(1))
    rotated, _ = encoding.rotate(x, x[:, :, :1], line(positions), origin)
    shifted, _ = encoding.rotate(x, x[:, :, :1], line(positions + offset), origin)
    twice, _ = encoding.rotate(rotated, x[:, :, :1], line(torch.full((length,), offset)), origin)
    # rotating twice applies the attention factor twice (xPos scales from each call's centre: once)
    factor = _rotation_scale(encoding)
    return float((shifted - twice / factor).abs().max() / x.abs().max())


def relative(encoding: PositionalEncoding, length: int) -> Property:
    """Seed 004's "Relative Position" column, measured: attention logits after shifting every position.

    An encoding with ``contextual_positions`` (CoPE) counts its positions from the content and gets the
    category "contextual": the shift then measures whether the given positions are read at all, which
    says nothing of explicit, implicit or no relative position (:func:`_contextual`).
    """
    change = _worst(logit_shift_change(encoding, seq_len=min(length, 16)).values())
    if not math.isfinite(change):
        return _non_finite_logits(encoding, change)
    if encoding.capabilities.contextual_positions:
        return _contextual(change)
    sensitivity = position_sensitivity(encoding, seq_len=min(length, 16))
    holds = change <= IDENTITY_TOLERANCE
    if holds and sensitivity <= IDENTITY_TOLERANCE:
        category, reason = "none", "the logits do not see position at all (reordering changes nothing)"
    elif holds:
        category = "explicit"
        reason = "the logits depend on position, but only through i − j: a shift changes nothing"
    elif translation_invariant(encoding, length).holds:
        category = "implicit"
        reason = (
            "a shift changes the logits (content × position terms), but code dot products depend only "
            "on distance: relative position is there for a learned map to use"
        )
    else:
        category, reason = "no", "a shift changes the logits and the codes carry no relative structure"
    return Property(
        "relative", change, f"≤ {IDENTITY_TOLERANCE:.3g}", holds, f"{category}: {reason}", category
    )


def _non_finite_logits(encoding: PositionalEncoding, change: float) -> Property:
    """The relative claim failed because a shift gave NaN or infinite logits: nothing can be read
    from them, whatever the other shifts say (category "no", or "contextual" for CoPE-like counts)."""
    category = "contextual" if encoding.capabilities.contextual_positions else "no"
    reason = f"{category}: a shift of the positions gives logits that are NaN or infinite (change {change})"
    return Property("relative", change, f"≤ {IDENTITY_TOLERANCE:.3g}", False, reason, category)


def _contextual(change: float) -> Property:
    """The relative claim of an encoding that counts positions from the content: holds when shifting every
    given position leaves the logits unchanged (they are not read), category "contextual" either way."""
    holds = change <= IDENTITY_TOLERANCE
    if holds:
        reason = (
            "shifting every given position leaves the logits unchanged because the positions are made from "
            "the content (CoPE's counts of gated keys, FoX's forget gates, stick-breaking's order of the keys, "
            "PaTH's Householder transforms) and the causal mask; the given positions are not read. The "
            "relative position it uses is made of what lies between key and query, not i − j"
        )
    else:
        reason = (
            "the positions are counted from the content, yet shifting every given position changes the "
            "logits: the encoding also reads the positions it is given"
        )
    return Property(
        "relative", change, f"≤ {IDENTITY_TOLERANCE:.3g}", holds, f"contextual: {reason}", "contextual"
    )


def decay(encoding: PositionalEncoding, length: int) -> Property:
    """Similarity at distances T/2 … T−1 over similarity at 1 … T/16 (RoFormer §3.4.3 long-term decay)."""
    similarity = _similarity_by_distance(encoding, length)
    if similarity is None:
        return _not_applicable("decay", "no similarity of positions to measure")
    if isinstance(similarity, str):
        return _not_applicable("decay", similarity)
    near, far = _near_and_far(similarity.reshape(-1, length), length)
    ratio = far / near
    holds = bool(ratio <= DECAY_RATIO)  # False for a NaN
    reason = (
        f"similarity falls from {near:.3g} near to {far:.3g} far"
        if holds
        else f"similarity does not fall with distance ({near:.3g} near, {far:.3g} far)"
        + ("; a trained table may learn a decay" if encoding.kind in ("bias", "additive") else "")
    )
    return Property("decay", ratio, f"≤ {DECAY_RATIO}", holds, reason)


def _near_and_far(similarity: torch.Tensor, length: int) -> tuple[float, float]:
    """Mean |s| at distances 1 … T/16 and T/2 … T−1 of the row of ``similarity`` ``[rows, T]`` (one per
    side of the query) whose far over near is largest, NaN where a row has a NaN: every side must decay."""
    near = similarity[:, 1 : max(2, length // 16 + 1)].abs().mean(dim=-1)  # [rows]
    far = similarity[:, length // 2 :].abs().mean(dim=-1)
    ratios = far / near
    if ratios.isnan().any():
        return math.nan, math.nan
    worst = int(ratios.argmax())
    return float(near[worst]), float(far[worst])


def _similarity_by_distance(encoding: PositionalEncoding, length: int) -> torch.Tensor | str | None:
    """s(d) for d = 0 … T−1, ``[T]``: normalised code dot product, rotated-ones logit, or
    exp(bias(d) − bias(0)), the latter ``[2, T]`` for a bidirectional bias (keys before, after the query)."""
    codes = _codes(encoding, length)
    if codes is not None:
        dots = dot_by_distance(codes, range(length))
        return torch.stack([dots[d].mean() for d in range(length)]) / dots[0].mean()
    if encoding.kind == "rotary":
        ones = _head_vectors(encoding, 1, 1, length, ones=True)  # [1, 1, T, d]
        line = functools.partial(along_line, encoding)
        q, k = encoding.rotate(
            ones[:, :, :1], ones, line(torch.tensor([length - 1])), line(torch.arange(length))
        )
        logits = (q @ k.transpose(-1, -2))[0, 0, 0].flip(0)  # [T]: distance 0 … T−1
        return logits / logits[0]
    if why := _no_distance(encoding):
        return why
    if encoding.kind == "bias":
        sides = _bias_sides(encoding, length)  # [[h, T]] per side
        if sides is None:
            return NO_BIAS
        biases = torch.stack(sides).to(torch.float64)  # [sides, h, T]
        return (biases - biases[..., :1]).exp().mean(dim=1)  # [sides, T]
    if encoding.kind == "additive":
        return _no_codes(encoding)
    return None


def parameters(encoding: PositionalEncoding, length: int) -> Property:
    """Seed 004's "Parameters" column: the learned parameters of this instance, counted, against its formula.

    The count is taken from the module given (with its own table sizes: T5's buckets, Swin's window);
    the formula, evaluated at the instance's L, d and h (``count_parameters``), must give the same
    number. How the count grows with L, d and h is read from ``count_parameters`` at doubled sizes. An
    encoding that declares no ``parameter_formula`` has no claim to check: n/a, with the count.
    """
    counted = trainable_parameters(encoding)
    sizes = {"L": encoding.max_len or 0, "d": encoding.d_model or 0, "h": encoding.n_heads or 0}
    shown = ", ".join(f"{letter}={size}" for letter, size in sizes.items() if size) or "no sizes"
    counts = f"{counted:,} counted on this instance ({shown}); {_growth(encoding, sizes)}"
    declared = describe(encoding).parameter_formula
    if declared is None:
        return _not_applicable("parameters", f"it declares no parameter_formula to check: {counts}")
    formula = encoding.count_parameters(*sizes.values())
    if formula is None:
        return _not_applicable("parameters", f"{declared}: count_parameters cannot evaluate it; {counts}")
    reason = f"{declared}: {counts}"
    if counted != formula:
        reason += f"; differs from the formula, which gives {formula:,}"
    return Property("parameters", float(counted), "count = formula", counted == formula, reason)


def _growth(encoding: PositionalEncoding, sizes: dict[str, int]) -> str:
    """Which of L, d and h the parameter count grows with, by ``count_parameters`` at each doubled."""
    at = encoding.count_parameters(*sizes.values())
    doubled = {
        letter: encoding.count_parameters(
            *(2 * size if other == letter else size for other, size in sizes.items())
        )
        for letter in sizes
    }
    if at is None or None in doubled.values():
        unknown = ", ".join(letter for letter, count in doubled.items() if count is None) or "L, d and h"
        return f"growth with {unknown} unknown: count_parameters cannot evaluate it there"
    grows = [letter for letter, count in doubled.items() if count != at]
    return f"grows with {', '.join(grows)}" if grows else "independent of L, d and h"


CLAIMS = {
    "bounded": bounded,
    "unique": unique,
    "translation_invariant": translation_invariant,
    "closed_form": closed_form,
    "linear_map": linear_map,
    "relative": relative,
    "decay": decay,
    "parameters": parameters,
    "precision": precision,
}


def properties(encoding: PositionalEncoding, *, length: int = 256) -> dict[str, Property]:
    """Every claim of ``PROPERTY_NAMES`` measured on ``encoding`` over positions 0 … length−1.

    Learned tables are measured over min(length, max_len) positions. A claim whose measurement raises
    (a hook of the encoding failing) is returned as ``failed``: verdict ``error``, the exception in its
    reason; the other claims are measured all the same. Returns ``{name: Property}``.

    Raises:
        ValueError: a ``length`` below 32.
        MemoryError, RuntimeError: an allocation failed (``out_of_memory``), which no claim records.
    """
    length = _measured_length(encoding, _check_length(length))
    with torch.no_grad():
        return {name: _measure(name, encoding, length) for name in PROPERTY_NAMES}


def _check_length(length: int) -> int:
    length = check_positive_int("length", length)
    if length < 32:
        raise ValueError(f"length must be at least 32 to measure decay and linear maps, got {length}")
    return length


def _measure(name: str, encoding: PositionalEncoding, length: int) -> Property:
    """One claim, or the error its measurement raised."""
    try:
        return CLAIMS[name](encoding, length)
    except Exception as error:  # an encoding's own hook may raise anything; it is shown, not hidden
        if out_of_memory(error):
            raise
        return failed(name, error)


def properties_by_name(
    names: list[str] | None = None, *, length: int = 256
) -> dict[str, dict[str, Property]]:
    """``{name: properties(specimen(name))}`` for the registered ``names`` (default: every one).

    An encoding whose specimen cannot be built, or whose views raise, gets its claims as ``failed``
    (verdict ``error``) while every other encoding is measured all the same.

    Raises:
        ValueError: a ``length`` below 32.
        MemoryError, RuntimeError: an allocation failed (``out_of_memory``): the length, not an encoding.
    """
    length = _check_length(length)
    return {name: _properties_of(name, length) for name in (names or available())}


def _properties_of(name: str, length: int) -> dict[str, Property]:
    try:
        return properties(specimen(name), length=length)
    except Exception as error:  # building the specimen (or reading its position_limit) raised
        if out_of_memory(error):
            raise
        return {claim: failed(claim, error) for claim in PROPERTY_NAMES}
