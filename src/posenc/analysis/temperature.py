"""How much a query temperature breaks an encoding's shift invariance: exact below its threshold, measured past it.

A query temperature (:mod:`posenc.temperature`) multiplies q_i by f(p_i). Below its ``threshold`` f is
one constant, so logits of a relative encoding stay unchanged when every position shifts there; past
it they do not, and :func:`temperature_shift` measures by how much: a claim of its own, beside the
encoding's ``relative`` one, that fails where the schedule moves the logits before the position it
declares.
"""

from __future__ import annotations

import copy
import math

import torch

from posenc.analysis.property import Property, _not_applicable, _worst
from posenc.analysis.shift import probe_widths
from posenc.analysis.verification import IDENTITY_TOLERANCE, properties
from posenc.encodings import PositionalEncoding
from posenc.temperature import QueryTemperature

#: The name of the claim, beside those of ``PROPERTY_NAMES``.
NAME = "temperature_shift"


def tempered_logits(
    encoding: PositionalEncoding,
    temperature: QueryTemperature | None,
    positions: torch.Tensor,
    *,
    seed: int = 0,
) -> torch.Tensor:
    """Logits ``[h, s, s]`` of one layer over random tokens in float64, the queries times f(position) after
    the encoding's rotation, as attention applies a temperature: ``f(p_i)·q_i·k_j/√d + bias + terms``.
    Tokens and projections are drawn from ``seed`` (as :func:`posenc.analysis.shift.attention_logits`)."""
    encoding = copy.deepcopy(encoding).to(torch.float64)
    widths = probe_widths(encoding)
    d_model, n_heads, d_head = widths["d_model"], widths["n_heads"], widths["d_head"]
    generator = torch.Generator().manual_seed(seed)
    seq_len = positions.shape[0]
    x = torch.randn(1, seq_len, d_model, generator=generator, dtype=torch.float64)  # [1, s, d]
    with torch.no_grad():
        e = encoding.embed(x, positions)  # [1, s, d']
        width = e.shape[-1]
        w_q, w_k = torch.randn(2, width, n_heads * d_head, generator=generator, dtype=torch.float64)
        w_q, w_k = w_q / math.sqrt(width), w_k / math.sqrt(width)
        q = (e @ w_q).view(1, seq_len, n_heads, d_head).transpose(1, 2)  # [1, h, s, d_head]
        k = (e @ w_k).view(1, seq_len, n_heads, d_head).transpose(1, 2)
        q, k = encoding.rotate(q, k, positions, positions)
        if temperature is not None:
            q = q * temperature(positions).view(1, 1, -1, 1)
        logits = q @ k.transpose(-1, -2) / math.sqrt(d_head)  # [1, h, s, s]
        bias = encoding.bias(positions, positions)
        if bias is not None:
            logits = logits + bias.to(torch.float64)
        terms = encoding.score_terms(q, k, positions, positions)
        if terms is not None:
            logits = logits + terms.to(torch.float64)
    return logits[0]


def _change(encoding, temperature, positions, shift: int) -> float:
    reference = tempered_logits(encoding, temperature, positions)
    moved = tempered_logits(encoding, temperature, positions + shift)
    mask = torch.ones(positions.shape[0], positions.shape[0], dtype=torch.bool).tril()  # causal keys
    return float((moved - reference)[:, mask].abs().max()) / float(reference[:, mask].abs().max())


def temperature_shift(
    encoding: PositionalEncoding, temperature: QueryTemperature, *, seq_len: int = 16
) -> Property:
    """The claim that shifting every position leaves the logits unchanged while they stay below the
    temperature's threshold, with the change past it as its value.

    Measured on positions 0 … seq_len − 1 (keys up to each query) shifted by steps that keep them below
    the threshold (the claim: change ≤ 1e-9) and by the threshold itself and four times it (the
    value: how far the logits move once the factor moves). n/a for an encoding whose own logits a shift
    changes (see its ``relative`` claim) or that takes coordinates.
    """
    if encoding.position_space.columns != 1 or not encoding.capabilities.accepts_query_temperature:
        return _not_applicable(NAME, f"{type(encoding).__name__} takes no query temperature")
    threshold = temperature.threshold
    positions = torch.arange(seq_len)
    below = sorted({s for s in (1, 7, (threshold or 0) - seq_len) if 0 < s <= (threshold or 0) - seq_len})
    past = [max(threshold or 1, 1), 4 * max(threshold or 1, 1)]
    own = _worst(_change(encoding, None, positions, s) for s in below + past)
    if not own <= IDENTITY_TOLERANCE:
        return _not_applicable(
            NAME, f"a shift changes the encoding's own logits ({own:.3g}): no shift invariance to break"
        )
    moved = _worst(_change(encoding, temperature, positions, s) for s in past)
    if not below:
        return Property(
            NAME,
            moved,
            "—",
            None,
            f"{temperature!r} moves the logits from the first positions: a shift changes them by {moved:.3g}",
        )
    kept = _worst(_change(encoding, temperature, positions, s) for s in below)
    holds = kept <= IDENTITY_TOLERANCE
    reason = (
        f"shifts below position {threshold} change nothing ({kept:.3g}); past it the logits move by {moved:.3g}"
        if holds
        else f"{temperature!r} declares its factor constant below position {threshold}, yet a shift there "
        f"changes the logits by {kept:.3g}"
    )
    return Property(NAME, moved, f"≤ {IDENTITY_TOLERANCE:.3g} below {threshold}", holds, reason)


def layer_properties(
    encoding: PositionalEncoding, temperature: QueryTemperature | None = None, *, length: int = 256
) -> dict[str, Property]:
    """The encoding's claims (:func:`posenc.analysis.properties`) and, for a layer with a query
    temperature, the row ``temperature_shift``."""
    claims = properties(encoding, length=length)
    if temperature is not None:
        claims[NAME] = temperature_shift(encoding, temperature, seq_len=min(length, 16))
    return claims
