"""Kerple's kernelized relative position biases: a learned logarithmic or power kernel of |i − j| per head.

Chi, Fan, Ramadge and Rudnicky, 2022, "KERPLE: Kernelized Relative Positional Embedding for Length
Extrapolation", https://arxiv.org/abs/2205.09921 (NeurIPS 2022). The bias added to the logit of query i
and key j is a conditionally positive definite kernel of the distance, negated:

    log:    b_h(i, j) = −r1_h·log(1 + r2_h·|i − j|)      r1, r2 > 0
    power:  b_h(i, j) = −r1_h·|i − j|^r2_h               r1 > 0, 0 < r2 ≤ 2

with two learned numbers per head. Notation used for tensor shapes: b batch, h heads, i / j query /
key positions, n distances.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from numbers import Real

import torch
from torch import nn

from posenc._validation import (
    check_choice,
    check_positive_float,
    check_positive_floats,
    pair_positions,
)
from posenc.encodings.bias import BiasEncoding
from posenc.encodings.description import Description

VARIANTS = ("log", "power")
#: The authors' code projects r1 and r2 onto [0.01, ∞) before every use (r2 of the power variant onto
#: [0.01, 2]): the kernel's domain, kept away from 0.
PROJECTION_FLOOR = 1e-2
#: Largest power of the power variant: |i − j|^r2 is conditionally positive definite only for r2 ≤ 2.
POWER_CEILING = 2.0
#: The authors' initialisation, per head uniform on (0, scale) (then projected): (r1 scale, r2 scale).
INIT_SCALES = {"log": (2.0, 1.0), "power": (1.0, 2.0)}


def kerple_scores(
    distance: torch.Tensor, r1: torch.Tensor, r2: torch.Tensor, *, variant: str = "log"
) -> torch.Tensor:
    """Kerple's bias, elementwise, float64: −r1·log(1 + r2·|δ|) (``"log"``) or −r1·|δ|^r2 (``"power"``).

    The one definition of the formula: the materialised bias, the per-distance table and the flex
    score_mod all evaluate it. ``distance`` holds integer distances (either sign) and broadcasts against
    ``r1`` and ``r2``; tensor ops only, so it runs inside a score_mod.
    """
    magnitude = distance.abs().to(torch.float64)
    r1, r2 = r1.to(torch.float64), r2.to(torch.float64)
    kernel = torch.log1p(r2 * magnitude) if variant == "log" else magnitude.pow(r2)
    return -r1 * kernel + 0.0  # + 0.0: distance 0 gives 0, not −0


class Kerple(BiasEncoding):
    """Kerple's bias (Chi et al., 2022, https://arxiv.org/abs/2205.09921): −r1·log(1 + r2·|i − j|) or
    −r1·|i − j|^r2 per head, r1 and r2 learned.

    Both kernels are functions of |i − j| alone, symmetric, so the same module serves causal attention
    (the mask removes keys after the query) and bidirectional attention. The log variant is the paper's
    best extrapolator; the power variant with r2 = 1 is ALiBi with a learned slope.

    The domain is kept as the authors' code keeps it (their GPT-NeoX ``ParallelKerpleLog`` /
    ``ParallelKerplePower``): before each use the parameters are projected, in place, onto
    r ≥ 0.01 (and r2 ≤ 2 for the power variant), :meth:`project_`: projected gradient descent, part of
    the authors' method, never a clamp of anything the caller passes. Values given to the constructor
    outside that domain are refused.

    Args:
        n_heads: attention heads h.
        variant: ``"log"`` (default) or ``"power"``.
        r1: initial r1, one value for every head or a sequence of h; None draws the authors'
            initialisation, uniform on (0, 2) for log and (0, 1) for power, per head (values below the
            projection floor raised to it).
        r2: initial r2, likewise; None draws uniform on (0, 1) for log and (0, 2) for power.

    Raises:
        ValueError: an unknown variant, r1 or r2 below 0.01 (the floor the parameters are projected
            onto), not finite, an r2 above 2 for the power variant, a sequence of the wrong length.
        TypeError: a non-numeric r1 or r2.
    """

    @classmethod
    def model_arguments(cls, *, d_model: int, n_heads: int, max_len: int, causal: bool) -> dict:
        """The model's heads (the kernel is symmetric: the same arguments for causal and bidirectional)."""
        return {"n_heads": n_heads}

    def __init__(
        self,
        n_heads: int,
        *,
        variant: str = "log",
        r1: float | Sequence[float] | None = None,
        r2: float | Sequence[float] | None = None,
    ) -> None:
        super().__init__(n_heads)
        self.variant = check_choice("variant", variant, VARIANTS)
        r1_scale, r2_scale = INIT_SCALES[self.variant]
        self.r1 = nn.Parameter(self._initial("r1", r1, r1_scale, None))  # [h]
        self.r2 = nn.Parameter(self._initial("r2", r2, r2_scale, self._r2_ceiling))  # [h]

    @property
    def _r2_ceiling(self) -> float | None:
        return POWER_CEILING if self.variant == "power" else None

    def _initial(self, name: str, value, scale: float, ceiling: float | None) -> torch.Tensor:
        """The initial values ``[h]`` of ``name``: drawn as the authors do, or the given ones, checked."""
        if value is None:
            return (torch.rand(self.n_heads) * scale).clamp_(PROJECTION_FLOOR, ceiling)
        if isinstance(value, Real) and not isinstance(value, bool):
            values = (check_positive_float(name, value),) * self.n_heads
        else:
            values = check_positive_floats(name, value, self.n_heads, "n_heads")
        for index, number in enumerate(values):
            where = name if len(set(values)) == 1 else f"{name}[{index}]"
            if number < PROJECTION_FLOOR:
                raise ValueError(
                    f"{where} must be ≥ {PROJECTION_FLOOR} (Kerple's parameters are projected onto "
                    f"[{PROJECTION_FLOOR}, ∞) before each use), got {number}"
                )
            if ceiling is not None and number > ceiling:
                raise ValueError(
                    f"{where} must be in (0, {ceiling:g}] for the {self.variant} variant (|i − j|^r2 is a "
                    f"conditionally positive definite kernel only up to r2 = 2), got {number}"
                )
        return torch.tensor(values, dtype=torch.float32)

    def count_parameters(self, max_len: int, d_model: int, n_heads: int) -> int:
        return 2 * (n_heads or self.n_heads)

    def project_(self) -> None:
        """Put r1 and r2 back into their domain, in place: r ≥ 0.01, and r2 ≤ 2 for the power variant.

        What the authors' code does before every use, so an optimiser step that left the domain is
        undone before the kernel is evaluated. Only a parameter outside the domain is written (an
        in-place write would otherwise invalidate graphs that already used it); skipped under
        torch.compile, where :meth:`coefficients` clamps the values it reads instead.
        """
        if torch.compiler.is_compiling():
            return
        with torch.no_grad():
            for parameter, ceiling in ((self.r1, None), (self.r2, self._r2_ceiling)):
                outside = parameter < PROJECTION_FLOOR
                if ceiling is not None:
                    outside = outside | (parameter > ceiling)
                if bool(outside.any()):
                    parameter.clamp_(PROJECTION_FLOOR, ceiling)

    def coefficients(self) -> tuple[torch.Tensor, torch.Tensor]:
        """r1 and r2 ``[h]`` as the kernel reads them (float64, inside their domain, with autograd)."""
        r1 = self.r1.clamp(min=PROJECTION_FLOOR)
        r2 = self.r2.clamp(PROJECTION_FLOOR, self._r2_ceiling)
        return r1.to(torch.float64), r2.to(torch.float64)

    def bias(self, q_positions: torch.Tensor, k_positions: torch.Tensor) -> torch.Tensor:
        """The bias ``[h, i, j]`` (``[b, h, i, j]`` for batched positions), float32 (float64 for float64
        parameters): each value the one rounding of the float64 kernel."""
        q_positions, k_positions = pair_positions(q_positions, k_positions)
        self.project_()
        r1, r2 = self.coefficients()
        distance = (q_positions.unsqueeze(-1) - k_positions.unsqueeze(-2)).unsqueeze(-3)  # [(b,) 1, i, j]
        scores = kerple_scores(distance, r1[:, None, None], r2[:, None, None], variant=self.variant)
        return scores.to(torch.promote_types(self.r1.dtype, torch.float32))  # [(b,) h, i, j]

    def distance_bias(self, distances: torch.Tensor) -> torch.Tensor:
        """The bias at query − key distances ``[n]`` for each head, ``[h, n]`` (float64)."""
        self.project_()
        r1, r2 = self.coefficients()
        return kerple_scores(distances[None, :], r1[:, None], r2[:, None], variant=self.variant)

    def score_mod(
        self,
        q_offset: int = 0,
        kv_offset: int = 0,
        *,
        q_positions: torch.Tensor | None = None,
        k_positions: torch.Tensor | None = None,
    ) -> Callable:
        """A flex_attention score_mod adding the kernel, computed per score (no s×s tensor); the
        parameters are projected once, here, not inside the kernel."""
        self.project_()
        return super().score_mod(q_offset, kv_offset, q_positions=q_positions, k_positions=k_positions)

    def pair_bias(self, q_position, k_position, head):
        r1, r2 = self.coefficients()
        return kerple_scores(k_position - q_position, r1[head], r2[head], variant=self.variant)

    def extra_repr(self) -> str:
        return f"n_heads={self.n_heads}, variant={self.variant!r}"


#: What posenc says about :class:`Kerple` (``register`` takes it with the class).
DESCRIPTION = Description(
    label="Kerple",
    where_it_acts="adds −r1·log(1 + r2·|i − j|) or −r1·|i − j|^r2, learned per head",
    used_by="KERPLE",
    parameter_formula="2·h (r1 and r2 per head; independent of L)",
    figures={
        "bias-heads": "−r1·log(1 + r2·|i − j|) per head at the authors' random initialisation: symmetric "
        "about the diagonal, steep near it and ever flatter away from it (a logarithmic penalty).",
        "bias-distance": "The log kernel per head: it falls fast over the first few distances and then only "
        "logarithmically, so far keys keep a finite share of attention (unlike ALiBi's straight lines).",
    },
)


__all__ = ["INIT_SCALES", "Kerple", "PROJECTION_FLOOR", "VARIANTS", "kerple_scores"]
