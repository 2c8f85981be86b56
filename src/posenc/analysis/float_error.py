"""The precision claim: float error of an encoding's tables, codes or bias at positions up to 2^21,
against an exact float64 reference (the DESIGN precision goal)."""

from __future__ import annotations

import torch

from posenc.analysis.precision import RECIPES
from posenc.analysis.property import Property, _at_most, _not_applicable, _worst
from posenc.encodings import PositionalEncoding
from posenc.encodings.views import along_line, frequency_pieces, view
from posenc.encodings.views import frequencies as frequencies_of
from posenc.functional.angles import exact_cos_sin, split_frequencies

#: Largest position (exclusive) of the precision check, the DESIGN precision goal.
PRECISION_POSITIONS = 2**21
#: Magnitude below which a value of a [−1, 1] table is judged by the ulp at 1/64 (see ``_ulps``).
TABLE_FLOOR = 2.0**-6
#: Positions (exclusive) that RoPE and the sinusoidal code serve from a float64 cache: the precision
#: check reads them in a call of their own, as ordinary calls do, and the far ones in another.
CACHED_POSITIONS = 2**16


def _ulps(
    approx: torch.Tensor, exact: torch.Tensor, dtype: torch.dtype, floor: float | torch.Tensor = 0.0
) -> float:
    """max |approx − exact| in units of the last place of ``dtype`` at each exact value (NaN if any is NaN).

    ``floor``: the smallest magnitude whose ulp is used (a number, or a tensor that broadcasts against
    ``exact``), so that values near 0 of a table in [−a, a] are judged on the table's scale rather
    than on their own (tiny) ulp.
    """
    info = torch.finfo(dtype)
    floor = torch.as_tensor(floor, dtype=torch.float64).clamp_min(info.tiny)
    magnitude = torch.maximum(exact.abs(), floor)
    ulp = torch.exp2(torch.floor(torch.log2(magnitude))) * info.eps  # spacing of dtype at each value
    return float(((approx.to(torch.float64) - exact).abs() / ulp).max())


def _precision_positions() -> torch.Tensor:
    """0 … 1023, every power of two ± 1 up to 2^21, and 1024 random positions below 2^21."""
    edges = [p + e for k in range(10, 22) for p in (2**k,) for e in (-1, 0, 1) if p + e < PRECISION_POSITIONS]
    generator = torch.Generator().manual_seed(0)
    random = torch.randint(0, PRECISION_POSITIONS, (1024,), generator=generator)
    return torch.cat((torch.arange(1024), torch.tensor(edges), random)).unique()


def _calls(positions: torch.Tensor) -> list[torch.Tensor]:
    """Sorted ``positions`` ``[n]`` split as ordinary calls meet them: those below ``CACHED_POSITIONS`` in
    a call of their own (RoPE and the sinusoidal code read them from a float64 cache), the far ones in
    another (a call reaching 2^16 computes every position directly, so one call would measure only
    that path). Concatenated, the parts are ``positions`` in order."""
    cached = positions < CACHED_POSITIONS
    return [part for part in (positions[cached], positions[~cached]) if part.numel()]


def precision(encoding: PositionalEncoding, length: int) -> Property:
    """float32 output against exact float64 at positions up to 2^21, in float32 ulps (≤ 1: one rounding).

    Codes of sin/cos pairs and rotation tables (values in [−1, 1]) are judged by the ulp at each value,
    but not below the ulp at 1/64; bias values by the ulp at each value.
    """
    limit = encoding.position_space.limit
    if limit is not None and limit < PRECISION_POSITIONS:
        return _not_applicable(
            "precision", f"it holds positions 0 … {limit - 1} only: positions up to 2^21 are refused"
        )
    positions, views = _precision_positions(), encoding.views
    if "codes" in views:
        return _code_precision(encoding, positions)
    if "rotation_tables" in views:
        return _rotation_precision(encoding, positions)
    if "distance_bias" in views:
        return _bias_precision(encoding, positions)
    return _not_applicable("precision", _no_arithmetic(encoding))


def _no_arithmetic(encoding: PositionalEncoding) -> str:
    """Why the precision claim has no table to compare with exact values."""
    view = {"additive": "codes", "rotary": "rotation_tables", "bias": "distance_bias"}.get(encoding.kind)
    if view is None:
        return "no position arithmetic"
    return f"it gives no {view} view: no table to compare with float64"


