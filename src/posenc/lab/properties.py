"""Properties of an encoding measured from its modules: learned parameters and relative position.

Parameters are counted from the module (``numel`` of its parameters) at the training length L, and
at 2L by the encoding's own formula with its other settings kept (the same table at twice the
length), which ``posenc.analysis.properties`` checks against the count.

Relative position is the analysis shift test, ``posenc.analysis.verification.relative``: attention
logits through every hook of the (trained) encoding, in float64, before and after adding the same
constant to every position. ``explicit`` when they do not change, ``implicit`` when they change but
code dot products depend only on distance, ``no`` otherwise, ``none`` when the logits do not see
position at all.

A model whose layers hold different encodings (a stack, :mod:`posenc.stacks`) is measured over every
distinct one: parameters summed, and the shift test of the layer furthest from relative (none <
explicit < implicit < contextual < no), since one such layer is enough to make the model so. Windows and
query temperatures are the attention's, not an encoding's: the shift test does not see them.
"""

from __future__ import annotations

import copy

from posenc.analysis.verification import relative
from posenc.encodings import PositionalEncoding, describe

#: Positions the relative-position test spans when the encoding has no table bounding them.
RELATIVE_LENGTH = 256


def count_parameters(encoding: PositionalEncoding) -> int:
    """Learned (trainable) parameters of an encoding module."""
    return sum(p.numel() for p in encoding.parameters() if p.requires_grad)


def count_fixed(encoding: PositionalEncoding) -> int:
    """Fixed constants its description declares (``fixed_buffers``: ALiBi's slopes), never learned."""
    return sum(int(encoding.get_buffer(name).numel()) for name in describe(encoding).fixed_buffers)


#: The shift test's verdicts, from the one nearest to relative position to the furthest.
VERDICT_ORDER = ("none", "explicit", "implicit", "contextual", "no")


def distinct_encodings(model) -> list[PositionalEncoding]:
    """The model's encoding and those of its layers, each instance once, in order."""
    return list({id(e): e for e in (model.encoding, *model.layer_encodings)}.values())


def parameters_at(encoding: PositionalEncoding, max_len: int, d_model: int) -> int:
    """Learned parameters of this encoding for ``max_len`` positions, its other settings kept."""
    return encoding.count_parameters(max_len, d_model, encoding.n_heads or 0)


def relative_position(encoding: PositionalEncoding, *, max_positions: int | None = None) -> dict:
    """The shift test of one encoding: its number, threshold, verdict (explicit | implicit | no | none)
    and reason. ``max_positions`` bounds the positions used (a learned table's size). The test runs
    in float64 on a CPU copy, wherever the trained encoding lives.
    """
    result = relative(copy.deepcopy(encoding).cpu(), max_positions or RELATIVE_LENGTH)
    return {
        "kind": encoding.kind,
        "logit_shift_change": result.value,
        "threshold": result.threshold,
        "verdict": result.category,
        "reason": result.reason,
    }


def model_relative_position(encodings: list[PositionalEncoding], max_positions: int | None = None) -> dict:
    """The shift test of the encoding, among ``encodings`` (a model's distinct ones), furthest from
    relative position (:data:`VERDICT_ORDER`; the first of equals); the only one's for a single encoding."""
    results = [relative_position(encoding, max_positions=max_positions) for encoding in encodings]
    return max(results, key=lambda result: VERDICT_ORDER.index(result["verdict"]))
