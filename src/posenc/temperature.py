"""Position-dependent query temperature: attention multiplies each query by f(its position).

q_i ← q_i · f(p_i) scales every logit of query i, so the softmax sharpens as the context grows. Three
schedules of the field, each a frozen declaration with a float64 ``factors(positions)``:

- :class:`Llama4Temperature`, Llama 4's ``attn_temperature_tuning`` (on its NoPE layers):
  f(p) = log(⌊(p + 1) / floor_scale⌋ + 1) · attn_scale + 1, floor_scale 8192, attn_scale 0.1.
- :class:`Ministral3Temperature`, Ministral 3's ``llama_4_scaling_beta``:
  f(p) = 1 + β · log(1 + ⌊p / original_max_position_embeddings⌋).
- :class:`ScalableSoftmax`, SSMax (Nakanishi 2025, arXiv 2501.19399): logits × s · log n, n the keys a
  causal query at position p attends to, n = p + 1.

``threshold`` is the first position at which f differs from f(0): below it the logits are those of
the layer without the schedule up to one constant factor, so an encoding's shift invariance holds
exactly for positions that stay below it and breaks past it (``posenc.analysis.temperature`` measures
by how much).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from posenc._validation import check_positive_int


class QueryTemperature:
    """Base of the query-scale schedules: ``factors(positions)`` ``[s]`` / ``[b, s]`` float64, and
    ``threshold``, the first position where the factor differs from ``factors(0)`` (None: never)."""

    threshold: int | None = None

    def factors(self, positions: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def __call__(self, positions: torch.Tensor) -> torch.Tensor:
        """Factors of integer positions ``[s]`` / ``[b, s]``, float64 on their device.

        Raises:
            TypeError: fractional positions (every schedule here floors or counts whole positions).
            ValueError: negative positions.
        """
        if positions.is_floating_point() or positions.is_complex() or positions.dtype == torch.bool:
            raise TypeError(f"query temperature reads integer positions, got dtype {positions.dtype}")
        if not torch.compiler.is_compiling() and positions.numel() and int(positions.min()) < 0:
            raise ValueError(f"query temperature reads positions ≥ 0, got {int(positions.min())}")
        return self.factors(positions.to(torch.float64))


def _check_positive_float(name: str, value: object) -> float:
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or value <= 0
    ):
        raise ValueError(f"{name} must be a finite number > 0, got {value!r}")
    return float(value)


@dataclass(frozen=True)
class Llama4Temperature(QueryTemperature):
    """Llama 4's attention temperature tuning: f(p) = log(⌊(p + 1) / floor_scale⌋ + 1) · attn_scale + 1.

    Names as in ``Llama4TextConfig`` (``floor_scale``, ``attn_scale``); 1 up to position floor_scale − 2.
    """

    floor_scale: int = 8192
    attn_scale: float = 0.1

    def __post_init__(self) -> None:
        check_positive_int("floor_scale", self.floor_scale)
        _check_positive_float("attn_scale", self.attn_scale)

    @property
    def threshold(self) -> int:
        return self.floor_scale - 1

    def factors(self, positions: torch.Tensor) -> torch.Tensor:
        return torch.log1p(torch.floor((positions + 1) / self.floor_scale)) * self.attn_scale + 1


@dataclass(frozen=True)
class Ministral3Temperature(QueryTemperature):
    """Ministral 3's scaling: f(p) = 1 + β · log(1 + ⌊p / original_max_position_embeddings⌋).

    Names as in its ``rope_parameters`` (``llama_4_scaling_beta``, ``original_max_position_embeddings``);
    1 below original_max_position_embeddings.
    """

    llama_4_scaling_beta: float = 0.1
    original_max_position_embeddings: int = 16384

    def __post_init__(self) -> None:
        _check_positive_float("llama_4_scaling_beta", self.llama_4_scaling_beta)
        check_positive_int("original_max_position_embeddings", self.original_max_position_embeddings)

    @property
    def threshold(self) -> int:
        return self.original_max_position_embeddings

    def factors(self, positions: torch.Tensor) -> torch.Tensor:
        return 1 + self.llama_4_scaling_beta * torch.log1p(
            torch.floor(positions / self.original_max_position_embeddings)
        )


@dataclass(frozen=True)
class ScalableSoftmax(QueryTemperature):
    """SSMax (arXiv 2501.19399): logits × s · log n, with n = p + 1 the keys a causal query at position
    p sees (from position 0). The factor grows from the first position: threshold 1 (f(0) = 0 scales
    the one logit of the first query, which its softmax ignores)."""

    s: float = 0.43

    def __post_init__(self) -> None:
        _check_positive_float("s", self.s)

    @property
    def threshold(self) -> int:
        return 1

    def factors(self, positions: torch.Tensor) -> torch.Tensor:
        return self.s * torch.log1p(positions)


def check_temperature(temperature: object) -> QueryTemperature | None:
    """None or a :class:`QueryTemperature`; a TypeError naming anything else."""
    if temperature is None or isinstance(temperature, QueryTemperature):
        return temperature
    raise TypeError(
        f"temperature must be a QueryTemperature (Llama4Temperature, Ministral3Temperature, ScalableSoftmax) "
        f"or None, got {temperature!r}"
    )


def tempered(q: torch.Tensor, positions: torch.Tensor, temperature: QueryTemperature) -> torch.Tensor:
    """q ``[b, h, i, d]`` times f(position) of each query (positions ``[i]`` or ``[b, i]``)."""
    factors = temperature(positions)  # [i] or [b, i], float64
    factors = factors.view(1, 1, -1, 1) if factors.dim() == 1 else factors[:, None, :, None]
    return q * factors.to(q.dtype)
