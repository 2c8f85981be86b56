"""One measured claim about one encoding (:class:`Property`), and the verdicts every claim shares."""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class Property:
    """One measured claim about one encoding."""

    name: str  # one of PROPERTY_NAMES
    value: float | None  # the measured number; None when the claim does not apply
    threshold: str  # the pass condition on value, e.g. "≤ 1e-09"
    holds: bool | None  # True / False; None when the claim does not apply
    reason: str  # why it holds, fails or does not apply
    category: str | None = None  # "relative" only: explicit | implicit | no | none | contextual
    error: str | None = None  # what measuring it raised ("ValueError: …"); holds is then False

    def as_dict(self) -> dict:
        return asdict(self)

    @property
    def verdict(self) -> str:
        """``holds`` / ``fails`` / ``n/a``, or ``error`` where measuring the claim raised."""
        if self.error is not None:
            return "error"
        return "n/a" if self.holds is None else ("holds" if self.holds else "fails")


def _not_applicable(name: str, reason: str) -> Property:
    return Property(name, None, "—", None, reason)


def failed(name: str, error: BaseException) -> Property:
    """The claim ``name`` as not measured because ``error`` was raised: verdict ``error``, never a pass."""
    message = f"{type(error).__name__}: {error}"
    return Property(name, None, "—", False, f"measuring it raised {message}", error=message)


def _at_most(name: str, value: float, limit: float, passed: str, failed: str) -> Property:
    """Holds when ``value`` ≤ ``limit``; a NaN or infinite value fails, and the reason says so."""
    holds = bool(math.isfinite(value) and value <= limit)
    if not math.isfinite(value):
        failed = f"the measurement is {value} (a NaN or infinite value along the way); {failed}"
    return Property(name, float(value), f"≤ {limit:.3g}", holds, passed if holds else failed)


def _worst(values: Iterable[float]) -> float:
    """The largest of ``values``, NaN when one is NaN: Python's ``max`` keeps or drops a NaN depending on
    where it stands, so a NaN at one shift or offset would vanish and the claim hold."""
    values = [float(value) for value in values]
    if not values:
        raise ValueError("no value to take the largest of: measure at least one shift, offset or distance")
    return math.nan if any(math.isnan(value) for value in values) else max(values)