def _code_precision(encoding: PositionalEncoding, positions: torch.Tensor) -> Property:
    """The float32 codes ``embed`` adds against the exact sin/cos of the encoding's frequencies."""
    if "frequencies" not in encoding.views:
        return _not_applicable("precision", "no exact reference for its codes (they are not sin/cos pairs)")
    cos, sin = exact_cos_sin(positions, frequency_pieces(encoding))  # [n, d/2] float64
    exact = torch.stack((sin, cos), dim=-1).flatten(-2)  # [n, d]: sin at 2k, cos at 2k+1
    approx = torch.cat(
        [
            encoding.embed(torch.zeros(1, part.numel(), exact.shape[-1]), along_line(encoding, part))[0]
            for part in _calls(positions)
        ]
    )  # [n, d']
    value = _ulps(approx[..., -exact.shape[-1] :], exact, torch.float32, TABLE_FLOOR)
    return _at_most(
        "precision",
        value,
        1.0,
        "angles reduced exactly from integer positions, rounded once to float32",
        "the float32 code is more than one rounding away from the exact sin/cos of its frequencies",
    )


def _rotation_precision(encoding: PositionalEncoding, positions: torch.Tensor) -> Property:
    """The rotation's cos/sin tables in float32 against the exact ones, beside the float32-angle recipe."""
    if "frequencies" not in encoding.views:
        return _not_applicable("precision", "no fixed frequencies: they follow the length (dynamic NTK)")
    frequencies = frequencies_of(encoding)
    exact = torch.cat(exact_cos_sin(positions, split_frequencies(frequencies)), dim=-1)  # [n, r] float64
    scale = _rotation_factor(encoding)  # [1, r]
    posenc = torch.cat([_rotation_table(encoding, part) for part in _calls(positions)])  # [n, r]
    ulps = {  # the table against a·exact (a exact in float64): only the table's own float32 rounding
        "posenc": _ulps(posenc.to(torch.float32), exact * scale, torch.float32, TABLE_FLOOR * scale),
        "float32": _ulps(
            torch.cat(RECIPES["float32"](positions, frequencies), dim=-1), exact, torch.float32, TABLE_FLOOR
        ),
    }
    return _at_most(
        "precision",
        ulps["posenc"],
        1.0,
        f"cos/sin within one float32 rounding of exact (the float32-angle recipe: {ulps['float32']:.3g} ulps)",
        f"cos/sin {ulps['posenc']:.3g} ulps from exact (float32-angle recipe: {ulps['float32']:.3g} ulps)",
    )


def _rotation_factor(encoding: PositionalEncoding) -> torch.Tensor:
    """The factor a of each pair, ``[1, r]`` float64: hypot(a·cos 0, a·sin 0) = a, exact in float64
    (RoPE's YaRN attention factor; 1 for a plain rotation)."""
    cos, sin = view(
        encoding, "rotation_tables", along_line(encoding, torch.zeros(1, dtype=torch.int64))
    )  # [1, r/2]
    return torch.hypot(cos, sin).repeat(1, 2).to(torch.float64)


def _rotation_table(encoding: PositionalEncoding, positions: torch.Tensor) -> torch.Tensor:
    """The (a·cos, a·sin) table of one call at ``positions`` ``[n]``, as a code ``[n, r]`` float64."""
    return torch.cat(view(encoding, "rotation_tables", along_line(encoding, positions)), dim=-1).to(
        torch.float64
    )


def _bias_precision(encoding: PositionalEncoding, positions: torch.Tensor) -> Property:
    """The materialised bias at far distances against the float64 per-distance bias: keys before the
    query, and, for a ``two_sided`` encoding, keys after it (query − key distances −positions)."""
    query = torch.tensor([PRECISION_POSITIONS - 1])
    approx = encoding.bias(query, PRECISION_POSITIONS - 1 - positions)[:, 0]  # [h, n]: distances = positions
    value = _ulps(approx, view(encoding, "distance_bias", positions).detach().to(torch.float64), approx.dtype)
    if encoding.capabilities.two_sided:
        after = encoding.bias(torch.tensor([0]), positions)[:, 0]  # [h, n]: distances = −positions
        exact = view(encoding, "distance_bias", -positions).detach().to(torch.float64)
        value = _worst((value, _ulps(after, exact, after.dtype)))
    return _at_most(
        "precision",
        value,
        1.0,
        "the bias at any distance is one rounding of the float64 value",
        "the bias is more than one rounding away from float64 at long distances",
    )
