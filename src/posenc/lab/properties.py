"""Properties of an encoding measured from its modules: learned parameters and relative position.

Parameters are counted from the module (``numel`` of its parameters), at the training length L
and at 2L, so "grows with L" is measured rather than read from a formula.

Relative position is a shift test through the encoding's own hooks, in float64:

- rotary: max |q'·k' at positions + Δ − q'·k' at positions| over random q, k
  (``posenc.analysis.relative_logit_deviation``);
- bias: max |bias(i + Δ, j + Δ) − bias(i, j)|;
- additive: the same logit test on random embeddings joined to the codes through a fixed random
  q/k projection, and whether the codes at p + k are one linear map of the codes at p: the map is
  fitted on even positions and its residual measured on odd ones.

The verdict is ``explicit`` when the logits are invariant under the shift (relative deviation at
most :data:`SHIFT_TOLERANCE`), ``implicit`` when they are not but a position-independent linear map
carries p to p + k (relative residual at most :data:`MAP_TOLERANCE`), ``no`` otherwise, and
``none`` for an encoding without position information.
"""

from __future__ import annotations

import torch

from posenc.analysis.rotation import relative_logit_deviation
from posenc.encodings import PositionalEncoding, build
from posenc.encodings.additive import AdditiveEncoding

SHIFT_TOLERANCE = 1e-9
MAP_TOLERANCE = 1e-6
SHIFTS = (1, 17, 1000)
SEQ_LEN = 32
#: Positions of the linear-map fit (more than d_model rows, so the fit is a test, not an interpolation).
MAP_POSITIONS = 2048


def count_parameters(encoding: PositionalEncoding) -> int:
    """Learned (trainable) parameters of an encoding module."""
    return sum(p.numel() for p in encoding.parameters() if p.requires_grad)


def count_fixed(encoding: PositionalEncoding) -> int:
    """Fixed per-head constants (ALiBi's slopes): buffers that are not caches or lookups."""
    slopes = getattr(encoding, "slopes", None)
    return int(slopes.numel()) if isinstance(slopes, torch.Tensor) else 0


def parameters_at(name: str, arguments: dict) -> int:
    """Learned parameters of a freshly built encoding with these arguments."""
    return count_parameters(build(name, **arguments))


def _bias_deviation(encoding: PositionalEncoding, shifts: tuple[int, ...], seq_len: int) -> float:
    positions = torch.arange(seq_len)
    with torch.no_grad():
        base = encoding.bias(positions, positions).double()  # [h, i, j]
        scale = float(base.abs().max()) or 1.0
        worst = max(
            float((encoding.bias(positions + s, positions + s).double() - base).abs().max()) for s in shifts
        )
    return worst / scale


def _additive_logit_deviation(
    encoding: AdditiveEncoding, shifts: tuple[int, ...], seed: int, seq_len: int
) -> float:
    generator = torch.Generator().manual_seed(seed)
    width = encoding.d_model
    x = torch.randn(1, seq_len, width, generator=generator, dtype=torch.float64)  # [b, s, d]
    w_q = torch.randn(encoding.output_width(width), width, generator=generator, dtype=torch.float64)
    w_k = torch.randn(encoding.output_width(width), width, generator=generator, dtype=torch.float64)
    positions = torch.arange(seq_len)

    def logits(shift: int) -> torch.Tensor:
        e = encoding.embed(x, positions + shift).double()  # [b, s, d']
        return (e @ w_q) @ (e @ w_k).transpose(-1, -2)  # [b, i, j]

    with torch.no_grad():
        base = logits(0)
        return max(float((logits(s) - base).abs().max()) for s in shifts) / float(base.abs().max())


def linear_map_residual(encoding: AdditiveEncoding, positions: int, shift: int = 1) -> float:
    """‖C[p+k] − C[p]·M‖ / ‖C[p+k]‖ at odd p, with M fitted by least squares at even p (p + k < T).

    Zero when one position-independent linear map carries every code to the code k positions on
    (sinusoidal); about 1 for a table without that structure (learned).
    """
    with torch.no_grad():
        codes = encoding.codes(torch.arange(positions)).double()  # [T, d]
    x, y = codes[: positions - shift], codes[shift:]  # [T − k, d] each
    shift_map = torch.linalg.lstsq(x[0::2], y[0::2], driver="gelsd").solution  # [d, d]
    return float((x[1::2] @ shift_map - y[1::2]).norm() / y[1::2].norm())


def relative_position(
    encoding: PositionalEncoding, *, max_positions: int | None = None, seed: int = 0
) -> dict:
    """The shift test of one encoding: its numbers and the verdict (explicit | implicit | no | none).

    ``max_positions`` bounds the positions used (a learned table's size): shifts that would leave
    the table are left out.
    """
    limit = max_positions if max_positions is not None else SEQ_LEN + max(SHIFTS)
    seq_len = min(SEQ_LEN, limit // 2)
    shifts = tuple(s for s in SHIFTS if seq_len + s <= limit) or (limit - seq_len,)
    result: dict = {"kind": encoding.kind, "seq_len": seq_len, "shifts": list(shifts)}
    if encoding.kind == "none":
        return result | {"verdict": "none"}
    if encoding.kind == "rotary":
        deviation = relative_logit_deviation(
            encoding, d_head=encoding.d_head, seq_len=seq_len, shifts=shifts, seed=seed
        )
        result["logit_shift_deviation"] = deviation / (encoding.d_head**0.5 * 4)
    elif encoding.kind == "bias":
        result["logit_shift_deviation"] = _bias_deviation(encoding, shifts, seq_len)
    else:
        result["logit_shift_deviation"] = _additive_logit_deviation(encoding, shifts, seed, seq_len)
        result["linear_map_residual"] = linear_map_residual(encoding, min(limit, MAP_POSITIONS))
    if result["logit_shift_deviation"] <= SHIFT_TOLERANCE:
        verdict = "explicit"
    elif result.get("linear_map_residual", float("inf")) <= MAP_TOLERANCE:
        verdict = "implicit"
    else:
        verdict = "no"
    return result | {"verdict": verdict}
