"""RoPE's frequencies as data: each axis's from a base (with a scaling), an explicit vector or a period
range, and where the pairs of several axes sit among the rotated channels.

The vision and video models of 2025 do not all follow θ_k = base^(−2k/r) on integer positions: DINOv3
turns by 2π·x/period with periods from a temperature or a geometric range (Siméoni et al., 2025,
https://arxiv.org/abs/2508.10104), LTX-Video by θ^(k/(n−1))·π/2 on coordinates in [−1, 1] with the axes
interleaved per frequency (HaCohen et al., 2024, https://arxiv.org/abs/2501.00103), Cosmos by a base per
axis (NVIDIA, 2025, https://arxiv.org/abs/2501.03575). :class:`AxisFrequencies` describes one axis so;
:func:`axes_spectrum` lays several out.

Notation used for tensor shapes: r rotated channels, r/2 pairs, n axes.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import torch

from posenc._validation import check_choice, check_even_positive_int, check_positive_float
from posenc.functional.rope.scalings import rope_inv_freq

#: Where the pairs of several axes sit: ``"axes"``: each axis's pairs in a run, axis by axis (axial RoPE,
#: Flux, DINOv3, Cosmos); ``"frequencies"``: frequency by frequency, the axes interleaved within each
#: (pair k·n + a turns axis a by its k-th frequency: LTX-Video).
PAIR_LAYOUTS = ("axes", "frequencies")


def geometric_frequencies(count: int, first: float, last: float) -> torch.Tensor:
    """``count`` frequencies from ``first`` to ``last`` in geometric steps, float64 ``[count]``:
    first·(last/first)^(k/(count − 1)) (only ``first`` when count is 1)."""
    steps = torch.arange(count, dtype=torch.float64) / max(count - 1, 1)
    return first * (last / first) ** steps


def _check_vector(name: str, values: object, count: int) -> torch.Tensor:
    """An explicit frequency vector: ``count`` positive finite values, float64; the bad one named."""
    if isinstance(values, str | bytes):
        raise TypeError(f"{name} must be a sequence of {count} frequencies, got {values!r}")
    try:
        vector = torch.as_tensor(values, dtype=torch.float64).detach().cpu()
    except (TypeError, ValueError, RuntimeError) as error:
        raise TypeError(f"{name} must be a sequence of {count} frequencies, got {values!r}") from error
    if vector.dim() != 1 or vector.shape[0] != count:
        raise ValueError(
            f"{name} must hold one frequency per pair (width/2 = {count}), got shape {tuple(vector.shape)}"
        )
    bad = ~torch.isfinite(vector) | (vector <= 0)
    if bad.any():
        index = int(bad.nonzero()[0])
        raise ValueError(f"{name}[{index}] must be positive and finite, got {float(vector[index])}")
    return vector


@dataclass(frozen=True)
class AxisFrequencies:
    """One axis's rotary frequencies as data, from one of three sources, times ``scale``:

    - ``base`` (and a ``scaling`` of :func:`~posenc.functional.rope_inv_freq` with its ``scaling_args``):
      θ_i = base^(−2i/width), the default;
    - ``frequencies``: the width/2 frequencies themselves (positive, finite);
    - ``periods`` = (min_period, max_period): wavelengths in geometric steps from min to max (DINOv3's
      ``min_period``/``max_period``), θ_i = 2π/period_i.

    ``scale`` multiplies the frequencies (DINOv3's 2π of its temperature periods, LTX's π/2).

    Args:
        width: rotary channels of this axis (even), width/2 pairs.

    Raises:
        ValueError: an odd width, a non-positive base or scale, an explicit vector of another length or
            with a non-finite or non-positive entry (named by index), periods with min ≥ max or not
            positive, more than one source, scaling arguments beside explicit frequencies or periods.
    """

    width: int
    base: float | None = None
    scaling: str | None = None
    scaling_args: Mapping = field(default_factory=dict)
    frequencies: Sequence[float] | torch.Tensor | None = None
    periods: tuple[float, float] | None = None
    scale: float = 1.0

    def __post_init__(self) -> None:
        set_ = object.__setattr__
        set_(self, "width", check_even_positive_int("width", self.width))
        set_(self, "scale", check_positive_float("scale", self.scale))
        set_(self, "scaling_args", dict(self.scaling_args or {}))
        given = [name for name in ("frequencies", "periods") if getattr(self, name) is not None]
        if len(given) > 1 or (given and (self.base is not None or self.scaling is not None)):
            base = ["base/scaling"] if self.base is not None or self.scaling is not None else []
            raise ValueError(
                f"an axis takes its frequencies from one of base (with a scaling), frequencies or periods, "
                f"got {', '.join(base + given)}"
            )
        if given and self.scaling_args:
            raise ValueError(f"scaling arguments without a scaling: {', '.join(sorted(self.scaling_args))}")
        if self.frequencies is not None:
            vector = _check_vector("frequencies", self.frequencies, self.width // 2)
            set_(self, "frequencies", tuple(vector.tolist()))
        elif self.periods is not None:
            if isinstance(self.periods, str | bytes) or len(tuple(self.periods)) != 2:
                raise ValueError(f"periods must be (min_period, max_period), got {self.periods!r}")
            low, high = (
                check_positive_float(n, v)
                for n, v in zip(("min_period", "max_period"), self.periods, strict=False)
            )
            if low >= high:
                raise ValueError(f"periods must have min_period < max_period, got ({low}, {high})")
            set_(self, "periods", (low, high))
        else:
            set_(self, "base", check_positive_float("base", 10000.0 if self.base is None else self.base))
        self.spectrum()  # the scaling and its arguments, named where they do not fit

    def spectrum(self) -> tuple[torch.Tensor, float]:
        """``(θ float64 [width/2], the factor on cos and sin)`` (the factor is a scaling's, else 1)."""
        pairs = self.width // 2
        if self.frequencies is not None:
            return torch.tensor(self.frequencies, dtype=torch.float64) * self.scale, 1.0
        if self.periods is not None:
            periods = geometric_frequencies(pairs, *self.periods)  # wavelengths, in the same steps
            return (2 * math.pi / periods) * self.scale, 1.0
        inv_freq, factor = rope_inv_freq(
            self.width, base=self.base, scaling=self.scaling, **self.scaling_args
        )
        return inv_freq.to(torch.float64) * self.scale, factor


def axes_spectrum(
    axes: Sequence[AxisFrequencies], *, layout: str = "axes"
) -> tuple[torch.Tensor, torch.Tensor, float]:
    """The frequency of each pair and the axis it turns with, for axes described by :class:`AxisFrequencies`.

    ``layout="axes"``: axis 0's pairs, then axis 1's …; ``"frequencies"``: pair k·n + a is axis a's k-th
    frequency (every axis must have the same width).

    Returns:
        ``(θ float64 [r/2], axis int64 [r/2], attention factor)``.

    Raises:
        ValueError: no axes, an unknown layout, unequal widths with ``"frequencies"``, axes whose
            scalings give different attention factors (one factor scales the whole rotation).
    """
    axes = tuple(axes)
    if not axes or not all(isinstance(axis, AxisFrequencies) for axis in axes):
        raise ValueError(f"axes must be a non-empty sequence of AxisFrequencies, got {axes!r}")
    layout = check_choice("pair_layout", layout, PAIR_LAYOUTS)
    spectra = [axis.spectrum() for axis in axes]
    factors = {factor for _, factor in spectra}
    if len(factors) > 1:
        raise ValueError(f"the axes' scalings give different attention factors {sorted(factors)}; use one")
    index = [torch.full((axis.width // 2,), a, dtype=torch.int64) for a, axis in enumerate(axes)]
    if layout == "axes":
        return torch.cat([theta for theta, _ in spectra]), torch.cat(index), factors.pop()
    widths = {axis.width for axis in axes}
    if len(widths) > 1:
        raise ValueError(
            f"pair_layout='frequencies' interleaves the axes frequency by frequency: every axis needs the "
            f"same width, got {[axis.width for axis in axes]}"
        )
    theta = torch.stack([theta for theta, _ in spectra], dim=-1).flatten()  # [k, n] -> [r/2]
    return theta, torch.stack(index, dim=-1).flatten(), factors.pop()


__all__ = ["PAIR_LAYOUTS", "AxisFrequencies", "axes_spectrum", "geometric_frequencies"]
